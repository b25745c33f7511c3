# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one place of the operands package that reads the cluster or sleeps: the reads of a wait through ClusterAPI
(OperandReads), the observers that read what a check needs and judge it with the checks (observe_*), the wait loop
(wait), and the tracker of the stretches in which the API server was out of reach (Lost), which the other modules'
waits use too. The wait loop takes its clock and sleep as arguments, and Lost its clock, so that failing fast can be
tested without waiting."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ..k8s.errors import APIError
from ..k8s.views import NODE_FULL, NODE_METADATA
from ..nodes.gfd_labels import nodes_label_problems
from .checks.allocatable import allocatable_state
from .checks.daemonsets import daemonset_problems, daemonset_state, leaving_pods, node_selector_of, with_unseen_nodes
from .checks.deployments import deployment_state
from .checks.jobs import JOB_UID_LABEL, job_state
from .checks.objects import metadata_of, owned_by, pod_node, selector_string, status_of
from .checks.pods import DRIVER_OPTED_OUT_SELECTOR, driver_opted_out_problems, pod_is_ready, pod_problems, waits_in_init
from .checks.problems import missing_problems
from .checks.services import served_nodes, service_warning
from .checks.subscriptions import subscription_state
from .diagnosis import FAILED_FAST, READY, TIMED_OUT, unreachable_line

_UIDS_PER_SELECTOR = 50
WARNING_EVENTS_PAGE = 1000


class Observation:
    """One look at the cluster: ready or not, the problems seen, what to report, and the pods not ready
    (diagnosed when the wait ends without success)."""

    def __init__(self, ready, problems=(), report=None, unready_pods=()):
        self.ready = ready
        self.problems = list(problems)
        self.report = report or {}
        self.unready_pods = list(unready_pods)


class _LazyEvents:
    """The namespace's Warning events, read at most once per observation, and only if needed."""

    def __init__(self, reads):
        self._reads = reads
        self._events = None

    def get(self):
        if self._events is None:
            self._events = self._reads.warning_events()
        return self._events


def _without_leaving(reads, daemonset, pods):
    """pods without those leaving_pods; the nodes are read only while one of the DaemonSet's pods has a fatal
    problem (what would end the wait)."""
    failing = [pod for pod in pods if owned_by(pod, daemonset) and pod_node(pod)
               and any(problem['fatal'] for problem in pod_problems(pod))]
    if not failing:
        return pods
    names = sorted(set(pod_node(pod) for pod in failing))
    nodes = dict((metadata_of(node).get('name'), node) for node in reads.nodes(names, '', labels_only=True))
    leaving = leaving_pods(daemonset, failing, nodes)
    return [pod for pod in pods if metadata_of(pod).get('uid') not in leaving]


def _driver_opted_out(reads, pods):
    """driver_opted_out_problems of pods; the nodes opted out are read only while one of them waits in Init."""
    waiting = [pod for pod in pods if waits_in_init(pod)]
    if not waiting:
        return []
    return driver_opted_out_problems(waiting, reads.nodes([], DRIVER_OPTED_OUT_SELECTOR, labels_only=True))


def observe_daemonsets(reads, names, selector, accept_outdated=False):
    """Observation of DaemonSets by name and/or label selector. reads: an object with namespace,
    daemonsets(names, selector) -> (found, missing names), pods(selector), revisions(selector),
    warning_events(). accept_outdated: see daemonset_state; the report's outdated_nodes lists those nodes."""
    found, missing = reads.daemonsets(names, selector)
    problems = missing_problems('DaemonSet', reads.namespace, missing, selector, found)
    events = _LazyEvents(reads)
    states, unready = [], []
    for daemonset in found:
        selector = selector_string((daemonset.get('spec') or {}).get('selector'))
        pods = reads.pods(selector)
        on_delete = ((daemonset['spec'].get('updateStrategy') or {}).get('type') == 'OnDelete')
        state = daemonset_state(daemonset, pods, reads.revisions(selector) if on_delete else (), accept_outdated)
        if state['ready'] and not state['desired']:
            node_selector = ','.join('%s=%s' % item for item in sorted(node_selector_of(daemonset).items()))
            state = with_unseen_nodes(state, daemonset, reads.nodes([], node_selector))
        creating = state['current'] < state['desired']
        current = [p for p in pods if metadata_of(p).get('uid') not in state.pop('outdated_uids', ())]
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


def observe_deployments(reads, names, selector):
    """Observation of Deployments by name and/or label selector: ready when each is (deployment_state); the problems
    of the pods of one that is not. reads: namespace, deployments(names, selector) -> (found, missing names),
    pods(selector)."""
    found, missing = reads.deployments(names, selector)
    problems = missing_problems('Deployment', reads.namespace, missing, selector, found)
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


def observe_jobs(reads, names, selector):
    """Observation of Jobs by name and/or label selector: ready when every one succeeded; a failed one is
    fatal. Their pods are found by the batch.kubernetes.io/controller-uid label (Kubernetes >= 1.27)."""
    found, missing = reads.jobs(names, selector)
    problems = missing_problems('Job', reads.namespace, missing, selector, found)
    uids = [metadata_of(job).get('uid') for job in found]
    pods = [pod for start in range(0, len(uids), _UIDS_PER_SELECTOR)
            for pod in reads.pods('%s in (%s)' % (JOB_UID_LABEL, ','.join(uids[start:start + _UIDS_PER_SELECTOR])))]
    events = _LazyEvents(reads)
    states, unready = [], []
    for job in found:
        own = [p for p in pods if owned_by(p, job)]
        state = job_state(job, own, events.get() if not own else ())
        problems.extend(state.pop('problems'))
        unready.extend(p for p in own if status_of(p).get('phase') != 'Succeeded')
        states.append(state)
    ready = bool(found) and not missing and all(s['result'] == 'succeeded' for s in states)
    return Observation(ready, problems, {'jobs': sorted(states, key=lambda s: (s['node'] or '', s['name']))},
                       unready)


def observe_subscription(reads, name):
    """Observation of an OLM Subscription (checks.subscriptions). reads.subscription(name),
    reads.cluster_service_version(name) -> dict or None."""
    subscription = reads.subscription(name)
    if subscription is None:
        return Observation(False, missing_problems('Subscription', reads.namespace, [name], '', []))
    csv_name = status_of(subscription).get('installedCSV')
    csv = reads.cluster_service_version(csv_name) if csv_name else None
    return Observation(*subscription_state(reads.namespace, name, subscription, csv))


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


def observe_service(reads, service, nodes):
    """Observation of Service service's endpoints: ready when each of nodes has a ready one. When some have none,
    the report names them and the Service's newest Warning event. reads.endpoint_slices(service) -> EndpointSlices."""
    served = set(served_nodes(reads.endpoint_slices(service)))
    report = {'unserved_nodes': [node for node in nodes if node not in served]}
    if report['unserved_nodes']:
        report['service_warning'] = service_warning(reads.warning_events(), service)
    return Observation(not report['unserved_nodes'], (), report)


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


class OperandReads:
    """The reads of operand_status, through the collection's API layer."""

    def __init__(self, api, namespace):
        self.api = api
        self.namespace = namespace

    def deadline(self, seconds):
        """The API layer's: a request within is retried for seconds at most."""
        return self.api.deadline(seconds)

    def _named_and_selected(self, path, names, selector):
        found, missing = {}, []
        for name in names:
            try:
                item = self.api.read('%s/%s' % (path, name))
            except APIError as error:
                if error.status != 404:
                    raise
                missing.append(name)
                continue
            found[item['metadata']['uid']] = item
        if selector:
            for item in self.api.list_items(path, selector):
                found[item['metadata']['uid']] = item
        return sorted(found.values(), key=lambda item: item['metadata']['name']), missing

    def daemonsets(self, names, selector):
        return self._named_and_selected('/apis/apps/v1/namespaces/%s/daemonsets' % self.namespace, names, selector)

    def deployments(self, names, selector):
        return self._named_and_selected('/apis/apps/v1/namespaces/%s/deployments' % self.namespace, names, selector)

    def jobs(self, names, selector):
        return self._named_and_selected('/apis/batch/v1/namespaces/%s/jobs' % self.namespace, names, selector)

    def pods(self, selector):
        return self.api.list_items('/api/v1/namespaces/%s/pods' % self.namespace, selector)

    def revisions(self, selector):
        return self.api.list_revisions(self.namespace, selector)

    def endpoint_slices(self, service):
        return self.api.list_items('/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices' % self.namespace,
                                   'kubernetes.io/service-name=%s' % service)

    def warning_events(self):
        page = self.api.read('/api/v1/namespaces/%s/events' % self.namespace, field_selector='type=Warning',
                             limit=WARNING_EVENTS_PAGE)
        return page.get('items') or []

    def subscription(self, name):
        return self.api.read_optional('/apis/operators.coreos.com/v1alpha1/namespaces/%s/subscriptions/%s' % (
            self.namespace, name))[0]

    def cluster_service_version(self, name):
        return self.api.read_optional('/apis/operators.coreos.com/v1alpha1/namespaces/%s/clusterserviceversions/%s'
                                      % (self.namespace, name))[0]

    def nodes(self, names, selector, labels_only=False):
        """Nodes, named or label-selected; with labels_only their metadata alone (NODE_METADATA)."""
        view = NODE_METADATA if labels_only else NODE_FULL
        if names:
            wanted = set(names)
            return [node for node in self.api.list_nodes(view=view) if node['metadata']['name'] in wanted]
        return list(self.api.list_nodes(selector, view=view))
