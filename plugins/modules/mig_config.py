#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: mig_config
short_description: Ask the NVIDIA MIG manager for a MIG layout on nodes and wait until they advertise its devices
version_added: 0.1.0
author: accelerators.gpu developers (@accelerators-gpu)
description:
  - The MIG manager applies the layout (a C(mig-configs) entry of its ConfigMap, mig-parted's format) that the node
    label C(nvidia.com/mig.config) names, and reports in C(nvidia.com/mig.config.state) (C(pending), C(rebooting),
    C(success), C(failed)).
  - I(action=check) reads the nodes and the layouts and fails, changing nothing, naming each node that cannot take
    the layout (its GPU not MIG-capable by GPU feature discovery's C(nvidia.com/mig.capable) label, or unknown), an
    unknown layout, or a layout that enables MIG under I(mig_strategy=none) (the nodes would keep advertising whole
    GPUs and no MIG device would appear; the message names the setting to change, C(common_mig_strategy) in the
    playbooks); it returns the nodes whose layout would change (to evict their GPU workloads first).
  - I(action=apply) does the same checks, sets C(nvidia.com/mig.config) (and the state back to C(pending)) on the
    nodes not yet at the layout, then waits until each reports C(success) and advertises the layout's resources
    under I(mig_strategy); it fails at once naming the nodes whose state is C(failed), at I(timeout) naming each
    node not there and why.
  - On a node of the DRA stack (C(nvidia.com/gpu.deploy.dra-driver=true)) the NVIDIA DRA driver's kubelet plugin
    serves the layout, whatever I(mig_strategy). The node is done once its ResourceSlice publishes the layout's
    devices (each GPU with MIG disabled as a C(gpu), each MIG device as C(mig-<profile>)). The plugin finds its
    devices when it starts and the MIG manager does not stop it, so once the MIG manager reports C(success) the
    plugin's pod there is restarted (once). The MIG manager sets the deploy labels of the GPU clients it stops back
    to C(true), absent ones too, so the device plugin's label, absent on such a node, is set to C(false) with the
    layout (the MIG manager leaves C(false) alone; annotation C(accelerators.gpu/mig.device-plugin-pinned)) and
    removed once the layout is applied, so that no device plugin starts beside the kubelet plugin.
  - A node under GPU remediation (its label C(accelerators.gpu/gpu-remediation-state) in a state in progress,
    C(quarantine-required) to C(uncordon-required), or held, C(rma) or C(failed); see
    M(accelerators.gpu.gpu_remediation)) is left alone by I(action=check), I(action=apply) and I(action=default) -
    neither checked nor labelled, and named in RV(remediation) with its state. Run again once its remediation ended.
  - I(action=default) sets I(config) on the nodes that name no layout; I(action=remove) removes
    C(nvidia.com/mig.config) and C(nvidia.com/mig.config.state) where the value is still the one this module set
    (annotation C(accelerators.gpu/mig.config)), and the annotation.
  - Every result carries I(api_requests), the API requests the module sent, by HTTP verb, and I(api_response_bytes).
options:
  action:
    description: What to do, see the description.
    type: str
    choices: [check, apply, default, remove]
    required: true
  nodes:
    description: Names of the nodes; all the nodes I(label_selector) selects when empty.
    type: list
    elements: str
    default: []
  label_selector:
    description: Label selector of the nodes read (and, without I(nodes), acted on).
    type: str
  config:
    description: Name of the MIG layout (for example V(all-1g.10gb), V(all-disabled)). Needed but by I(action=remove).
    type: str
  namespace:
    description: Namespace of the MIG manager's ConfigMap.
    type: str
    default: nvidia-gpu-operator
  config_map:
    description: ConfigMap of the layouts (key C(config.yaml)).
    type: str
    default: default-mig-parted-config
  mig_strategy:
    description:
      - The device plugin's MIG strategy, which decides the resources a layout gives. Under V(none) only layouts
        that disable MIG are taken on the device plugin's nodes (nodes of the DRA stack take any).
    type: str
    choices: [none, single, mixed]
    default: none
  timeout:
    description: Seconds for every node to apply the layout and advertise its resources.
    type: int
    default: 600
  poll_interval:
    description: Seconds between two looks at the nodes.
    type: int
    default: 2
attributes:
  check_mode:
    description: Label patches are server-side dry runs, and the module does not wait.
    support: full
  diff_mode:
    description: No diff.
    support: none
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - accelerators.gpu.api_retry
requirements:
  - kubernetes >= 24.2.0
  - PyYAML >= 3.11
'''

EXAMPLES = r'''
- name: Seven 1g.10gb MIG devices on every GPU of two A100-80GB nodes
  accelerators.gpu.mig_config:
    action: apply
    nodes: [gpu-a100-0, gpu-a100-1]
    config: all-1g.10gb
    mig_strategy: mixed
'''

RETURN = r'''
nodes:
  description: The nodes acted on (I(action=default) and I(action=remove), those patched).
  returned: always
  type: list
  elements: str
changing:
  description: The nodes not yet at the layout (I(action=check) and I(action=apply)).
  returned: when action is check or apply
  type: list
  elements: str
expected:
  description: By node, the resources it advertises at the layout (on a node of the DRA stack, the devices its
    ResourceSlice publishes, by kind).
  returned: when action is check or apply
  type: dict
  sample: {gpu-a100-0: {nvidia.com/gpu: 0, nvidia.com/mig-1g.10gb: 56}, gpu-dra-0: {gpu: 0, mig-3g.40gb: 2}}
remediation:
  description: The nodes left alone as under GPU remediation, each with its state, in words.
  returned: when action is check, apply or default
  type: list
  elements: str
  sample: ["node gpu-a100-1: under GPU remediation (accelerators.gpu/gpu-remediation-state=reset-required), its MIG
    layout not changed"]
restarted:
  description: The DRA kubelet plugin pods (namespace/name) restarted so that they publish the layout's devices.
  returned: when action is apply and not in check mode
  type: list
  elements: str
refused:
  description: Why nodes cannot take the layout (the module then fails).
  returned: on failure
  type: list
  elements: str
failed_nodes:
  description: The nodes whose MIG manager reported C(failed) (the module then fails).
  returned: on failure
  type: list
  elements: str
api_requests:
  description: API requests sent by the module, by HTTP verb.
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
from ansible_collections.accelerators.gpu.plugins.module_utils.mig.config import run


def main():
    run_module(dict(
        action=dict(type='str', choices=['check', 'apply', 'default', 'remove'], required=True),
        nodes=dict(type='list', elements='str', default=[]),
        label_selector=dict(type='str'),
        config=dict(type='str'),
        namespace=dict(type='str', default='nvidia-gpu-operator'),
        config_map=dict(type='str', default='default-mig-parted-config'),
        mig_strategy=dict(type='str', choices=['none', 'single', 'mixed'], default='none'),
        timeout=dict(type='int', default=600),
        poll_interval=dict(type='int', default=2),
    ), run, required_if=[('action', 'check', ['config']), ('action', 'apply', ['config']),
                         ('action', 'default', ['config'])])


if __name__ == '__main__':
    main()
