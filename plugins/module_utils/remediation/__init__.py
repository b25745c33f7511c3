# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bringing failing GPUs back, node by node: where a node stands (state: its label, annotation and quarantine
taint), what the next run does to each node within the budgets (plan), and the Jobs that reset GPUs or reboot a node
(jobs). Pure functions: the remediate role reads the cluster, calls them and writes what they return."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
