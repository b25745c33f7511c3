# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jobs: whether a (validation) Job succeeded, failed (naming the node and why) or still runs."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .objects import metadata_of, owned_by, pinned_node, pod_node, status_of, warning_events
from .pods import failure_message, pod_problems
from .problems import FAILED, NOT_CREATED, new_problem

JOB_UID_LABEL = 'batch.kubernetes.io/controller-uid'


def _true_conditions(obj):
    return dict((c.get('type'), c) for c in status_of(obj).get('conditions') or [] if c.get('status') == 'True')


def job_succeeded(job):
    """Whether a Job has succeeded: its Complete condition, or SuccessCriteriaMet (Kubernetes 1.31 and later, before
    Complete) without Failed. A succeeded pod count alone is not enough: the Job may still be failing."""
    conditions = _true_conditions(job)
    return 'Complete' in conditions or ('SuccessCriteriaMet' in conditions and 'Failed' not in conditions)


def job_state(job, pods, owner_events=()):
    """Outcome of a validation Job: succeeded, failed (naming the node and why) or running; with its problems."""
    meta, status = metadata_of(job), status_of(job)
    own = [p for p in pods if owned_by(p, job)]
    template_spec = ((job.get('spec') or {}).get('template') or {}).get('spec') or {}
    nodes = sorted(set(filter(None, [pod_node(p) for p in own]))) or [pinned_node(template_spec)]
    conditions = _true_conditions(job)
    state = {'name': meta.get('name'), 'namespace': meta.get('namespace'), 'node': nodes[0], 'result': 'running',
             'message': '', 'problems': []}
    if job_succeeded(job):
        state.update(result='succeeded', message='succeeded on node %s' % nodes[0])
        return state
    failed_pods = [p for p in own if status_of(p).get('phase') == 'Failed']
    if 'Failed' in conditions or 'FailureTarget' in conditions:
        why = failure_message(failed_pods[-1]) if failed_pods else '%s: %s' % (
            (conditions.get('Failed') or conditions.get('FailureTarget')).get('reason'),
            (conditions.get('Failed') or conditions.get('FailureTarget')).get('message'))
        state.update(result='failed', message='failed on node %s: %s' % (nodes[0], why))
        state['problems'] = [new_problem(FAILED, None, 'Job %s/%s failed on node %s: %s' % (
            meta.get('namespace'), meta.get('name'), nodes[0], why), key=(FAILED, meta.get('uid')), node=nodes[0])]
        return state
    state['problems'] = [problem for pod in own if status_of(pod).get('phase') != 'Failed'
                         for problem in pod_problems(pod)]
    if not own:
        events = warning_events(owner_events, job, 1)
        if events:
            state['problems'].append(new_problem(NOT_CREATED, None, 'Job %s/%s has no pod on node %s (%s: %s)' % (
                meta.get('namespace'), meta.get('name'), nodes[0], events[0]['reason'], events[0]['message']),
                key=(NOT_CREATED, meta.get('uid')), node=nodes[0]))
    return state
