# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How every module of the collection runs: its options, its API client and its result (module), and the per-user
worker process that runs modules with the Kubernetes client already imported (worker)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
