# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How every module of the collection runs: its options, its API client and its result (module), and the per-user
worker process that runs modules with the Kubernetes client already imported: how a module gets there (worker), the
process itself (worker_process) and what it relies on in ansible-core, checked once per version
(worker_compatibility)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
