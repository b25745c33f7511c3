#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# The documentation of the action plugins/action/k8s_drain.py, which runs kubernetes.core.k8s_drain
# (plugins/plugin_utils/kubernetes_core_retry.py).

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: k8s_drain
short_description: Cordon, drain or uncordon with M(kubernetes.core.k8s_drain), run again through API server faults
version_added: 0.1.0
author: accelerators.gpu developers (@accelerators-gpu)
description:
  - Cordons, drains or uncordons a node as M(kubernetes.core.k8s_drain) does, with its options.
extends_documentation_fragment:
  - accelerators.gpu.api_retry
  - accelerators.gpu.kubernetes_core_retry
seealso:
  - module: kubernetes.core.k8s_drain
'''

EXAMPLES = r'''
- name: Drain a node, PodDisruptionBudgets permitting, through API server restarts
  accelerators.gpu.k8s_drain:
    name: gpu-worker-3
    state: drain
    delete_options:
      ignore_daemonsets: true
      delete_emptydir_data: true
      wait_timeout: 600
'''

RETURN = r'''
api_faults:
  description:
    - Added to the result of M(kubernetes.core.k8s_drain) when a run met a fault, the faults by kind, the runs
      (C(tries)), the seconds from the first fault, and C(given_up), 1 when the last run still failed on one.
  returned: when a run met a fault
  type: dict
  sample: {"faults": {"refused": 3, "503": 1}, "tries": 5, "given_up": 0, "seconds": 7.6}
'''
