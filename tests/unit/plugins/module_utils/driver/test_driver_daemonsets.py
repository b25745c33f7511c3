# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.driver.daemonsets import given_dtk_images, given_node_facts, run
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.errors import APIError, TaskError
from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.facts import node_facts
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver.role_template import TEMPLATE, desired_driver_daemonsets
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.fakes import FakeCluster, FakeModule
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.node_dicts import (
    KERNEL_418, RHCOS_416, RHCOS_418, rhcos_node, ubuntu_node)

DTK_416 = 'quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:' + 'a' * 64
DTK_418 = 'quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:' + 'c' * 64
DS_416 = 'nvidia-driver-daemonset-' + RHCOS_416
DS_418 = 'nvidia-driver-daemonset-' + RHCOS_418
DRIVER = {'repository': 'nvcr.io/nvidia', 'version': '550.90.07', 'image': None, 'env': None}
# Deploy-labelled, and owned by the default driver configuration as a first run labels them.
LABELLED = {'nvidia.com/gpu.deploy.driver': 'true', 'nvidia.com/gpu-operator.driver.owner': 'default'}


def params(**overrides):
    base = {'namespace': 'gpu', 'state': 'present', 'mode': 'rhcos', 'driver': dict(DRIVER), 'nodes': None,
            'label_selector': None, 'page_size': 500, 'dtk_images': None, 'dtk_overrides': {}, 'precompiled_available': None,
            'precompiled_registry_check': None, 'prepare_versions': [], 'allow_blocked': False, 'allow_downgrade': False,
            'refuse_outdated': False,
            'plan_only': False, 'wait': None, 'daemonset_template': TEMPLATE, 'configurations': None,
            'gpudirect_images': {}}
    base.update(overrides)
    return base


def stream(*tags):
    return {'spec': {'tags': [{'name': name, 'from': {'kind': 'DockerImage', 'name': image}} for name, image in tags]}}


def node_418(name):
    return rhcos_node(name, rhcos=RHCOS_418, kernel=KERNEL_418, ocp='4.18', extra=LABELLED)


def existing_daemonset(rhcos, pods):
    """The DaemonSet a previous run made for rhcos, as read back with `pods` scheduled pods."""
    node = rhcos_node('x', rhcos=rhcos)
    dtk = {rhcos: {'status': 'resolved', 'image': DTK_416, 'message': ''}}
    daemonset = desired_driver_daemonsets(dict(DRIVER, namespace='gpu', image=None, env=None),
                                          [node_facts(node)], dtk, 'rhcos')['desired'][0]
    daemonset['metadata'].update(uid='uid-old', resourceVersion='7')
    daemonset['status'] = {'desiredNumberScheduled': pods, 'currentNumberScheduled': pods, 'numberMisscheduled': 0}
    return daemonset


def test_nodes_may_be_node_objects_or_nfd_labels_facts():
    node = rhcos_node('w1')
    facts = given_node_facts([node, node_facts(rhcos_node('w2'))])
    assert [f['name'] for f in facts] == ['w1', 'w2'] and facts[0]['rhcos_version'] == RHCOS_416
    with pytest.raises(TaskError) as error:
        given_node_facts([node, {'name': 'w3', 'labels': {}}])
    assert str(error.value).startswith('nodes[1] is neither a Node object (no metadata) nor node facts from '
                                       'nfd_labels (no gpu_present, deploy_labels')


def test_dtk_images_may_be_lookup_results_or_plain_references():
    entries = given_dtk_images({RHCOS_416: DTK_416, RHCOS_418: {'status': 'missing', 'image': None, 'message': 'no'}})
    assert (entries[RHCOS_416]['status'], entries[RHCOS_416]['image']) == ('resolved', DTK_416)
    assert entries[RHCOS_418]['status'] == 'missing'
    with pytest.raises(TaskError) as error:
        given_dtk_images({RHCOS_416: {'status': 'resolved', 'image': None}})
    assert str(error.value) == 'dtk_images[%s] is resolved but has no image' % RHCOS_416


def test_first_run_creates_second_changes_nothing():
    cluster = FakeCluster([rhcos_node('w1', extra=LABELLED), node_418('w3')],
                          imagestream=stream((RHCOS_416, DTK_416), (RHCOS_418, DTK_418)))
    first = run(FakeModule(params(), diff=True), cluster)
    assert (first['changed'], first['created'], first['deleted']) == (True, [DS_416, DS_418], [])
    assert [(d['before'], d['after']['metadata']['name']) for d in first['diff']] == [({}, DS_416), ({}, DS_418)]
    assert 'uid' not in first['diff'][0]['after']['metadata']
    assert first['assignments']['w3']['dtk_image'] == DTK_418
    second = run(FakeModule(params(), diff=True), cluster)
    assert (second['changed'], second['unchanged'], second['diff']) == (False, [DS_416, DS_418], [])
    assert cluster.writes == [('APPLY', DS_416), ('APPLY', DS_418)]

    assert second['upgrade_in_progress'] == []


def test_nodes_left_mid_rollout_are_named_for_the_rollout_to_resume():
    state = 'nvidia.com/gpu-driver-upgrade-state'
    cluster = FakeCluster([rhcos_node('w1', extra=dict(LABELLED, **{state: 'upgrade-done'})),
                           rhcos_node('w2', extra=dict(LABELLED, **{state: 'validation-required'})),
                           rhcos_node('w0', extra=dict(LABELLED, **{state: 'upgrade-failed'})),
                           rhcos_node('w4', extra=dict(LABELLED, **{state: 'upgrade-required'}))],
                          imagestream=stream((RHCOS_416, DTK_416)))
    assert run(FakeModule(params()), cluster)['upgrade_in_progress'] == ['w0', 'w2']


def test_blocked_version_fails_before_any_write_and_names_the_nodes():
    cluster = FakeCluster([rhcos_node('w1', extra=LABELLED), node_418('w3'), node_418('w4')],
                          imagestream=stream((RHCOS_416, DTK_416)))
    with pytest.raises(TaskError) as error:
        run(FakeModule(params()), cluster)
    assert str(error.value).startswith(
        'driver DaemonSets left unchanged, because %s: node(s) w3, w4 would be left without a driver: RHCOS %s has no '
        'tag in image stream openshift/driver-toolkit' % (RHCOS_418, RHCOS_418))
    assert error.value.result['left_without_driver'] == ['w3', 'w4']
    assert error.value.result['plan']['created'] == [DS_416]
    assert cluster.writes == []

    module = FakeModule(params(allow_blocked=True))
    tolerated = run(module, cluster)
    assert (tolerated['created'], tolerated['left_without_driver']) == ([DS_416], ['w3', 'w4'])
    assert module.warnings[0].startswith('driver for %s blocked, node(s) w3, w4: RHCOS %s has no tag' % (
        RHCOS_418, RHCOS_418))
    assert cluster.writes == [('APPLY', DS_416)]


def test_a_change_to_an_older_driver_is_refused_before_any_write_unless_allowed():
    cluster = FakeCluster([rhcos_node('w1', extra=LABELLED), rhcos_node('w2', extra=LABELLED)],
                          imagestream=stream((RHCOS_416, DTK_416)))
    newer = dict(DRIVER, version='580.95.05')
    assert run(FakeModule(params(driver=newer)), cluster)['downgrades'] == {}
    cluster.writes.clear()
    for check_mode in (False, True):
        with pytest.raises(TaskError) as error:
            run(FakeModule(params(), check_mode=check_mode), cluster)
        assert str(error.value) == (
            'refusing to downgrade the driver from 580.95.05 to 550.90.07 on 2 GPU node(s) (w1, w2): '
            'set allow_downgrade: true to do it. Nothing was changed.')
        assert error.value.result['downgrade_refusal'] == (
            'refusing to downgrade the driver from 580.95.05 to 550.90.07 on 2 GPU node(s) (w1, w2)')
        assert sorted(error.value.result['downgrades']) == ['w1', 'w2']
        assert error.value.result['plan']['updated'] == [DS_416]
    assert cluster.writes == []
    # plan_only reports it; allow_downgrade applies it.
    assert sorted(run(FakeModule(params(plan_only=True)), cluster)['downgrades']) == ['w1', 'w2']
    allowed = run(FakeModule(params(allow_downgrade=True)), cluster)
    assert (allowed['updated'], sorted(allowed['downgrades'])) == ([DS_416], ['w1', 'w2'])
    assert cluster.writes == [('APPLY', DS_416)]


def test_stale_daemonset_is_kept_while_it_has_pods_and_deleted_when_empty():
    cluster = FakeCluster([node_418('w3')], [existing_daemonset(RHCOS_416, pods=1)],
                          imagestream=stream((RHCOS_418, DTK_418)))
    busy = run(FakeModule(params()), cluster)
    assert (busy['created'], busy['deleted'], [k['name'] for k in busy['kept']]) == ([DS_418], [], [DS_416])
    cluster.daemonsets[DS_416]['status'].update(desiredNumberScheduled=0, currentNumberScheduled=0)
    emptied = run(FakeModule(params(), diff=True), cluster)
    assert (emptied['deleted'], emptied['unchanged']) == ([DS_416], [DS_418])
    assert [(d['before']['metadata']['name'], d['after']) for d in emptied['diff']] == [(DS_416, {})]
    assert DS_416 not in cluster.daemonsets


def test_a_daemonset_changed_since_it_was_read_is_not_deleted():
    cluster = FakeCluster([node_418('w3')], [existing_daemonset(RHCOS_416, pods=0)],
                          imagestream=stream((RHCOS_418, DTK_418)))
    cluster.delete_conflicts.add(DS_416)
    result = run(FakeModule(params()), cluster)
    assert result['deleted'] == []
    assert result['kept'] == [{'name': DS_416, 'reason': (
        'not deleted: it changed since it was read (resourceVersion 7), so its pods may have changed too; run again')}]


def test_a_failed_write_says_what_was_written_before():
    cluster = FakeCluster([rhcos_node('w1', extra=LABELLED), node_418('w3')],
                          imagestream=stream((RHCOS_416, DTK_416), (RHCOS_418, DTK_418)))
    apply_daemonset = cluster.apply_daemonset

    def admission_refuses_418(daemonset):
        if daemonset['metadata']['name'] == DS_418:
            raise APIError('PATCH', DS_418, 403, 'daemonsets.apps is forbidden')
        return apply_daemonset(daemonset)
    cluster.apply_daemonset = admission_refuses_418
    with pytest.raises(TaskError) as error:
        run(FakeModule(params()), cluster)
    assert str(error.value) == ('PATCH %s: HTTP 403: daemonsets.apps is forbidden (before this failure: applied %s; '
                                'deleted none)' % (DS_418, DS_416))
    assert error.value.result['status'] == 403


def test_plan_only_writes_nothing():
    cluster = FakeCluster([node_418('w3')], [existing_daemonset(RHCOS_416, pods=0)],
                          imagestream=stream((RHCOS_418, DTK_418)))
    result = run(FakeModule(params(plan_only=True)), cluster)
    assert (result['changed'], result['created'], result['deleted']) == (False, [DS_418], [DS_416])
    assert cluster.writes == []


def test_absent_deletes_only_owned_driver_daemonsets():
    foreign = existing_daemonset(RHCOS_418, pods=1)
    del foreign['metadata']['labels']['app.kubernetes.io/managed-by']
    cluster = FakeCluster(daemonsets=[existing_daemonset(RHCOS_416, pods=2), foreign])
    planned = run(FakeModule(params(state='absent', plan_only=True)), cluster)
    assert (planned['changed'], planned['deleted'], cluster.writes) == (False, [DS_416], [])
    removed = run(FakeModule(params(state='absent')), cluster)
    assert (removed['changed'], removed['deleted']) == (True, [DS_416])
    assert sorted(cluster.daemonsets) == [DS_418]
    assert cluster.reads[-1] == ('daemonsets', 'app.kubernetes.io/managed-by=accelerators.gpu,'
                                               'app.kubernetes.io/component=nvidia-driver')


def test_image_stream_is_read_only_when_a_dtk_build_may_need_it():
    ubuntu = FakeCluster([ubuntu_node('u1', extra=LABELLED)])
    run(FakeModule(params(mode='single')), ubuntu)
    run(FakeModule(params(mode='kernel', driver=dict(DRIVER, branch='550'))), ubuntu)
    assert ('imagestream', None) not in ubuntu.reads
    given = FakeCluster([rhcos_node('w1', extra=LABELLED)])
    assert run(FakeModule(params(dtk_images={RHCOS_416: DTK_416})), given)['created'] == [DS_416]
    assert ('imagestream', None) not in given.reads


def test_plan_errors_name_object_and_field():
    cluster = FakeCluster([rhcos_node('w1', extra=LABELLED)], imagestream=stream((RHCOS_416, DTK_416)))
    with pytest.raises(TaskError) as error:
        run(FakeModule(params(driver=dict(DRIVER, labels={'team': 'x' * 64}))), cluster)
    assert str(error.value).endswith('(object %s, field metadata.labels.team)' % DS_416)


def test_prepare_versions_creates_the_target_daemonset_looking_its_dtk_up_and_keeps_it():
    target = '9.6.20260401-0'
    cluster = FakeCluster([rhcos_node('w1', extra=LABELLED)],
                          imagestream=stream((RHCOS_416, DTK_416), (target, DTK_418)))
    first = run(FakeModule(params(prepare_versions=[target])), cluster)
    assert (first['created'], first['prepared']) == ([DS_416, 'nvidia-driver-daemonset-' + target],
                                                     ['nvidia-driver-daemonset-' + target])
    again = run(FakeModule(params(prepare_versions=[target])), cluster)
    assert (again['changed'], again['deleted'], again['prepared']) == (False, [], ['nvidia-driver-daemonset-' + target])
    with pytest.raises(TaskError) as error:
        run(FakeModule(params(prepare_versions=['9.6.20260501-0'])), cluster)
    assert str(error.value).startswith('prepare_versions: RHCOS 9.6.20260501-0 has no DTK image')
    assert cluster.writes == [('APPLY', DS_416), ('APPLY', 'nvidia-driver-daemonset-' + target)]


def test_images_are_every_image_of_the_planned_daemonsets():
    cluster = FakeCluster([rhcos_node('w1', extra=LABELLED), node_418('w3')],
                          imagestream=stream((RHCOS_416, DTK_416), (RHCOS_418, DTK_418)))
    result = run(FakeModule(params(plan_only=True)), cluster)
    assert result['images'] == sorted([DTK_416, DTK_418, 'nvcr.io/nvidia/driver:550.90.07-rhcos4.16',
                                       'nvcr.io/nvidia/driver:550.90.07-rhcos4.18'])
    assert cluster.writes == []
