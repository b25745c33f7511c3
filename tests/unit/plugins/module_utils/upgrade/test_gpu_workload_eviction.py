# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which GPU workloads to evict, and the eviction loop against PodDisruptionBudgets (module_utils/gpu_eviction.py)."""

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.errors import APIError, TaskError
from ansible_collections.accelerators.gpu.plugins.module_utils.upgrade.gpu_workload_eviction import (
    SKIP_LABEL, blocking_budgets, eviction, eviction_plan, gpu_resources, run)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.fakes import Deadlines, FakeModule


def pod(name, namespace='ml', node='gpu-1', requests=None, limits=None, init=None, labels=None, owner=None,
        phase='Running', deleting=False, annotations=None):
    container = {'name': 'main', 'resources': {}}
    if requests:
        container['resources']['requests'] = requests
    if limits:
        container['resources']['limits'] = limits
    metadata = {'name': name, 'namespace': namespace, 'uid': 'uid-' + name, 'labels': labels or {},
                'annotations': annotations or {}}
    if owner:
        metadata['ownerReferences'] = [{'kind': owner, 'name': 'x'}]
    if deleting:
        metadata['deletionTimestamp'] = '2026-11-22T10:00:00Z'
    spec = {'nodeName': node, 'containers': [container]}
    if init:
        spec['initContainers'] = [{'name': 'init', 'resources': {'limits': init}}]
    return {'metadata': metadata, 'spec': spec, 'status': {'phase': phase}}


def test_gpu_resources_of_any_container_in_requests_or_limits():
    assert gpu_resources(pod('a', requests={'nvidia.com/gpu': '1', 'cpu': '2'})) == ['nvidia.com/gpu']
    assert gpu_resources(pod('b', limits={'nvidia.com/gpu.shared': 2})) == ['nvidia.com/gpu.shared']
    assert gpu_resources(pod('c', init={'nvidia.com/gpu': '1'}, requests={'cpu': '1'})) == ['nvidia.com/gpu']
    assert gpu_resources(pod('d', requests={'nvidia.com/gpu': '0'}, limits={'amd.com/gpu': '1'})) == []
    assert gpu_resources(pod('e')) == []
    # MIG devices under the mixed strategy are GPUs too.
    assert gpu_resources(pod('f', limits={'nvidia.com/mig-1g.10gb': '1'})) == ['nvidia.com/mig-1g.10gb']


def test_plan_evicts_gpu_workloads_and_says_why_others_stay():
    pods = [pod('train', requests={'nvidia.com/gpu': '1'}),
            pod('keep', limits={'nvidia.com/gpu': '1'}, labels={SKIP_LABEL: 'true'}),
            pod('not-skipped', limits={'nvidia.com/gpu': '1'}, labels={SKIP_LABEL: 'false'}),
            pod('plugin', requests={'nvidia.com/gpu': '1'}, owner='DaemonSet'),
            pod('static', requests={'nvidia.com/gpu': '1'}, annotations={'kubernetes.io/config.mirror': 'x'}),
            pod('going', requests={'nvidia.com/gpu': '1'}, deleting=True),
            pod('done', requests={'nvidia.com/gpu': '1'}, phase='Succeeded'),
            pod('web', requests={'cpu': '1'}, owner='ReplicaSet')]
    plan = eviction_plan(pods)
    assert [p['metadata']['name'] for p in plan['evict']] == ['not-skipped', 'train']
    assert plan['terminating'] == ['ml/going']
    assert plan['spared'] == [
        {'pod': 'ml/keep', 'reason': 'labelled nvidia.com/gpu-driver-upgrade-drain.skip=true'},
        {'pod': 'ml/plugin', 'reason': 'a DaemonSet pod: its DaemonSet would put it back'},
        {'pod': 'ml/static', 'reason': 'a static pod of the kubelet'}]
    assert eviction_plan(pods, skip_label='site/keep')['spared'][0]['pod'] == 'ml/plugin'


def test_eviction_is_of_the_pod_read():
    assert eviction(pod('train')) == {'apiVersion': 'policy/v1', 'kind': 'Eviction',
                                      'metadata': {'name': 'train', 'namespace': 'ml'},
                                      'deleteOptions': {'preconditions': {'uid': 'uid-train'}}}


def budget(name, selector, namespace='ml', allowed=0):
    return {'metadata': {'name': name, 'namespace': namespace}, 'spec': {'selector': selector},
            'status': {'disruptionsAllowed': allowed, 'currentHealthy': 1, 'desiredHealthy': 1}}


def test_blocking_budgets_are_those_selecting_the_pod_in_its_namespace():
    target = pod('train', labels={'app': 'train', 'tier': 'gpu'})
    budgets = [budget('by-label', {'matchLabels': {'app': 'train'}}),
               budget('by-expression', {'matchExpressions': [{'key': 'tier', 'operator': 'In', 'values': ['gpu']}]}),
               budget('absent-key', {'matchExpressions': [{'key': 'team', 'operator': 'DoesNotExist'}]}),
               budget('other-app', {'matchLabels': {'app': 'web'}}),
               budget('not-in', {'matchExpressions': [{'key': 'tier', 'operator': 'NotIn', 'values': ['gpu']}]}),
               budget('other-namespace', {}, namespace='web'),
               budget('everything', {})]
    assert blocking_budgets(target, budgets) == [
        'absent-key (disruptionsAllowed 0, currentHealthy 1 of desiredHealthy 1)',
        'by-expression (disruptionsAllowed 0, currentHealthy 1 of desiredHealthy 1)',
        'by-label (disruptionsAllowed 0, currentHealthy 1 of desiredHealthy 1)',
        'everything (disruptionsAllowed 0, currentHealthy 1 of desiredHealthy 1)']


class EvictionCluster(Deadlines):
    """Pods, budgets, and evictions answered as the API server would: 429 while refuse[pod] > 0."""

    def __init__(self, pods, budgets=(), refuse=None, claims=None):
        self.pods = dict(('%s/%s' % (p['metadata']['namespace'], p['metadata']['name']), p) for p in pods)
        self.budgets = list(budgets)
        self.refuse = dict(refuse or {})
        self.evictions = []
        # ResourceClaims; None: a server without resource.k8s.io/v1.
        self.claims = claims

    def list_items(self, path, label_selector=None, field_selector=None):
        if self.claims is None:
            raise APIError('GET', path, 404, 'the server could not find the requested resource')
        return self.claims

    def list_node_pods(self, node):
        return [p for key, p in sorted(self.pods.items()) if p['spec']['nodeName'] == node]

    def evict_pod(self, body):
        key = '%s/%s' % (body['metadata']['namespace'], body['metadata']['name'])
        self.evictions.append(key)
        if self.refuse.get(key, 0) > 0:
            self.refuse[key] -= 1
            raise APIError('POST', key, 429, 'Cannot evict pod as it would violate the pod\'s disruption budget.')
        # Deleted at once (no grace period), as evictions of pods without finalizers may be.
        del self.pods[key]

    def list_pod_disruption_budgets(self, namespace):
        return [b for b in self.budgets if b['metadata']['namespace'] == namespace]


def params(**overrides):
    base = {'nodes': ['gpu-1'], 'skip_label': SKIP_LABEL, 'timeout': 10, 'poll_interval': 1}
    base.update(overrides)
    return base


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_run_retries_a_pdb_refusal_until_the_budget_allows_it():
    cluster = EvictionCluster([pod('train', requests={'nvidia.com/gpu': '1'}, labels={'app': 'train'}),
                               pod('other', node='gpu-2', requests={'nvidia.com/gpu': '1'})],
                              [budget('train', {'matchLabels': {'app': 'train'}})], refuse={'ml/train': 2})
    clock = Clock()
    result = run(FakeModule(params()), cluster, clock=clock, sleep=clock.sleep)
    # Refused twice, evicted the third time, seen gone the fourth look.
    assert cluster.evictions == ['ml/train'] * 3 and clock.now == 3
    assert (result['changed'], result['evicted'], result['blocked']) == (True, ['ml/train'], {})
    assert 'ml/other' in cluster.pods


def test_run_fails_at_the_timeout_naming_the_pod_and_its_budget():
    cluster = EvictionCluster([pod('train', requests={'nvidia.com/gpu': '1'}, labels={'app': 'train'})],
                              [budget('train', {'matchLabels': {'app': 'train'}})], refuse={'ml/train': 100})
    clock = Clock()
    with pytest.raises(TaskError) as error:
        run(FakeModule(params(timeout=5)), cluster, clock=clock, sleep=clock.sleep)
    assert str(error.value) == (
        'GPU workloads of gpu-1 not gone within 5 s: ml/train: eviction held back by PodDisruptionBudget train '
        '(disruptionsAllowed 0, currentHealthy 1 of desiredHealthy 1)')
    assert error.value.result['blocked'] == {'ml/train': [
        'train (disruptionsAllowed 0, currentHealthy 1 of desiredHealthy 1)']}


def test_run_waits_for_terminating_pods_and_check_mode_does_not_wait():
    cluster = EvictionCluster([pod('going', requests={'nvidia.com/gpu': '1'}, deleting=True)])
    clock = Clock()
    with pytest.raises(TaskError) as error:
        run(FakeModule(params(timeout=3)), cluster, clock=clock, sleep=clock.sleep)
    assert str(error.value) == 'GPU workloads of gpu-1 not gone within 3 s: evicted, still terminating: ml/going'
    checked = run(FakeModule(params(), check_mode=True), cluster, clock=clock, sleep=clock.sleep)
    assert (checked['changed'], checked['terminating']) == (False, ['ml/going'])


def test_run_with_no_gpu_workload_changes_nothing():
    cluster = EvictionCluster([pod('web', requests={'cpu': '1'})])
    result = run(FakeModule(params()), cluster)
    assert (result['changed'], result['evicted'], cluster.evictions) == (False, [], [])


def test_evictions_go_on_through_a_lost_api_server_and_say_so_at_the_timeout():
    class Losing(EvictionCluster):
        lost = 2

        def list_node_pods(self, node):
            if self.lost:
                self.lost -= 1
                raise APIError('GET', '/api/v1/pods', None, 'cannot reach the API server', fault='refused')
            return super(Losing, self).list_node_pods(node)
    cluster = Losing([pod('train', requests={'nvidia.com/gpu': '1'})])
    clock = Clock()
    result = run(FakeModule(params()), cluster, clock=clock, sleep=clock.sleep)
    assert result['evicted'] == ['ml/train'] and cluster.lost == 0
    cluster = Losing([pod('train', requests={'nvidia.com/gpu': '1'})])
    cluster.lost, clock = 1000, Clock()
    with pytest.raises(TaskError, match=r'^GPU workloads of gpu-1 not gone within 3 s: unknown; the API server was '
                                        r'unreachable for 3 s of the wait \(last: GET /api/v1/pods: cannot reach'):
        run(FakeModule(params(timeout=3)), cluster, clock=clock, sleep=clock.sleep)


def allocated_claim(name, driver, admin_access=None):
    result = {'request': 'gpu', 'driver': driver, 'pool': 'gpu-1', 'device': 'gpu-0'}
    if admin_access is not None:
        result['adminAccess'] = admin_access
    return {'metadata': {'name': name, 'namespace': 'ml'}, 'status': {'allocation': {'devices': {'results': [result]}}}}


def test_pods_holding_claims_of_nvidia_gpus_are_gpu_workloads_and_others_are_not():
    trainer = pod('trainer')
    trainer['spec']['resourceClaims'] = [{'name': 'gpu', 'resourceClaimTemplateName': 'one-gpu'}]
    trainer['status']['resourceClaimStatuses'] = [{'name': 'gpu', 'resourceClaimName': 'trainer-gpu-x'}]
    nic_user = pod('nic-user')
    nic_user['spec']['resourceClaims'] = [{'name': 'nic', 'resourceClaimName': 'a-nic'}]
    cluster = EvictionCluster([trainer, nic_user, pod('web')], claims=[
        allocated_claim('trainer-gpu-x', 'gpu.nvidia.com'), allocated_claim('a-nic', 'nic.example.com')])
    result = run(FakeModule(params()), cluster, clock=Clock(), sleep=lambda seconds: None)
    assert (result['evicted'], cluster.evictions) == (['ml/trainer'], ['ml/trainer'])
    assert eviction_plan([trainer], gpu_claims=frozenset(['ml/trainer-gpu-x']))['evict'] == [trainer]
    assert eviction_plan([trainer])['evict'] == []


def test_a_claim_of_gpus_with_admin_access_makes_no_gpu_workload():
    """The node agents' claims (GFD, DCGM) see GPUs others use and keep them from no one: not evicted for them (as the
    GPU Operator's PodHasNVIDIAGPUClaim without admin access), unlike a claim allocated without admin access."""
    monitor, trainer = pod('monitor'), pod('trainer')
    for holder, claim_name in ((monitor, 'monitor-gpus-x'), (trainer, 'trainer-gpu-x')):
        holder['spec']['resourceClaims'] = [{'name': 'gpus', 'resourceClaimTemplateName': 'admin'}]
        holder['status']['resourceClaimStatuses'] = [{'name': 'gpus', 'resourceClaimName': claim_name}]
    cluster = EvictionCluster([monitor, trainer], claims=[
        allocated_claim('monitor-gpus-x', 'gpu.nvidia.com', admin_access=True),
        allocated_claim('trainer-gpu-x', 'gpu.nvidia.com', admin_access=False)])
    result = run(FakeModule(params()), cluster, clock=Clock(), sleep=lambda seconds: None)
    assert (result['evicted'], result['spared'], cluster.evictions) == (['ml/trainer'], [], ['ml/trainer'])
