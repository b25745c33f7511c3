#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: nfd_labels
short_description: GPU, kernel and OS facts of nodes from their Node Feature Discovery labels
version_added: 0.1.0
author: accelerators.gpu developers (@accelerators-gpu)
description:
  - Reads nodes (optionally label-selected, in a small view of each; see O(page_size)) and returns per node
    whether it carries an NVIDIA GPU (either NFD PCI label shape, C(pci-10de.present) or
    C(pci-0302_10de.present)/C(pci-0300_10de.present)), GPU count and product when GPU feature discovery labelled
    it, kernel, OS, RHCOS version, OpenShift version and container runtime; and GPU nodes grouped by RHCOS version,
    by kernel and by OS.
  - The RHCOS version is the node's C(status.nodeInfo.osImage) one; an NFD C(OSTREE_VERSION) label that disagrees
    is reported as stale (NFD relabels only every C(sleepInterval), so it lags an upgrade).
  - Warns, per node, about GPU nodes without NFD labels, stale labels, labels NFD would have rejected and NFD
    releases too old to use.
  - Optionally waits until every selected node (or at least I(min_gpu_nodes) GPU nodes) carries NFD labels.
  - Optionally manages C(nvidia.com/gpu.present) and C(nvidia.com/gpu.deploy.<operand>) labels on GPU nodes, as the
    GPU Operator does, one deploy label per operand deployed (O(operands)). A label that exists is never overwritten,
    whatever its value (an admin's opt-out, or an upgrade pausing the node); C(nvidia.com/gpu.deploy.operands=false)
    removes the C(true) ones, and so does an operand left out of O(operands) for its own label.
  - Every result carries I(api_requests), the API requests the module sent, by HTTP verb, and
    I(api_response_bytes), the bytes of the answers.
options:
  label_selector:
    description:
      - Label selector of the nodes to read, wait for and label, for example C(node-role.kubernetes.io/worker).
      - All nodes when omitted.
    type: str
  page_size:
    description:
      - Nodes per list request. By default a fleet of up to 100 selected nodes is read in one request, the Node
        Table with each row's metadata, and a larger one in two more, each answered from the API server's cache
        (after the first, pages are read from etcd), the Table's cells (OS image, kernel, container runtime, Ready),
        about 200 bytes a node, and the nodes' names and labels in protobuf, read as they arrive.
      - Set it to bound the size of each answer; every page is then the Node Table with each row's metadata.
      - The nodes without NFD labels are read again in full (their taints decide whether I(wait) waits for them,
        their allocatable GPUs whether they look like GPU nodes NFD missed), with one request each while they are at
        most a third of the selected nodes, else with one list of the full selected nodes, 10-40 KB of JSON each on
        a busy cluster, by default 100 a page.
    type: int
  wait:
    description:
      - Wait until every selected node where nfd-worker runs (Ready and, while it has no NFD labels, without a
        C(NoSchedule) or C(NoExecute) taint; at least one) carries NFD labels or, with I(min_gpu_nodes), until at
        least that many GPU nodes are found. A node NFD labelled counts whatever its taints.
      - On timeout the module fails naming the nodes still without NFD labels.
    type: bool
    default: false
  wait_timeout:
    description:
      - Seconds to wait at most.
    type: int
    default: 300
  wait_sleep:
    description:
      - Seconds between two looks at the nodes while waiting.
    type: int
    default: 5
  min_gpu_nodes:
    description:
      - With I(wait), wait for at least this many GPU nodes instead of for NFD labels on every selected node where
        nfd-worker runs.
    type: int
    default: 0
  manage_labels:
    description:
      - Set C(nvidia.com/gpu.present=true) and each absent C(nvidia.com/gpu.deploy.<operand>=true) of O(operands) on
        GPU nodes, and remove the C(true) label of every other operand the collection deploys (its state is switched
        off; but see O(dra_node_selector) for C(dra-driver));
        set C(nvidia.com/gpu.present=false) and remove C(true) deploy labels on nodes whose GPU is gone (NFD labels
        them, without an NVIDIA PCI device).
      - Check mode sends the label patches as server-side dry runs; with C(--diff) the result shows each node's
        labels before and after.
    type: bool
    default: false
  labels_state:
    description:
      - With I(manage_labels) and O(operands), V(absent) removes the C(true) deploy labels of those operands only (a
        state switched off).
      - With I(manage_labels) and no O(operands), V(absent) removes C(nvidia.com/gpu.present), every
        C(nvidia.com/gpu.deploy.*) label whose value is C(true), the driver rollout's C(nvidia.com/gpu-driver-upgrade-state) and the labels GPU
        feature discovery writes (C(nvidia.com/gpu.product), C(gpu.memory), C(gpu.count), C(nvidia.com/cuda.*),
        C(nvidia.com/mig.capable), C(mig.strategy), C(nvidia.com/mig-<profile>.*), C(nvidia.com/gfd.timestamp)...)
        (uninstall); other values and labels, chosen by an admin (C(nvidia.com/mig.config)...), stay.
    type: str
    choices: [present, absent]
    default: present
  return_labels:
    description:
      - Return each node's full label map in RV(nodes[].labels).
      - Off by default, because NFD sets dozens of labels per node, and on thousands of nodes they would make most of the
        result (and of the time Ansible spends on it). Turn it on to pass RV(nodes) to
        M(accelerators.gpu.driver_daemonsets), which matches the nodes against the DaemonSets' node selectors.
    type: bool
    default: false
  operands:
    description:
      - Operands whose C(nvidia.com/gpu.deploy.<operand>) label is set (the states deployed); see O(labels_state) for
        V(absent).
      - Omitted, with V(present), every operand the collection deploys (C(driver), C(container-toolkit),
        C(device-plugin), C(dcgm-exporter), C(gpu-feature-discovery), C(operator-validator), C(dcgm), C(dra-driver)).
      - C(device-plugin) and C(dra-driver) (the NVIDIA DRA driver's kubelet plugin) are one or the other on a node,
        by O(dra_node_selector).
    type: list
    elements: str
  dra_node_selector:
    description:
      - Labels (all must match) of the GPU nodes in DRA mode. With I(manage_labels), a GPU node labelled for
        neither gets C(nvidia.com/gpu.deploy.dra-driver=true) when it matches (and C(dra-driver) is among
        O(operands)), C(nvidia.com/gpu.deploy.device-plugin=true) otherwise.
      - A node labelled for one whose mode now wants the other keeps its labels; it is returned in RV(mode_switches),
        for a switch that evicts its GPU workloads first (role C(dra_driver)). So does a node labelled
        C(nvidia.com/gpu.deploy.dra-driver=true) when C(dra-driver) is no longer among O(operands) (the DRA stack
        switched off), which its kubelet plugin serves until its switch to the device plugin.
    type: dict
    default: {}
attributes:
  check_mode:
    description: Label patches are sent as server-side dry runs, so the API server validates them and stores nothing.
    support: full
  diff_mode:
    description: Returns the managed labels of each node that changes, before and after.
    support: full
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - accelerators.gpu.api_retry
requirements:
  - kubernetes >= 24.2.0
  - PyYAML >= 3.11
'''

EXAMPLES = r'''
- name: Read GPU, kernel and OS facts of the worker nodes
  accelerators.gpu.nfd_labels:
    label_selector: node-role.kubernetes.io/worker
  register: nfd

- name: Show the GPU nodes per RHCOS version
  ansible.builtin.debug:
    var: nfd.groups.by_rhcos

- name: Wait up to 10 minutes for NFD to label at least 4 GPU nodes, then label them for the operands
  accelerators.gpu.nfd_labels:
    wait: true
    wait_timeout: 600
    min_gpu_nodes: 4
    manage_labels: true
  register: nfd

- name: Uninstall, remove the labels this collection set
  accelerators.gpu.nfd_labels:
    manage_labels: true
    labels_state: absent
'''

RETURN = r'''
mode_switches:
  description:
    - GPU nodes whose stack mode (O(dra_node_selector)) wants the other of C(device-plugin) and C(dra-driver) than the
      one they are labelled for, by name, with the operand to switch to; with C(dra-driver) not among O(operands), the
      nodes still labelled C(nvidia.com/gpu.deploy.dra-driver=true), to C(device-plugin).
  returned: always
  type: dict
  sample: {gpu-node-3: dra-driver}
nodes:
  description: Facts of each selected node, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Node name.
      type: str
    gpu_present:
      description: Whether an NFD NVIDIA PCI label (either shape) is C(true).
      type: bool
    nfd_labelled:
      description: Whether the node carries any C(feature.node.kubernetes.io/) label.
      type: bool
    ready:
      description: Whether the node's C(Ready) condition is C(True).
      type: bool
    tainted:
      description:
        - Whether the node has a C(NoSchedule) or C(NoExecute) taint, other than those of a passing node condition
          (C(node.kubernetes.io/*), C(node.cloudprovider.kubernetes.io/*)).
        - Null for a node with NFD labels, whose taints are not read (they are in no smaller view of a Node than the
          whole Node; nfd-worker ran there whatever they are, so waiting for NFD does not need them).
      type: bool
    gpu_count:
      description: C(nvidia.com/gpu.count) from GPU feature discovery, or null.
      type: int
    gpu_product:
      description: C(nvidia.com/gpu.product) from GPU feature discovery, or null.
      type: str
    gpu_memory:
      description: C(nvidia.com/gpu.memory) (MiB) from GPU feature discovery, or null.
      type: int
    kernel:
      description:
        - C(full), C(major), C(minor), C(revision) from NFD labels; C(running) from C(status.nodeInfo.kernelVersion);
          C(effective), the running kernel as NFD writes it into a label (C(+rt) becomes C(_rt)).
      type: dict
    os:
      description: C(id), C(version_id), C(rhel_version), C(openshift_version) from NFD, C(os_image) from the node.
      type: dict
    rhcos_version:
      description: RHCOS version the node runs (from C(osImage), else from the NFD label), or null.
      type: str
    rhcos_label:
      description: The NFD C(OSTREE_VERSION) label, or null.
      type: str
    rhcos_os_image:
      description: RHCOS version found in C(status.nodeInfo.osImage), or null.
      type: str
    runtime:
      description: Container runtime name (C(cri-o), C(containerd)).
      type: str
    runtime_version:
      description: Container runtime version.
      type: str
    deploy_labels:
      description: C(nvidia.com/gpu.deploy.<operand>) labels by operand.
      type: dict
    labels:
      description: All labels of the node.
      type: dict
      returned: when I(return_labels)
    warnings:
      description: Problems found on this node.
      type: list
      elements: str
gpu_nodes:
  description: Names of the GPU nodes.
  returned: always
  type: list
  elements: str
  sample: [worker-0, worker-1]
groups:
  description: GPU node names by RHCOS version (C(by_rhcos)), by effective kernel (C(by_kernel)), by OS (C(by_os)).
  returned: always
  type: dict
  sample:
    by_rhcos: {"416.94.202405081406-0": [worker-0], "9.6.20260303-1": [worker-1]}
    by_kernel: {"5.14.0-427.33.1.el9_4.x86_64": [worker-0], "5.14.0-570.42.1.el9_6.x86_64": [worker-1]}
    by_os: {"rhcos-416.94.202405081406-0": [worker-0], "rhcos-9.6.20260303-1": [worker-1]}
rhcos_versions:
  description: RHCOS versions of the GPU nodes, the input of M(accelerators.gpu.dtk_image_lookup).
  returned: always
  type: list
  elements: str
  sample: ["416.94.202405081406-0", "9.6.20260303-1"]
without_nfd:
  description: Names of the selected nodes without any NFD label.
  returned: always
  type: list
  elements: str
node_warnings:
  description: Warnings by node name (nodes without warnings are left out); also emitted as module warnings.
  returned: always
  type: dict
label_changes:
  description: Label changes made (or, in check mode, that would be made) by node; a null value removes a label.
  returned: always
  type: dict
  sample: {"worker-0": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.driver": "true"}}
waited_seconds:
  description: Seconds spent waiting for NFD labels.
  returned: always
  type: float
api_requests:
  description: API requests sent by the module, by HTTP verb, and
    I(api_response_bytes), the bytes of the answers.
  returned: always
  type: dict
  sample: {"GET": 10, "PATCH": 2}
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
from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.nfd_labels import run


def main():
    run_module(dict(
        label_selector=dict(type='str'),
        page_size=dict(type='int'),
        wait=dict(type='bool', default=False),
        wait_timeout=dict(type='int', default=300),
        wait_sleep=dict(type='int', default=5),
        min_gpu_nodes=dict(type='int', default=0),
        manage_labels=dict(type='bool', default=False),
        labels_state=dict(type='str', choices=['present', 'absent'], default='present'),
        return_labels=dict(type='bool', default=False),
        operands=dict(type='list', elements='str'),
        dra_node_selector=dict(type='dict', default={}),
    ), run)


if __name__ == '__main__':
    main()
