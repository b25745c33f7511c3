#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: stack_status
short_description: Where the GPU stack stands on each GPU node, as rows and as a table
version_added: 0.1.0
author: accelerators.gpu developers (@accelerators-gpu)
description:
  - Reads the nodes (optionally label-selected), the stack's pods, its kept validation Jobs and its driver DaemonSets
    in O(namespace), and returns one row per GPU node (a node with an NFD NVIDIA PCI label) with GPUs, product, memory and
    MIG capability (GPU feature discovery's labels, else NFD's PCI device labels), RHCOS version or kernel, driver
    DaemonSet, the readiness of each operand, the driver upgrade state, the MIG layout and its state, allocatable
    GPUs (MIG devices included) and the last validation; RV(ready); and the rows as text lines (RV(lines)).
  - Reads each list once, in the smallest form that carries what the rows show; full Nodes only, for their
    allocatable and capacity, which no smaller view carries; the pods as Table cells only (name, node, readiness,
    no metadata), read per operand component and per driver DaemonSet, whose label selectors say what the pods are;
    driver pods of no driver DaemonSet (left by one deleted) as a Table with their labels.
  - Where the API server serves C(resource.k8s.io/v1) (Kubernetes 1.34), also reads the ResourceSlices of
    C(gpu.nvidia.com) and every ResourceClaim; a node in DRA mode (C(nvidia.com/gpu.deploy.dra-driver=true)) shows the
    devices its slices publish and how many of them claims were allocated, and RV(pending_claims) the claims of the
    classes C(gpu.nvidia.com) and C(mig.nvidia.com) the scheduler could not allocate, with the reason it gave their pod.
  - Warns, per node, as M(accelerators.gpu.nfd_labels) does (GPU nodes without NFD labels, stale labels...).
  - Never changes anything. Every result carries I(api_requests), the API requests sent, by HTTP verb, and
    I(api_response_bytes), the bytes of the answers.
options:
  namespace:
    description: The namespace of the stack's operands and validation Jobs.
    type: str
    default: nvidia-gpu-operator
  label_selector:
    description:
      - Label selector of the nodes to show, for example C(node-role.kubernetes.io/worker).
      - All GPU nodes when omitted.
    type: str
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - accelerators.gpu.api_retry
  - accelerators.gpu.read_only
requirements:
  - kubernetes >= 24.2.0
'''

EXAMPLES = r'''
- name: Read the status of the GPU stack
  accelerators.gpu.stack_status:
    namespace: nvidia-gpu-operator
  register: status

- name: Print it as a table
  ansible.builtin.debug:
    msg: "{{ status.lines }}"
'''

RETURN = r'''
nodes:
  description: One row per GPU node, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: Node name.
      type: str
    gpus:
      description: C(nvidia.com/gpu.count) from GPU feature discovery, else the node's C(nvidia.com/gpu) capacity, or null.
      type: int
    product:
      description: GPU product (GPU feature discovery's label, else NFD's PCI device label), or null.
      type: str
    memory:
      description: GPU memory in MiB, or null.
      type: int
    mig_capable:
      description: Whether the GPUs are MIG-capable, or null when unknown.
      type: bool
    gpu_info:
      description: Where product, memory and MIG capability come from, V(gfd), V(pci) or null.
      type: str
    os:
      description: RHCOS version, else the running kernel.
      type: str
    driver_daemonset:
      description: The driver DaemonSet of the node's driver pod, else its C(nvidia.com/gpu.deploy.driver) label
        value other than C(true), else C(-).
      type: str
    driver:
      description:
        - Readiness of the driver pod on the node, C(ready), else why not (the pod's Status as C(kubectl get pods)
          shows it, for example C(CrashLoopBackOff) or C(Init:0/1)), C(-) without a pod; C(host) for a pre-installed
          driver.
      type: str
    driver_version:
      description:
        - The version of the driver loaded on the node, as GPU feature discovery labels it from NVML
          (C(nvidia.com/cuda.driver-version.full), else C(nvidia.com/cuda.driver.major), C(minor) and C(rev)), or
          null where GPU feature discovery has not labelled the node. Not a column of RV(lines).
      type: str
      version_added: 0.2.0
    toolkit:
      description: Readiness of the container toolkit pod, as for RV(nodes[].driver).
      type: str
    device_plugin:
      description: Readiness of the device plugin pod, as for RV(nodes[].driver).
      type: str
    dra_driver:
      description: Readiness of the NVIDIA DRA driver's kubelet plugin pod, as for RV(nodes[].driver).
      type: str
    stack:
      description: V(dra) for a node in DRA mode (C(nvidia.com/gpu.deploy.dra-driver=true)), else V(device-plugin).
      type: str
    dra_devices:
      description: In DRA mode, the devices the node's C(gpu.nvidia.com) ResourceSlices publish; null otherwise.
      type: int
    dra_allocated:
      description: In DRA mode, how many of them the scheduler allocated to claims; null otherwise.
      type: int
    dcgm_exporter:
      description: Readiness of the DCGM exporter pod, as for RV(nodes[].driver).
      type: str
    gpu_feature_discovery:
      description: Readiness of the GPU feature discovery pod, as for RV(nodes[].driver).
      type: str
    mig_manager:
      description: Readiness of the MIG manager pod, as for RV(nodes[].driver).
      type: str
    mps_control_daemon:
      description: Readiness of the MPS control daemon pod (nodes sharing their GPUs through MPS), as for
        RV(nodes[].driver).
      type: str
      version_added: 0.2.0
    sharing:
      description:
        - How the node's GPUs are shared, V(none), V(time-slicing) or V(mps), as GPU feature discovery labels it
          (C(nvidia.com/gpu.sharing-strategy)) from the device plugin's configuration of the node; null without its
          labels. The column SHARING of RV(lines) adds the replicas (C(mps x4)).
      type: str
      version_added: 0.2.0
    sharing_replicas:
      description: Pods per GPU (C(nvidia.com/gpu.replicas)), or null.
      type: int
      version_added: 0.2.0
    driver_upgrade:
      description: The node's C(nvidia.com/gpu-driver-upgrade-state) label, or C(-).
      type: str
    driver_upgrade_failure:
      description: Why the node's driver upgrade failed (its C(accelerators.gpu/driver-upgrade-failure) annotation), or null.
      type: str
    mig_config:
      description: The MIG layout the node asks for (C(nvidia.com/mig.config)), or null.
      type: str
    mig_config_state:
      description: How applying it went (C(nvidia.com/mig.config.state)), or null.
      type: str
    allocatable:
      description: Allocatable C(nvidia.com/gpu) and C(nvidia.com/mig-*) devices.
      type: int
    validation:
      description: Result (C(ok), C(failed), C(running)) by check of the newest kept validation Job.
      type: dict
    validated_at:
      description: When the newest of those Jobs ended (or started), or null.
      type: str
    without_driver_daemonset:
      description: The node is to get the stack's driver and no driver DaemonSet of the collection is for the RHCOS
        build or kernel it runs (an upgrade outside the C(accelerators.gpu.rhcos_upgrade) playbook).
      type: bool
    ready:
      description: Every operand ready (GPU feature discovery, the MIG manager and the MPS control daemon only where
        they have a pod; a node sharing through MPS needs its daemon's pod; in DRA mode the kubelet plugin instead of
        the device plugin), no driver upgrade under way or failed, a driver DaemonSet for the node, GPUs allocatable
        (in DRA mode, published) and every check of the last validation C(ok).
      type: bool
ready:
  description: Whether there is a GPU node and the stack is ready on every one.
  returned: always
  type: bool
dra_controller:
  description:
    - Where a node runs the DRA stack, the DRA driver's ComputeDomain controller Deployment
      (C(nvidia-dra-driver-controller), with C(dra_driver_compute_domains_enabled)) with its name, namespace,
      replicas, updated and available counts, and whether it is ready (every replica updated and available); null
      where there is none. A controller not ready makes RV(ready) false.
  returned: always
  type: dict
pending_claims:
  description: The ResourceClaims of NVIDIA GPUs the scheduler has not allocated.
  returned: always
  type: list
  elements: dict
  contains:
    claim:
      description: Namespace and name of the claim.
      type: str
    pod:
      description: Namespace and name of a pod using it, or null.
      type: str
    reason:
      description: Why the scheduler could not place that pod (its C(PodScheduled) condition), as it says it.
      type: str
  sample: [{claim: ml/train-gpu-x7k2p, pod: ml/train, reason: "0/3 nodes are available: 3 cannot allocate all claims."}]
lines:
  description:
    - The rows as text aligned under a header, a line for each node whose driver upgrade failed (with the cause)
      and each node no driver DaemonSet serves, a line for each of RV(pending_claims), one for RV(dra_controller),
      then whether the stack is ready on every GPU node.
  returned: always
  type: list
  elements: str
api_requests:
  description: HTTP requests sent to the API server, by verb.
  returned: always
  type: dict
  sample: {"GET": 53}
api_response_bytes:
  description:
    - Bytes of the API server's answers to the module's requests (lists come in the smallest view that carries what
      the module reads, compressed when large). C(wire) as received, C(json) once decoded.
  returned: always
  type: dict
  sample: {"wire": 17000000, "json": 95000000}
api_faults:
  description: The API server's faults (429, 5xx, lost connections) met and retried, as a warning says too.
  returned: when a request met a fault
  type: dict
  sample: {"faults": {"503": 3, "refused": 2}, "retried": 4, "given_up": 0, "seconds": 4.1}
'''

from ansible_collections.accelerators.gpu.plugins.module_utils.runner.module import run_module
from ansible_collections.accelerators.gpu.plugins.module_utils.status.stack_status import run


def main():
    run_module(dict(
        namespace=dict(type='str', default='nvidia-gpu-operator'),
        label_selector=dict(type='str'),
    ), run)


if __name__ == '__main__':
    main()
