#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# The documentation of the action plugins/action/k8s.py, which runs kubernetes.core.k8s
# (plugins/plugin_utils/kubernetes_core_retry.py).

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: k8s
short_description: Manage Kubernetes objects with M(kubernetes.core.k8s), run again through API server faults
version_added: 0.1.0
author: accelerators.gpu developers (@accelerators-gpu)
description:
  - Creates, applies, patches and deletes objects as M(kubernetes.core.k8s) does, with its options.
extends_documentation_fragment:
  - accelerators.gpu.api_retry
  - accelerators.gpu.kubernetes_core_retry
seealso:
  - module: kubernetes.core.k8s
'''

EXAMPLES = r'''
- name: Pause a MachineConfigPool, sent again while the API server restarts
  accelerators.gpu.k8s:
    api_version: machineconfiguration.openshift.io/v1
    kind: MachineConfigPool
    name: worker
    state: patched
    merge_type: merge
    definition:
      spec:
        paused: true
'''

RETURN = r'''
api_faults:
  description:
    - Added to the result of M(kubernetes.core.k8s) when a run met a fault, the faults by kind, the runs
      (C(tries)), the seconds from the first fault, and C(given_up), 1 when the last run still failed on one.
  returned: when a run met a fault
  type: dict
  sample: {"faults": {"refused": 3, "503": 1}, "tries": 5, "given_up": 0, "seconds": 7.6}
'''
