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
  - Waits until operand DaemonSets are ready, validation Jobs have succeeded, or GPU nodes advertise an
    allocatable resource; fails as soon as the cause of a failure is visible instead of waiting for the timeout.
  - "A DaemonSet is ready (the GPU Operator's rule) when its controller has observed its current generation and
    either no node should run it, or, with C(RollingUpdate), every scheduled pod is updated and available, or,
    with C(OnDelete), every pod carries the C(controller-revision-hash) of the newest ControllerRevision and is Ready."
  - Fails at once on a pod in C(ImagePullBackOff), C(ErrImagePull) or C(InvalidImageName) (naming node, pod and image),
    C(CrashLoopBackOff) (naming node, pod, container and message), C(CreateContainerConfigError), a failed pod or
    Job (naming the node and the failure message); after O(grace) seconds on a pod the scheduler cannot place
    (with its message) or on pods a DaemonSet cannot create (with its C(FailedCreate) warning).
  - Whenever it fails, by a visible cause or at the timeout, it returns a per-node diagnosis of the pods not ready
    (phase, containers' waiting reasons and messages, recent Warning events).
  - Reads only; in check mode it reads and waits the same way.
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
options:
  wait_for:
    description:
      - V(daemonsets) waits for the DaemonSets named in O(names) and/or selected by O(label_selectors) in O(namespace).
      - V(jobs) waits for Jobs the same way; they must succeed. Their pods are found by the label
        C(batch.kubernetes.io/controller-uid) (Kubernetes 1.27 and later).
      - V(allocatable) waits until every node of O(nodes), or every node selected by O(node_label_selectors),
        advertises more than zero of O(resource) in its allocatable resources.
    type: str
    required: true
    choices: [daemonsets, jobs, allocatable]
  namespace:
    description: Namespace of the DaemonSets or Jobs. Required for V(daemonsets) and V(jobs).
    type: str
  names:
    description: Names of the DaemonSets or Jobs. A name that does not exist fails the wait at once.
    type: list
    elements: str
    default: []
  label_selectors:
    description:
      - Label selectors (C(key=value), all must match) of the DaemonSets or Jobs, in addition to O(names).
      - When nothing matches (and O(names) is empty) the wait fails at once.
    type: list
    elements: str
    default: []
  nodes:
    description: Names of the nodes that must advertise O(resource) (V(allocatable)).
    type: list
    elements: str
    default: []
  node_label_selectors:
    description:
      - Label selectors (all must match) of the nodes that must advertise O(resource) (V(allocatable)), when O(nodes)
        is empty.
    type: list
    elements: str
    default: []
  resource:
    description:
      - Allocatable resource name, or shell-style pattern (V(nvidia.com/mig-*)); the matching resources are summed.
    type: str
    default: nvidia.com/gpu
  allocatable_on_ready_nodes:
    description:
      - With V(daemonsets), once the DaemonSets are ready, wait as V(allocatable) does (for at most O(timeout) seconds
        more) until every node in C(ready_nodes) advertises O(resource), in the same call.
    type: bool
    default: false
  service:
    description:
      - With V(daemonsets), once the DaemonSets are ready, wait (for at most O(service_timeout) seconds more) until
        every node in C(ready_nodes) has a ready endpoint in the EndpointSlices of this Service of O(namespace), as
        the endpoint controller follows pod readiness; when one has none, the failure names it and the Service's
        newest Warning event.
    type: str
  service_timeout:
    description: Seconds the endpoints of O(service) may take.
    type: int
    default: 10
  jobs_label_selectors:
    description:
      - Once the wait succeeded, read the Jobs of O(namespace) these label selectors select (all must match) and
        return them as C(jobs_found), as the API gives them; for instance the validation Jobs a check plans from,
        read in the same call as the wait for the operand it checks.
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds to wait at most.
    type: int
    default: 300
  poll_interval:
    description: Seconds between two looks at the cluster.
    type: float
    default: 2
  grace:
    description:
      - Seconds a pod may stay unschedulable, or a DaemonSet fall short of creating its pods, before the wait fails.
      - Image pull failures, crash loops and failed Jobs fail the wait at once.
    type: int
    default: 20
  event_limit:
    description: Warning events returned per pod not ready, newest first.
    type: int
    default: 5
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

- name: Wait for the device plugin, then for its GPUs on its nodes; return the Jobs of the CUDA check
  accelerators.gpu.operand_status:
    wait_for: daemonsets
    namespace: nvidia-gpu-operator
    names: [nvidia-device-plugin-daemonset]
    allocatable_on_ready_nodes: true
    jobs_label_selectors: [app.kubernetes.io/component=gpu-validation, accelerators.gpu/validation=cuda]
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
jobs:
  description: Per Job (V(jobs)) its name, namespace, node, result (succeeded, failed, running) and message.
  returned: when wait_for is jobs
  type: list
  elements: dict
allocatable:
  description: Per node (V(allocatable)) the sum of its allocatable resources matching O(resource).
  returned: when wait_for is allocatable, or O(allocatable_on_ready_nodes) waited for it
  type: dict
missing:
  description: Nodes (V(allocatable)) that do not advertise O(resource).
  returned: when wait_for is allocatable, or O(allocatable_on_ready_nodes) waited for it
  type: list
  elements: str
unserved_nodes:
  description: Nodes in C(ready_nodes) without a ready endpoint in O(service)'s EndpointSlices.
  returned: when O(service) is given and some node was ready
  type: list
  elements: str
jobs_found:
  description: The Jobs O(jobs_label_selectors) select, sorted by name, as the API returns them.
  returned: when O(jobs_label_selectors) is given and the wait succeeded
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
'''

from ansible_collections.accelerators.gpu.plugins.module_utils import readiness
from ansible_collections.accelerators.gpu.plugins.module_utils.cluster_api import APIError, TaskError, run_module

WARNING_EVENTS_PAGE = 1000


class OperandReads:
    """The reads of operand_status, through the collection's API layer."""

    def __init__(self, api, namespace):
        self.api = api
        self.namespace = namespace

    def _named_and_selected(self, path, names, selector):
        found, missing = {}, []
        for name in names:
            try:
                item = self.api._request('GET', '%s/%s' % (path, name))
            except APIError as error:
                if error.status != 404:
                    raise
                missing.append(name)
                continue
            found[item['metadata']['uid']] = item
        if selector:
            for item in self.api._list(path, selector):
                found[item['metadata']['uid']] = item
        return sorted(found.values(), key=lambda item: item['metadata']['name']), missing

    def daemonsets(self, names, selector):
        return self._named_and_selected('/apis/apps/v1/namespaces/%s/daemonsets' % self.namespace, names, selector)

    def jobs(self, names, selector):
        return self._named_and_selected('/apis/batch/v1/namespaces/%s/jobs' % self.namespace, names, selector)

    def pods(self, selector):
        return list(self.api._list('/api/v1/namespaces/%s/pods' % self.namespace, selector))

    def revisions(self, selector):
        return list(self.api._list('/apis/apps/v1/namespaces/%s/controllerrevisions' % self.namespace, selector))

    def endpoint_slices(self, service):
        return list(self.api._list('/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices' % self.namespace,
                                   'kubernetes.io/service-name=%s' % service))

    def warning_events(self):
        page = self.api._request('GET', '/api/v1/namespaces/%s/events' % self.namespace, field_selector='type=Warning',
                                 limit=WARNING_EVENTS_PAGE)
        return page.get('items') or []

    def nodes(self, names, selector):
        if names:
            wanted = set(names)
            return [node for node in self.api.list_nodes() if node['metadata']['name'] in wanted]
        return list(self.api.list_nodes(selector))


def _allocatable_observer(reads, nodes, selector, resource):
    return ('allocatable %s on nodes %s' % (resource, ', '.join(nodes) if nodes else selector),
            lambda: readiness.observe_allocatable(reads, nodes, selector, resource))


def _observer(params, reads):
    """(what is awaited, in words; a function observing it). Label selectors are ANDed, as kubernetes.core's."""
    mode = params['wait_for']
    if mode == 'allocatable':
        return _allocatable_observer(reads, params['nodes'], ','.join(params['node_label_selectors']),
                                     params['resource'])
    kind, observe = {'daemonsets': ('DaemonSets', readiness.observe_daemonsets),
                     'jobs': ('Jobs', readiness.observe_jobs)}[mode]
    names, selector = params['names'], ','.join(params['label_selectors'])
    subject = '%s %s in namespace %s' % (kind, ', '.join(names + ([selector] if selector else [])), reads.namespace)
    return subject, lambda: observe(reads, names, selector)


def _wait(params, reads, subject, observe, before=None, timeout=None):
    """The result of one wait; TaskError when it did not succeed. before: the result of an earlier wait of the same
    call, which this one's result extends (its report, its message, its seconds). timeout: params' unless given."""
    before = before or {}
    timeout = params['timeout'] if timeout is None else timeout
    outcome, observation, decisive, elapsed = readiness.wait(observe, timeout, params['poll_interval'],
                                                             params['grace'])
    diagnosis = []
    if outcome != readiness.READY:
        events = reads.warning_events() if observation.unready_pods else []
        diagnosis = readiness.diagnose(observation, events, params['event_limit'])
    message = readiness.outcome_message(subject, outcome, observation, decisive, diagnosis, elapsed, timeout)
    result = dict(before, **observation.report)
    result.update(ready=outcome == readiness.READY, outcome=outcome,
                  elapsed=round(elapsed + before.get('elapsed', 0), 1),
                  problems=readiness.public_problems(observation.problems), nodes=diagnosis, changed=False,
                  msg='\n'.join(filter(None, (before.get('msg'), message))))
    if outcome != readiness.READY:
        raise TaskError(result.pop('msg'), **result)
    return result


def wait_for_operands(module, api):
    params = module.params
    if params['wait_for'] == 'allocatable':
        if not (params['nodes'] or params['node_label_selectors']):
            raise TaskError('allocatable needs nodes or node_label_selectors')
    elif not (params['namespace'] and (params['names'] or params['label_selectors'])):
        raise TaskError('%s needs namespace, and names or label_selectors' % params['wait_for'])
    if (params['allocatable_on_ready_nodes'] or params['service']) and params['wait_for'] != 'daemonsets':
        raise TaskError('allocatable_on_ready_nodes and service go with wait_for daemonsets')
    if params['jobs_label_selectors'] and not params['namespace']:
        raise TaskError('jobs_label_selectors needs namespace')
    reads = OperandReads(api, params['namespace'])
    result = _wait(params, reads, *_observer(params, reads))
    if params['allocatable_on_ready_nodes'] and result['ready_nodes']:
        result = _wait(params, reads, *_allocatable_observer(reads, result['ready_nodes'], '', params['resource']),
                       before=result)
    if params['service'] and result['ready_nodes']:
        nodes = result['ready_nodes']
        subject = 'endpoints of Service %s/%s on the %d ready nodes' % (
            params['namespace'], params['service'], len(nodes))
        result = _wait(params, reads, subject, lambda: readiness.observe_service(reads, params['service'], nodes),
                       before=result, timeout=params['service_timeout'])
    if params['jobs_label_selectors']:
        result['jobs_found'] = reads.jobs([], ','.join(params['jobs_label_selectors']))[0]
    return result


def main():
    run_module(dict(
        wait_for=dict(type='str', required=True, choices=['daemonsets', 'jobs', 'allocatable']),
        namespace=dict(type='str'),
        names=dict(type='list', elements='str', default=[]),
        label_selectors=dict(type='list', elements='str', default=[]),
        nodes=dict(type='list', elements='str', default=[]),
        node_label_selectors=dict(type='list', elements='str', default=[]),
        resource=dict(type='str', default='nvidia.com/gpu'),
        allocatable_on_ready_nodes=dict(type='bool', default=False),
        service=dict(type='str'),
        service_timeout=dict(type='int', default=10),
        jobs_label_selectors=dict(type='list', elements='str', default=[]),
        timeout=dict(type='int', default=300),
        poll_interval=dict(type='float', default=2),
        grace=dict(type='int', default=20),
        event_limit=dict(type='int', default=5),
    ), wait_for_operands)


if __name__ == '__main__':
    main()
