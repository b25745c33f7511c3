# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver rollout: where nodes stand, the budget and the waves (driver.upgrade_plan), and its steps against a cluster
in memory (driver.upgrade), including eviction held back by a PodDisruptionBudget, a crash-looping new driver and
a failed validation."""

import copy

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.driver import upgrade_plan as du
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.errors import APIError, TaskError
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.upgrade import Rollout
from ansible_collections.accelerators.gpu.plugins.module_utils.upgrade.gpu_workload_eviction import drain_plan
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.fakes import Deadlines, FakeModule

OLD, NEW = 'rev-old', 'rev-new'


def daemonset(name='nvidia-driver-daemonset-x', generation=2, observed=2):
    return {'metadata': {'name': name, 'uid': 'ds-' + name, 'namespace': 'gpu', 'generation': generation},
            'status': {'observedGeneration': observed}}


def revisions(ds, hashes):
    return [{'metadata': {'name': '%s-%s' % (ds['metadata']['name'], h), 'labels': {'controller-revision-hash': h},
                          'ownerReferences': [{'uid': ds['metadata']['uid']}]}, 'revision': index + 1}
            for index, h in enumerate(hashes)]


def driver_pod(node, revision, ds, ready=True, name=None, crash=None):
    status = {'phase': 'Running', 'conditions': [{'type': 'Ready', 'status': 'True' if ready else 'False'}],
              'containerStatuses': [{'name': 'nvidia-driver-ctr', 'ready': ready, 'restartCount': 1 if crash else 0,
                                     'state': {'waiting': {'reason': 'CrashLoopBackOff', 'message': crash}}
                                     if crash else {'running': {}}}]}
    return {'metadata': {'name': name or 'driver-' + node, 'namespace': 'gpu', 'uid': 'uid-%s-%s' % (node, revision),
                         'labels': {'controller-revision-hash': revision,
                                    'app.kubernetes.io/component': 'nvidia-driver',
                                    'app.kubernetes.io/managed-by': 'accelerators.gpu'},
                         'ownerReferences': [{'kind': 'DaemonSet', 'uid': ds['metadata']['uid']}]},
            'spec': {'nodeName': node, 'containers': [{'name': 'nvidia-driver-ctr', 'image': 'driver'}]},
            'status': status}


def node(name, gpus=2, state=None, unschedulable=False, ready=True, annotations=None):
    labels = {du.STATE_LABEL: state} if state else {}
    return {'metadata': {'name': name, 'labels': labels, 'annotations': dict(annotations or {})},
            'spec': {'unschedulable': True} if unschedulable else {},
            'status': {'allocatable': {'nvidia.com/gpu': str(gpus)},
                       'conditions': [{'type': 'Ready', 'status': 'True' if ready else 'False'}]}}


def states_of(nodes, pods, ds=None):
    ds = ds or daemonset()
    return du.node_driver_states(nodes, [ds], revisions(ds, [OLD, NEW]), pods)


def test_budget_is_a_count_or_a_percentage_rounded_up_and_at_least_one():
    assert du.resolve_budget('25%', 12) == 3
    assert du.resolve_budget('25%', 10) == 3
    assert du.resolve_budget('10%', 3) == 1
    assert du.resolve_budget(2, 12) == 2
    assert du.resolve_budget('0', 5) == 1
    assert du.resolve_budget('50', 5) == 5
    assert du.resolve_budget('25%', 0) == 0
    with pytest.raises(du.BudgetError, match="max_unavailable 'a quarter'"):
        du.resolve_budget('a quarter', 4)


def test_states_say_which_driver_pod_is_outdated_and_which_node_works():
    ds = daemonset()
    nodes = [node('a'), node('b', gpus=0), node('c', state=du.UPGRADE_DONE, unschedulable=True,
                                                annotations={du.INITIAL_STATE_ANNOTATION: 'true'})]
    pods = [driver_pod('a', OLD, ds), driver_pod('b', NEW, ds), driver_pod('c', NEW, ds, ready=False)]
    by_name = dict((s['name'], s) for s in states_of(nodes, pods, ds))
    assert (by_name['a']['outdated'], by_name['a']['available'], by_name['a']['pod']) == (True, True, 'driver-a')
    assert (by_name['b']['outdated'], by_name['b']['available']) == (False, False)  # no allocatable GPU
    assert by_name['c']['initially_unschedulable'] and not by_name['c']['driver_ready']


def test_a_daemonset_its_controller_has_not_processed_makes_revisions_unknown():
    ds = daemonset(generation=3, observed=2)
    by_name = dict((s['name'], s) for s in states_of([node('a')], [driver_pod('a', OLD, ds)], ds))
    assert (by_name['a']['revision_known'], by_name['a']['outdated']) == (False, False)


def test_waves_take_nodes_in_progress_first_then_outdated_ones_within_the_budget():
    ds = daemonset()
    names = ['n%02d' % i for i in range(12)]
    nodes = [node(n, state=du.POD_RESTART_REQUIRED if n == 'n07' else None) for n in names]
    pods = [driver_pod(n, OLD, ds) for n in names]
    plan = du.rollout_plan(states_of(nodes, pods, ds), max_parallel=0, max_unavailable='25%')
    assert plan['budget'] == 3 and plan['in_progress'] == ['n07']
    assert plan['wave'] == ['n07', 'n00', 'n01']
    assert du.waves(states_of(nodes, pods, ds), 0, '25%') == [
        ['n07', 'n00', 'n01'], ['n02', 'n03', 'n04'], ['n05', 'n06', 'n08'], ['n09', 'n10', 'n11']]
    assert du.rollout_plan(states_of(nodes, pods, ds), 1, '25%')['wave'] == ['n07']
    assert du.rollout_plan(states_of(nodes, pods, ds), 2, '25%')['wave'] == ['n07', 'n00']


def test_nodes_already_without_a_working_driver_take_the_budget_and_skipped_nodes_keep_theirs():
    ds = daemonset()
    nodes = [node('a', gpus=0), node('b'), node('c'), node('d'), node('e')]
    nodes[1]['metadata']['labels'][du.SKIP_LABEL] = 'true'
    pods = [driver_pod('a', NEW, ds), driver_pod('b', OLD, ds), driver_pod('c', OLD, ds), driver_pod('d', OLD, ds),
            driver_pod('e', NEW, ds)]
    plan = du.rollout_plan(states_of(nodes, pods, ds), 0, 2)
    assert plan['skipped_nodes'] == ['b'] and plan['unavailable'] == ['a']
    assert plan['wave'] == ['c']  # one of two slots is taken by node a
    stuck = du.rollout_plan(states_of(nodes, pods, ds), 0, 1)
    assert stuck['wave'] == [] and 'already is: a' in stuck['stuck']


REMEDIATION_STATE = 'accelerators.gpu/gpu-remediation-state'


def test_a_node_under_remediation_is_left_alone_counted_unavailable_not_in_progress():
    ds = daemonset()
    nodes = [node('a'), node('b', unschedulable=True), node('c', state=du.CORDON_REQUIRED, unschedulable=True),
             node('d'), node('e', unschedulable=True)]
    nodes[1]['metadata']['labels'][REMEDIATION_STATE] = 'reset-required'
    nodes[2]['metadata']['labels'][REMEDIATION_STATE] = 'rma'
    nodes[4]['metadata']['labels'][REMEDIATION_STATE] = 'done'  # no longer: rolled out as any
    pods = [driver_pod(name, OLD, ds) for name in 'abcde']
    states = states_of(nodes, pods, ds)
    assert [s['remediation'] for s in states][1] == (
        'under GPU remediation (accelerators.gpu/gpu-remediation-state=reset-required)')
    plan = du.rollout_plan(states, 1, 3)
    # b and c wait for their remediation, c although its upgrade state is in progress; neither takes max_parallel.
    assert plan['remediation'] == ['b', 'c'] and plan['in_progress'] == [] and plan['waiting'] == ['a', 'd', 'e']
    assert plan['wave'] == ['a'] and 'b' not in plan['done'] + plan['skipped_nodes']
    # Their GPUs serve nothing: they take two of max_unavailable 3.
    assert du.rollout_plan(states, 0, 3)['wave'] == ['a']
    assert du.waves(states, 0, 3) == [['a'], ['d'], ['e']]
    stuck = du.rollout_plan(states, 0, 2)
    assert stuck['wave'] == [] and 'b (under GPU remediation (accelerators.gpu/gpu-remediation-state=' \
        'reset-required)), c (under GPU remediation' in stuck['stuck']


def test_the_rollout_never_cordons_evicts_or_replaces_the_driver_of_a_node_under_remediation():
    cluster = RolloutCluster(['a', 'b', 'c'])
    cluster.nodes['b']['metadata']['labels'][REMEDIATION_STATE] = 'reset-required'
    cluster.nodes['b']['spec']['unschedulable'] = True
    # Labelled upgrade-required before its remediation began, which waits for that label to go.
    cluster.nodes['b']['metadata']['labels'][du.STATE_LABEL] = du.UPGRADE_REQUIRED
    plan = rollout(cluster, max_unavailable=2).plan()
    assert plan['remediation'] == ['b'] and plan['wave'] == ['a'] and plan['waiting'] == ['a', 'c']
    assert du.STATE_LABEL not in cluster.nodes['b']['metadata']['labels']
    assert [n['remediation'] for n in plan['nodes'] if n['name'] == 'b'] == [
        'under GPU remediation (accelerators.gpu/gpu-remediation-state=reset-required)']
    # A node that went under remediation after the plan is left out of its wave.
    cluster.nodes['c']['metadata']['labels'][REMEDIATION_STATE] = 'quarantine-required'
    moved = rollout(cluster).upgrade(['a', 'b', 'c'])
    assert moved['ready'] == ['a'] and moved['remediation'] == ['b', 'c']
    assert [w[:2] for w in cluster.writes if w[0] in ('EVICT', 'DELETE')] == [
        ('EVICT', 'train-a'), ('DELETE', 'driver-a')]
    assert not [w for w in cluster.writes if w[1] in ('b', 'c') and w[0] == 'PATCH' and 'spec' in w[2]]
    assert cluster.nodes['c']['metadata']['labels'][du.STATE_LABEL] == du.UPGRADE_REQUIRED  # as the plan left it
    cluster.succeed_jobs('driver-upgrade', ['a'], moved['validation_keys'])
    assert rollout(cluster).complete(['a', 'b'])['completed'] == ['a']
    assert cluster.nodes['b']['spec']['unschedulable'] is True  # still quarantined
    # Once its remediation is done, the rollout takes it as any node.
    cluster.nodes['b']['metadata']['labels'][REMEDIATION_STATE] = 'done'
    cluster.nodes['c']['metadata']['labels'].pop(REMEDIATION_STATE)
    again = rollout(cluster, max_unavailable=1).plan()
    assert again['remediation'] == [] and again['waiting'] == ['b', 'c']
    assert cluster.nodes['b']['metadata']['labels'][du.STATE_LABEL] == du.UPGRADE_REQUIRED


def test_an_outdated_node_already_down_costs_no_budget():
    ds = daemonset()
    nodes = [node('a', gpus=0), node('b'), node('c')]
    pods = [driver_pod('a', OLD, ds, ready=False), driver_pod('b', OLD, ds), driver_pod('c', OLD, ds)]
    assert du.rollout_plan(states_of(nodes, pods, ds), 0, 1)['wave'] == ['a']


def test_a_dra_node_is_available_by_the_devices_its_resource_slices_publish_not_by_nvidia_com_gpu():
    ds = daemonset()
    nodes = [node('dra', gpus=0), node('dra-down', gpus=0), node('plugin')]
    for entry in nodes[:2]:
        entry['metadata']['labels'][du.DRA_DEPLOY_LABEL] = 'true'
    pods = [driver_pod(name, OLD, ds) for name in ('dra', 'dra-down', 'plugin')]
    states = du.node_driver_states(nodes, [ds], revisions(ds, [OLD, NEW]), pods, {'dra': 2})
    assert [(s['name'], s['gpus'], s['available']) for s in states] == [
        ('dra', 2, True), ('dra-down', 0, False), ('plugin', 2, True)]
    # The DRA node without published devices takes the budget of one, as a device-plugin node without GPUs would.
    assert du.rollout_plan(states, 0, 1)['wave'] == ['dra-down']


def test_steps_follow_the_options_and_stop_once_the_driver_was_replaced():
    assert du.steps({'cordon': True, 'drain': {'enable': False}}, '') == [
        du.CORDON_REQUIRED, du.POD_DELETION_REQUIRED, du.POD_RESTART_REQUIRED]
    assert du.steps({'cordon': False, 'drain': {'enable': True}}, du.UPGRADE_FAILED) == [
        du.POD_DELETION_REQUIRED, du.DRAIN_REQUIRED, du.POD_RESTART_REQUIRED]
    assert du.steps({}, du.VALIDATION_REQUIRED) == []


def test_drain_plan_takes_every_pod_but_daemonset_static_finished_and_unselected_ones():
    def pod(name, labels=None, owner=None, phase='Running', annotations=None, deleting=False):
        metadata = {'name': name, 'namespace': 'ml', 'labels': labels or {}, 'annotations': annotations or {}}
        if owner:
            metadata['ownerReferences'] = [{'kind': owner}]
        if deleting:
            metadata['deletionTimestamp'] = 'now'
        return {'metadata': metadata, 'spec': {}, 'status': {'phase': phase}}
    pods = [pod('web', {'tier': 'web'}), pod('db', {'tier': 'db'}), pod('agent', owner='DaemonSet'),
            pod('static', annotations={'kubernetes.io/config.mirror': 'x'}), pod('done', phase='Succeeded'),
            pod('keep', {'tier': 'web', 'nvidia.com/gpu-driver-upgrade-drain.skip': 'true'}),
            pod('leaving', {'tier': 'web'}, deleting=True)]
    everything = drain_plan()(pods)
    assert [p['metadata']['name'] for p in everything['evict']] == ['db', 'web']
    assert everything['terminating'] == ['ml/leaving'] and everything['spared'][0]['pod'] == 'ml/keep'
    assert [p['metadata']['name'] for p in drain_plan('tier=db')(pods)['evict']] == ['db']


class RolloutCluster(Deadlines):
    """Nodes, one driver DaemonSet and its pods, GPU workloads and validation Jobs in memory, with the ClusterAPI
    methods the rollout uses. A deleted driver pod comes back at the new revision (as the DaemonSet controller would)
    unless the node is listed in crash; workloads in guarded are refused eviction (429)."""

    def __init__(self, names, crash=(), guarded=()):
        self.ds = daemonset()
        self.nodes = dict((n, node(n)) for n in names)
        self.pods = dict(('driver-' + n, driver_pod(n, OLD, self.ds)) for n in names)
        for n in names:
            self.pods['train-' + n] = {
                'metadata': {'name': 'train-' + n, 'namespace': 'ml', 'uid': 'w-' + n, 'labels': {}},
                'spec': {'nodeName': n, 'containers': [{'resources': {'limits': {'nvidia.com/gpu': '1'}}}]},
                'status': {'phase': 'Running'}}
        self.crash, self.guarded = set(crash), set(guarded)
        self.jobs = []
        self.writes = []
        self.claims = []

    def list_items(self, path, label_selector=None, field_selector=None):
        assert path == '/apis/resource.k8s.io/v1/resourceclaims', path
        return copy.deepcopy(self.claims)

    def list_daemonsets(self, namespace, label_selector=None):
        return [copy.deepcopy(self.ds)]

    def list_revisions(self, namespace, label_selector=None):
        return revisions(self.ds, [OLD, NEW])

    def list_pods(self, namespace, label_selector=None):
        wanted = 'ml' if namespace == 'ml' else 'gpu'
        return [copy.deepcopy(p) for p in self.pods.values() if p['metadata']['namespace'] == wanted]

    def list_nodes(self, label_selector=None, page_size=None, view=None):
        return iter(copy.deepcopy(list(self.nodes.values())))

    def list_node_pods(self, name):
        return [copy.deepcopy(p) for p in self.pods.values() if p['spec']['nodeName'] == name]

    def list_pod_disruption_budgets(self, namespace):
        return [{'metadata': {'name': 'serve', 'namespace': 'ml'}, 'spec': {'selector': {}},
                 'status': {'disruptionsAllowed': 0}}]

    def list_jobs(self, namespace, label_selector=None):
        return copy.deepcopy(self.jobs)

    def patch_node(self, name, body):
        self.writes.append(('PATCH', name, copy.deepcopy(body)))
        metadata = self.nodes[name]['metadata']
        for key in ('labels', 'annotations'):
            for label, value in ((body.get('metadata') or {}).get(key) or {}).items():
                if value is None:
                    metadata[key].pop(label, None)
                else:
                    metadata[key][label] = value
        if 'spec' in body:
            self.nodes[name]['spec']['unschedulable'] = body['spec']['unschedulable']

    def evict_pod(self, eviction):
        name = eviction['metadata']['name']
        if self.pods[name]['spec']['nodeName'] in self.guarded:
            raise APIError('POST', name, 429, 'Cannot evict pod as it would violate the pod\'s disruption budget.')
        self.writes.append(('EVICT', name))
        del self.pods[name]

    def delete_pod(self, namespace, name, uid):
        self.writes.append(('DELETE', name))
        pod = self.pods.pop(name)
        node_name = pod['spec']['nodeName']
        crash = 'driver does not load' if node_name in self.crash else None
        self.pods[name + '-new'] = driver_pod(node_name, NEW, self.ds, ready=not crash, name=name + '-new',
                                              crash=crash)

    def succeed_jobs(self, check, nodes, keys, ok=True):
        for name in nodes:
            self.jobs.append({'metadata': {'name': 'job-' + name, 'labels': {'accelerators.gpu/validation': check},
                                           'annotations': {'accelerators.gpu/node': name,
                                                           'accelerators.gpu/validated-pods': keys[name]}},
                              'spec': {}, 'status': {'conditions': [
                                  {'type': 'Complete' if ok else 'Failed', 'status': 'True', 'reason': 'x',
                                   'message': 'ECC errors'}]}})


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def params(**extra):
    values = {'namespace': 'gpu', 'label_selector': None, 'assume_outdated': [], 'max_parallel': 0,
              'max_unavailable': '50%', 'cordon': True, 'eviction': {'timeout': 10, 'skip_label': 'skip'},
              'drain': {'enable': False, 'pod_selector': '', 'timeout': 10}, 'wait_timeout': 30,
              'poll_interval': 1, 'grace': 3, 'validation_checks': ['driver-upgrade'], 'nodes': [],
              'configurations': []}
    values.update(extra)
    return values


def rollout(cluster, check_mode=False, **extra):
    clock = Clock()
    return Rollout(FakeModule(params(**extra), check_mode=check_mode), cluster, clock=clock, sleep=clock.sleep)


def test_a_wave_is_cordoned_evicted_then_its_driver_pods_replaced_and_completed_after_validation():
    cluster = RolloutCluster(['a', 'b', 'c', 'd'])
    cluster.nodes['b']['spec']['unschedulable'] = True  # cordoned by its admin before
    plan = rollout(cluster).plan()
    assert plan['wave'] == ['a', 'b'] and plan['waiting'] == ['a', 'b', 'c', 'd']
    assert set(n['metadata']['labels'][du.STATE_LABEL] for n in cluster.nodes.values()) == {du.UPGRADE_REQUIRED}
    moved = rollout(cluster).upgrade(plan['wave'])
    assert moved['ready'] == ['a', 'b'] and moved['failures'] == []
    assert moved['validation_keys'] == {'a': 'uid-a-%s' % NEW, 'b': 'uid-b-%s' % NEW}
    order = [w[:2] for w in cluster.writes if w[0] in ('EVICT', 'DELETE')]
    assert order == [('EVICT', 'train-a'), ('EVICT', 'train-b'), ('DELETE', 'driver-a'), ('DELETE', 'driver-b')]
    assert cluster.nodes['a']['spec']['unschedulable'] and cluster.nodes['b']['metadata']['annotations'][
        du.INITIAL_STATE_ANNOTATION] == 'true'
    assert cluster.nodes['c']['metadata']['labels'][du.STATE_LABEL] == du.UPGRADE_REQUIRED  # not touched
    cluster.succeed_jobs('driver-upgrade', ['a', 'b'], moved['validation_keys'])
    done = rollout(cluster).complete(['a', 'b'])
    assert done == {'completed': ['a', 'b'], 'failures': []}
    assert cluster.nodes['a']['spec']['unschedulable'] is None  # uncordoned
    assert cluster.nodes['b']['spec']['unschedulable'] is True  # stays cordoned, as before the upgrade
    assert du.INITIAL_STATE_ANNOTATION not in cluster.nodes['b']['metadata']['annotations']
    assert rollout(cluster).plan()['wave'] == ['c', 'd']


def test_a_wave_evicts_the_pods_holding_claims_of_the_dra_drivers_gpus_too():
    cluster = RolloutCluster(['a'])
    cluster.pods['dra-train-a'] = {
        'metadata': {'name': 'dra-train-a', 'namespace': 'ml', 'uid': 'd-a', 'labels': {}},
        'spec': {'nodeName': 'a', 'containers': [{}], 'resourceClaims': [{'name': 'gpu', 'resourceClaimTemplateName': 't'}]},
        'status': {'phase': 'Running', 'resourceClaimStatuses': [{'name': 'gpu', 'resourceClaimName': 'dra-train-a-gpu'}]}}
    cluster.claims = [{'metadata': {'name': 'dra-train-a-gpu', 'namespace': 'ml'}, 'status': {'allocation': {'devices': {
        'results': [{'request': 'gpu', 'driver': 'gpu.nvidia.com', 'pool': 'a', 'device': 'gpu-0'}]}}}}]
    rollout(cluster).plan()
    assert rollout(cluster).upgrade(['a'])['ready'] == ['a']
    assert [w[:2] for w in cluster.writes if w[0] in ('EVICT', 'DELETE')] == [
        ('EVICT', 'dra-train-a'), ('EVICT', 'train-a'), ('DELETE', 'driver-a')]


def test_a_run_stopped_mid_wave_resumes_without_replacing_a_driver_twice():
    cluster = RolloutCluster(['a', 'b'])
    rollout(cluster).plan()
    rollout(cluster).upgrade(['a'])  # then stopped before validation
    plan = rollout(cluster).plan()
    assert plan['in_progress'] == ['a'] and plan['wave'][0] == 'a'
    writes = len(cluster.writes)
    again = rollout(cluster).upgrade(['a'])
    assert again['ready'] == ['a'] and len(cluster.writes) == writes  # nothing deleted, evicted or labelled again


def test_a_crash_looping_new_driver_fails_its_node_after_grace_and_the_others_go_on():
    cluster = RolloutCluster(['a', 'b'], crash=['b'])
    rollout(cluster).plan()
    moved = rollout(cluster).upgrade(['a', 'b'])
    assert moved['ready'] == ['a']
    assert [(f['node'], f['state']) for f in moved['failures']] == [('b', du.UPGRADE_FAILED)]
    assert 'driver does not load' in moved['failures'][0]['reason']
    assert cluster.nodes['b']['metadata']['labels'][du.STATE_LABEL] == du.UPGRADE_FAILED
    assert 'driver does not load' in cluster.nodes['b']['metadata']['annotations'][du.FAILURE_ANNOTATION]
    # A re-run takes both again: a to be validated, b to be retried.
    plan = rollout(cluster).plan()
    assert plan['in_progress'] == ['a', 'b'] and plan['upgrade_failed'] == ['b'] and plan['wave'] == ['a', 'b']


def test_an_eviction_held_back_by_a_budget_fails_its_node_naming_the_pod_and_leaves_its_driver():
    cluster = RolloutCluster(['a', 'b'], guarded=['a'])
    rollout(cluster).plan()
    moved = rollout(cluster).upgrade(['a', 'b'])
    assert moved['ready'] == ['b']
    reason = moved['failures'][0]['reason']
    assert moved['failures'][0]['node'] == 'a' and 'ml/train-a' in reason and 'PodDisruptionBudget serve' in reason
    assert 'driver-a' in cluster.pods  # its driver pod was not deleted


def test_a_node_that_failed_validation_is_upgrade_failed_with_the_jobs_message():
    cluster = RolloutCluster(['a', 'b'])
    rollout(cluster).plan()
    moved = rollout(cluster).upgrade(['a', 'b'])
    cluster.succeed_jobs('driver-upgrade', ['a'], moved['validation_keys'])
    cluster.succeed_jobs('driver-upgrade', ['b'], moved['validation_keys'], ok=False)
    done = rollout(cluster).complete(['a', 'b'])
    assert done['completed'] == ['a']
    assert done['failures'][0]['node'] == 'b' and 'ECC errors' in done['failures'][0]['reason']
    assert cluster.nodes['b']['spec']['unschedulable']  # stays cordoned, out of service


def test_plan_in_check_mode_writes_nothing_and_counts_assumed_nodes_as_outdated():
    cluster = RolloutCluster(['a', 'b'])
    for name in ('a', 'b'):
        cluster.pods['driver-' + name]['metadata']['labels']['controller-revision-hash'] = NEW
    plan = rollout(cluster, check_mode=True, assume_outdated=['b']).plan()
    assert plan['outdated'] == ['b'] and plan['waves'] == [['b']]
    assert cluster.writes == []


class LosingCluster(RolloutCluster):
    """A RolloutCluster whose API server is out of reach for the next `lost` pod lists (an APIError with a fault)."""

    lost = 0

    def list_pods(self, namespace, label_selector=None):
        if self.lost:
            self.lost -= 1
            raise APIError('GET', '/api/v1/namespaces/gpu/pods', 503, 'unavailable (tried 9 times in 60.0 s)',
                           fault='503')
        return super(LosingCluster, self).list_pods(namespace, label_selector)


def losing_after_delete(lost):
    """A planned LosingCluster of nodes a and b whose API server goes away for `lost` pod lists as a driver pod is
    deleted (it restarts as the wave waits for the new driver pods)."""
    cluster = LosingCluster(['a', 'b'])
    rollout(cluster).plan()
    original = cluster.delete_pod

    def delete_then_lose(namespace, name, uid):
        original(namespace, name, uid)
        cluster.lost = lost
    cluster.delete_pod = delete_then_lose
    return cluster


def test_a_wave_waits_through_a_lost_api_server_for_its_new_drivers():
    cluster = losing_after_delete(3)
    moved = rollout(cluster).upgrade(['a'])
    assert moved['ready'] == ['a'] and moved['failures'] == [] and cluster.lost == 0
    assert cluster.nodes['a']['metadata']['labels'][du.STATE_LABEL] == du.VALIDATION_REQUIRED


def test_a_wave_whose_api_server_stays_away_past_the_wait_stops_resumable_saying_so():
    cluster = losing_after_delete(1000)
    with pytest.raises(TaskError) as raised:
        rollout(cluster, wait_timeout=10).upgrade(['a'])
    assert str(raised.value).startswith(
        'the driver of node(s) a not seen back within 10 s; the API server was unreachable for 1')
    assert str(raised.value).endswith('they stay pod-restart-required, which a next run resumes from')
    # Where the next run resumes: cordoned with its state, its new driver pod on its way.
    assert cluster.nodes['a']['metadata']['labels'][du.STATE_LABEL] == du.POD_RESTART_REQUIRED
    assert cluster.nodes['a']['spec']['unschedulable'] and 'driver-a-new' in cluster.pods
    cluster.lost = 0
    assert rollout(cluster).upgrade(['a'])['ready'] == ['a']


def operand_pod(node_name, name, component, owner, phase='Running', ready=True):
    return {'metadata': {'name': name, 'namespace': 'gpu', 'uid': 'uid-' + name,
                         'labels': {'app.kubernetes.io/component': component,
                                    'app.kubernetes.io/managed-by': 'accelerators.gpu'},
                         'ownerReferences': [{'kind': owner, 'name': component, 'controller': True}]},
            'spec': {'nodeName': node_name, 'containers': [{'name': component}]},
            'status': {'phase': phase, 'conditions': [{'type': 'Ready', 'status': 'True' if ready else 'False'}]}}


def test_the_pods_of_jobs_on_a_node_never_hold_its_driver_back_an_unready_operand_does():
    # A GPU reset of the remediation, and a validation, completed on node a: their pods are never ready.
    cluster = RolloutCluster(['a', 'b'])
    cluster.pods['reset-a'] = operand_pod('a', 'reset-a', 'gpu-remediation', 'Job', phase='Succeeded', ready=False)
    cluster.pods['check-a'] = operand_pod('a', 'check-a', 'gpu-validation', 'Job', phase='Succeeded', ready=False)
    cluster.pods['plugin-b'] = operand_pod('b', 'plugin-b', 'nvidia-device-plugin', 'DaemonSet', ready=False)
    rollout(cluster).plan()
    moved = rollout(cluster).upgrade(['a', 'b'])
    assert moved['ready'] == ['a']
    assert [(f['node'], f['reason']) for f in moved['failures']] == [
        ('b', 'not back within 30 s: operand pod(s) not ready: plugin-b')]
