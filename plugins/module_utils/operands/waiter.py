# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure functions deciding whether operands are ready, and why not.

Inputs are objects as the API returns them (plain dicts): DaemonSets, their pods and ControllerRevisions,
Jobs and their pods, Warning events, Nodes. Outputs are plain data: a readiness verdict, problems (each
naming the node, the pod and the cause) and a per-node diagnosis. The wait loop takes its clock and sleep
as arguments, so that failing fast can be tested without waiting.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import re
import time

from ..nodes.gfd_labels import nodes_label_problems
from ..nodes.facts import DEPLOY_LABEL_PREFIX

REVISION_HASH_LABEL = 'controller-revision-hash'
# Waiting reasons that retrying will not cure: the wait fails at once, naming the cause.
IMAGE_REASONS = ('ImagePullBackOff', 'ErrImagePull', 'InvalidImageName', 'ErrImageNeverPull')
CRASH_REASONS = ('CrashLoopBackOff', 'RunContainerError')
CONFIG_REASONS = ('CreateContainerConfigError', 'CreateContainerError')
# Problem kinds. Fatal ones end a wait at once; stuck ones only once they have lasted the grace period
# (a pod the scheduler cannot place now may fit a moment later; a DaemonSet may create its pods late).
IMAGE, CRASH, CONFIG, FAILED, MISSING = 'image', 'crash', 'config', 'failed', 'missing'
UNSCHEDULABLE, NOT_CREATED, DRIVER_OPTED_OUT = 'unschedulable', 'not-created', 'driver-opted-out'
FATAL_KINDS = (IMAGE, CRASH, CONFIG, FAILED, MISSING)
# Results of wait().
READY, FAILED_FAST, TIMED_OUT = 'ready', 'failed', 'timed out'
_PULLED_IMAGE_RE = re.compile(r'image "([^"]+)"')
REPORTED_PROBLEMS = 10
DRIVER_DEPLOY_LABEL = DEPLOY_LABEL_PREFIX + 'driver'
# The nodes an admin opted out of the driver: no driver pod runs there, and (not labelled pre-installed) no driver is
# known on the host.
DRIVER_OPTED_OUT_SELECTOR = DRIVER_DEPLOY_LABEL + '=false'


def selector_string(selector):
    """A label selector (matchLabels, matchExpressions) as the string the list API takes."""
    selector = selector or {}
    terms = ['%s=%s' % (key, value) for key, value in sorted((selector.get('matchLabels') or {}).items())]
    for expression in selector.get('matchExpressions') or []:
        key, operator, values = expression['key'], expression['operator'], expression.get('values') or []
        if operator == 'In':
            terms.append('%s in (%s)' % (key, ','.join(values)))
        elif operator == 'NotIn':
            terms.append('%s notin (%s)' % (key, ','.join(values)))
        elif operator == 'Exists':
            terms.append(key)
        elif operator == 'DoesNotExist':
            terms.append('!' + key)
    return ','.join(terms)


def _meta(obj):
    return obj.get('metadata') or {}


def _status(obj):
    return obj.get('status') or {}


def owned_by(obj, owner):
    """True when obj names owner (by uid) among its owner references."""
    uid = _meta(owner).get('uid')
    return any(ref.get('uid') == uid for ref in _meta(obj).get('ownerReferences') or [])


def newest_revision_hash(revisions):
    """controller-revision-hash of the highest-numbered ControllerRevision, or None when there is none."""
    if not revisions:
        return None
    newest = max(revisions, key=lambda revision: int(revision.get('revision') or 0))
    return (_meta(newest).get('labels') or {}).get(REVISION_HASH_LABEL)


def pod_is_ready(pod):
    """Every container Ready (the pod's Ready condition) and the pod not being deleted."""
    if _meta(pod).get('deletionTimestamp'):
        return False
    return any(c.get('type') == 'Ready' and c.get('status') == 'True' for c in _status(pod).get('conditions') or [])


def pinned_node(pod_spec):
    """The node a pod is bound or pinned to: spec.nodeName, else the node named by a metadata.name node
    affinity (as DaemonSet pods and validation Jobs are pinned), else a kubernetes.io/hostname nodeSelector."""
    if pod_spec.get('nodeName'):
        return pod_spec['nodeName']
    required = (((pod_spec.get('affinity') or {}).get('nodeAffinity') or {})
                .get('requiredDuringSchedulingIgnoredDuringExecution') or {})
    for term in required.get('nodeSelectorTerms') or []:
        for field in term.get('matchFields') or []:
            values = field.get('values') or []
            if field.get('key') == 'metadata.name' and field.get('operator') == 'In' and len(values) == 1:
                return values[0]
    return (pod_spec.get('nodeSelector') or {}).get('kubernetes.io/hostname')


def pod_node(pod):
    return pinned_node(pod.get('spec') or {})


def _images_by_container(pod):
    spec = pod.get('spec') or {}
    containers = (spec.get('initContainers') or []) + (spec.get('containers') or [])
    return dict((c['name'], c.get('image')) for c in containers)


def container_states(pod):
    """What each container not running and ready is doing: name, image, state, reason, message, restarts and,
    for one that ran before, how it last ended."""
    images = _images_by_container(pod)
    status = _status(pod)
    found = []
    for init, statuses in ((True, status.get('initContainerStatuses')), (False, status.get('containerStatuses'))):
        for container in statuses or []:
            state = container.get('state') or {}
            if ('running' in state and container.get('ready')) or (state.get('terminated') or {}).get('exitCode') == 0:
                continue
            entry = {'container': container.get('name'), 'init': init, 'image': images.get(container.get('name')),
                     'restarts': container.get('restartCount') or 0}
            for name in ('waiting', 'terminated', 'running'):
                if name in state:
                    details = state[name] or {}
                    entry.update(state=name, reason=details.get('reason') or '', message=details.get('message') or '')
                    if name == 'terminated':
                        entry['exit_code'] = details.get('exitCode')
                    break
            last = (container.get('lastState') or {}).get('terminated')
            if last:
                entry['last_termination'] = {'reason': last.get('reason') or '', 'exit_code': last.get('exitCode'),
                                             'message': last.get('message') or ''}
            found.append(entry)
    return found


def scheduling_message(pod):
    """The scheduler's reason a pod is not placed (PodScheduled False), or None."""
    for condition in _status(pod).get('conditions') or []:
        if condition.get('type') == 'PodScheduled' and condition.get('status') == 'False':
            return '%s: %s' % (condition.get('reason') or 'Unschedulable', condition.get('message') or '')
    return None


def _pulled_image(entry):
    """The image a pull failure names in its message (kubelet: 'Back-off pulling image "x"'), else the spec's."""
    match = _PULLED_IMAGE_RE.search(entry.get('message') or '')
    return match.group(1) if match else entry.get('image')


def _where(pod):
    node = pod_node(pod)
    return '%spod %s/%s' % ('node %s: ' % node if node else '', _meta(pod).get('namespace'), _meta(pod).get('name'))


def _last_exit(entry):
    last = entry.get('last_termination')
    if not last:
        return ''
    return '; last exit %s %s%s' % (last.get('exit_code'), last.get('reason'),
                                    ': ' + last['message'] if last.get('message') else '')


def _problem(kind, pod, text, key=None, node=None):
    return {'kind': kind, 'fatal': kind in FATAL_KINDS, 'node': node if pod is None else pod_node(pod),
            'pod': None if pod is None else _meta(pod).get('name'), 'key': key or (kind, _meta(pod or {}).get('uid')),
            'text': text}


def pod_problems(pod):
    """Problems a pod shows: image pull failures, crash loops, container config errors, a failed pod, or a
    scheduler that cannot place it. Each names the node, the pod, the container and the cause."""
    problems = []
    seen = set()
    where = _where(pod)
    for entry in container_states(pod):
        reason = entry.get('reason') or ''
        if reason in IMAGE_REASONS:
            image = _pulled_image(entry)
            if ('image', image) in seen:
                continue
            seen.add(('image', image))
            problems.append(_problem(IMAGE, pod, '%s cannot pull image %s (%s: %s)' % (
                where, image, reason, entry.get('message')), key=(IMAGE, _meta(pod).get('uid'), image)))
        elif reason in CRASH_REASONS:
            problems.append(_problem(CRASH, pod, '%s container %s is crash-looping after %s restarts (%s: %s%s)' % (
                where, entry['container'], entry['restarts'], reason, entry.get('message'), _last_exit(entry)),
                key=(CRASH, _meta(pod).get('uid'), entry['container'])))
        elif reason in CONFIG_REASONS:
            problems.append(_problem(CONFIG, pod, '%s container %s cannot be created (%s: %s)' % (
                where, entry['container'], reason, entry.get('message')),
                key=(CONFIG, _meta(pod).get('uid'), entry['container'])))
    if _status(pod).get('phase') == 'Failed':
        problems.append(_problem(FAILED, pod, '%s failed: %s' % (where, failure_message(pod))))
    unschedulable = scheduling_message(pod)
    if unschedulable and not pod.get('spec', {}).get('nodeName'):
        problems.append(_problem(UNSCHEDULABLE, pod, '%s is Pending: %s' % (where, unschedulable)))
    return problems


def waits_in_init(pod):
    """True while a pod's init containers have not all completed (its Initialized condition is False), as an operand
    pod's stay while its driver-validation init container waits for a driver."""
    return any(c.get('type') == 'Initialized' and c.get('status') == 'False'
               for c in _status(pod).get('conditions') or [])


def driver_opted_out_problems(pods, nodes):
    """Problems of the pods waiting in Init on a node opted out of the driver (nvidia.com/gpu.deploy.driver=false;
    nodes: Node dicts, those with another value are ignored): no driver pod comes there, and none is known on the host
    (that is nvidia.com/gpu.deploy.driver=pre-installed), so waiting does not help. A host driver on such a node is
    found by the init container within seconds: the problem ends the wait only once it has lasted the grace period."""
    opted_out = set(_meta(node).get('name') for node in nodes
                    if (_meta(node).get('labels') or {}).get(DRIVER_DEPLOY_LABEL) == 'false')
    return [_problem(DRIVER_OPTED_OUT, pod, (
        '%s waits in Init for a driver, but the node is opted out of the driver (%s=false), so no driver pod runs '
        'there, and has no pre-installed one (%s=pre-installed): install a driver on the host and label the node '
        '%s=pre-installed, or remove the label so that the next deploy runs the driver there') % (
            _where(pod), DRIVER_DEPLOY_LABEL, DRIVER_DEPLOY_LABEL, DRIVER_DEPLOY_LABEL))
        for pod in pods if pod_node(pod) in opted_out and waits_in_init(pod)]


def leaving_pods(daemonset, pods, nodes):
    """The uids of a DaemonSet's pods on nodes that its nodeSelector no longer selects (nodes: Node dicts by name):
    its controller deletes them. The old RHCOS build's driver pod on a node back on the new build crash-loops
    until NFD relabels the node, then goes: that is not the rollout failing."""
    wanted = ((((daemonset.get('spec') or {}).get('template') or {}).get('spec') or {}).get('nodeSelector')) or {}
    leaving = set()
    for pod in pods:
        node = nodes.get(pod_node(pod))
        labels = (_meta(node).get('labels') or {}) if node else {}
        if node and owned_by(pod, daemonset) and any(labels.get(key) != value for key, value in wanted.items()):
            leaving.add(_meta(pod).get('uid'))
    return leaving


def _without_leaving(reads, daemonset, pods):
    """pods without those leaving_pods; the nodes are read only while one of the DaemonSet's pods has a fatal
    problem (what would end the wait)."""
    failing = [pod for pod in pods if owned_by(pod, daemonset) and pod_node(pod)
               and any(problem['fatal'] for problem in pod_problems(pod))]
    if not failing:
        return pods
    names = sorted(set(pod_node(pod) for pod in failing))
    nodes = dict((_meta(node).get('name'), node) for node in reads.nodes(names, '', labels_only=True))
    leaving = leaving_pods(daemonset, failing, nodes)
    return [pod for pod in pods if _meta(pod).get('uid') not in leaving]


def _driver_opted_out(reads, pods):
    """driver_opted_out_problems of pods; the nodes opted out are read only while one of them waits in Init."""
    waiting = [pod for pod in pods if waits_in_init(pod)]
    if not waiting:
        return []
    return driver_opted_out_problems(waiting, reads.nodes([], DRIVER_OPTED_OUT_SELECTOR, labels_only=True))


def failure_message(pod):
    """Why a pod failed: a failing container's termination message (or exit code), else the pod's message."""
    for entry in container_states(pod):
        if entry.get('state') == 'terminated' and entry.get('exit_code') not in (0, None):
            message = entry.get('message') or entry.get('reason') or ''
            return 'container %s exited with code %s%s' % (
                entry['container'], entry['exit_code'], ': ' + message if message else '')
    status = _status(pod)
    return status.get('message') or status.get('reason') or 'no message'


def _event_time(event):
    series = event.get('series') or {}
    return (series.get('lastObservedTime') or event.get('lastTimestamp') or event.get('eventTime')
            or _meta(event).get('creationTimestamp') or '')


def warning_events(events, obj, limit=5):
    """The newest Warning events about obj (matched by uid), newest first: reason, message, count, last seen."""
    uid = _meta(obj).get('uid')
    mine = [e for e in events if e.get('type') == 'Warning' and (e.get('involvedObject') or {}).get('uid') == uid]
    mine.sort(key=_event_time, reverse=True)
    return [{'reason': e.get('reason') or '', 'message': e.get('message') or '',
             'count': (e.get('series') or {}).get('count') or e.get('count') or 1, 'last_seen': _event_time(e)}
            for e in mine[:limit]]


def pod_diagnosis(pod, events=(), event_limit=5):
    """Per-node record of a pod that is not ready: node, pod, phase, containers' states, scheduler message,
    recent Warning events."""
    return {
        'node': pod_node(pod),
        'namespace': _meta(pod).get('namespace'),
        'pod': _meta(pod).get('name'),
        'phase': _status(pod).get('phase') or 'Unknown',
        'ready': pod_is_ready(pod),
        'message': _status(pod).get('message') or '',
        'containers': container_states(pod),
        'scheduling': scheduling_message(pod),
        'events': warning_events(events, pod, event_limit),
    }


def _int(value):
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def daemonset_state(daemonset, pods, revisions=(), accept_outdated=False):
    """Readiness of one DaemonSet by the GPU Operator's rule.

    Ready when its status describes the current spec (observedGeneration) and either no node should run it
    (desiredNumberScheduled == 0) or: RollingUpdate, every scheduled pod is updated and available;
    OnDelete, every pod's controller-revision-hash is the newest ControllerRevision's and every pod is Ready.
    pods: the DaemonSet's pods (others are ignored); revisions: its ControllerRevisions (needed for OnDelete).
    accept_outdated: an OnDelete pod of an older revision counts as ready when it is (its node is served until a
    rollout replaces it); such pods are listed in 'outdated'.
    """
    meta, status = _meta(daemonset), _status(daemonset)
    strategy = ((daemonset.get('spec') or {}).get('updateStrategy') or {}).get('type') or 'RollingUpdate'
    own = [p for p in pods if owned_by(p, daemonset) and not _meta(p).get('deletionTimestamp')]
    desired = _int(status.get('desiredNumberScheduled'))
    state = {
        'name': meta.get('name'), 'namespace': meta.get('namespace'), 'update_strategy': strategy,
        'desired': desired, 'current': _int(status.get('currentNumberScheduled')),
        'ready_pods': _int(status.get('numberReady')), 'updated': _int(status.get('updatedNumberScheduled')),
        'available': _int(status.get('numberAvailable')), 'misscheduled': _int(status.get('numberMisscheduled')),
        'ready': False, 'reason': '',
        'pods': sorted(({'node': pod_node(p), 'pod': _meta(p).get('name'), 'uid': _meta(p).get('uid'),
                         'ready': pod_is_ready(p)} for p in own),
                       key=lambda p: (p['node'] or '', p['pod'])),
    }
    own_revisions = [r for r in revisions if owned_by(r, daemonset)]
    if _int(status.get('observedGeneration')) < _int(meta.get('generation')):
        state['reason'] = 'its controller has not yet processed generation %s' % meta.get('generation')
    elif desired == 0:
        state.update(ready=True, reason='no node selected')
    elif strategy == 'OnDelete':
        newest = newest_revision_hash(own_revisions)
        stale = [p for p in own if (_meta(p).get('labels') or {}).get(REVISION_HASH_LABEL) != newest]
        state['revision'] = newest
        if accept_outdated and newest is not None:
            # Left to the rollout, ready or not: their nodes are served, or failed, with the old revision.
            state['outdated'] = sorted(pod_node(p) for p in stale if pod_node(p))
            state['outdated_uids'] = sorted(_meta(p).get('uid') for p in stale)
            stale = []
        unready = [p for p in own if not pod_is_ready(p) and _meta(p).get('uid') not in state.get('outdated_uids', ())]
        if newest is None:
            state['reason'] = 'no ControllerRevision yet'
        elif stale:
            state['reason'] = '%d of %d pods run an older revision than %s (OnDelete: delete them to update): %s' % (
                len(stale), len(own), newest, ', '.join(sorted(_meta(p)['name'] for p in stale)))
        elif len(own) < desired or unready:
            state['reason'] = '%d of %d pods ready' % (len(own) - len(unready), desired)
        else:
            state.update(ready=True, reason='%d pods ready at revision %s' % (desired, newest))
    elif state['updated'] == desired and state['available'] == desired:
        state.update(ready=True, reason='%d pods updated and available' % desired)
    else:
        state['reason'] = '%d of %d pods updated, %d available' % (state['updated'], desired, state['available'])
    return state


def daemonset_problems(daemonset, pods, state, owner_events=()):
    """Problems of a DaemonSet that is not ready: those of its pods, and pods it cannot create (with the
    Warning events saying why, e.g. FailedCreate for a Pod Security or SCC denial)."""
    if state['ready']:
        return []
    own = [pod for pod in pods if owned_by(pod, daemonset)]
    problems = [problem for pod in own for problem in pod_problems(pod)]
    # The controller counts the pods it created in the DaemonSet's status a moment after it creates them: the pods
    # seen count too, so that a pod that exists is not also reported as not created.
    created = max(state['current'], len(own))
    if created < state['desired'] and _int(_status(daemonset).get('observedGeneration')):
        events = warning_events(owner_events, daemonset, 1)
        why = ' (%s: %s)' % (events[0]['reason'], events[0]['message']) if events else ''
        problems.append(_problem(NOT_CREATED, None, 'DaemonSet %s/%s has created %d of %d pods%s' % (
            state['namespace'], state['name'], created, state['desired'], why),
            key=(NOT_CREATED, _meta(daemonset).get('uid'))))
    return problems


def _true_conditions(obj):
    return dict((c.get('type'), c) for c in _status(obj).get('conditions') or [] if c.get('status') == 'True')


def job_succeeded(job):
    """Whether a Job has succeeded: its Complete condition, or SuccessCriteriaMet (Kubernetes 1.31 and later, before
    Complete) without Failed. A succeeded pod count alone is not enough: the Job may still be failing."""
    conditions = _true_conditions(job)
    return 'Complete' in conditions or ('SuccessCriteriaMet' in conditions and 'Failed' not in conditions)


def job_state(job, pods, owner_events=()):
    """Outcome of a validation Job: succeeded, failed (naming the node and why) or running; with its problems."""
    meta, status = _meta(job), _status(job)
    own = [p for p in pods if owned_by(p, job)]
    template_spec = ((job.get('spec') or {}).get('template') or {}).get('spec') or {}
    nodes = sorted(set(filter(None, [pod_node(p) for p in own]))) or [pinned_node(template_spec)]
    conditions = _true_conditions(job)
    state = {'name': meta.get('name'), 'namespace': meta.get('namespace'), 'node': nodes[0], 'result': 'running',
             'message': '', 'problems': []}
    if job_succeeded(job):
        state.update(result='succeeded', message='succeeded on node %s' % nodes[0])
        return state
    failed_pods = [p for p in own if _status(p).get('phase') == 'Failed']
    if 'Failed' in conditions or 'FailureTarget' in conditions:
        why = failure_message(failed_pods[-1]) if failed_pods else '%s: %s' % (
            (conditions.get('Failed') or conditions.get('FailureTarget')).get('reason'),
            (conditions.get('Failed') or conditions.get('FailureTarget')).get('message'))
        state.update(result='failed', message='failed on node %s: %s' % (nodes[0], why))
        state['problems'] = [_problem(FAILED, None, 'Job %s/%s failed on node %s: %s' % (
            meta.get('namespace'), meta.get('name'), nodes[0], why), key=(FAILED, meta.get('uid')), node=nodes[0])]
        return state
    state['problems'] = [problem for pod in own if _status(pod).get('phase') != 'Failed'
                         for problem in pod_problems(pod)]
    if not own:
        events = warning_events(owner_events, job, 1)
        if events:
            state['problems'].append(_problem(NOT_CREATED, None, 'Job %s/%s has no pod on node %s (%s: %s)' % (
                meta.get('namespace'), meta.get('name'), nodes[0], events[0]['reason'], events[0]['message']),
                key=(NOT_CREATED, meta.get('uid')), node=nodes[0]))
    return state


def allocatable_count(node, pattern):
    """Sum of a node's allocatable resources whose name matches pattern (e.g. nvidia.com/gpu, nvidia.com/mig-*)."""
    allocatable = _status(node).get('allocatable') or {}
    return sum(_int(value) for name, value in allocatable.items() if fnmatch.fnmatchcase(name, pattern))


def advertised_resource(node, patterns):
    """(the resource a workload on the node can request, the sum of those matching its pattern): the first of
    patterns (names or shell-style patterns, in order) the node advertises more than zero of, and by name the
    first of that pattern's resources it has; (None, 0) when it advertises none."""
    allocatable = _status(node).get('allocatable') or {}
    for pattern in patterns:
        found = sorted(name for name, value in allocatable.items()
                       if fnmatch.fnmatchcase(name, pattern) and _int(value) > 0)
        if found:
            return found[0], allocatable_count(node, pattern)
    return None, 0


def allocatable_state(nodes, patterns, expected=None):
    """Which nodes advertise any of patterns (> 0; a name, a shell-style pattern or a list of them, in order of
    preference). expected: node names that must; those absent from nodes count as lacking it (a node that left the
    cluster). Returns {'allocatable': {node: n}, 'node_resources': {node: resource}, 'missing': [node, ...]}, n the
    sum of the resources matching the node's first advertised pattern, resource the one a workload there requests
    (advertised_resource)."""
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    found = dict((_meta(n).get('name'), advertised_resource(n, patterns)) for n in nodes)
    wanted = [(name, found.get(name, (None, 0))) for name in (sorted(expected) if expected is not None else sorted(found))]
    return {'allocatable': dict((name, count) for name, (_resource, count) in wanted),
            'node_resources': dict((name, resource) for name, (resource, _count) in wanted if resource),
            'missing': [name for name, (resource, _count) in wanted if not resource]}


def summarize(problems, limit=REPORTED_PROBLEMS):
    """Problems as text, one per line, at most limit of them (fatal ones first)."""
    ordered = sorted(problems, key=lambda p: (not p['fatal'], p.get('node') or '', p.get('pod') or ''))
    lines = [p['text'] for p in ordered[:limit]]
    if len(ordered) > limit:
        lines.append('... and %d more problems (see the problems returned)' % (len(ordered) - limit))
    return lines


class Observation:
    """One look at the cluster: ready or not, the problems seen, what to report, and the pods not ready
    (diagnosed when the wait ends without success)."""

    def __init__(self, ready, problems=(), report=None, unready_pods=()):
        self.ready = ready
        self.problems = list(problems)
        self.report = report or {}
        self.unready_pods = list(unready_pods)


def _missing(kind, namespace, names, selector, found):
    problems = [_problem(MISSING, None, '%s %s/%s does not exist' % (kind, namespace, name), key=(MISSING, name))
                for name in names]
    if selector and not found and not names:
        problems.append(_problem(MISSING, None, 'no %s in namespace %s matches %s' % (kind, namespace, selector),
                                 key=(MISSING, kind)))
    return problems


class _LazyEvents:
    """The namespace's Warning events, read at most once per observation, and only if needed."""

    def __init__(self, reads):
        self._reads = reads
        self._events = None

    def get(self):
        if self._events is None:
            self._events = self._reads.warning_events()
        return self._events


def observe_daemonsets(reads, names, selector, accept_outdated=False):
    """Observation of DaemonSets by name and/or label selector. reads: an object with namespace,
    daemonsets(names, selector) -> (found, missing names), pods(selector), revisions(selector),
    warning_events(). accept_outdated: see daemonset_state; the report's outdated_nodes lists those nodes."""
    found, missing = reads.daemonsets(names, selector)
    problems = _missing('DaemonSet', reads.namespace, missing, selector, found)
    events = _LazyEvents(reads)
    states, unready = [], []
    for daemonset in found:
        selector = selector_string((daemonset.get('spec') or {}).get('selector'))
        pods = reads.pods(selector)
        on_delete = ((daemonset['spec'].get('updateStrategy') or {}).get('type') == 'OnDelete')
        state = daemonset_state(daemonset, pods, reads.revisions(selector) if on_delete else (), accept_outdated)
        creating = state['current'] < state['desired']
        current = [p for p in pods if _meta(p).get('uid') not in state.pop('outdated_uids', ())]
        current = _without_leaving(reads, daemonset, current)
        problems.extend(daemonset_problems(daemonset, current, state, events.get() if creating else ()))
        unready.extend(p for p in current if owned_by(p, daemonset) and not pod_is_ready(p))
        states.append(state)
    problems.extend(_driver_opted_out(reads, unready))
    ready_pods = {}
    for state in states:
        for entry in state['pods']:
            if entry['ready'] and entry['node']:
                ready_pods.setdefault(entry['node'], []).append(entry['uid'])
    ready = bool(found) and not missing and all(s['ready'] for s in states)
    keys = dict((node, ','.join(sorted(uids))) for node, uids in ready_pods.items())
    report = {'daemonsets': states, 'ready_nodes': sorted(ready_pods), 'ready_pods': keys}
    if accept_outdated:
        report['outdated_nodes'] = sorted(node for state in states for node in state.get('outdated', ()))
    return Observation(ready, problems, report, unready)


def deployment_state(deployment):
    """Readiness of one Deployment: ready when its status describes the current spec (observedGeneration) and every
    replica it wants is updated and available."""
    meta, status = _meta(deployment), _status(deployment)
    replicas = _int((deployment.get('spec') or {}).get('replicas', 1))
    updated, available = _int(status.get('updatedReplicas')), _int(status.get('availableReplicas'))
    observed = _int(status.get('observedGeneration')) >= _int(meta.get('generation'))
    return {'name': meta.get('name'), 'namespace': meta.get('namespace'), 'replicas': replicas, 'updated': updated,
            'available': available, 'ready': observed and updated >= replicas and available >= replicas}


def observe_deployments(reads, names, selector):
    """Observation of Deployments by name and/or label selector: ready when each is (deployment_state); the problems
    of the pods of one that is not. reads: namespace, deployments(names, selector) -> (found, missing names),
    pods(selector)."""
    found, missing = reads.deployments(names, selector)
    problems = _missing('Deployment', reads.namespace, missing, selector, found)
    states, unready = [], []
    for deployment in found:
        state = deployment_state(deployment)
        if not state['ready']:
            pods = reads.pods(selector_string((deployment.get('spec') or {}).get('selector')))
            problems.extend(problem for pod in pods for problem in pod_problems(pod))
            unready.extend(pod for pod in pods if not pod_is_ready(pod))
        states.append(state)
    ready = bool(found) and not missing and all(state['ready'] for state in states)
    return Observation(ready, problems, {'deployments': states}, unready)


JOB_UID_LABEL = 'batch.kubernetes.io/controller-uid'
_UIDS_PER_SELECTOR = 50


def observe_jobs(reads, names, selector):
    """Observation of Jobs by name and/or label selector: ready when every one succeeded; a failed one is
    fatal. Their pods are found by the batch.kubernetes.io/controller-uid label (Kubernetes >= 1.27)."""
    found, missing = reads.jobs(names, selector)
    problems = _missing('Job', reads.namespace, missing, selector, found)
    uids = [_meta(job).get('uid') for job in found]
    pods = [pod for start in range(0, len(uids), _UIDS_PER_SELECTOR)
            for pod in reads.pods('%s in (%s)' % (JOB_UID_LABEL, ','.join(uids[start:start + _UIDS_PER_SELECTOR])))]
    events = _LazyEvents(reads)
    states, unready = [], []
    for job in found:
        own = [p for p in pods if owned_by(p, job)]
        state = job_state(job, own, events.get() if not own else ())
        problems.extend(state.pop('problems'))
        unready.extend(p for p in own if _status(p).get('phase') != 'Succeeded')
        states.append(state)
    ready = bool(found) and not missing and all(s['result'] == 'succeeded' for s in states)
    return Observation(ready, problems, {'jobs': sorted(states, key=lambda s: (s['node'] or '', s['name']))},
                       unready)


def observe_subscription(reads, name):
    """Observation of an OLM Subscription: ready when the ClusterServiceVersion it installed has succeeded. A failed
    resolution or a failed CSV is fatal. reads.subscription(name), reads.cluster_service_version(name) -> dict or None."""
    subscription = reads.subscription(name)
    if subscription is None:
        return Observation(False, _missing('Subscription', reads.namespace, [name], '', []))
    status = _status(subscription)
    csv_name = status.get('installedCSV')
    csv = reads.cluster_service_version(csv_name) if csv_name else None
    phase = _status(csv or {}).get('phase')
    report = {'subscription': {'name': name, 'namespace': reads.namespace, 'state': status.get('state'),
                               'installed_csv': csv_name, 'csv_phase': phase}}
    problems = []
    failed = [c for c in status.get('conditions') or []
              if c.get('type') == 'ResolutionFailed' and c.get('status') == 'True']
    if status.get('state') == 'ResolutionFailed' or failed:
        problems.append(_problem(FAILED, None, 'Subscription %s/%s cannot be resolved: %s' % (
            reads.namespace, name, '; '.join(c.get('message') or c.get('reason') or '' for c in failed) or 'no message'),
            key=(FAILED, name)))
    if phase == 'Failed':
        problems.append(_problem(FAILED, None, 'ClusterServiceVersion %s/%s failed: %s' % (
            reads.namespace, csv_name, _status(csv).get('message') or 'no message'), key=(FAILED, csv_name)))
    return Observation(phase == 'Succeeded', problems, report)


def observe_allocatable(reads, nodes, selector, patterns):
    """Observation of nodes' allocatable resources matching any of patterns: ready when every node (named, or
    selected by label) advertises more than zero. reads.nodes(names, selector) -> Node dicts."""
    state = allocatable_state(reads.nodes(nodes, selector), patterns, expected=nodes or None)
    return Observation(not state['missing'], (), state)


def observe_node_labels(reads, nodes, keys, expected=None):
    """Observation of node labels: ready when each of nodes carries every key, well-formed (gfd_labels), with the
    expected value where one is given. The report's label_problems says what each other node lacks."""
    problems = nodes_label_problems(reads.nodes(nodes, '', labels_only=True), nodes, keys, expected)
    return Observation(not problems, (), {'label_problems': problems})


def served_nodes(slices):
    """The nodes with a ready endpoint in a Service's EndpointSlices, sorted."""
    return sorted(set(endpoint['nodeName'] for piece in slices for endpoint in piece.get('endpoints') or []
                      if (endpoint.get('conditions') or {}).get('ready') and endpoint.get('nodeName')))


def observe_service(reads, service, nodes):
    """Observation of Service service's endpoints: ready when each of nodes has a ready one. When some have none,
    the report names them and the Service's newest Warning event. reads.endpoint_slices(service) -> EndpointSlices."""
    served = set(served_nodes(reads.endpoint_slices(service)))
    report = {'unserved_nodes': [node for node in nodes if node not in served]}
    if report['unserved_nodes']:
        mine = [event for event in reads.warning_events()
                if (event.get('involvedObject') or {}).get('kind') == 'Service'
                and (event.get('involvedObject') or {}).get('name') == service]
        newest = max(mine, key=_event_time) if mine else {}
        report['service_warning'] = '%s: %s' % (newest.get('reason'), newest.get('message')) if newest else ''
    return Observation(not report['unserved_nodes'], (), report)


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


class Lost(object):
    """How long a wait went without the API server: the stretches in which its reads failed with an error that
    lost() (see wait) names. clock: seconds, monotonic."""

    def __init__(self, clock):
        self.clock = clock
        self.seconds, self.error, self._since = 0.0, None, None

    def since(self, error, started=None):
        """A read failed (it started at started, by default now)."""
        self.error = error
        if self._since is None:
            self._since = self.clock() if started is None else started

    def back(self, at=None):
        """A read succeeded (it started at at, by default now)."""
        if self._since is not None:
            self.seconds += (self.clock() if at is None else at) - self._since
            self._since = None

    def report(self):
        """None, or when the API server was out of reach: {'seconds': how long in all, 'error': its last words}."""
        if self.error is None:
            return None
        ongoing = self.clock() - self._since if self._since is not None else 0.0
        return {'seconds': round(self.seconds + ongoing, 1), 'error': str(self.error)}

    def words(self):
        """'; the API server was unreachable for N s of the wait (last: ...)', '' when it never was."""
        return '; %s' % unreachable_line(self.report()) if self.error is not None else ''

    def attempt(self, api, read, deadline):
        """(True, read()) with the requests of read() retried until deadline (the clock's) at most; (False, None)
        when the API server was out of reach (an error with a fault, k8s.errors.APIError's); any other error
        raised."""
        before = self.clock()
        try:
            with api.deadline(max(0.0, deadline - before)):
                value = read()
        except Exception as error:  # only an API server out of reach is unknown; anything else is raised again
            if not getattr(error, 'fault', None):
                raise
            self.since(error, before)
            return False, None
        self.back(before)
        return True, value


def wait(observe, timeout, interval, grace, clock=time.monotonic, sleep=time.sleep, lost=lambda error: None):
    """Observe until ready, until a problem is fatal, or until timeout (seconds) has passed.

    observe() -> Observation. A fatal problem ends the wait at once; a stuck one (unschedulable pod, pods not
    created) once it has been seen for grace seconds in a row. lost(error) -> the words of an exception of observe()
    that means the API server is out of reach for now, None for any other (which ends the wait): while it is, the
    state is unknown, not failed, and the wait goes on. Returns (READY | FAILED_FAST | TIMED_OUT, the last
    observation (not ready, without problems, before the first), the problems that ended the wait, elapsed seconds,
    and Lost.report(): None, or how long the API server was out of reach).
    """
    start = clock()
    first_seen = {}
    observation = Observation(False)
    unreachable = Lost(clock)
    while True:
        before = clock()
        try:
            observation = observe()
        except Exception as error:  # lost() tells the API server's faults from anything else, raised again
            words = lost(error)
            if words is None:
                raise
            unreachable.since(words, before)
            now = clock()
        else:
            unreachable.back(before)
            now = clock()
            if observation.ready:
                return READY, observation, [], now - start, unreachable.report()
            current = dict((p['key'], p) for p in observation.problems)
            first_seen = dict((key, first_seen.get(key, now)) for key in current)
            decisive = [p for key, p in current.items() if p['fatal'] or now - first_seen[key] >= grace]
            if decisive:
                return FAILED_FAST, observation, decisive, now - start, unreachable.report()
        if now - start >= timeout:
            return TIMED_OUT, observation, [], now - start, unreachable.report()
        sleep(max(0.0, min(interval, timeout - (now - start))))


def unreachable_line(unreachable):
    """The line a wait's message gets when the API server was out of reach during it (Lost.report()), '' when not."""
    if not unreachable:
        return ''
    return 'the API server was unreachable for %.0f s of the wait (last: %s)' % (
        unreachable['seconds'], unreachable['error'])
