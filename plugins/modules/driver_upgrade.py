#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: driver_upgrade
short_description: Move GPU nodes to a new driver revision node by node, with the GPU Operator's upgrade states
version_added: 0.1.0
author: accelerators.gpu developers (@accelerators-gpu)
description:
  - The driver DaemonSets use C(OnDelete), so a changed pod template (driver version, image, environment, DTK or
    precompiled build) reaches a node only when its driver pod is deleted. This module does that safely, a wave of
    nodes at a time, as the GPU Operator's upgrade controller does, and writes where each node stands on the node with
    the GPU Operator's label C(nvidia.com/gpu-driver-upgrade-state), so that a re-run resumes and tools that know
    the GPU Operator read it.
  - O(action=plan) reads every GPU node that runs a driver of this collection, labels the nodes whose driver pod is
    outdated C(upgrade-required) (and one whose driver is current again C(upgrade-done)), and returns the next wave,
    first the nodes an earlier run left in progress, then outdated nodes within the budget (O(max_parallel),
    O(max_unavailable)). Nodes labelled C(nvidia.com/gpu-driver-upgrade.skip=true) keep their driver.
  - A node under GPU remediation (its label C(accelerators.gpu/gpu-remediation-state) in a state in progress,
    C(quarantine-required) to C(uncordon-required), or held, C(rma) or C(failed); see
    M(accelerators.gpu.gpu_remediation)) is left alone whatever its upgrade state - not cordoned, drained or given a
    new driver pod, and not uncordoned by O(action=complete) - and keeps its driver until its remediation ends
    (RV(remediation)). It counts against O(max_unavailable) (its GPUs serve no workload), not against
    O(max_parallel). Its C(upgrade-required) label, which the remediation waits for, is removed; the next plan after
    its remediation sets it again.
  - O(action=upgrade) takes each node of O(nodes) through C(cordon-required) (cordon; a node unschedulable before
    is recorded in the annotation C(nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable)),
    C(pod-deletion-required) (its GPU workloads evicted through the Eviction API, PodDisruptionBudgets respected, as
    M(accelerators.gpu.gpu_workload_eviction) does), C(drain-required) (with O(drain)), C(pod-restart-required) (its
    outdated driver pod deleted; the DaemonSet creates the new one), and waits until the node runs a ready driver pod
    of the newest revision, its other operand pods are ready and it advertises GPUs again, then
    C(validation-required). A node that does not get there (a driver that crash-loops or cannot be pulled, a
    PodDisruptionBudget that holds an eviction past its timeout, the wait's timeout) is C(upgrade-failed) with the
    cause in the annotation C(accelerators.gpu/driver-upgrade-failure); the other nodes go on.
  - O(action=complete) checks that each node's new driver pod passed every check of O(validation_checks) (a
    succeeded validation Job of M(accelerators.gpu.operand_status)'s plan keyed by that pod), then uncordons it
    (unless it was unschedulable before) and labels it C(upgrade-done); a node that did not pass is
    C(upgrade-failed), with the Job's failure.
  - Every result carries I(api_requests), the API requests the module sent, by HTTP verb, and
    I(api_response_bytes), the bytes of the answers.
options:
  namespace:
    description: Namespace of the driver DaemonSets and the operands.
    type: str
    required: true
  action:
    description: What to do, see the description.
    type: str
    choices: [plan, upgrade, complete]
    default: plan
  nodes:
    description: The nodes of the wave, for O(action=upgrade) and O(action=complete) (RV(wave) of a plan).
    type: list
    elements: str
    default: []
  label_selector:
    description: Label selector of the nodes the rollout considers; all nodes that run a driver pod when omitted.
    type: str
  assume_outdated:
    description:
      - With O(action=plan), nodes to count as outdated although their driver pod is current, such as the nodes a
        M(accelerators.gpu.driver_daemonsets) run in check mode would make outdated (its RV(accelerators.gpu.driver_daemonsets#module:outdated)),
        so that check mode shows the rollout a real run would make.
    type: list
    elements: str
    default: []
  configurations:
    description:
      - The driver configurations of M(accelerators.gpu.driver_daemonsets) (its O(accelerators.gpu.driver_daemonsets#module:configurations)),
        of which this module reads C(name) and C(upgrade_policy) (C(max_parallel), C(max_unavailable)) - the nodes of each
        configuration (its owner label C(nvidia.com/gpu-operator.driver.owner), or the one it moves to) roll out within
        that configuration's own budget, O(max_parallel) and O(max_unavailable) where it gives none.
      - A node labelled C(accelerators.gpu/driver-owner-next) moves to that configuration - its owner label is changed
        at the step where a driver pod would be deleted, after the node was cordoned and its GPU workloads evicted.
    type: list
    elements: dict
    default: []
  max_parallel:
    description: At most this many nodes in a wave; C(0) sets no limit (the budget still does).
    type: int
    default: 1
  max_unavailable:
    description:
      - At most this many GPU nodes without a working driver (a ready driver pod and allocatable GPUs) at once,
        counting those already so - a count or a percentage of the GPU nodes (rounded up, at least one).
    type: raw
    default: 25%
  cordon:
    description: Cordon each node before its driver is replaced, and uncordon it after (unless it was cordoned before).
    type: bool
    default: true
  eviction:
    description: How the GPU workloads (pods requesting C(nvidia.com/gpu*), and pods using a ResourceClaim allocated
      GPUs of the NVIDIA DRA driver, C(gpu.nvidia.com)) are evicted.
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
  drain:
    description: A full drain of each node after the GPU workloads went (DaemonSet pods and static pods stay).
    type: dict
    default: {}
    suboptions:
      enable:
        description: Drain the node.
        type: bool
        default: false
      pod_selector:
        description: Only the pods this equality selector (C(key=value,...)) selects, as C(kubectl drain --pod-selector).
        type: str
        default: ''
      timeout:
        description: Seconds for the drained pods to be gone.
        type: int
        default: 300
  wait_timeout:
    description: Seconds a node's new driver (a DTK build takes minutes) and its operands may take to be ready.
    type: int
    default: 1500
  poll_interval:
    description: Seconds between two looks at the nodes' pods.
    type: float
    default: 2
  grace:
    description: Seconds a driver or operand pod may crash-loop or fail to pull before its node is upgrade-failed.
    type: int
    default: 20
  validation_checks:
    description: The validation checks each node's new driver pod must have passed, for O(action=complete).
    type: list
    elements: str
    default: [driver]
attributes:
  check_mode:
    description: O(action=plan) returns the plan and writes nothing; the other actions send their writes as server-side
      dry runs and do not wait.
    support: full
  diff_mode:
    description: Nodes are labelled, cordoned and their pods evicted; there is no diff.
    support: none
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - accelerators.gpu.api_retry
requirements:
  - kubernetes >= 24.2.0
  - PyYAML >= 3.11
'''

EXAMPLES = r'''
- name: Where the rollout stands, and its next wave (25 % of the GPU nodes, 3 at a time)
  accelerators.gpu.driver_upgrade:
    namespace: nvidia-gpu-operator
    max_parallel: 3
    max_unavailable: 25%
  register: rollout

- name: Replace the driver of the wave's nodes
  accelerators.gpu.driver_upgrade:
    namespace: nvidia-gpu-operator
    action: upgrade
    nodes: "{{ rollout.wave }}"
  register: wave

- name: Mark the nodes done once their driver passed the driver check
  accelerators.gpu.driver_upgrade:
    namespace: nvidia-gpu-operator
    action: complete
    nodes: "{{ wave.ready }}"
    validation_checks: [driver]
'''

RETURN = r'''
wave:
  description: With O(action=plan), the nodes of the next wave (those in progress first).
  returned: action plan
  type: list
  elements: str
  sample: [worker-0, worker-1, worker-2]
waves:
  description: With O(action=plan), the waves the rollout would take from here, if each came back at once.
  returned: action plan
  type: list
  elements: list
outdated:
  description: Nodes whose driver pod runs an older revision than its DaemonSet's newest, one that runs differently
    (not only a new C(DRIVER_CONFIG_DIGEST), a default env value or node selection).
  returned: action plan
  type: list
  elements: str
waiting:
  description: Outdated nodes not yet taken (skipped nodes excluded).
  returned: action plan
  type: list
  elements: str
in_progress:
  description: Nodes an earlier run left between C(cordon-required) and C(uncordon-required), or C(upgrade-failed).
  returned: action plan
  type: list
  elements: str
upgrade_failed:
  description: With O(action=plan), the nodes labelled C(upgrade-failed).
  returned: action plan
  type: list
  elements: str
failures:
  description:
    - With O(action=upgrade) or O(action=complete), the nodes that failed in this run (C(node), C(state), C(reason)),
      now C(upgrade-failed). The module does not fail for them, so that the other nodes of the wave go on.
  returned: action upgrade or complete
  type: list
  elements: dict
skipped_nodes:
  description: Outdated nodes labelled C(nvidia.com/gpu-driver-upgrade.skip=true).
  returned: action plan
  type: list
  elements: str
remediation:
  description:
    - Nodes under GPU remediation, outdated or in an upgrade state in progress, left alone until their remediation
      ends; each one's state in words is C(remediation) of its entry in RV(nodes), such as C(under GPU remediation
      (accelerators.gpu/gpu-remediation-state=reset-required)).
    - With O(action=upgrade), the nodes of O(nodes) found under GPU remediation since the plan, left alone.
  returned: action plan or upgrade
  type: list
  elements: str
unavailable:
  description: GPU nodes without a ready driver pod or without allocatable GPUs now.
  returned: action plan
  type: list
  elements: str
budget:
  description: How many GPU nodes may be without a working driver at once (O(max_unavailable) resolved), summed over
    the driver configurations.
  returned: action plan
  type: int
budgets:
  description: Per driver configuration, its GPU nodes (C(total)) and how many may be without a working driver at once
    (C(budget)).
  returned: action plan
  type: dict
  sample: {default: {total: 4, budget: 1}, a100: {total: 2, budget: 1}}
stuck:
  description: Why no node can start although some wait (the budget is taken by unavailable nodes), else empty.
  returned: action plan
  type: str
steps:
  description: The states a node passes before its new driver runs, with these options.
  returned: action plan
  type: list
  elements: str
nodes:
  description: Per node, its upgrade state, driver pod, DaemonSet, whether it is outdated, ready, cordoned, its GPUs,
    and C(remediation), its GPU remediation in words (empty when it is under none).
  returned: action plan
  type: list
  elements: dict
ready:
  description: With O(action=upgrade), the nodes whose new driver and operands run, now C(validation-required).
  returned: action upgrade
  type: list
  elements: str
validation_keys:
  description: With O(action=upgrade), by node of RV(ready), the uid of its new driver pod (the validation key).
  returned: action upgrade
  type: dict
dra_nodes:
  description: With O(action=upgrade), the nodes of RV(ready) in DRA mode (labelled C(nvidia.com/gpu.deploy.dra-driver=true)),
    whose GPUs come from ResourceClaims, not C(nvidia.com/gpu).
  returned: action upgrade
  type: list
  elements: str
seconds:
  description: With O(action=upgrade), how long the wave took.
  returned: action upgrade
  type: float
completed:
  description: With O(action=complete), the nodes now C(upgrade-done).
  returned: action complete
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
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.upgrade import run


def main():
    run_module(dict(
        namespace=dict(type='str', required=True),
        action=dict(type='str', choices=['plan', 'upgrade', 'complete'], default='plan'),
        nodes=dict(type='list', elements='str', default=[]),
        label_selector=dict(type='str'),
        assume_outdated=dict(type='list', elements='str', default=[]),
        configurations=dict(type='list', elements='dict', default=[]),
        max_parallel=dict(type='int', default=1),
        max_unavailable=dict(type='raw', default='25%'),
        cordon=dict(type='bool', default=True),
        eviction=dict(type='dict', default={}, options=dict(
            timeout=dict(type='int', default=300),
            skip_label=dict(type='str', default='nvidia.com/gpu-driver-upgrade-drain.skip'),
        )),
        drain=dict(type='dict', default={}, options=dict(
            enable=dict(type='bool', default=False),
            pod_selector=dict(type='str', default=''),
            timeout=dict(type='int', default=300),
        )),
        wait_timeout=dict(type='int', default=1500),
        poll_interval=dict(type='float', default=2),
        grace=dict(type='int', default=20),
        validation_checks=dict(type='list', elements='str', default=['driver']),
    ), run, required_if=[('action', 'upgrade', ['nodes']), ('action', 'complete', ['nodes'])])


if __name__ == '__main__':
    main()
