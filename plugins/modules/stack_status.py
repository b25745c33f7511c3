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
    GPUs (MIG devices included) and the last validation; RV(ready); and the rows as text lines (RV(lines)), in the
    columns O(columns) selects.
  - Reads each list once, in the smallest form that carries what the rows show; full Nodes only, for their
    allocatable and capacity, which no smaller view carries; the pods as Table cells only (name, node, readiness,
    no metadata), read per operand component and per driver DaemonSet, whose label selectors say what the pods are;
    driver pods of no driver DaemonSet (left by one deleted) as a Table with their labels.
  - Where the API server serves C(resource.k8s.io/v1) (Kubernetes 1.34), also reads the ResourceSlices of
    C(gpu.nvidia.com) and every ResourceClaim; a node in DRA mode (C(nvidia.com/gpu.deploy.dra-driver=true)) shows the
    devices its slices publish and how many of them claims were allocated, and RV(pending_claims) the claims of the
    classes C(gpu.nvidia.com) and C(mig.nvidia.com) the scheduler could not allocate, with the reason it gave their pod.
  - Reads each GPU node's health as M(accelerators.gpu.gpu_health) does (RV(gpu_health)), from the Nodes and
    ResourceSlices it reads anyway, and the DCGM exporter's XIDs from O(prometheus_url); without one, from the
    exporter pods (through the API server's pod proxy) of the nodes that show a fault without them only (GPUs short
    of capacity, a GPU condition True), to name the GPU and its XID; a GET each, not one per node of a large fleet.
    An application error's XID, which the device plugin ignores, then shows in M(accelerators.gpu.gpu_health) only.
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
  columns:
    description:
      - The columns of RV(lines). Omitted, the default view, which fits a terminal of 120 columns as
        C(ansible-playbook) prints it. It shows C(NODE), C(GPUS), C(PRODUCT), C(DRIVER) (the version of the driver
        loaded, and the state of its pod), C(STACK) (C(ready), or the first reason it is not, shortened with an
        ellipsis where the line would be wider), and, before C(STACK) and only while some node has one under way,
        C(DRIVER UPGRADE) (a driver upgrade state other than none or C(upgrade-done)) and C(MIG CONFIG) (a MIG
        layout not applied with success yet).
      - V(wide) for every column, in full.
      - Else the names of the columns to show, in that order, in full, after C(NODE), which is always first. The names
        are V(node), V(gpus), V(product), V(memory), V(mig_capable), V(os), V(driver_daemonset),
        V(driver_configuration), V(driver),
        V(kernel_modules), V(driver_upgrade), V(toolkit), V(device_plugin), V(sharing), V(mps_control_daemon), V(dra_driver),
        V(dcgm_exporter), V(gpu_feature_discovery), V(mig_manager), V(mig_config), V(allocatable), V(dra_devices),
        V(validation), V(health), V(stack) (the order of the wide view). C(HEALTH) is C(ok), or the action the node's
        GPU faults ask for (C(reported) for application errors only) and each fault's XID or source. An unknown name fails the module before it reads
        anything, naming it and the valid names.
      - RV(nodes) has every field whatever the columns.
    type: list
    elements: str
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - accelerators.gpu.api_retry
  - accelerators.gpu.gpu_health
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

- name: Read it with every column of the table
  accelerators.gpu.stack_status:
    columns: wide
  register: status_wide

- name: Read it with the columns of the operands' readiness
  accelerators.gpu.stack_status:
    columns: [driver, toolkit, device_plugin, dcgm_exporter, gpu_feature_discovery, stack]
  register: status_operands
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
          null where GPU feature discovery has not labelled the node. The column C(DRIVER) of RV(lines) shows it
          before RV(nodes[].driver).
      type: str
    driver_configuration:
      description:
        - The driver configuration that owns the node (its C(nvidia.com/gpu-operator.driver.owner) label), and
          C(<owner> -> <next>) while it waits for the rollout to move it to another; null when no run labelled it.
          The column C(DRIVER CONFIG) of RV(lines) shows it.
      type: str
    kernel_module_type:
      description:
        - The C(KERNEL_MODULE_TYPE) of the driver container of the node's driver DaemonSet (RV(nodes[].driver_daemonset)),
          V(auto), V(open) or V(proprietary); V(auto) where it sets none, as the driver container takes it; null
          without a driver DaemonSet (a pre-installed driver, none yet).
      type: str
    kernel_modules:
      description:
        - The kernel modules that DaemonSet's pods build, V(open) or V(proprietary) - with V(auto), by its driver
          image's branch (proprietary below 560, open from 560), as the driver container falls back; null where that
          is unknown (a digest, a tag without a version) or without a driver DaemonSet. A pod of an older revision,
          until a rollout replaces it, may still run others. The column C(KERNEL MODULES) of RV(lines) shows it, with
          C((auto)) after it where RV(nodes[].kernel_module_type) is V(auto).
      type: str
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
    sharing:
      description:
        - How the node's GPUs are shared, V(none), V(time-slicing) or V(mps), as GPU feature discovery labels it
          (C(nvidia.com/gpu.sharing-strategy)) from the device plugin's configuration of the node; null without its
          labels. The column SHARING of RV(lines) adds the replicas (C(mps x4)).
      type: str
    sharing_replicas:
      description: Pods per GPU (C(nvidia.com/gpu.replicas)), or null.
      type: int
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
    health:
      description: The action the node's GPU faults ask for, V(none) (healthy), V(reset), V(reboot) or V(rma), as in
        RV(gpu_health).
      type: str
    gpu_faults:
      description: The node's GPU faults, as in RV(gpu_health).
      type: list
      elements: dict
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
gpu_health:
  description: The health record of each GPU node, as M(accelerators.gpu.gpu_health) returns them.
  returned: always
  type: list
  elements: dict
lines:
  description:
    - The rows as text aligned under a header, in the columns of O(columns), a line for each node whose driver upgrade
      failed (with the cause)
      and each node no driver DaemonSet serves, a line for each of RV(pending_claims), the GPU faults that ask for an
      action under a header (C(NODE), C(GPU) (its UUID), C(XID), C(ACTION), C(SOURCE)), one for RV(dra_controller),
      then whether the stack is ready on every GPU node.
  returned: always
  type: list
  elements: str
  sample:
    - "NODE               GPUS  PRODUCT                DRIVER            STACK"
    - "gpu-a100-0         8     NVIDIA-A100-SXM4-80GB  570.172.08 ready  ready"
    - "gpu-host-driver-0  4     NVIDIA-L40S            570.172.08 host   ready"
    - "gpu-l40s-0         4     NVIDIA-L40S            CrashLoopBackOff  driver CrashLoopBackOff"
    - "GPU stack NOT ready on gpu-l40s-0"
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

from ansible_collections.accelerators.gpu.plugins.module_utils.health.read import ARGUMENT_SPEC
from ansible_collections.accelerators.gpu.plugins.module_utils.runner.module import run_module
from ansible_collections.accelerators.gpu.plugins.module_utils.status.stack_status import run


def main():
    run_module(dict(
        ARGUMENT_SPEC,
        namespace=dict(type='str', default='nvidia-gpu-operator'),
        label_selector=dict(type='str'),
        columns=dict(type='list', elements='str'),
    ), run)


if __name__ == '__main__':
    main()
