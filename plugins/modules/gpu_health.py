#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: gpu_health
short_description: The health of each GPU node's GPUs, each fault classified by NVIDIA's XID catalog action
version_added: 0.1.0
author: accelerators.gpu developers (@accelerators-gpu)
description:
  - Reads, for every GPU node (a node with an NFD NVIDIA PCI label), what the cluster already exposes of its GPUs'
    health, and returns a record per node (RV(gpu_health)) with its faults, each with the action NVIDIA's XID catalog
    recommends, V(none) (an application error, reported only), V(reset) (a GPU reset), V(reboot) (a node reboot)
    or V(rma) (contact support; also for an XID the catalog table does not know).
  - "Capacity against allocatable C(nvidia.com/gpu) (and C(nvidia.com/mig-*)): the device plugin marks a GPU
    Unhealthy on a critical XID, and allocatable drops; a drop no XID explains is a fault with no XID, a reset. On a
    node in DRA mode (C(nvidia.com/gpu.deploy.dra-driver=true)), the GPUs its C(gpu.nvidia.com) ResourceSlices
    publish against GPU feature discovery's C(nvidia.com/gpu.count)."
  - The DCGM exporter's C(DCGM_FI_DEV_XID_ERRORS) (the last XID of each GPU) and C(DCGM_FI_DEV_ROW_REMAP_FAILURE)
    (a reset, as the catalog says of XID 64), from O(prometheus_url) or from the exporters themselves.
  - "Node conditions that GPU health monitors write, True: NVSentinel's (C(GpuMemWatch), C(GpuThermalWatch),
    C(GpuPcieWatch), C(GpuNvlinkWatch), C(SysLogsXIDError), C(SysLogsSXIDError), C(SysLogsGPUFallenOff)) and any
    other whose type names a GPU or an XID. The action: the C(RecommendedAction) its message names, else the
    catalog's action of the XIDs its message starts with (C([79])), else V(reboot) for C(SysLogsGPUFallenOff), else
    V(rma), as NVSentinel treats every fault outside its none and reset buckets."
  - Never changes anything.
options:
  namespace:
    description: The namespace of the stack's DCGM exporter pods, read without O(prometheus_url).
    type: str
    default: nvidia-gpu-operator
  label_selector:
    description:
      - Label selector of the nodes to read, for example C(node-role.kubernetes.io/worker).
      - All GPU nodes when omitted.
    type: str
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - accelerators.gpu.api_retry
  - accelerators.gpu.gpu_health
  - accelerators.gpu.read_only
requirements:
  - kubernetes >= 24.2.0
'''

EXAMPLES = r'''
- name: Read the health of every GPU node from the DCGM exporters, through the API server
  accelerators.gpu.gpu_health:
    namespace: nvidia-gpu-operator
  register: health

- name: Name the nodes that need a GPU reset, a reboot or support
  ansible.builtin.debug:
    msg: "{{ item.key }}: {{ item.value | map(attribute='message') | join('; ') }}"
  loop: "{{ health.unhealthy | dict2items }}"

- name: Read it from OpenShift's monitoring stack instead
  accelerators.gpu.gpu_health:
    prometheus_url: https://thanos-querier.openshift-monitoring.svc:9091
    prometheus_token: "{{ monitoring_token }}"
  register: health
'''

RETURN = r'''
gpu_health:
  description: One record per GPU node, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: Node name.
      type: str
    healthy:
      description: No fault of the node asks for an action (application errors are reported only).
      type: bool
    action:
      description: The most severe action of its faults, V(none) < V(reset) < V(reboot) < V(rma).
      type: str
    gpus:
      description: C(capacity) and C(allocatable) GPU devices (in DRA mode, GPU feature discovery's count and the
        GPUs published).
      type: dict
    faults:
      description: What is wrong, each with C(gpu_uuid), C(pci_bus_id), C(gpu_index) (each null where unknown),
        C(xid) (null for a fault without one), C(source) (V(exporter), V(prometheus), V(allocatable), V(condition),
        V(row_remap)), C(action) and C(message).
      type: list
      elements: dict
      sample:
        - {gpu_uuid: GPU-8d9e7f1a-2b3c-4d5e-6f70-8192a3b4c5d6, pci_bus_id: "00000000:07:00.0", gpu_index: 0, xid: 48,
           source: exporter, action: reset,
           message: "XID 48 on GPU 0 (GPU-8d9e7f1a-2b3c-4d5e-6f70-8192a3b4c5d6): reset the GPU"}
    unschedulable:
      description: The node is cordoned.
      type: bool
    labels:
      description: The node's labels.
      type: dict
    taints:
      description: The node's taints.
      type: list
      elements: dict
unhealthy:
  description: The faults of each node that is not healthy, by node.
  returned: always
  type: dict
summary:
  description:
    - C(gpu_nodes), C(healthy), C(nodes_by_action), C(faults_by_source); C(metrics_source) (V(exporter) or
      V(prometheus)) and C(metrics_unread), the nodes whose DCGM fields could not be read, with why.
  returned: always
  type: dict
  sample: {gpu_nodes: 2, healthy: 1, nodes_by_action: {none: 1, reset: 1, reboot: 0, rma: 0},
           faults_by_source: {exporter: 1, prometheus: 0, allocatable: 0, condition: 0, row_remap: 0},
           metrics_source: exporter, metrics_unread: {}}
api_requests:
  description: HTTP requests sent to the API server, by verb.
  returned: always
  type: dict
  sample: {"GET": 4}
api_response_bytes:
  description: Bytes of the API server's answers to the module's requests, C(wire) as received, C(json) once decoded.
  returned: always
  type: dict
  sample: {"wire": 170000, "json": 950000}
api_faults:
  description: The API server's faults (429, 5xx, lost connections) met and retried, as a warning says too.
  returned: when a request met a fault
  type: dict
  sample: {"faults": {"503": 3, "refused": 2}, "retried": 4, "given_up": 0, "seconds": 4.1}
'''

from ansible_collections.accelerators.gpu.plugins.module_utils.health.read import ARGUMENT_SPEC, run
from ansible_collections.accelerators.gpu.plugins.module_utils.runner.module import run_module


def main():
    run_module(dict(ARGUMENT_SPEC, namespace=dict(type='str', default='nvidia-gpu-operator'),
                    label_selector=dict(type='str')), run)


if __name__ == '__main__':
    main()
