#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: operand
short_description: Apply the objects of one state of the GPU stack, remove those it no longer needs, wait until ready
version_added: 0.1.0
author: accelerators.gpu developers (@accelerators-gpu)
description:
  - Server-side applies (field manager C(accelerators.gpu), forced) the objects of O(definitions) in their order, and
    deletes the objects of O(absent) that exist; then, with O(wait_for), waits as M(accelerators.gpu.operand_status)
    does, in the same module run. One run per state instead of one to apply and one to wait.
  - An object counts as changed when it differs once the server's bookkeeping (C(managedFields), C(resourceVersion),
    C(generation)) and C(status) are left out, so a re-run that declares nothing new reports no change.
  - A field this collection applied before and no longer declares is removed by the server-side apply; fields set by
    others stay.
  - The kind of each object is found through kubernetes.core's cached API discovery. A failed write names the object.
  - The values of a Secret are masked in the results and the diff.
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - accelerators.gpu.api_retry
  - accelerators.gpu.operand_wait
options:
  definitions:
    description:
      - Objects to apply, in order (a Namespace before what goes into it), each with C(apiVersion), C(kind),
        C(metadata.name) and, for a namespaced kind, C(metadata.namespace).
    type: list
    elements: dict
    default: []
  absent:
    description:
      - Objects to delete when they exist (C(apiVersion), C(kind), C(metadata.name), C(metadata.namespace)); their
        dependents go in the background. An object or a kind that does not exist is no error.
    type: list
    elements: dict
    default: []
  wait_for:
    description:
      - After the writes, wait as M(accelerators.gpu.operand_status) waits with the same O(wait_for) and the other
        options of the wait. Omitted, the module does not wait; in check mode it never waits.
    type: str
    choices: [daemonsets, deployments, jobs, allocatable, subscription]
attributes:
  check_mode:
    description: Every write is a server-side dry run (C(dryRun=All)); the API server validates it and stores nothing.
    support: full
  diff_mode:
    description: Returns each changed object before and after.
    support: full
requirements:
  - kubernetes >= 24.2.0
  - PyYAML >= 3.11
'''

EXAMPLES = r'''
- name: Device plugin service account, DaemonSet and its configuration, waited for on every GPU node
  accelerators.gpu.operand:
    definitions: "{{ lookup('ansible.builtin.template', 'daemonset.yml.j2') | ansible.builtin.from_yaml_all }}"
    wait_for: daemonsets
    namespace: nvidia-gpu-operator
    names: [nvidia-device-plugin-daemonset]
    allocatable_on_ready_nodes: true
    timeout: 300
  register: device_plugin

- name: The operand namespace; the proxy Secret goes when no proxy is set any more
  accelerators.gpu.operand:
    definitions:
      - apiVersion: v1
        kind: Namespace
        metadata:
          name: nvidia-gpu-operator
    absent:
      - apiVersion: v1
        kind: Secret
        metadata:
          name: accelerators-gpu-proxy
          namespace: nvidia-gpu-operator
'''

RETURN = r'''
objects:
  description: Each object of O(definitions) and each object of O(absent) deleted, with its action.
  returned: always
  type: list
  elements: dict
  contains:
    object:
      description: Kind, namespace and name.
      type: str
      sample: DaemonSet nvidia-gpu-operator/nvidia-device-plugin-daemonset
    action:
      description: V(created), V(updated), V(unchanged) or V(deleted) (in check mode, what would be done).
      type: str
diff:
  description: Each changed object before and after (Secret values masked).
  returned: in diff mode
  type: list
  elements: dict
ready:
  description:
    - With O(wait_for), whether what was awaited is ready; the other keys M(accelerators.gpu.operand_status)
      returns come with it (C(ready_nodes), C(ready_pods), C(daemonsets), C(validation), C(nodes)...).
  returned: when O(wait_for) is given and not in check mode
  type: bool
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

from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.errors import TaskError
from ansible_collections.accelerators.gpu.plugins.module_utils.runner.module import run_module
from ansible_collections.accelerators.gpu.plugins.module_utils.operands.apply import apply_objects
from ansible_collections.accelerators.gpu.plugins.module_utils.operands.wait import WAIT_ARGUMENT_SPEC, WAIT_FOR, wait_for_operands


def apply_and_wait(module, api):
    params = module.params
    result = apply_objects(api, params['definitions'], params['absent'])
    if not module._diff:
        del result['diff']
    if params['wait_for'] and not module.check_mode:
        try:
            result.update(wait_for_operands(params, api), changed=result['changed'])
        except TaskError as error:
            error.result.update(objects=result['objects'], changed=result['changed'])
            raise
    return result


def main():
    run_module(dict(
        WAIT_ARGUMENT_SPEC,
        definitions=dict(type='list', elements='dict', default=[]),
        absent=dict(type='list', elements='dict', default=[]),
        wait_for=dict(type='str', choices=WAIT_FOR),
    ), apply_and_wait)


if __name__ == '__main__':
    main()
