# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Waiting for operands to be ready, as the operand_status and operand modules (and driver_daemonsets) do it: the
options of a wait, what it observes (waiter's observers), and its result, with a diagnosis when it does not succeed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ..k8s.errors import APIError, TaskError
from . import waiter
from .diagnosis import READY, diagnose, outcome_message, public_problems, unreachable_line
from .validation import check_label_selector, validation_plan
from .waiter import OperandReads

# What can be waited for, and the options of a wait (doc fragment accelerators.gpu.operand_wait, which documents
# wait_for too); each module makes wait_for required or not.
WAIT_FOR = ['daemonsets', 'deployments', 'jobs', 'allocatable', 'subscription']
WAIT_ARGUMENT_SPEC = dict(
    namespace=dict(type='str'),
    names=dict(type='list', elements='str', default=[]),
    label_selectors=dict(type='list', elements='str', default=[]),
    nodes=dict(type='list', elements='str', default=[]),
    node_label_selectors=dict(type='list', elements='str', default=[]),
    resource=dict(type='list', elements='str', default=['nvidia.com/gpu']),
    allocatable_on_ready_nodes=dict(type='bool', default=False),
    node_labels=dict(type='list', elements='str', default=[]),
    node_label_values=dict(type='dict', default={}),
    service=dict(type='str'),
    service_timeout=dict(type='int', default=10),
    validation_check=dict(type='str'),
    accept_outdated=dict(type='bool', default=False),
    timeout=dict(type='int', default=300),
    poll_interval=dict(type='float', default=2),
    grace=dict(type='int', default=20),
    event_limit=dict(type='int', default=5),
)


def api_lost(error):
    """The words of an error that means the API server is out of reach or overloaded for now (APIError.fault), None
    for any other: a wait counts the state behind such an error as unknown, not as failed (waiter.wait)."""
    return str(error) if isinstance(error, APIError) and error.fault else None


def job_summary(job):
    """What a validation plan reads of a Job (operands/validation.py): names, annotations, deletion, conditions;
    the pod template and the rest stay out of the result, which Ansible carries from task to task."""
    metadata = job.get('metadata') or {}
    kept = ('name', 'namespace', 'annotations', 'deletionTimestamp')
    summary = {'metadata': dict((key, metadata[key]) for key in kept if key in metadata)}
    summary['status'] = {'conditions': (job.get('status') or {}).get('conditions') or []}
    return summary


def wait_params(wait_for, **given):
    """The parameters of a wait, as operand_status's would be: WAIT_ARGUMENT_SPEC's defaults and the given values."""
    params = dict((name, spec.get('default')) for name, spec in WAIT_ARGUMENT_SPEC.items())
    params.update(given, wait_for=wait_for)
    return params


def _allocatable_observer(reads, nodes, selector, resources):
    return ('allocatable %s on nodes %s' % (' or '.join(resources), ', '.join(nodes) if nodes else selector),
            lambda: waiter.observe_allocatable(reads, nodes, selector, resources))


def _observer(params, reads):
    """(what is awaited, in words; a function observing it). Label selectors are ANDed, as kubernetes.core's."""
    mode = params['wait_for']
    if mode == 'allocatable':
        return _allocatable_observer(reads, params['nodes'], ','.join(params['node_label_selectors']),
                                     params['resource'])
    if mode == 'subscription':
        name = params['names'][0]
        return ('the operator of Subscription %s/%s' % (reads.namespace, name),
                lambda: waiter.observe_subscription(reads, name))
    kind, observe = {'daemonsets': ('DaemonSets', waiter.observe_daemonsets),
                     'deployments': ('Deployments', waiter.observe_deployments),
                     'jobs': ('Jobs', waiter.observe_jobs)}[mode]
    names, selector = params['names'], ','.join(params['label_selectors'])
    subject = '%s %s in namespace %s' % (kind, ', '.join(names + ([selector] if selector else [])), reads.namespace)
    if mode == 'daemonsets':
        return subject, lambda: observe(reads, names, selector, params['accept_outdated'])
    return subject, lambda: observe(reads, names, selector)


def _wait(params, reads, subject, observe, before=None, timeout=None):
    """The result of one wait; TaskError when it did not succeed. before: the result of an earlier wait of the same
    call, which this one's result extends (its report, its message, its seconds). timeout: params' unless given."""
    before = before or {}
    timeout = params['timeout'] if timeout is None else timeout
    with reads.deadline(timeout):
        outcome, observation, decisive, elapsed, unreachable = waiter.wait(
            observe, timeout, params['poll_interval'], params['grace'], lost=api_lost)
    diagnosis = []
    if outcome != READY and not unreachable:
        events = reads.warning_events() if observation.unready_pods else []
        diagnosis = diagnose(observation, events, params['event_limit'])
    message = outcome_message(subject, outcome, observation, decisive, diagnosis, elapsed, timeout)
    if outcome != READY and unreachable:
        message = '\n'.join((message, unreachable_line(unreachable)))
    result = dict(before, **observation.report)
    result.update(ready=outcome == READY, outcome=outcome,
                  elapsed=round(elapsed + before.get('elapsed', 0), 1),
                  problems=public_problems(observation.problems), nodes=diagnosis, changed=False,
                  msg='\n'.join(filter(None, (before.get('msg'), message))))
    if outcome != READY:
        raise TaskError(result.pop('msg'), **result)
    return result


def wait_for_operands(params, api):
    """The result of waiting as params (WAIT_ARGUMENT_SPEC and wait_for) say; TaskError when it did not succeed."""
    if params['wait_for'] == 'allocatable':
        if not (params['nodes'] or params['node_label_selectors']):
            raise TaskError('allocatable needs nodes or node_label_selectors')
    elif params['wait_for'] == 'subscription':
        if not (params['namespace'] and len(params['names']) == 1):
            raise TaskError('subscription needs namespace, and the name of one Subscription in names')
    elif not (params['namespace'] and (params['names'] or params['label_selectors'])):
        raise TaskError('%s needs namespace, and names or label_selectors' % params['wait_for'])
    if ((params['allocatable_on_ready_nodes'] or params['service'] or params['node_labels'])
            and params['wait_for'] != 'daemonsets'):
        raise TaskError('allocatable_on_ready_nodes, node_labels and service go with wait_for daemonsets')
    if params['validation_check'] and params['wait_for'] != 'daemonsets':
        raise TaskError('validation_check goes with wait_for daemonsets')
    reads = OperandReads(api, params['namespace'])
    result = _wait(params, reads, *_observer(params, reads))
    if params['allocatable_on_ready_nodes'] and result['ready_nodes']:
        result = _wait(params, reads, *_allocatable_observer(reads, result['ready_nodes'], '', params['resource']),
                       before=result)
    if params['node_labels'] and result['ready_nodes']:
        nodes, keys, expected = result['ready_nodes'], params['node_labels'], params['node_label_values']
        subject = 'labels %s on the %d ready nodes' % (', '.join(keys), len(nodes))
        result = _wait(params, reads, subject, lambda: waiter.observe_node_labels(reads, nodes, keys, expected),
                       before=result)
    if params['service'] and result['ready_nodes']:
        nodes = result['ready_nodes']
        subject = 'endpoints of Service %s/%s on the %d ready nodes' % (
            params['namespace'], params['service'], len(nodes))
        result = _wait(params, reads, subject, lambda: waiter.observe_service(reads, params['service'], nodes),
                       before=result, timeout=params['service_timeout'])
    if params['validation_check']:
        jobs = [job_summary(job) for job in reads.jobs([], check_label_selector(params['validation_check']))[0]]
        result['validation'] = validation_plan(jobs, result['ready_nodes'], result['ready_pods'])
    return result
