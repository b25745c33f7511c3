#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: gpu_remediation
short_description: Take GPU nodes with failing GPUs through quarantine, drain, reset or reboot, validation and return
version_added: 0.1.0
author: accelerators.gpu developers (@accelerators-gpu)
description:
  - Where each node stands is on the node alone, the label C(accelerators.gpu/gpu-remediation-state) and the JSON
    annotation C(accelerators.gpu/gpu-remediation) (reason, XIDs, GPU UUIDs, PCI bus IDs, action, attempts), so that
    a run that stopped resumes there. The states and budgets are those of the Failing GPUs page of the docs.
  - O(action=plan) reads the nodes and the health records of O(health) (M(accelerators.gpu.gpu_health)'s records)
    and returns the plan of this run within the budgets (O(max_parallel), O(max_faulty_percent), O(max_attempts) in
    O(attempt_window), O(opt_out_label)) and its lines; the nodes of its wave get their target state and record
    written. When the circuit breaker trips, nothing is written and RV(breaker) says why.
  - The other actions act on the nodes of O(nodes) standing in their state, one after the other.
    O(action=quarantine) cordons and taints (C(accelerators.gpu/gpu-remediation:NoSchedule)) the nodes in
    C(quarantine-required). O(action=drain) evicts their GPU workloads through the Eviction API,
    PodDisruptionBudgets held, within O(eviction.timeout). O(action=reset) stops the operands that hold the GPUs
    (their deploy labels set to C(paused-for-gpu-reset)), resets the failing GPUs by UUID with a privileged Job
    running C(nvidia-smi) from the driver's root, puts the labels back and waits for the operands; a reset refused
    because a GPU is in use sends the node to C(failed), another failure to a reboot or to RMA.
    O(action=reboot) records the reboot's attempt with the node's boot ID before it and reboots the node with a
    privileged Job (as C(oc debug node) does); with O(reboot_by=tasks) it records the attempt alone and names the
    node in RV(reboot_nodes), for the site's own reboot (a BMC, Redfish) to follow. O(action=reboot_wait) then waits
    for a new boot ID and Ready, the attempt succeeded or failed; a reboot not asked of the node by a Job is
    recorded as asked by the site's tasks, which must have run before it. Once the GPUs are back the taint comes
    off and the cordon stays (the operands tolerate only C(nvidia.com/gpu)). O(action=complete) returns the nodes
    whose allocatable C(nvidia.com/gpu) equals capacity and whose CUDA validation Job (check O(validation_check))
    passed for this attempt, uncordoned unless cordoned before, C(done); the others go to a reboot, or to C(rma)
    after O(max_attempts) attempts.
  - Every result carries I(api_requests), the API requests the module sent, by HTTP verb, and
    I(api_response_bytes), the bytes of the answers.
options:
  namespace:
    description: Namespace of the operands, and of the reset, reboot and validation Jobs.
    type: str
    required: true
  action:
    description: What to do, see the description.
    type: str
    choices: [plan, quarantine, drain, reset, reboot, reboot_wait, complete]
    default: plan
  reboot_by:
    description:
      - How O(action=reboot) reboots a node. V(job), a privileged Job on the node running
        C(chroot /host systemctl reboot). V(tasks), by the site's own reboot (a BMC, Redfish), which runs between
        O(action=reboot) and O(action=reboot_wait); the module records the attempt and names the node in
        RV(reboot_nodes).
      - A reboot already asked of a node (a stopped run's) is never asked again, whichever way.
    type: str
    choices: [job, tasks]
    default: job
  cluster:
    description: The cluster's name, in the plan's lines and the report.
    type: str
    default: cluster
  health:
    description: For O(action=plan), the health records of the cluster's GPU nodes, one per node (node, healthy,
      action, gpus, faults, unschedulable, labels, taints), as M(accelerators.gpu.gpu_health) returns them.
    type: list
    elements: dict
    default: []
  nodes:
    description:
      - The nodes of the wave, for every action but O(action=plan) (RV(wave) of a plan).
      - With O(action=plan), the only nodes to act on, as an event's rule names its node; the other faulty nodes are
        reported, and still counted by the circuit breaker. Every node when empty.
    type: list
    elements: str
    default: []
  label_selector:
    description: Label selector of the nodes the plan reads; all nodes when omitted.
    type: str
  max_parallel:
    description: At most this many nodes under remediation at once; C(0) sets no limit.
    type: int
    default: 1
  max_faulty_percent:
    description: The circuit breaker; more than this percentage of the GPU nodes (and at least two) faulty at once
      and the run acts on no node.
    type: int
    default: 50
  max_attempts:
    description: Attempts (resets and reboots) within O(attempt_window) after which a node goes for RMA.
    type: int
    default: 3
  attempt_window:
    description: Seconds over which attempts count.
    type: int
    default: 86400
  opt_out_label:
    description: The label (C(key=value); a key alone means C(true)) that keeps a node out of the remediation.
    type: str
    default: accelerators.gpu/gpu-remediation.skip=true
  eviction:
    description: How the GPU workloads are evicted in the drain.
    type: dict
    default: {}
    suboptions:
      timeout:
        description: Seconds for a node's GPU workloads to be gone, PodDisruptionBudgets permitting.
        type: int
        default: 300
      skip_label:
        description: Pods with this label set to C(true) are not evicted.
        type: str
        default: nvidia.com/gpu-driver-upgrade-drain.skip
  image:
    description: The image of the reset and reboot Jobs (a shell and C(chroot); C(nvidia-smi) comes from the
      driver's root).
    type: str
    default: nvcr.io/nvidia/cloud-native/gpu-operator-validator:v25.3.4
  service_account:
    description: The service account of the reset and reboot Jobs, allowed privileged pods.
    type: str
    default: nvidia-operator-validator
  driver_root:
    description: Where the driver's root is on the node, C(/) for a driver installed on the host.
    type: str
    default: /run/nvidia/driver
  validation_check:
    description: The check name of the CUDA validation Jobs O(action=complete) reads (C(accelerators.gpu/validation)).
    type: str
    default: gpu-remediation-cuda
  wait_timeout:
    description: Seconds each wait may take (operands stopped or back, a Job, a reboot).
    type: int
    default: 600
  poll_interval:
    description: Seconds between two looks at the cluster while waiting.
    type: float
    default: 2
attributes:
  check_mode:
    description: O(action=plan) returns the plan and writes nothing; the other actions report the nodes as they stand
      and write nothing.
    support: full
  diff_mode:
    description: Nodes are labelled, cordoned, tainted and their pods evicted; there is no diff.
    support: none
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - accelerators.gpu.api_retry
requirements:
  - kubernetes >= 24.2.0
  - PyYAML >= 3.11
'''

EXAMPLES = r'''
- name: Plan the remediation of the cluster's failing GPUs
  accelerators.gpu.gpu_remediation:
    namespace: nvidia-gpu-operator
    cluster: prod-east
    health: "{{ health.gpu_health }}"
    max_parallel: 1
  register: plan

- name: Quarantine, drain and reset the wave's nodes
  accelerators.gpu.gpu_remediation:
    namespace: nvidia-gpu-operator
    action: "{{ item }}"
    nodes: "{{ plan.wave }}"
  loop: [quarantine, drain, reset]

- name: Record the reboot of the wave's nodes that need one, the site rebooting them
  accelerators.gpu.gpu_remediation:
    namespace: nvidia-gpu-operator
    action: reboot
    reboot_by: tasks
    nodes: "{{ plan.wave }}"
  register: reboot

- name: Reboot each node through its BMC (the site's tasks)
  ansible.builtin.include_tasks: bmc-reboot.yml
  loop: "{{ reboot.reboot_nodes }}"
  loop_control:
    loop_var: bmc_node

- name: Wait for the nodes to come back with a new boot ID
  accelerators.gpu.gpu_remediation:
    namespace: nvidia-gpu-operator
    action: reboot_wait
    nodes: "{{ plan.wave }}"
'''

RETURN = r'''
lines:
  description: With O(action=plan), the plan as people read it, one line per node (cluster, node, step, GPUs, XIDs).
  returned: action plan
  type: list
  elements: str
wave:
  description: With O(action=plan), the nodes this run acts on (those in progress first).
  returned: action plan
  type: list
  elements: str
waiting:
  description: With O(action=plan), faulty nodes left for a later run by O(max_parallel) or the breaker.
  returned: action plan
  type: list
  elements: str
reported:
  description: With O(action=plan), the nodes left alone (held for RMA, failed, opted out, another owner's...).
  returned: action plan
  type: list
  elements: str
breaker:
  description: With O(action=plan), why the circuit breaker tripped (no node is acted on), else empty.
  returned: action plan
  type: str
faulty:
  description: With O(action=plan), the nodes with a fault calling for an action (those held excepted).
  returned: action plan
  type: list
  elements: str
total:
  description: With O(action=plan), the GPU nodes of the health records.
  returned: action plan
  type: int
cluster:
  description: With O(action=plan), O(cluster).
  returned: action plan
  type: str
nodes:
  description:
    - With O(action=plan), one entry per node with a fault, a remediation state or the quarantine taint (node, state,
      disposition, reason, target_state, record, step, next_state, gpu_uuids, pci_bus_ids, xids, faults, text).
    - With the other actions, each node of O(nodes) after it (cluster, node, state, gpu_uuids, pci_bus_ids, xids,
      action, attempts, reason).
  returned: always
  type: list
  elements: dict
states:
  description: With the actions but O(action=plan), the state of each node of O(nodes) after it.
  returned: action quarantine, drain, reset, reboot, reboot_wait or complete
  type: dict
validation_keys:
  description: With the actions but O(action=plan), by node now C(validation-required), the key of its validation
    Job (its last attempt).
  returned: action quarantine, drain, reset, reboot, reboot_wait or complete
  type: dict
validation_plan:
  description: With the actions but O(action=plan), the common role's validation plan of the nodes of
    RV(validation_keys) alone (C(validate), C(kept), C(stale)), for its C(validate) tasks'
    C(common_validation_planned), so that the validation Jobs of other nodes stay.
  returned: action quarantine, drain, reset, reboot, reboot_wait or complete
  type: dict
validation_claim_nodes:
  description: With the actions but O(action=plan), the nodes of RV(validation_keys) in DRA mode (the DRA driver's
    kubelet plugin serves their GPUs, C(nvidia.com/gpu.deploy.dra-driver=true)), whose validation Job takes its GPU
    from a ResourceClaim of the DRA driver role's template, as its own validation does.
  returned: action quarantine, drain, reset, reboot, reboot_wait or complete
  type: list
  elements: str
reboot_nodes:
  description: With the actions but O(action=plan), the nodes in C(reboot-required) whose reboot is recorded and not
    asked of them yet, for the site's reboot tasks (O(reboot_by=tasks)) to reboot before O(action=reboot_wait).
  returned: action quarantine, drain, reset, reboot, reboot_wait or complete
  type: list
  elements: str
failures:
  description: With the actions but O(action=plan), the nodes whose step failed in this run (C(node), C(state),
    C(reason)). The module does not fail for them, so that the other nodes go on.
  returned: action quarantine, drain, reset, reboot, reboot_wait or complete
  type: list
  elements: dict
api_requests:
  description: API requests sent by the module, by HTTP verb.
  returned: always
  type: dict
api_response_bytes:
  description: Bytes of the API server's answers to the module's requests, C(wire) as received, C(json) once decoded.
  returned: always
  type: dict
'''

from ansible_collections.accelerators.gpu.plugins.module_utils.runner.module import run_module
from ansible_collections.accelerators.gpu.plugins.module_utils.remediation.plan import OPT_OUT_LABEL
from ansible_collections.accelerators.gpu.plugins.module_utils.remediation.run import run


def main():
    run_module(dict(
        namespace=dict(type='str', required=True),
        action=dict(type='str', choices=['plan', 'quarantine', 'drain', 'reset', 'reboot', 'reboot_wait', 'complete'],
                    default='plan'),
        reboot_by=dict(type='str', choices=['job', 'tasks'], default='job'),
        cluster=dict(type='str', default='cluster'),
        health=dict(type='list', elements='dict', default=[]),
        nodes=dict(type='list', elements='str', default=[]),
        label_selector=dict(type='str'),
        max_parallel=dict(type='int', default=1),
        max_faulty_percent=dict(type='int', default=50),
        max_attempts=dict(type='int', default=3),
        attempt_window=dict(type='int', default=86400),
        opt_out_label=dict(type='str', default=OPT_OUT_LABEL),
        eviction=dict(type='dict', default={}, options=dict(
            timeout=dict(type='int', default=300),
            skip_label=dict(type='str', default='nvidia.com/gpu-driver-upgrade-drain.skip'),
        )),
        image=dict(type='str', default='nvcr.io/nvidia/cloud-native/gpu-operator-validator:v25.3.4'),
        service_account=dict(type='str', default='nvidia-operator-validator'),
        driver_root=dict(type='str', default='/run/nvidia/driver'),
        validation_check=dict(type='str', default='gpu-remediation-cuda'),
        wait_timeout=dict(type='int', default=600),
        poll_interval=dict(type='float', default=2),
    ), run)


if __name__ == '__main__':
    main()
