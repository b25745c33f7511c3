# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""DaemonSets: whether one is ready by the GPU Operator's rule (RollingUpdate or OnDelete), the problems of one that
is not, and the pods that leave it because their node no longer matches its nodeSelector."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ...driver.revisions import revision_template, runs_differently
from ...nodes.selection import daemonset_schedules_on
from .objects import as_int, metadata_of, owned_by, pod_node, status_of, warning_events
from .pods import pod_is_ready, pod_problems
from .problems import NOT_CREATED, new_problem

REVISION_HASH_LABEL = 'controller-revision-hash'


def _revision_hash(obj):
    return (metadata_of(obj).get('labels') or {}).get(REVISION_HASH_LABEL)


def newest_revision_hash(revisions):
    """controller-revision-hash of the highest-numbered ControllerRevision, or None when there is none."""
    if not revisions:
        return None
    return _revision_hash(max(revisions, key=lambda revision: int(revision.get('revision') or 0)))


def outdated_revision_hashes(daemonset, revisions, pods, newest):
    """The controller-revision-hashes of an OnDelete DaemonSet's pods that are older than newest and whose revision's
    template runs differently from the DaemonSet's current one (driver/revisions.py: a new DRIVER_CONFIG_DIGEST or
    node selector alone does not); a hash whose revision is gone counts. revisions: the DaemonSet's. Each hash is
    compared once, however many pods carry it."""
    template = (daemonset.get('spec') or {}).get('template')
    by_hash = dict((_revision_hash(revision), revision) for revision in revisions)
    return set(pod_hash for pod_hash in set(_revision_hash(pod) for pod in pods) - set([newest])
               if runs_differently(revision_template(by_hash.get(pod_hash)), template))


def leaving_pods(daemonset, pods, nodes):
    """The uids of a DaemonSet's pods on nodes that its nodeSelector no longer selects (nodes: Node dicts by name):
    its controller deletes them. The old RHCOS build's driver pod on a node back on the new build crash-loops
    until NFD relabels the node, then goes: that is not the rollout failing."""
    wanted = ((((daemonset.get('spec') or {}).get('template') or {}).get('spec') or {}).get('nodeSelector')) or {}
    leaving = set()
    for pod in pods:
        node = nodes.get(pod_node(pod))
        labels = (metadata_of(node).get('labels') or {}) if node else {}
        if node and owned_by(pod, daemonset) and any(labels.get(key) != value for key, value in wanted.items()):
            leaving.add(metadata_of(pod).get('uid'))
    return leaving


def daemonset_state(daemonset, pods, revisions=(), accept_outdated=False):
    """Readiness of one DaemonSet by the GPU Operator's rule.

    Ready when its status describes the current spec (observedGeneration) and either no node should run it
    (desiredNumberScheduled == 0) or: RollingUpdate, every scheduled pod is updated and available;
    OnDelete, every pod runs the newest ControllerRevision (or an older one that runs no differently:
    outdated_revision_hashes) and every pod is Ready.
    pods: the DaemonSet's pods (others are ignored); revisions: its ControllerRevisions (needed for OnDelete).
    accept_outdated: an OnDelete pod of an older revision counts as ready when it is (its node is served until a
    rollout replaces it); such pods are listed in 'outdated'.
    """
    meta, status = metadata_of(daemonset), status_of(daemonset)
    strategy = ((daemonset.get('spec') or {}).get('updateStrategy') or {}).get('type') or 'RollingUpdate'
    own = [p for p in pods if owned_by(p, daemonset) and not metadata_of(p).get('deletionTimestamp')]
    desired = as_int(status.get('desiredNumberScheduled'))
    state = {
        'name': meta.get('name'), 'namespace': meta.get('namespace'), 'update_strategy': strategy,
        'desired': desired, 'current': as_int(status.get('currentNumberScheduled')),
        'ready_pods': as_int(status.get('numberReady')), 'updated': as_int(status.get('updatedNumberScheduled')),
        'available': as_int(status.get('numberAvailable')), 'misscheduled': as_int(status.get('numberMisscheduled')),
        'ready': False, 'reason': '',
        'pods': sorted(({'node': pod_node(p), 'pod': metadata_of(p).get('name'), 'uid': metadata_of(p).get('uid'),
                         'ready': pod_is_ready(p)} for p in own),
                       key=lambda p: (p['node'] or '', p['pod'])),
    }
    own_revisions = [r for r in revisions if owned_by(r, daemonset)]
    if as_int(status.get('observedGeneration')) < as_int(meta.get('generation')):
        state['reason'] = 'its controller has not yet processed generation %s' % meta.get('generation')
    elif desired == 0:
        state.update(ready=True, reason='no node selected')
    elif strategy == 'OnDelete':
        newest = newest_revision_hash(own_revisions)
        outdated_hashes = outdated_revision_hashes(daemonset, own_revisions, own, newest)
        stale = [p for p in own if _revision_hash(p) in outdated_hashes]
        state['revision'] = newest
        if accept_outdated and newest is not None:
            # Left to the rollout, ready or not: their nodes are served, or failed, with the old revision.
            state['outdated'] = sorted(pod_node(p) for p in stale if pod_node(p))
            state['outdated_uids'] = sorted(metadata_of(p).get('uid') for p in stale)
            stale = []
        unready = [p for p in own if not pod_is_ready(p) and metadata_of(p).get('uid') not in state.get('outdated_uids', ())]
        if newest is None:
            state['reason'] = 'no ControllerRevision yet'
        elif stale:
            state['reason'] = '%d of %d pods run an older revision than %s (OnDelete: delete them to update): %s' % (
                len(stale), len(own), newest, ', '.join(sorted(metadata_of(p)['name'] for p in stale)))
        elif len(own) < desired or unready:
            state['reason'] = '%d of %d pods ready' % (len(own) - len(unready), desired)
        else:
            state.update(ready=True, reason='%d pods ready at revision %s' % (desired, newest))
    elif state['updated'] == desired and state['available'] == desired:
        state.update(ready=True, reason='%d pods updated and available' % desired)
    else:
        state['reason'] = '%d of %d pods updated, %d available' % (state['updated'], desired, state['available'])
    return state


def node_selector_of(daemonset):
    """The pod template's nodeSelector ({} when it has none)."""
    return ((((daemonset.get('spec') or {}).get('template') or {}).get('spec') or {}).get('nodeSelector')) or {}


def with_unseen_nodes(state, daemonset, nodes):
    """A state ready because no node is selected (desired 0), checked against nodes: the DaemonSet controller counts
    from its own cache of the nodes, which lags behind the API server (nodes just labelled or created). Not ready
    while one of nodes is one the controller will place a pod on."""
    pod_spec = ((daemonset.get('spec') or {}).get('template') or {}).get('spec') or {}
    unseen = sorted(metadata_of(node).get('name') for node in nodes if daemonset_schedules_on(pod_spec, node))
    if not unseen:
        return state
    return dict(state, ready=False, reason='its controller counts no node yet, while %d match its pods: %s' % (
        len(unseen), ', '.join(unseen[:5]) + (' ...' if len(unseen) > 5 else '')))


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
    if created < state['desired'] and as_int(status_of(daemonset).get('observedGeneration')):
        events = warning_events(owner_events, daemonset, 1)
        why = ' (%s: %s)' % (events[0]['reason'], events[0]['message']) if events else ''
        problems.append(new_problem(NOT_CREATED, None, 'DaemonSet %s/%s has created %d of %d pods%s' % (
            state['namespace'], state['name'], created, state['desired'], why),
            key=(NOT_CREATED, metadata_of(daemonset).get('uid'))))
    return problems
