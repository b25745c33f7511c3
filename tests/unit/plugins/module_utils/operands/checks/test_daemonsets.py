# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.operands.checks.daemonsets import (
    daemonset_problems, daemonset_state, with_unseen_nodes)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.operands.operand_objects import (
    container_status, daemonset, event, pod, revision)


def test_daemonset_whose_generation_is_not_observed_is_not_ready():
    state = daemonset_state(daemonset(generation=2, observed=1), [pod('a', 'n1'), pod('b', 'n2')])
    assert not state['ready']
    assert 'generation 2' in state['reason']


def test_freshly_created_daemonset_without_status_is_not_ready():
    fresh = daemonset()
    fresh['status'] = {}
    assert not daemonset_state(fresh, [])['ready']


def test_daemonset_selecting_no_node_is_ready():
    state = daemonset_state(daemonset(desired=0), [])
    assert state['ready']
    assert state['reason'] == 'no node selected'


def test_selecting_no_node_is_not_ready_while_a_node_it_would_run_on_is_unseen_by_its_controller():
    selecting = daemonset(desired=0)
    selecting['spec']['template'] = {'spec': {'nodeSelector': {'gpu': 'true'}}}
    state = daemonset_state(selecting, [])
    nodes = [{'metadata': {'name': 'n%d' % index, 'labels': {'gpu': 'true'}}} for index in range(7)]
    unseen = with_unseen_nodes(state, selecting, nodes)
    assert not unseen['ready']
    assert unseen['reason'] == 'its controller counts no node yet, while 7 match its pods: n0, n1, n2, n3, n4 ...'
    tainted = [{'metadata': {'name': 'n', 'labels': {'gpu': 'true'}},
                'spec': {'taints': [{'key': 'dedicated', 'effect': 'NoSchedule'}]}}]
    assert with_unseen_nodes(state, selecting, tainted) == state == with_unseen_nodes(state, selecting, [])


def test_rolling_daemonset_ready_when_all_updated_and_available():
    state = daemonset_state(daemonset(), [pod('a', 'n1'), pod('b', 'n2'), pod('other', 'n3', owner_uid='x')])
    assert state['ready']
    assert [p['node'] for p in state['pods']] == ['n1', 'n2']


@pytest.mark.parametrize('counts, reason', [
    ({'updated': 1}, '1 of 2 pods updated, 2 available'),
    ({'available': 1}, '2 of 2 pods updated, 1 available'),
])
def test_rolling_daemonset_not_ready(counts, reason):
    state = daemonset_state(daemonset(**counts), [pod('a', 'n1'), pod('b', 'n2')])
    assert not state['ready']
    assert state['reason'] == reason


def test_on_delete_daemonset_ready_only_at_newest_revision():
    revisions = [revision(1, 'old'), revision(2, 'new'), revision(3, 'foreign', owner_uid='x')]
    ds = daemonset(strategy='OnDelete')
    current = [pod('a', 'n1', revision='new'), pod('b', 'n2', revision='new')]
    state = daemonset_state(ds, current, revisions)
    assert state['ready']
    assert state['revision'] == 'new'

    stale = daemonset_state(ds, [pod('a', 'n1', revision='new'), pod('b', 'n2', revision='old')], revisions)
    assert not stale['ready']
    assert '1 of 2 pods run an older revision than new' in stale['reason']
    assert stale['reason'].endswith(': b')


def test_on_delete_daemonset_needs_every_pod_ready_and_present():
    revisions = [revision(1, 'h')]
    ds = daemonset(strategy='OnDelete')
    unready = daemonset_state(ds, [pod('a', 'n1', revision='h'), pod('b', 'n2', revision='h', ready=False)],
                              revisions)
    assert not unready['ready']
    assert unready['reason'] == '1 of 2 pods ready'
    assert not daemonset_state(ds, [pod('a', 'n1', revision='h')], revisions)['ready']
    assert daemonset_state(ds, [pod('a', 'n1')], [])['reason'] == 'no ControllerRevision yet'


def test_terminating_pods_do_not_count():
    leaving = pod('b', 'n2', revision='h')
    leaving['metadata']['deletionTimestamp'] = '2026-01-01T00:00:00Z'
    state = daemonset_state(daemonset(strategy='OnDelete'), [pod('a', 'n1', revision='h'), leaving],
                            [revision(1, 'h')])
    assert not state['ready']
    assert [p['pod'] for p in state['pods']] == ['a']


def test_daemonset_that_cannot_create_pods_says_why():
    ds = daemonset(current=0, ready=0, updated=0, available=0)
    events = [event('ds-1', 'FailedCreate', 'pods "x" is forbidden: violates PodSecurity "baseline:latest"',
                    '2026-01-01T00:00:02Z', kind='DaemonSet'),
              event('ds-1', 'FailedCreate', 'older', '2026-01-01T00:00:01Z', kind='DaemonSet')]
    state = daemonset_state(ds, [])
    problems = daemonset_problems(ds, [], state, events)
    assert [p['kind'] for p in problems] == ['not-created']
    assert not problems[0]['fatal']
    assert problems[0]['text'] == ('DaemonSet gpu/toolkit has created 0 of 2 pods (FailedCreate: pods "x" is '
                                   'forbidden: violates PodSecurity "baseline:latest")')


def test_pods_the_daemonset_status_does_not_count_yet_are_not_reported_as_not_created():
    # The controller created the pods (one cannot pull its image) and has not yet counted them in the status.
    ds = daemonset(current=0, ready=0, updated=0, available=0)
    pulling = container_status('main', {'waiting': {'reason': 'ImagePullBackOff', 'message': 'Back-off pulling'}})
    pods = [pod('p-0', 'gpu-0'), pod('p-1', 'gpu-1', ready=False, statuses=[pulling])]
    problems = daemonset_problems(ds, pods, daemonset_state(ds, pods))
    assert [(p['kind'], p['node']) for p in problems] == [('image', 'gpu-1')]
    # One pod of two seen: the other is not created.
    problems = daemonset_problems(ds, pods[1:], daemonset_state(ds, pods[1:]))
    assert [(p['kind'], p['node']) for p in problems] == [('image', 'gpu-1'), ('not-created', None)]
    assert problems[1]['text'] == 'DaemonSet gpu/toolkit has created 1 of 2 pods'


def test_ready_daemonset_has_no_problems():
    ds = daemonset()
    assert daemonset_problems(ds, [pod('a', 'n1')], daemonset_state(ds, [pod('a', 'n1'), pod('b', 'n2')])) == []


def test_on_delete_daemonset_accepting_outdated_pods_leaves_them_to_the_rollout():
    revisions = [revision(1, 'old'), revision(2, 'new')]
    ds = daemonset(strategy='OnDelete')
    crashing = pod('c', 'n3', revision='old', ready=False)
    state = daemonset_state(ds, [pod('a', 'n1', revision='new'), pod('b', 'n2', revision='old'), crashing],
                            revisions, accept_outdated=True)
    assert state['ready'] and state['outdated'] == ['n2', 'n3']
    not_yet = daemonset_state(ds, [pod('a', 'n1', revision='new', ready=False), pod('b', 'n2', revision='old')],
                              revisions, accept_outdated=True)
    assert not not_yet['ready'] and not_yet['reason'] == '1 of 2 pods ready'
