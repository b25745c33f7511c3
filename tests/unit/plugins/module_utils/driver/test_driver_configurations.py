# -*- coding: utf-8 -*-
"""Named driver configurations: which configuration owns each GPU node, the refusals upstream makes, the DaemonSets
each gets (names, node selection, settings), and what the driver_daemonsets module writes for owners and moves."""

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.driver.configurations import (
    NEXT_OWNER_LABEL, OWNER_LABEL, configuration_specs, node_owners, owner_changes)
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.daemonsets import run
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.names import PlanError, configuration_daemonset_name
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.upgrade_plan import configuration_plan
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.errors import TaskError
from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.facts import node_facts
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver.role_template import (
    TEMPLATE, desired_driver_daemonsets)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.fakes import FakeCluster, FakeModule
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.node_dicts import RHCOS_416, rhcos_node

SPEC = {'namespace': 'gpu', 'repository': 'nvcr.io/nvidia', 'version': '570.172.08', 'env': [{'name': 'A', 'value': '1'}]}
POOL = 'example.com/pool'
A100 = {'name': 'a100', 'node_selector': {POOL: 'a100'}, 'version': '570.195.03', 'kernel_module_type': 'proprietary'}
B200 = {'name': 'b200', 'node_affinity': {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': [
    {'matchExpressions': [{'key': POOL, 'operator': 'In', 'values': ['b200']}]}]}},
    'version': '595.91.07', 'kernel_module_type': 'open', 'env': [{'name': 'A', 'value': '2'}]}
DEPLOY = {'nvidia.com/gpu.deploy.driver': 'true'}
DTK_416 = 'quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:' + 'a' * 64
DTK = {RHCOS_416: {'image': DTK_416, 'source': 'imagestream', 'status': 'resolved', 'history': [], 'message': ''}}


def node(name, pool=None, owner=None, next_owner=None):
    labels = dict(DEPLOY)
    for key, value in ((POOL, pool), (OWNER_LABEL, owner), (NEXT_OWNER_LABEL, next_owner)):
        if value:
            labels[key] = value
    return rhcos_node(name, extra=labels)


def facts(*nodes):
    return [node_facts(item) for item in nodes]


def plan(configurations, *nodes):
    return desired_driver_daemonsets(SPEC, facts(*nodes), DTK, 'rhcos',
                                     configurations=configurations)


def test_a_selecting_configuration_wins_over_the_default_and_the_rest_fall_back_to_it():
    specs = configuration_specs(SPEC, [A100, B200])
    owners = node_owners(specs, facts(node('w1', 'a100'), node('w2', 'b200'), node('w3', 'other'), node('w4')))
    assert owners == {'w1': 'a100', 'w2': 'b200', 'w3': 'default', 'w4': 'default'}
    # Without a default of its own the common settings are the default configuration, planned last.
    assert [(entry['name'], entry['default']) for entry in specs] == [('a100', False), ('b200', False),
                                                                      ('default', True)]


def test_a_configuration_states_only_what_differs_from_the_common_settings():
    spec = configuration_specs(SPEC, [B200], {'gds': 'nvcr.io/nvidia/cloud-native/nvidia-fs:2.29.4'})[0]['spec']
    assert spec['version'] == '595.91.07' and spec['repository'] == 'nvcr.io/nvidia'
    assert spec['env'] == [{'name': 'A', 'value': '1'}, {'name': 'A', 'value': '2'}]
    with_gds = configuration_specs(SPEC, [dict(A100, gds=True)], {'gds': 'fs:2.29.4'})[0]['spec']
    assert with_gds['gds_image'] == 'fs:2.29.4'
    precompiled = configuration_specs(SPEC, [dict(A100, use_precompiled=True, version='570')])[0]['spec']
    assert precompiled['branch'] == '570'


@pytest.mark.parametrize('configurations, message', [
    ([A100, dict(B200, node_selector={POOL: 'a100'}, node_affinity=None)],
     'node w1 is selected by driver configurations a100, b200'),
    ([dict(A100, node_selector=None, default=True), dict(B200, node_affinity=None, default=True, name='base')],
     'driver configurations a100, base are all default'),
    ([dict(A100, node_selector={OWNER_LABEL: 'a100'})],
     'driver configuration a100 selects nodes by nvidia.com/gpu-operator.driver.owner'),
    ([dict(A100, default=True)], 'driver configuration a100 is the default and has a node selection'),
    ([dict(A100, node_selector=None)], 'driver configuration a100 selects no node'),
    ([A100, dict(B200, name='a100')], 'two driver configurations are named a100'),
    ([dict(A100, name='A100')], "driver configuration 'A100': a name is 1-30 lower-case alphanumerics"),
])
def test_what_upstream_refuses_is_refused_naming_nodes_and_configurations(configurations, message):
    with pytest.raises(PlanError) as error:
        plan(configurations, node('w1', 'a100'), node('w2'))
    assert message in str(error.value)


def test_each_configuration_gets_its_own_daemonsets_selecting_its_nodes_and_the_default_keeps_its_names():
    result = plan([A100, B200], node('w1', 'a100'), node('w2', 'b200'), node('w3'))
    by_name = dict((ds['metadata']['name'], ds) for ds in result['desired'])
    assert sorted(by_name) == ['nvidia-driver-daemonset-' + RHCOS_416, 'nvidia-gpu-driver-a100-' + RHCOS_416,
                               'nvidia-gpu-driver-b200-' + RHCOS_416]
    for name, owner, image in (('nvidia-gpu-driver-a100-', 'a100', '570.195.03'),
                               ('nvidia-gpu-driver-b200-', 'b200', '595.91.07'),
                               ('nvidia-driver-daemonset-', 'default', '570.172.08')):
        pod = by_name[name + RHCOS_416]['spec']['template']['spec']
        assert pod['nodeSelector'][OWNER_LABEL] == owner
        driver = [c for c in pod['containers'] if c['name'] == 'nvidia-driver-ctr'][0]
        assert driver['image'] == 'nvcr.io/nvidia/driver:%s-rhcos4.16' % image
    env = dict((e['name'], e.get('value')) for c in by_name['nvidia-gpu-driver-b200-' + RHCOS_416]['spec'][
        'template']['spec']['containers'] if c['name'] == 'nvidia-driver-ctr' for e in c['env'])
    assert (env['KERNEL_MODULE_TYPE'], env['OPEN_KERNEL_MODULES_ENABLED'], env['A']) == ('open', 'true', '2')
    assert result['owners'] == {'w1': 'a100', 'w2': 'b200', 'w3': 'default'}


def test_a_long_name_is_cut_and_ended_with_a_hash_so_that_two_pools_never_share_one():
    long_one = configuration_daemonset_name('a' * 30, '418.94.202509100653-0')
    other = configuration_daemonset_name('a' * 30, '418.94.202509100653-1')
    assert len(long_one) <= 63 and long_one != other


def test_unowned_nodes_are_labelled_moved_nodes_are_marked_and_a_cancelled_move_is_unmarked():
    owners = {'w1': 'a100', 'w2': 'a100', 'w3': 'default', 'w4': 'default'}
    changes = owner_changes(owners, facts(node('w1'), node('w2', owner='default'), node('w3', owner='default'),
                                          node('w4', owner='default', next_owner='a100')))
    assert changes == {'label': {'w1': 'a100'}, 'move': {'w2': {'from': 'default', 'to': 'a100'}}, 'settled': ['w4']}


def test_the_module_labels_owners_before_the_daemonsets_and_leaves_a_move_to_the_rollout():
    cluster = FakeCluster(nodes=[node('w1', 'a100'), node('w2', 'a100', owner='default'), node('w3', owner='default')])
    module = FakeModule({'namespace': 'gpu', 'state': 'present', 'mode': 'rhcos', 'driver': dict(SPEC), 'nodes': None,
                         'label_selector': None, 'page_size': 500, 'dtk_images': {RHCOS_416: DTK_416},
                         'dtk_overrides': {}, 'precompiled_available': None, 'precompiled_registry_check': None,
                         'prepare_versions': [], 'allow_blocked': False, 'allow_downgrade': False,
                         'refuse_outdated': False, 'plan_only': False, 'wait': None, 'daemonset_template': TEMPLATE,
                         'configurations': [A100], 'gpudirect_images': {}})
    result = run(module, cluster)
    assert result['moves'] == {'w2': {'from': 'default', 'to': 'a100'}}
    assert cluster.writes[:2] == [('PATCH', 'w1'), ('PATCH', 'w2')]
    labels = dict((name, n['metadata']['labels']) for name, n in cluster.nodes.items())
    assert labels['w1'][OWNER_LABEL] == 'a100'
    # w2 keeps its owner, and so its driver pod, until the rollout moves it.
    assert (labels['w2'][OWNER_LABEL], labels['w2'][NEXT_OWNER_LABEL]) == ('default', 'a100')
    assert OWNER_LABEL in labels['w3'] and NEXT_OWNER_LABEL not in labels['w3']
    again = run(module, cluster)
    assert again['owner_labelled'] == [] and not again['changed']


def test_a_refusal_writes_nothing():
    cluster = FakeCluster(nodes=[node('w1', 'a100')])
    module = FakeModule({'namespace': 'gpu', 'state': 'present', 'mode': 'rhcos', 'driver': dict(SPEC), 'nodes': None,
                         'label_selector': None, 'page_size': 500, 'dtk_images': {RHCOS_416: DTK_416},
                         'dtk_overrides': {}, 'precompiled_available': None, 'precompiled_registry_check': None,
                         'prepare_versions': [], 'allow_blocked': False, 'allow_downgrade': False,
                         'refuse_outdated': False, 'plan_only': False, 'wait': None, 'daemonset_template': TEMPLATE,
                         'configurations': [A100, dict(A100, name='other')], 'gpudirect_images': {}})
    with pytest.raises(TaskError) as error:
        run(module, cluster)
    assert 'node w1 is selected by driver configurations a100, other' in str(error.value)
    assert cluster.writes == []


def rollout_state(name, configuration, outdated=True):
    return {'name': name, 'configuration': configuration, 'state': '', 'skip': False, 'remediation': '',
            'outdated': outdated, 'available': True, 'revision_known': True}


def test_each_configuration_rolls_out_within_its_own_budget():
    states = [rollout_state('a1', 'a100'), rollout_state('a2', 'a100'), rollout_state('d1', 'default'),
              rollout_state('d2', 'default'), rollout_state('d3', 'default', outdated=False)]
    merged = configuration_plan(states, {'a100': {'max_parallel': 2, 'max_unavailable': 2}}, 1, 1)
    assert merged['wave'] == ['a1', 'a2', 'd1']
    assert merged['waves'] == [['a1', 'a2', 'd1'], ['d2']]
    assert merged['budgets'] == {'a100': {'total': 2, 'budget': 2}, 'default': {'total': 3, 'budget': 1}}


def test_the_image_list_has_every_configurations_images_and_no_other():
    """What roles/common/tasks/image_list.yml reads (plan_only): the driver images of each configuration's
    DaemonSets, and the GPUDirect image of the configuration that has it."""
    cluster = FakeCluster(nodes=[node('w1', 'a100'), node('w2', 'b200'), node('w3')])
    module = FakeModule({'namespace': 'gpu', 'state': 'present', 'mode': 'rhcos', 'driver': dict(SPEC), 'nodes': None,
                         'label_selector': None, 'page_size': 500, 'dtk_images': {RHCOS_416: DTK_416},
                         'dtk_overrides': {}, 'precompiled_available': None, 'precompiled_registry_check': None,
                         'prepare_versions': [], 'allow_blocked': False, 'allow_downgrade': False,
                         'refuse_outdated': False, 'plan_only': True, 'wait': None, 'daemonset_template': TEMPLATE,
                         'configurations': [A100, dict(B200, gds=True)],
                         'gpudirect_images': {'gds': 'nvcr.io/nvidia/cloud-native/nvidia-fs:2.29.4'}})
    images = run(module, cluster)['images']
    assert sorted(image for image in images if 'driver:' in image or 'nvidia-fs' in image) == [
        'nvcr.io/nvidia/cloud-native/nvidia-fs:2.29.4-rhcos4.16', 'nvcr.io/nvidia/driver:570.172.08-rhcos4.16',
        'nvcr.io/nvidia/driver:570.195.03-rhcos4.16', 'nvcr.io/nvidia/driver:595.91.07-rhcos4.16']
    assert cluster.writes == []
