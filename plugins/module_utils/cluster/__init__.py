# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster as a whole: what the states of the stack need to know before they apply anything (facts, module
cluster_facts) and the cluster's proxy settings as the operands get them (proxy, filter proxy_settings)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
