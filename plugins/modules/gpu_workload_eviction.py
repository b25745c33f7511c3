#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: gpu_workload_eviction
short_description: Evict the GPU workloads of nodes through the Eviction API, respecting PodDisruptionBudgets
version_added: 0.1.0
author: accelerators.gpu developers (@accelerators-gpu)
description:
  - Before nodes go down (an upgrade, a reboot), evicts their GPU workloads as the GPU Operator's upgrade controller
    chooses them - the pods of which any container or init container requests or limits an C(nvidia.com/gpu*) or
    C(nvidia.com/mig-*) resource - and the pods using a ResourceClaim the scheduler allocated GPUs of the NVIDIA DRA
    driver (C(gpu.nvidia.com)), and waits until they are gone.
  - Evictions go through the C(policy/v1) Eviction API, so PodDisruptionBudgets hold; an eviction refused with 429
    is tried again every I(poll_interval); at I(timeout) the module fails naming each pod held back and the budgets
    that select it, and the pods still terminating.
  - Left alone, and returned in I(spared) with the reason, are pods labelled I(skip_label)C(=true) (the GPU
    Operator's C(nvidia.com/gpu-driver-upgrade-drain.skip)), DaemonSet pods and static pods. Finished pods and pods
    requesting no GPU are not GPU workloads.
  - Does not cordon the nodes; cordon them first (the machine-config operator does) so that evicted pods are not
    placed back on them.
  - Every result carries I(api_requests), the API requests the module sent, by HTTP verb, and
    I(api_response_bytes), the bytes of the answers.
options:
  nodes:
    description: Names of the nodes whose GPU workloads to evict.
    type: list
    elements: str
    required: true
  skip_label:
    description: Pods with this label set to C(true) are not evicted.
    type: str
    default: nvidia.com/gpu-driver-upgrade-drain.skip
  timeout:
    description: Seconds for the GPU workloads to be gone, PodDisruptionBudgets permitting.
    type: int
    default: 300
  poll_interval:
    description: Seconds between two rounds of evictions and looks at the pods.
    type: int
    default: 2
attributes:
  check_mode:
    description: Evictions are sent as server-side dry runs, and the module does not wait.
    support: full
  diff_mode:
    description: Pods are evicted, not changed; there is no diff.
    support: none
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - accelerators.gpu.api_retry
requirements:
  - kubernetes >= 24.2.0
  - PyYAML >= 3.11
'''

EXAMPLES = r'''
- name: Evict the GPU workloads of the nodes the machine-config operator took, PDBs permitting
  accelerators.gpu.gpu_workload_eviction:
    nodes: [gpu-worker-3, gpu-worker-4]
    timeout: 600
  register: evicted
'''

RETURN = r'''
evicted:
  description: Pods evicted (C(namespace/name)).
  returned: always
  type: list
  elements: str
spared:
  description: GPU workloads left alone, each with C(pod) and C(reason).
  returned: always
  type: list
  elements: dict
  sample: [{pod: ml/notebook-0, reason: labelled nvidia.com/gpu-driver-upgrade-drain.skip=true}]
blocked:
  description: By pod whose last eviction was refused (429), the PodDisruptionBudgets that select it, with their status.
  returned: always
  type: dict
  sample: {ml/trainer-0: ["trainer (disruptionsAllowed 0, currentHealthy 1 of desiredHealthy 1)"]}
terminating:
  description: GPU workloads being deleted at the last look.
  returned: always
  type: list
  elements: str
api_requests:
  description: API requests sent by the module, by HTTP verb, and
    I(api_response_bytes), the bytes of the answers.
  returned: always
  type: dict
api_response_bytes:
  description:
    - Bytes of the API server's answers to the module's requests (node lists come in the smallest view that carries
      what the module reads, compressed when large). C(wire) as received, C(json) once decoded.
  returned: always
  type: dict
  sample: {"wire": 2600000, "json": 36000000}
api_faults:
  description: The API server's faults (429, 5xx, lost connections) met and retried, as a warning says too.
  returned: when a request met a fault
  type: dict
  sample: {"faults": {"503": 3, "refused": 2}, "retried": 4, "given_up": 0, "seconds": 4.1}
'''

from ansible_collections.accelerators.gpu.plugins.module_utils.runner.module import run_module
from ansible_collections.accelerators.gpu.plugins.module_utils.upgrade.gpu_workload_eviction import SKIP_LABEL, run


def main():
    run_module(dict(
        nodes=dict(type='list', elements='str', required=True),
        skip_label=dict(type='str', default=SKIP_LABEL),
        timeout=dict(type='int', default=300),
        poll_interval=dict(type='int', default=2),
    ), run)


if __name__ == '__main__':
    main()
