#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: operand_status
short_description: Wait for GPU operands to be ready, or say at once which node is not and why
version_added: 0.1.0
author: accelerators.gpu developers (@accelerators-gpu)
description:
  - Waits until operand DaemonSets are ready, validation Jobs have succeeded, GPU nodes advertise an
    allocatable resource, or an OLM Subscription's operator is installed; fails as soon as the cause of a failure is visible instead of waiting for the timeout.
  - "A DaemonSet is ready (the GPU Operator's rule) when its controller has observed its current generation and
    either no node should run it, or, with C(RollingUpdate), every scheduled pod is updated and available, or,
    with C(OnDelete), every pod carries the C(controller-revision-hash) of the newest ControllerRevision, or of an older
    one whose pod template differs only in what a running pod does not act on (C(DRIVER_CONFIG_DIGEST), an env value
    the container uses anyway when unset, node selection), and is Ready."
  - Fails at once on a pod in C(ImagePullBackOff), C(ErrImagePull) or C(InvalidImageName) (naming node, pod and image),
    C(CrashLoopBackOff) (naming node, pod, container and message), C(CreateContainerConfigError), a failed pod or
    Job (naming the node and the failure message); after O(grace) seconds on a pod the scheduler cannot place
    (with its message) or on pods a DaemonSet cannot create (with its C(FailedCreate) warning).
  - Whenever it fails, by a visible cause or at the timeout, it returns a per-node diagnosis of the pods not ready
    (phase, containers' waiting reasons and messages, recent Warning events).
  - Reads only; in check mode it reads and waits the same way.
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - accelerators.gpu.api_retry
  - accelerators.gpu.operand_wait
options:
  wait_for:
    description:
      - V(daemonsets) waits for the DaemonSets named in O(names) and/or selected by O(label_selectors) in O(namespace).
      - V(deployments) waits for Deployments the same way, until each has its replicas updated and available.
      - V(jobs) waits for Jobs the same way; they must succeed. Their pods are found by the label
        C(batch.kubernetes.io/controller-uid) (Kubernetes 1.27 and later).
      - V(allocatable) waits until every node of O(nodes), or every node selected by O(node_label_selectors),
        advertises more than zero of O(resource) in its allocatable resources.
      - V(subscription) waits until the OLM Subscription named in O(names) (one name) of O(namespace) has installed a
        ClusterServiceVersion and that CSV's phase is C(Succeeded); a failed resolution or a failed CSV ends the wait
        at once.
    type: str
    required: true
    choices: [daemonsets, deployments, jobs, allocatable, subscription]
requirements:
  - kubernetes >= 24.2.0
  - PyYAML >= 3.11
notes:
  - Validation Jobs are expected to set C(backoffLimit=0), so that their first failed pod fails them.
'''

EXAMPLES = r'''
- name: Wait for the container toolkit
  accelerators.gpu.operand_status:
    wait_for: daemonsets
    namespace: nvidia-gpu-operator
    names: [nvidia-container-toolkit-daemonset]
    timeout: 300
  register: toolkit

- name: Wait for every driver DaemonSet (OnDelete) of the collection
  accelerators.gpu.operand_status:
    wait_for: daemonsets
    namespace: nvidia-gpu-operator
    label_selectors: [app.kubernetes.io/component=nvidia-driver]
    timeout: 1500

- name: Every node running the device plugin advertises its GPUs
  accelerators.gpu.operand_status:
    wait_for: allocatable
    nodes: "{{ device_plugin.ready_nodes }}"
    timeout: 60

- name: Wait for the device plugin, then for its GPUs on its nodes; return the nodes the CUDA check must run on
  accelerators.gpu.operand_status:
    wait_for: daemonsets
    namespace: nvidia-gpu-operator
    names: [nvidia-device-plugin-daemonset]
    allocatable_on_ready_nodes: true
    validation_check: cuda
  register: device_plugin

- name: The CUDA validation Jobs succeed
  accelerators.gpu.operand_status:
    wait_for: jobs
    namespace: nvidia-gpu-operator
    label_selectors: [app.kubernetes.io/component=gpu-validation, accelerators.gpu/validation=cuda]
'''

RETURN = r'''
ready:
  description: Whether what was awaited is ready.
  returned: always
  type: bool
outcome:
  description: V(ready), V(failed) (a visible cause ended the wait before the timeout) or V(timed out).
  returned: always
  type: str
elapsed:
  description: Seconds waited.
  returned: always
  type: float
daemonsets:
  description:
    - Per DaemonSet (V(daemonsets)) its name, namespace, update_strategy, desired, current, ready_pods, updated,
      available, misscheduled counts, ready, the reason for the verdict, revision (V(OnDelete)) and pods
      (node, pod, ready).
  returned: when wait_for is daemonsets
  type: list
  elements: dict
ready_nodes:
  description: Nodes where a pod of the DaemonSets is ready (V(daemonsets)), sorted.
  returned: when wait_for is daemonsets
  type: list
  elements: str
ready_pods:
  description:
    - Per node where a pod of the DaemonSets is ready (V(daemonsets)), the uids of those pods, comma-separated and
      sorted. A pod replaced on a node (new revision, restart by deletion) gives that node a new value.
  returned: when wait_for is daemonsets
  type: dict
deployments:
  description: Per Deployment (V(deployments)) its name, namespace, replicas, updated and available counts, and ready.
  returned: when wait_for is deployments
  type: list
  elements: dict
jobs:
  description: Per Job (V(jobs)) its name, namespace, node, result (succeeded, failed, running) and message.
  returned: when wait_for is jobs
  type: list
  elements: dict
allocatable:
  description: Per node (V(allocatable)) the sum of its allocatable resources matching the first O(resource) it advertises.
  returned: when wait_for is allocatable, or O(allocatable_on_ready_nodes) waited for it
  type: dict
node_resources:
  description: Per node advertising O(resource), the resource a workload there can request (see O(resource)).
  returned: when wait_for is allocatable, or O(allocatable_on_ready_nodes) waited for it
  type: dict
  sample: {"gpu-node-1": "nvidia.com/mig-1g.10gb", "gpu-node-2": "nvidia.com/gpu"}
missing:
  description: Nodes (V(allocatable)) that do not advertise O(resource).
  returned: when wait_for is allocatable, or O(allocatable_on_ready_nodes) waited for it
  type: list
  elements: str
label_problems:
  description: Per node in C(ready_nodes) whose O(node_labels) are not as they must be, what is wrong (missing, malformed, another value).
  returned: when O(node_labels) is given and some node was ready
  type: dict
unserved_nodes:
  description: Nodes in C(ready_nodes) without a ready endpoint in O(service)'s EndpointSlices.
  returned: when O(service) is given and some node was ready
  type: list
  elements: str
validation:
  description:
    - The plan of check O(validation_check) on the ready nodes.
  returned: when O(validation_check) is given and the wait succeeded
  type: dict
  contains:
    validate:
      description: Ready nodes without a succeeded Job of the check for their current operand pods.
      type: list
      elements: str
    kept:
      description: Ready nodes whose succeeded Job stands.
      type: list
      elements: str
    stale:
      description: The check's other Jobs, to delete, as C(apiVersion), C(kind), C(metadata.name), C(metadata.namespace).
      type: list
      elements: dict
problems:
  description:
    - Causes seen at the last look, each with kind (image, crash, config, failed, missing, unschedulable,
      not-created), fatal, node, pod and text.
  returned: always
  type: list
  elements: dict
nodes:
  description:
    - Per-node diagnosis of the pods not ready when the wait did not succeed, sorted by node; each with node,
      namespace, pod, phase, ready, message, containers (container, init, image, state, reason, message, restarts,
      last_termination), scheduling (the scheduler's message) and events (recent Warning events, newest first).
  returned: always
  type: list
  elements: dict
api_requests:
  description: HTTP requests sent to the API server, by verb.
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
from ansible_collections.accelerators.gpu.plugins.module_utils.operands.wait import WAIT_ARGUMENT_SPEC, WAIT_FOR, wait_for_operands


def main():
    run_module(dict(WAIT_ARGUMENT_SPEC, wait_for=dict(type='str', required=True,
                                                      choices=WAIT_FOR)),
               lambda module, api: wait_for_operands(module.params, api))


if __name__ == '__main__':
    main()
