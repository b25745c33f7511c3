# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a wait says when it ends: pure text and records from its last observation, never a bare 'timed out' but the
objects not ready, the problems seen (the decisive ones first) and a per-node diagnosis of the pods not ready."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .checks.objects import metadata_of, pod_node, status_of, warning_events
from .checks.pods import container_states, pod_is_ready, scheduling_message

# How a wait ends (waiter.wait).
READY, FAILED_FAST, TIMED_OUT = 'ready', 'failed', 'timed out'
REPORTED_PROBLEMS = 10


def summarize(problems, limit=REPORTED_PROBLEMS):
    """Problems as text, one per line, at most limit of them (fatal ones first)."""
    ordered = sorted(problems, key=lambda p: (not p['fatal'], p.get('node') or '', p.get('pod') or ''))
    lines = [p['text'] for p in ordered[:limit]]
    if len(ordered) > limit:
        lines.append('... and %d more problems (see the problems returned)' % (len(ordered) - limit))
    return lines


def pod_diagnosis(pod, events=(), event_limit=5):
    """Per-node record of a pod that is not ready: node, pod, phase, containers' states, scheduler message,
    recent Warning events."""
    return {
        'node': pod_node(pod),
        'namespace': metadata_of(pod).get('namespace'),
        'pod': metadata_of(pod).get('name'),
        'phase': status_of(pod).get('phase') or 'Unknown',
        'ready': pod_is_ready(pod),
        'message': status_of(pod).get('message') or '',
        'containers': container_states(pod),
        'scheduling': scheduling_message(pod),
        'events': warning_events(events, pod, event_limit),
    }


def diagnose(observation, events, event_limit=5):
    """Per-node diagnosis of the pods not ready at the end of a wait, sorted by node."""
    found = [pod_diagnosis(pod, events, event_limit) for pod in observation.unready_pods]
    return sorted(found, key=lambda d: (d['node'] or '', d['pod']))


def describe_diagnosis(entry):
    """One line about a pod that is not ready: where, its phase, what its containers wait for, its last warning."""
    parts = ['%spod %s/%s %s' % ('node %s: ' % entry['node'] if entry['node'] else '', entry['namespace'],
                                 entry['pod'], entry['phase'])]
    if entry['scheduling']:
        parts.append(entry['scheduling'])
    for container in entry['containers']:
        parts.append('container %s %s%s%s' % (
            container['container'], container.get('state') or 'not started',
            ' ' + container['reason'] if container.get('reason') else '',
            ': ' + container['message'] if container.get('message') else ''))
    if entry['events']:
        event = entry['events'][0]
        parts.append('last warning %s: %s' % (event['reason'], event['message']))
    return '; '.join(parts)


def _not_ready_lines(report):
    lines = ['DaemonSet %s/%s: %s' % (s['namespace'], s['name'], s['reason'])
             for s in report.get('daemonsets') or [] if not s['ready']]
    # A failed Job is a problem already, listed with the others: only the running ones are added here.
    lines.extend('Job %s/%s running on node %s' % (s['namespace'], s['name'], s['node'])
                 for s in report.get('jobs') or [] if s['result'] == 'running')
    if report.get('missing'):
        lines.append('nodes without it: %s' % ', '.join(report['missing']))
    subscription = report.get('subscription')
    if subscription:
        lines.append('Subscription %s/%s: state %s, installed CSV %s, phase %s' % (
            subscription['namespace'], subscription['name'], subscription['state'] or 'none',
            subscription['installed_csv'] or 'none', subscription['csv_phase'] or 'none'))
    for node, problems in sorted((report.get('label_problems') or {}).items())[:REPORTED_PROBLEMS]:
        lines.append('node %s: %s' % (node, '; '.join(problems)))
    if len(report.get('label_problems') or {}) > REPORTED_PROBLEMS:
        lines.append('... and %d more nodes with label problems (see label_problems returned)'
                     % (len(report['label_problems']) - REPORTED_PROBLEMS))
    if report.get('unserved_nodes'):
        lines.append('nodes without a ready endpoint: %s' % ', '.join(report['unserved_nodes']))
    if report.get('service_warning'):
        lines.append('last warning of the Service %s' % report['service_warning'])
    return lines


def outcome_message(subject, outcome, observation, decisive, diagnosis, elapsed, timeout):
    """What the module says: never a bare 'timed out', but the objects not ready, the problems seen (the
    decisive ones first) and the per-node diagnosis."""
    if outcome == READY:
        return '%s ready after %.1fs' % (subject, elapsed)
    if outcome == FAILED_FAST:
        head = '%s not ready: failing after %.1fs, before the %ss timeout, as the cause is visible:' % (
            subject, elapsed, timeout)
    else:
        head = '%s not ready after %ss:' % (subject, timeout)
    decisive_keys = set(p['key'] for p in decisive)
    others = [p for p in observation.problems if p['key'] not in decisive_keys]
    lines = [head] + summarize(decisive) + _not_ready_lines(observation.report) + summarize(others)
    named = set(p['pod'] for p in observation.problems)
    unexplained = [entry for entry in diagnosis if entry['pod'] not in named]
    lines.extend(describe_diagnosis(entry) for entry in unexplained[:REPORTED_PROBLEMS])
    if len(unexplained) > REPORTED_PROBLEMS:
        lines.append('... and %d more pods not ready (see nodes returned)' % (len(unexplained) - REPORTED_PROBLEMS))
    return '\n'.join(lines)


def public_problems(problems):
    """Problems as returned by the module: without the internal key."""
    return [dict((k, v) for k, v in p.items() if k != 'key') for p in problems]


def unreachable_line(unreachable):
    """The line a wait's message gets when the API server was out of reach during it (Lost.report()), '' when not."""
    if not unreachable:
        return ''
    return 'the API server was unreachable for %.0f s of the wait (last: %s)' % (
        unreachable['seconds'], unreachable['error'])
