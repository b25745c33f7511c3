# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import copy

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.driver import plan as driver_plan
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.changes import is_subset, nodes_left_without_driver, plan_driver_changes
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.names import (
    PREPARED_ANNOTATION, PlanError, driver_daemonset_name, os_tag, precompiled_daemonset_name, precompiled_image,
    sanitize_kernel_for_name)
from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.facts import node_facts
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver.role_template import TEMPLATE, desired_driver_daemonsets
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.node_dicts import (
    KERNEL, KERNEL_416, KERNEL_418, OSTREE, RHCOS_416, RHCOS_418, layered_rhcos_node, rhcos_node, ubuntu_node)

DTK_416 = 'quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:' + 'a' * 64
DTK_418 = 'quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:' + 'c' * 64
SPEC = {'namespace': 'nvidia-gpu', 'repository': 'nvcr.io/nvidia', 'image': 'driver', 'version': '550.90.07',
        'branch': '550'}
DEPLOY_DRIVER = 'nvidia.com/gpu.deploy.driver'
# Every driver DaemonSet selects the nodes of its configuration; without configurations, the default one's.
OWNED = {'nvidia.com/gpu-operator.driver.owner': 'default'}


def resolved(image):
    return {'image': image, 'source': 'imagestream', 'status': 'resolved', 'message': 'ok', 'history': []}


DTK = {RHCOS_416: resolved(DTK_416), RHCOS_418: resolved(DTK_418)}


def node_418(name, **kwargs):
    return rhcos_node(name, rhcos=RHCOS_418, kernel=KERNEL_418, ocp='4.18', **kwargs)


def facts_of(*nodes):
    return [node_facts(node) for node in nodes]


def by_name(daemonsets):
    return dict((ds['metadata']['name'], ds) for ds in daemonsets)


def container(daemonset, name):
    return [c for c in daemonset['spec']['template']['spec']['containers'] if c['name'] == name][0]


def server_applied(daemonset, desired=1, current=1, misscheduled=0):
    """The DaemonSet as the API returns it: defaults, normalised quantities, status."""
    live = copy.deepcopy(daemonset)
    live['metadata'].update({'uid': 'u-1', 'resourceVersion': '42', 'generation': 1, 'creationTimestamp': 'x'})
    live['metadata'].setdefault('annotations', {})['deprecated.daemonset.template.generation'] = '1'
    live['spec']['revisionHistoryLimit'] = 10
    template = live['spec']['template']
    template['metadata']['creationTimestamp'] = None
    pod = template['spec']
    pod.update({'dnsPolicy': 'ClusterFirst', 'restartPolicy': 'Always', 'schedulerName': 'default-scheduler',
                'securityContext': {}, 'terminationGracePeriodSeconds': 30})
    for volume in pod['volumes']:
        if 'hostPath' in volume:
            volume['hostPath'].setdefault('type', '')
    for ctr in pod['containers']:
        ctr.update({'terminationMessagePath': '/dev/termination-log', 'terminationMessagePolicy': 'File'})
        ctr.setdefault('resources', {})
        for quantities in ctr['resources'].values():
            for key, value in quantities.items():
                quantities[key] = {'1': '1', 1: '1', '0.5': '500m', '1024Mi': '1Gi'}.get(value, value)
        for env in ctr.get('env', []):
            if 'valueFrom' in env:
                env['valueFrom']['fieldRef']['apiVersion'] = 'v1'
    live['status'] = {'desiredNumberScheduled': desired, 'currentNumberScheduled': current,
                      'numberMisscheduled': misscheduled, 'numberReady': current, 'observedGeneration': 1}
    return live


# names and limits

def test_daemonset_names_match_the_gpu_operator():
    assert driver_daemonset_name(RHCOS_416) == 'nvidia-driver-daemonset-416.94.202405081406-0'
    assert len(driver_daemonset_name(RHCOS_416)) == 45
    assert driver_daemonset_name('9.6.20260303-1') == 'nvidia-driver-daemonset-9.6.20260303-1'
    assert precompiled_daemonset_name('5.15.0-100-generic', 'ubuntu22.04') == \
        'nvidia-driver-daemonset-5.15.0-100-generic-ubuntu22.04'
    assert precompiled_daemonset_name('5.14.0-427.37.1.el9_4.x86_64', 'rhcos4.16') == \
        'nvidia-driver-daemonset-5.14.0-427.37.1.el9.4-rhcos4.16'


@pytest.mark.parametrize('kernel, expected', [
    ('5.14.0-427.37.1.el9_4.aarch64_64k', '5.14.0-427.37.1.el9.4'),
    ('5.14.0-427.37.1.el9_4.aarch64', '5.14.0-427.37.1.el9.4'),
    ('5.14.0-427.37.1.el9_4.x86_64_64k', '5.14.0-427.37.1.el9.4'),
    ('5.14.0-427.37.1.el9_4.x86_64', '5.14.0-427.37.1.el9.4'),
    ('5.14.0-427.33.1.el9_4.x86_64_rt', '5.14.0-427.33.1.el9.4.rt'),
    ('5.15.0-100-generic', '5.15.0-100-generic'),
])
def test_sanitize_kernel_for_name(kernel, expected):
    assert sanitize_kernel_for_name(kernel) == expected


def test_name_longer_than_63_is_a_plan_error():
    version = '416.94.' + '2' * 40 + '-0'
    with pytest.raises(PlanError) as error:
        driver_daemonset_name(version)
    assert error.value.field == 'metadata.name'
    assert error.value.obj == 'nvidia-driver-daemonset-' + version
    assert '73 characters' in str(error.value)


def test_name_of_exactly_63_is_fine():
    version = '4.1.' + '1' * 33 + '-0'
    assert len(driver_daemonset_name(version)) == 63


def test_extra_label_value_too_long_is_a_plan_error():
    spec = dict(SPEC, labels={'team': 'x' * 64})
    with pytest.raises(PlanError) as error:
        desired_driver_daemonsets(spec, facts_of(rhcos_node('w1')), DTK, 'rhcos')
    assert error.value.field == 'metadata.labels.team'
    assert error.value.obj == 'nvidia-driver-daemonset-' + RHCOS_416


def test_precompiled_image_reference():
    assert precompiled_image('nvcr.io/nvidia', 'driver', '535', '5.15.0-100-generic', 'ubuntu22.04') == \
        'nvcr.io/nvidia/driver:535-5.15.0-100-generic-ubuntu22.04'
    with pytest.raises(PlanError) as error:
        precompiled_image('nvcr.io/nvidia', 'driver', '535', 'k' * 130, 'ubuntu22.04')
    assert error.value.field == 'tag'


def test_os_tag_per_os_generation():
    assert os_tag(node_facts(ubuntu_node('u1'))) == 'ubuntu22.04'
    assert os_tag(node_facts(node_418('w1'))) == 'rhcos4.18'
    assert os_tag(node_facts(layered_rhcos_node('w2'))) == 'rhel9.6'
    no_os = rhcos_node('w3')
    del no_os['metadata']['labels']['feature.node.kubernetes.io/system-os_release.ID']
    assert os_tag(node_facts(no_os)) is None


# rhcos mode

def test_rhcos_mode_mixed_cluster_gets_one_daemonset_per_version():
    nodes = facts_of(rhcos_node('w1'), rhcos_node('w2'), node_418('w3'), rhcos_node('cpu', gpu=False))
    plan = desired_driver_daemonsets(SPEC, nodes, DTK, 'rhcos')
    assert plan['blocked'] == [] and plan['mismatched'] == [] and plan['warnings'] == []
    daemonsets = by_name(plan['desired'])
    name = 'nvidia-driver-daemonset-' + RHCOS_416
    assert sorted(daemonsets) == [name, 'nvidia-driver-daemonset-' + RHCOS_418]
    ds = daemonsets[name]
    labels = {'app': name, 'app.kubernetes.io/component': 'nvidia-driver',
              'app.kubernetes.io/managed-by': 'accelerators.gpu', 'openshift.driver-toolkit': 'true',
              'openshift.driver-toolkit.rhcos': RHCOS_416, 'nvidia.com/precompiled': 'false'}
    assert ds['metadata'] == {'name': name, 'namespace': 'nvidia-gpu', 'labels': labels}
    assert ds['spec']['selector'] == {'matchLabels': {'app': name}}
    assert ds['spec']['updateStrategy'] == {'type': 'OnDelete'}
    assert ds['spec']['template']['metadata']['labels'] == labels
    pod = ds['spec']['template']['spec']
    assert pod['nodeSelector'] == {OSTREE: RHCOS_416, DEPLOY_DRIVER: 'true', **OWNED}
    assert 'nodeAffinity' not in pod['affinity']
    driver = container(ds, 'nvidia-driver-ctr')
    assert driver['image'] == 'nvcr.io/nvidia/driver:550.90.07-rhcos4.16'
    assert driver['command'] == ['ocp_dtk_entrypoint'] and driver['args'] == ['nv-ctr-run-with-dtk']
    assert driver['securityContext']['privileged'] is True
    probe = driver['startupProbe']
    assert probe['initialDelaySeconds'] + probe['failureThreshold'] * probe['periodSeconds'] == 1260
    dtk = container(ds, 'openshift-driver-toolkit-ctr')
    assert dtk['image'] == DTK_416
    assert dtk['command'] == ['bash', '-xc']
    assert dtk['args'] == ['until [ -f /mnt/shared-nvidia-driver-toolkit/dir_prepared ]; do sleep 10; done; '
                           'exec /mnt/shared-nvidia-driver-toolkit/ocp_dtk_entrypoint dtk-build-driver']
    assert {'name': 'RHCOS_VERSION', 'value': RHCOS_416} in dtk['env']
    assert dtk['securityContext']['privileged'] is True
    shared = {'name': 'shared-nvidia-driver-toolkit', 'mountPath': '/mnt/shared-nvidia-driver-toolkit'}
    assert shared in driver['volumeMounts'] and shared in dtk['volumeMounts']
    assert {'name': 'shared-nvidia-driver-toolkit', 'emptyDir': {}} in pod['volumes']
    assert plan['assignments'] == {
        'w1': {'daemonset': name, 'build': 'dtk', 'image': driver['image'], 'dtk_image': DTK_416},
        'w2': {'daemonset': name, 'build': 'dtk', 'image': driver['image'], 'dtk_image': DTK_416},
        'w3': {'daemonset': 'nvidia-driver-daemonset-' + RHCOS_418, 'build': 'dtk',
               'image': 'nvcr.io/nvidia/driver:550.90.07-rhcos4.18', 'dtk_image': DTK_418},
    }


def test_rhcos_mode_layered_rhcos_uses_rhel_os_tag():
    dtk = {'9.6.20260303-1': resolved(DTK_418)}
    plan = desired_driver_daemonsets(SPEC, facts_of(layered_rhcos_node('w1')), dtk, 'rhcos')
    ds = plan['desired'][0]
    assert ds['metadata']['name'] == 'nvidia-driver-daemonset-9.6.20260303-1'
    assert container(ds, 'nvidia-driver-ctr')['image'] == 'nvcr.io/nvidia/driver:550.90.07-rhel9.6'


def test_rhcos_mode_spec_is_applied():
    spec = dict(SPEC, image_ref='mirror.local/nvidia/driver@sha256:' + 'e' * 64, image_pull_secrets=['pull'],
                env=[{'name': 'NODE_NAME', 'value': 'override'}, {'name': 'X', 'value': '1'}],
                resources={'limits': {'memory': '4Gi'}}, tolerations=[], labels={'team': 'ml'},
                annotations={'owner': 'ml'}, node_selector={'node-role.kubernetes.io/gpu': ''},
                priority_class_name='high', service_account_name='sa')
    ds = desired_driver_daemonsets(spec, facts_of(rhcos_node('w1')), DTK, 'rhcos')['desired'][0]
    pod = ds['spec']['template']['spec']
    driver = container(ds, 'nvidia-driver-ctr')
    assert driver['image'] == 'mirror.local/nvidia/driver@sha256:' + 'e' * 64
    # The digest of the install settings (test_driver_digest) comes last.
    assert driver['env'][:-1] == [{'name': 'NODE_NAME', 'value': 'override'},
                                  {'name': 'NODE_IP', 'valueFrom': {'fieldRef': {'fieldPath': 'status.hostIP'}}},
                                  {'name': 'X', 'value': '1'}]
    assert driver['env'][-1]['name'] == 'DRIVER_CONFIG_DIGEST'
    assert driver['resources'] == {'limits': {'memory': '4Gi'}}
    assert pod['imagePullSecrets'] == [{'name': 'pull'}]
    assert pod['tolerations'] == []
    assert pod['priorityClassName'] == 'high' and pod['serviceAccountName'] == 'sa'
    assert pod['nodeSelector'] == {'node-role.kubernetes.io/gpu': '', OSTREE: RHCOS_416, DEPLOY_DRIVER: 'true', **OWNED}
    assert ds['metadata']['labels']['team'] == 'ml'
    assert ds['metadata']['annotations'] == {'owner': 'ml'}
    assert ds['spec']['template']['metadata']['annotations']['owner'] == 'ml'


def test_missing_dtk_blocks_that_version_only():
    missing = {'image': None, 'source': None, 'status': 'missing', 'history': [],
               'message': 'RHCOS %s has no tag in image stream openshift/driver-toolkit' % RHCOS_418}
    nodes = facts_of(rhcos_node('w1'), node_418('w3'), node_418('w4'))
    plan = desired_driver_daemonsets(SPEC, nodes, {RHCOS_416: resolved(DTK_416), RHCOS_418: missing}, 'rhcos')
    assert [ds['metadata']['name'] for ds in plan['desired']] == ['nvidia-driver-daemonset-' + RHCOS_416]
    assert plan['blocked'] == [{'key': RHCOS_418, 'nodes': ['w3', 'w4'], 'reason': missing['message']}]
    assert plan['assignments']['w3'] == {'daemonset': None, 'build': 'blocked', 'reason': missing['message']}


def test_version_never_looked_up_is_blocked():
    plan = desired_driver_daemonsets(SPEC, facts_of(node_418('w3')), {}, 'rhcos')
    assert plan['desired'] == []
    assert plan['blocked'][0]['reason'] == 'RHCOS %s was not looked up in the DTK image stream' % RHCOS_418


def test_non_rhcos_node_in_rhcos_mode_is_blocked():
    plan = desired_driver_daemonsets(SPEC, facts_of(ubuntu_node('u1')), DTK, 'rhcos')
    assert plan['blocked'][0]['key'] == 'unknown' and plan['blocked'][0]['nodes'] == ['u1']


def test_stale_ostree_label_groups_by_os_image_and_reports_the_node():
    nodes = facts_of(node_418('w3'), node_418('w4', label_rhcos=RHCOS_416))
    plan = desired_driver_daemonsets(SPEC, nodes, DTK, 'rhcos')
    assert [ds['metadata']['name'] for ds in plan['desired']] == ['nvidia-driver-daemonset-' + RHCOS_418]
    assert plan['assignments']['w4']['daemonset'] == 'nvidia-driver-daemonset-' + RHCOS_418
    assert len(plan['mismatched']) == 1
    mismatch = plan['mismatched'][0]
    assert (mismatch['node'], mismatch['label'], mismatch['effective']) == ('w4', RHCOS_416, RHCOS_418)
    assert 'DaemonSet nvidia-driver-daemonset-%s selects it' % RHCOS_416 in mismatch['message']
    assert 'build against the DTK of %s' % RHCOS_416 in mismatch['message']
    assert plan['warnings'] == [mismatch['message']]


def test_driver_image_os_tag_of_an_rhcos_build_comes_from_the_build_alone():
    # Booted into 4.18, NFD has not relabelled it: every os-release label still says 4.16.
    just_booted = rhcos_node('w0', rhcos=RHCOS_418, kernel=KERNEL_418, label_rhcos=RHCOS_416, ocp='4.16')
    alone = desired_driver_daemonsets(SPEC, facts_of(just_booted), DTK, 'rhcos')
    assert container(alone['desired'][0], 'nvidia-driver-ctr')['image'] == 'nvcr.io/nvidia/driver:550.90.07-rhcos4.18'
    # Beside a node NFD relabelled, in either order; and one NFD relabelled only in part (OSTREE_VERSION first).
    part = node_418('w2')
    part['metadata']['labels']['feature.node.kubernetes.io/system-os_release.VERSION_ID'] = '4.16'
    for nodes in ((just_booted, node_418('w1'), part), (part, node_418('w1'), just_booted)):
        plan = desired_driver_daemonsets(SPEC, facts_of(*nodes), DTK, 'rhcos')
        assert set(entry['image'] for entry in plan['assignments'].values()) == {
            'nvcr.io/nvidia/driver:550.90.07-rhcos4.18'}
    # A layered build (OpenShift >= 4.19) and a node without os-release labels at all.
    layered = layered_rhcos_node('l0')
    bare = rhcos_node('b0')
    for key in list(bare['metadata']['labels']):
        if 'os_release.ID' in key or 'VERSION_ID' in key:
            del bare['metadata']['labels'][key]
    plan = desired_driver_daemonsets(SPEC, facts_of(layered, bare), dict(DTK, **{'9.6.20260303-1': resolved(DTK_418)}),
                                     'rhcos')
    assert {node: entry['image'] for node, entry in plan['assignments'].items()} == {
        'l0': 'nvcr.io/nvidia/driver:550.90.07-rhel9.6', 'b0': 'nvcr.io/nvidia/driver:550.90.07-rhcos4.16'}


def test_opted_out_and_host_driver_nodes_get_no_daemonset():
    nodes = facts_of(
        rhcos_node('host', extra={DEPLOY_DRIVER: 'pre-installed'}),
        rhcos_node('off', extra={DEPLOY_DRIVER: 'false'}),
        rhcos_node('kill', extra={'nvidia.com/gpu.deploy.operands': 'false', DEPLOY_DRIVER: 'true'}),
        node_418('w3', extra={DEPLOY_DRIVER: 'true'}))
    plan = desired_driver_daemonsets(SPEC, nodes, DTK, 'rhcos')
    assert [ds['metadata']['name'] for ds in plan['desired']] == ['nvidia-driver-daemonset-' + RHCOS_418]
    assert plan['assignments']['host'] == {
        'daemonset': None, 'build': 'host', 'reason': 'nvidia.com/gpu.deploy.driver=pre-installed'}
    assert plan['assignments']['off'] == {
        'daemonset': None, 'build': 'none', 'reason': 'nvidia.com/gpu.deploy.driver=false'}
    assert plan['assignments']['kill'] == {
        'daemonset': None, 'build': 'none', 'reason': 'nvidia.com/gpu.deploy.operands=false'}


def test_unknown_mode_and_missing_spec_fields_are_plan_errors():
    with pytest.raises(PlanError) as error:
        desired_driver_daemonsets(SPEC, [], DTK, 'per-node')
    assert error.value.field == 'mode'
    with pytest.raises(PlanError) as error:
        desired_driver_daemonsets({'namespace': 'n'}, [], DTK, 'kernel')
    assert error.value.field == 'repository'


def test_a_template_that_does_not_render_is_a_plan_error_naming_the_daemonset():
    undefined = TEMPLATE.replace('- name: nvidia-driver-ctr\n          image: {{ image | to_json }}',
                                 '- name: nvidia-driver-ctr\n          image: {{ driver_image }}')
    assert undefined != TEMPLATE
    with pytest.raises(PlanError) as error:
        driver_plan.desired_driver_daemonsets(undefined, SPEC, facts_of(rhcos_node('w1')), DTK, 'rhcos')
    assert (error.value.obj, error.value.field) == ('nvidia-driver-daemonset-' + RHCOS_416, 'daemonset_template')
    assert str(error.value) == "daemonset_template: 'driver_image' is undefined"
    with pytest.raises(PlanError) as error:
        driver_plan.desired_driver_daemonsets(TEMPLATE + '{% endif %}', SPEC, [], DTK, 'rhcos')
    assert (error.value.obj, error.value.field) == ('driver DaemonSet template', 'daemonset_template')
    assert str(error.value).startswith('daemonset_template, line %d: ' % (TEMPLATE.count('\n') + 1))


# kernel mode

def test_kernel_mode_precompiled_with_dtk_fallback_and_blocked_ubuntu():
    rt_kernel = KERNEL_416 + '+rt'
    nodes = facts_of(rhcos_node('w1'), rhcos_node('rt1', kernel=rt_kernel), ubuntu_node('u1'),
                     ubuntu_node('u2', kernel='6.8.0-45-generic', version='24.04'))
    have = 'nvcr.io/nvidia/driver:550-%s-rhcos4.16' % KERNEL_416
    available = {have: True, 'nvcr.io/nvidia/driver:550-6.8.0-45-generic-ubuntu24.04': True}
    plan = desired_driver_daemonsets(SPEC, nodes, DTK, 'kernel', available)
    daemonsets = by_name(plan['desired'])
    precompiled = 'nvidia-driver-daemonset-5.14.0-427.33.1.el9.4-rhcos4.16'
    fallback = 'nvidia-driver-daemonset-' + RHCOS_416
    ubuntu = 'nvidia-driver-daemonset-6.8.0-45-generic-ubuntu24.04'
    assert sorted(daemonsets) == sorted([precompiled, fallback, ubuntu])
    ds = daemonsets[precompiled]
    assert ds['metadata']['labels']['nvidia.com/precompiled'] == 'true'
    assert ds['spec']['template']['spec']['nodeSelector'] == {
        KERNEL: KERNEL_416, 'feature.node.kubernetes.io/system-os_release.ID': 'rhcos',
        'feature.node.kubernetes.io/system-os_release.VERSION_ID': '4.16', DEPLOY_DRIVER: 'true', **OWNED}
    assert container(ds, 'nvidia-driver-ctr')['image'] == have
    assert container(ds, 'nvidia-driver-ctr')['command'] == ['nvidia-driver']
    # The fallback DTK DaemonSet must not also select w1, which has the precompiled driver.
    terms = daemonsets[fallback]['spec']['template']['spec']['affinity']['nodeAffinity'][
        'requiredDuringSchedulingIgnoredDuringExecution']['nodeSelectorTerms']
    assert terms == [{'matchExpressions': [{'key': KERNEL, 'operator': 'In',
                                            'values': ['5.14.0-427.33.1.el9_4.x86_64_rt']}]}]
    assert plan['assignments']['w1'] == {'daemonset': precompiled, 'build': 'precompiled', 'image': have}
    assert plan['assignments']['rt1']['daemonset'] == fallback
    assert plan['assignments']['rt1']['build'] == 'dtk'
    assert plan['assignments']['u2']['build'] == 'precompiled'
    assert plan['blocked'] == [{
        'key': '5.15.0-100-generic', 'nodes': ['u1'],
        'reason': 'precompiled image nvcr.io/nvidia/driver:550-5.15.0-100-generic-ubuntu22.04 does not exist; '
                  'the nodes are not RHCOS, so no DTK build can replace it: publish the image, or use mode single'}]
    assert plan['warnings'] == [
        'precompiled image nvcr.io/nvidia/driver:550-5.14.0-427.33.1.el9_4.x86_64_rt-rhcos4.16 does not exist; '
        'node(s) rt1 fall back to a DTK build (DaemonSet %s)' % fallback]


def test_kernel_mode_without_precompiled_image_or_dtk_is_blocked():
    plan = desired_driver_daemonsets(SPEC, facts_of(node_418('w3')), {}, 'kernel', set())
    assert plan['desired'] == []
    assert plan['blocked'][0]['key'] == RHCOS_418
    assert plan['blocked'][0]['reason'].startswith(
        'precompiled image nvcr.io/nvidia/driver:550-%s-rhcos4.18 does not exist; the DTK fallback is not possible '
        'either: RHCOS %s was not looked up' % (KERNEL_418, RHCOS_418))


def test_kernel_mode_unchecked_availability_assumes_images_exist():
    plan = desired_driver_daemonsets(SPEC, facts_of(ubuntu_node('u1')), {}, 'kernel')
    assert [ds['metadata']['name'] for ds in plan['desired']] == [
        'nvidia-driver-daemonset-5.15.0-100-generic-ubuntu22.04']


def test_kernel_mode_stale_kernel_label_is_reported():
    node = ubuntu_node('u1', kernel='5.15.0-101-generic')
    node['metadata']['labels'][KERNEL] = '5.15.0-100-generic'
    plan = desired_driver_daemonsets(SPEC, facts_of(node), {}, 'kernel')
    assert plan['desired'][0]['metadata']['name'] == 'nvidia-driver-daemonset-5.15.0-101-generic-ubuntu22.04'
    assert plan['mismatched'][0]['label'] == '5.15.0-100-generic'
    assert plan['mismatched'][0]['effective'] == '5.15.0-101-generic'


def test_kernels_that_only_differ_by_arch_are_a_plan_error():
    nodes = facts_of(rhcos_node('arm', kernel='5.14.0-427.37.1.el9_4.aarch64'),
                     rhcos_node('arm64k', kernel='5.14.0-427.37.1.el9_4.aarch64+64k'))
    with pytest.raises(PlanError) as error:
        desired_driver_daemonsets(SPEC, nodes, {}, 'kernel')
    assert error.value.obj == 'nvidia-driver-daemonset-5.14.0-427.37.1.el9.4-rhcos4.16'
    assert 'arm, arm64k' in str(error.value)


# single mode

def test_single_mode_one_daemonset_for_all_driver_nodes():
    plan = desired_driver_daemonsets(SPEC, facts_of(ubuntu_node('u1'), ubuntu_node('u2', kernel='5.15.0-101-generic')),
                                     {}, 'single')
    assert len(plan['desired']) == 1
    ds = plan['desired'][0]
    assert ds['metadata']['name'] == 'nvidia-driver-daemonset'
    assert ds['spec']['template']['spec']['nodeSelector'] == {DEPLOY_DRIVER: 'true', **OWNED}
    assert container(ds, 'nvidia-driver-ctr')['image'] == 'nvcr.io/nvidia/driver:550.90.07-ubuntu22.04'
    assert plan['assignments']['u2'] == {'daemonset': 'nvidia-driver-daemonset', 'build': 'compile',
                                         'image': 'nvcr.io/nvidia/driver:550.90.07-ubuntu22.04'}


def test_single_mode_mixed_os_needs_image_ref():
    nodes = facts_of(ubuntu_node('u1'), ubuntu_node('u2', version='24.04'))
    plan = desired_driver_daemonsets(SPEC, nodes, {}, 'single')
    assert plan['desired'] == []
    assert plan['blocked'][0]['reason'] == (
        'one DaemonSet needs one driver image, but the nodes run ubuntu22.04: u1; ubuntu24.04: u2: give image_ref '
        'or use mode kernel')
    plan = desired_driver_daemonsets(dict(SPEC, image_ref='registry.local/driver:550'), nodes, {}, 'single')
    assert container(plan['desired'][0], 'nvidia-driver-ctr')['image'] == 'registry.local/driver:550'


# change planning

def test_subset_rules():
    assert is_subset({'a': [1, {'b': 2}]}, {'a': [1, {'b': 2, 'c': 3}], 'd': 4})
    assert not is_subset({'a': [1]}, {'a': [1, 2]})
    assert not is_subset({'a': [1, 2]}, {'a': [2, 1]})
    assert is_subset({'resources': {'limits': {'cpu': 1, 'memory': '1024Mi'}}},
                     {'resources': {'limits': {'cpu': '1000m', 'memory': '1Gi'}}})
    assert not is_subset({'resources': {'limits': {'cpu': '2'}}}, {'resources': {'limits': {'cpu': '1'}}})
    assert is_subset({'readOnly': False, 'annotations': {}, 'items': []}, {})
    assert not is_subset({'readOnly': True}, {})
    assert not is_subset({'labels': {'a': 'b'}}, {'labels': None})


def test_first_run_creates_everything():
    nodes = facts_of(rhcos_node('w1'), node_418('w3'))
    desired = desired_driver_daemonsets(SPEC, nodes, DTK, 'rhcos')['desired']
    plan = plan_driver_changes(desired, [], nodes)
    assert [ds['metadata']['name'] for ds in plan['create']] == [
        'nvidia-driver-daemonset-' + RHCOS_416, 'nvidia-driver-daemonset-' + RHCOS_418]
    assert plan['update'] == [] and plan['unchanged'] == [] and plan['delete'] == [] and plan['keep'] == []


def test_second_run_against_the_applied_result_changes_nothing():
    spec = dict(SPEC, resources={'limits': {'cpu': 1, 'memory': '1024Mi'}, 'requests': {'cpu': '0.5'}})
    nodes = facts_of(rhcos_node('w1'), node_418('w3'))
    first = desired_driver_daemonsets(spec, nodes, DTK, 'rhcos')['desired']
    existing = [server_applied(ds) for ds in plan_driver_changes(first, [], nodes)['create']]
    again = desired_driver_daemonsets(spec, nodes, DTK, 'rhcos')['desired']
    plan = plan_driver_changes(again, existing, nodes)
    assert plan['unchanged'] == ['nvidia-driver-daemonset-' + RHCOS_416, 'nvidia-driver-daemonset-' + RHCOS_418]
    assert plan['create'] == [] and plan['update'] == [] and plan['delete'] == [] and plan['keep'] == []


def test_a_label_taken_out_of_the_declaration_is_an_update():
    nodes = facts_of(rhcos_node('w1'))
    existing = server_applied(desired_driver_daemonsets(dict(SPEC, labels={'team': 'ml'}), nodes, DTK, 'rhcos')[
        'desired'][0])
    # What the API server records of that apply (trimmed): the extra label is this collection's.
    existing['metadata']['managedFields'] = [{'manager': 'accelerators.gpu', 'operation': 'Apply', 'fieldsV1': {
        'f:metadata': {'f:labels': {'f:team': {}}}}}]
    desired = desired_driver_daemonsets(SPEC, nodes, DTK, 'rhcos')['desired']
    assert [new['metadata']['name'] for _old, new in plan_driver_changes(desired, [existing], nodes)['update']] == [
        'nvidia-driver-daemonset-' + RHCOS_416]
    # Set by someone else, the same label is not this collection's to remove.
    existing['metadata']['managedFields'][0]['manager'] = 'kubectl'
    assert plan_driver_changes(desired, [existing], nodes)['unchanged'] == ['nvidia-driver-daemonset-' + RHCOS_416]


def test_changed_driver_version_is_an_update():
    nodes = facts_of(rhcos_node('w1'))
    existing = [server_applied(ds) for ds in desired_driver_daemonsets(SPEC, nodes, DTK, 'rhcos')['desired']]
    desired = desired_driver_daemonsets(dict(SPEC, version='570.124.06'), nodes, DTK, 'rhcos')['desired']
    plan = plan_driver_changes(desired, existing, nodes)
    assert len(plan['update']) == 1
    old, new = plan['update'][0]
    assert old is existing[0]
    assert container(new, 'nvidia-driver-ctr')['image'] == 'nvcr.io/nvidia/driver:570.124.06-rhcos4.16'


def test_removed_env_var_is_an_update():
    nodes = facts_of(rhcos_node('w1'))
    spec = dict(SPEC, env=[{'name': 'X', 'value': '1'}])
    existing = [server_applied(ds) for ds in desired_driver_daemonsets(spec, nodes, DTK, 'rhcos')['desired']]
    plan = plan_driver_changes(desired_driver_daemonsets(SPEC, nodes, DTK, 'rhcos')['desired'], existing, nodes)
    assert [new['metadata']['name'] for _old, new in plan['update']] == ['nvidia-driver-daemonset-' + RHCOS_416]


def stale_daemonset(rhcos, desired, current=None, misscheduled=0):
    old = desired_driver_daemonsets(SPEC, facts_of(rhcos_node('x', rhcos=rhcos)), {rhcos: resolved(DTK_416)},
                                    'rhcos')['desired'][0]
    return server_applied(old, desired, desired if current is None else current, misscheduled)


def test_stale_daemonset_kept_while_pods_are_scheduled():
    nodes = facts_of(node_418('w3'))
    desired = desired_driver_daemonsets(SPEC, nodes, DTK, 'rhcos')['desired']
    for counts in ((1, 1, 0), (0, 1, 0), (0, 0, 1)):
        plan = plan_driver_changes(desired, [stale_daemonset(RHCOS_416, *counts)], nodes)
        assert plan['delete'] == []
        assert plan['keep'][0]['name'] == 'nvidia-driver-daemonset-' + RHCOS_416
        assert plan['keep'][0]['reason'].startswith('not desired, but it still has pods (')


def test_stale_daemonset_kept_while_a_node_still_has_its_version():
    desired = desired_driver_daemonsets(SPEC, facts_of(node_418('w3')), DTK, 'rhcos')['desired']
    stale = stale_daemonset(RHCOS_416, 0)
    by_label = facts_of(node_418('w3'), node_418('w4', label_rhcos=RHCOS_416))
    plan = plan_driver_changes(desired, [stale], by_label)
    assert plan['delete'] == []
    assert plan['keep'][0]['reason'] == (
        'not desired, but GPU node(s) w4 still have its version (by NFD label or osImage)')
    by_os_image = facts_of(node_418('w3'), rhcos_node('w5', label_rhcos=RHCOS_418))
    assert plan_driver_changes(desired, [stale], by_os_image)['delete'] == []


def test_stale_daemonset_deleted_when_empty_and_no_node_has_its_version():
    nodes = facts_of(node_418('w3'), rhcos_node('cpu', gpu=False))
    desired = desired_driver_daemonsets(SPEC, nodes, DTK, 'rhcos')['desired']
    plan = plan_driver_changes(desired, [stale_daemonset(RHCOS_416, 0)], nodes)
    assert plan['delete'] == ['nvidia-driver-daemonset-' + RHCOS_416]
    assert plan['keep'] == []
    assert [ds['metadata']['name'] for ds in plan['create']] == ['nvidia-driver-daemonset-' + RHCOS_418]


def test_stale_daemonset_without_status_is_kept():
    stale = stale_daemonset(RHCOS_416, 0)
    del stale['status']
    plan = plan_driver_changes([], [stale], facts_of(node_418('w3')))
    assert plan['delete'] == []
    assert 'does not report' in plan['keep'][0]['reason']


def test_unmanaged_daemonsets_are_never_touched():
    foreign = stale_daemonset(RHCOS_416, 0)
    del foreign['metadata']['labels']['app.kubernetes.io/managed-by']
    nodes = facts_of(node_418('w3'))
    plan = plan_driver_changes([], [foreign], nodes)
    assert plan == {'create': [], 'update': [], 'unchanged': [], 'delete': [], 'keep': []}
    # Same name as a desired one: reported, neither created nor updated.
    desired = desired_driver_daemonsets(SPEC, facts_of(rhcos_node('w1')), DTK, 'rhcos')['desired']
    plan = plan_driver_changes(desired, [foreign], nodes)
    assert plan['create'] == [] and plan['update'] == [] and plan['unchanged'] == []
    assert plan['keep'][0]['name'] == 'nvidia-driver-daemonset-' + RHCOS_416
    assert 'this collection does not manage' in plan['keep'][0]['reason']
    assert plan['keep'][0]['node_selector'] == {OSTREE: RHCOS_416, DEPLOY_DRIVER: 'true', **OWNED}


def test_other_managed_daemonsets_are_not_driver_daemonsets():
    plugin = stale_daemonset(RHCOS_416, 0)
    plugin['metadata']['name'] = 'nvidia-device-plugin-daemonset'
    plugin['metadata']['labels']['app.kubernetes.io/component'] = 'nvidia-device-plugin'
    plan = plan_driver_changes([], [plugin], facts_of(node_418('w3')))
    assert plan == {'create': [], 'update': [], 'unchanged': [], 'delete': [], 'keep': []}


def test_blocked_version_keeps_its_daemonset_and_its_nodes_keep_a_driver():
    nodes = facts_of(rhcos_node('w1', extra={DEPLOY_DRIVER: 'true', **OWNED}), node_418('w3'))
    broken = {'image': None, 'source': None, 'status': 'broken', 'history': [], 'message': 'stream broken'}
    result = desired_driver_daemonsets(SPEC, nodes, {RHCOS_416: broken, RHCOS_418: resolved(DTK_418)}, 'rhcos')
    assert result['blocked'] == [{'key': RHCOS_416, 'nodes': ['w1'], 'reason': 'stream broken'}]
    existing = [stale_daemonset(RHCOS_416, 0, 0)]
    plan = plan_driver_changes(result['desired'], existing, nodes)
    assert plan['delete'] == []
    assert plan['keep'][0]['name'] == 'nvidia-driver-daemonset-' + RHCOS_416
    assert plan['keep'][0]['node_selector'] == {OSTREE: RHCOS_416, DEPLOY_DRIVER: 'true', **OWNED}
    # w1 is still labelled for the kept DaemonSet, which builds for the RHCOS it runs.
    assert nodes_left_without_driver(plan, result['blocked'], nodes) == []
    # Without the deploy label the kept DaemonSet does not select w1.
    unlabelled = facts_of(rhcos_node('w1'), node_418('w3'))
    assert nodes_left_without_driver(plan, result['blocked'], unlabelled) == ['w1']


def test_nodes_left_without_driver_mid_upgrade():
    # w1 rebooted into 418 (label relabelled), whose DTK is missing; the kept 416 DaemonSet no longer serves it.
    labelled = {DEPLOY_DRIVER: 'true', **OWNED}
    nodes = facts_of(node_418('w1', extra=labelled), rhcos_node('w2', extra=labelled))
    missing = {'image': None, 'source': None, 'status': 'missing', 'history': [], 'message': 'no tag'}
    result = desired_driver_daemonsets(SPEC, nodes, {RHCOS_416: resolved(DTK_416), RHCOS_418: missing}, 'rhcos')
    existing = [server_applied(ds) for ds in result['desired']]
    plan = plan_driver_changes(result['desired'], existing, nodes)
    assert plan['unchanged'] == ['nvidia-driver-daemonset-' + RHCOS_416]
    assert nodes_left_without_driver(plan, result['blocked'], nodes) == ['w1']
    # Stale label: the 416 DaemonSet selects w3, but it runs 418, so its driver would not load.
    stale_nodes = facts_of(node_418('w3', label_rhcos=RHCOS_416, extra=labelled))
    result = desired_driver_daemonsets(SPEC, stale_nodes, {RHCOS_418: missing}, 'rhcos')
    plan = plan_driver_changes(result['desired'], [stale_daemonset(RHCOS_416, 1)], stale_nodes)
    assert plan['keep'][0]['name'] == 'nvidia-driver-daemonset-' + RHCOS_416
    assert nodes_left_without_driver(plan, result['blocked'], stale_nodes) == ['w3']


def test_upgrade_from_one_rhcos_to_the_next_end_to_end():
    before = facts_of(rhcos_node('w1'), rhcos_node('w2'))
    existing = [server_applied(ds, 2, 2) for ds in desired_driver_daemonsets(SPEC, before, DTK, 'rhcos')['desired']]
    # w1 rebooted into 418: a new DaemonSet appears, the 416 one stays for w2.
    during = facts_of(node_418('w1'), rhcos_node('w2'))
    plan = plan_driver_changes(desired_driver_daemonsets(SPEC, during, DTK, 'rhcos')['desired'], existing, during)
    assert [ds['metadata']['name'] for ds in plan['create']] == ['nvidia-driver-daemonset-' + RHCOS_418]
    assert plan['unchanged'] == ['nvidia-driver-daemonset-' + RHCOS_416]
    # Both on 418 but the 416 pod on w2 is not gone yet: kept.
    after = facts_of(node_418('w1'), node_418('w2'))
    desired = desired_driver_daemonsets(SPEC, after, DTK, 'rhcos')['desired']
    existing_after = [server_applied(existing[0], 0, 1)] + [server_applied(d, 2, 2) for d in desired]
    plan = plan_driver_changes(desired, existing_after, after)
    assert plan['delete'] == [] and plan['keep'][0]['name'] == 'nvidia-driver-daemonset-' + RHCOS_416
    # Last pod gone: deleted.
    existing_after[0] = server_applied(existing[0], 0, 0)
    plan = plan_driver_changes(desired, existing_after, after)
    assert plan['delete'] == ['nvidia-driver-daemonset-' + RHCOS_416]
    assert plan['unchanged'] == ['nvidia-driver-daemonset-' + RHCOS_418]


# prepare_versions: an upgrade's target before any node runs it

TARGET_96 = '9.6.20260401-0'
DS_TARGET = 'nvidia-driver-daemonset-' + TARGET_96


@pytest.mark.parametrize('build, tag', [(RHCOS_418, 'rhcos4.18'), (TARGET_96, 'rhel9.6'), ('10.1.20260126-0', 'rhel10.1')])
def test_prepared_version_gets_its_daemonset_selecting_its_label_only(build, tag):
    dtk = dict(DTK, **{build: resolved(DTK_418)})
    plan = desired_driver_daemonsets(SPEC, facts_of(rhcos_node('w1')), dtk, 'rhcos', prepare_versions=[build])
    desired = by_name(plan['desired'])
    name = 'nvidia-driver-daemonset-' + build
    assert sorted(desired) == sorted(['nvidia-driver-daemonset-' + RHCOS_416, name])
    assert plan['prepared'] == [name] and plan['blocked'] == []
    pod = desired[name]['spec']['template']['spec']
    assert pod['nodeSelector'] == {OSTREE: build, DEPLOY_DRIVER: 'true', **OWNED}
    assert container(desired[name], 'nvidia-driver-ctr')['image'] == 'nvcr.io/nvidia/driver:550.90.07-' + tag
    assert container(desired[name], 'openshift-driver-toolkit-ctr')['image'] == DTK_418
    assert plan['assignments']['w1']['daemonset'] == 'nvidia-driver-daemonset-' + RHCOS_416
    # Like a DaemonSet built for nodes of that build: the same object once nodes run it, but for the mark (not in
    # the pod template: the pods it starts are those of that DaemonSet).
    assert desired[name]['metadata']['annotations'] == {PREPARED_ANNOTATION: build}
    if build == RHCOS_418:
        served = desired_driver_daemonsets(SPEC, facts_of(node_418('w9')), dtk, 'rhcos')['desired'][0]
        assert desired[name]['spec'] == served['spec'] and 'annotations' not in served['metadata']


def test_prepared_version_a_node_runs_is_planned_once_for_its_nodes():
    plan = desired_driver_daemonsets(SPEC, facts_of(node_418('w1')), DTK, 'rhcos', prepare_versions=[RHCOS_418])
    assert [ds['metadata']['name'] for ds in plan['desired']] == ['nvidia-driver-daemonset-' + RHCOS_418]
    assert plan['prepared'] == [] and plan['assignments']['w1']['daemonset'] == 'nvidia-driver-daemonset-' + RHCOS_418


def test_prepared_daemonset_is_kept_while_listed_or_marked_prepared_and_stale_without_pods_once_not():
    nodes = facts_of(rhcos_node('w1'))
    dtk = dict(DTK, **{TARGET_96: resolved(DTK_418)})
    desired = desired_driver_daemonsets(SPEC, nodes, dtk, 'rhcos', prepare_versions=[TARGET_96])['desired']
    existing = [server_applied(ds, 1 if ds['metadata']['name'] != DS_TARGET else 0,
                               1 if ds['metadata']['name'] != DS_TARGET else 0) for ds in desired]
    changes = plan_driver_changes(desired, existing, nodes)
    assert changes['delete'] == [] and DS_TARGET in changes['unchanged']
    # A run without prepare_versions (a deploy while the upgrade goes on) keeps the DaemonSet marked prepared.
    plain = desired_driver_daemonsets(SPEC, nodes, dtk, 'rhcos')['desired']
    kept = plan_driver_changes(plain, existing, nodes)
    assert kept['delete'] == [] and [entry['name'] for entry in kept['keep']] == [DS_TARGET]
    assert 'prepared for an upgrade to %s' % TARGET_96 in kept['keep'][0]['reason']
    # Without the mark, the empty DaemonSet of a build no node has is stale.
    for daemonset in existing:
        daemonset['metadata'].get('annotations', {}).pop(PREPARED_ANNOTATION, None)
    assert plan_driver_changes(plain, existing, nodes)['delete'] == [DS_TARGET]


def test_prepared_daemonset_loses_its_mark_once_its_nodes_run_the_version():
    dtk = dict(DTK, **{RHCOS_418: resolved(DTK_418)})
    prepared = desired_driver_daemonsets(SPEC, facts_of(rhcos_node('w1')), dtk, 'rhcos',
                                         prepare_versions=[RHCOS_418])['desired']
    name = 'nvidia-driver-daemonset-' + RHCOS_418
    existing = [server_applied(ds, 0, 0) for ds in prepared if ds['metadata']['name'] == name]
    # As the API server records the apply: the mark is a field this collection applied.
    existing[0]['metadata']['managedFields'] = [{'manager': 'accelerators.gpu', 'operation': 'Apply', 'fieldsV1': {
        'f:metadata': {'f:annotations': {'f:' + PREPARED_ANNOTATION: {}}}}}]
    moved = facts_of(node_418('w1'))
    desired = desired_driver_daemonsets(SPEC, moved, dtk, 'rhcos')['desired']
    changes = plan_driver_changes(desired, existing, moved)
    # The update (a server-side apply) drops the mark; the pod template is the same, so no driver pod is outdated.
    assert [(old['metadata']['name'], new['spec'] == prepared_spec(prepared, name)) for old, new in changes['update']] \
        == [(name, True)]


def prepared_spec(daemonsets, name):
    return [ds for ds in daemonsets if ds['metadata']['name'] == name][0]['spec']


def test_prepared_version_without_dtk_or_not_a_build_or_not_rhcos_mode_is_a_plan_error():
    with pytest.raises(PlanError) as error:
        desired_driver_daemonsets(SPEC, [], {TARGET_96: {'status': 'missing', 'message': 'no tag 9.6.20260401-0'}},
                                  'rhcos', prepare_versions=[TARGET_96])
    assert str(error.value) == ('prepare_versions: RHCOS %s has no DTK image, so its driver DaemonSet cannot be '
                                'prepared: no tag 9.6.20260401-0' % TARGET_96)
    assert (error.value.obj, error.value.field) == (DS_TARGET, 'dtk_images')
    with pytest.raises(PlanError) as error:
        desired_driver_daemonsets(SPEC, [], DTK, 'rhcos', prepare_versions=['4.21.5'])
    assert 'prepare_versions: 4.21.5 is not an RHCOS build' in str(error.value)
    with pytest.raises(PlanError) as error:
        desired_driver_daemonsets(SPEC, [], DTK, 'single', prepare_versions=[TARGET_96])
    assert str(error.value) == 'prepare_versions needs mode rhcos or kernel, not single'


# prepare_versions with mode kernel: a kernel upgrade's target, precompiled, before any node boots it
KERNEL_NEW = '5.15.0-105-generic'
IMAGE_OLD = 'nvcr.io/nvidia/driver:550-5.15.0-100-generic-ubuntu22.04'
IMAGE_NEW = 'nvcr.io/nvidia/driver:550-5.15.0-105-generic-ubuntu22.04'
DS_KERNEL_NEW = 'nvidia-driver-daemonset-5.15.0-105-generic-ubuntu22.04'


def test_prepared_kernel_gets_its_precompiled_daemonset_per_os_selecting_no_node_yet():
    nodes = facts_of(ubuntu_node('u1'), ubuntu_node('u2'),
                     ubuntu_node('u3', version='24.04', kernel='6.8.0-45-generic'))
    plan = desired_driver_daemonsets(SPEC, nodes, {}, 'kernel', precompiled_available=None,
                                     prepare_versions=[KERNEL_NEW])
    assert plan['prepared'] == [DS_KERNEL_NEW, 'nvidia-driver-daemonset-5.15.0-105-generic-ubuntu24.04']
    prepared = by_name(plan['desired'])[DS_KERNEL_NEW]
    assert prepared['spec']['template']['spec']['nodeSelector'] == {
        'feature.node.kubernetes.io/kernel-version.full': KERNEL_NEW,
        'feature.node.kubernetes.io/system-os_release.ID': 'ubuntu',
        'feature.node.kubernetes.io/system-os_release.VERSION_ID': '22.04', DEPLOY_DRIVER: 'true', **OWNED}
    assert container(prepared, 'nvidia-driver-ctr')['image'] == IMAGE_NEW
    # The nodes' own DaemonSets stay; none is assigned to the prepared one yet.
    assert plan['assignments']['u1']['daemonset'] == 'nvidia-driver-daemonset-5.15.0-100-generic-ubuntu22.04'
    # Once a node runs the kernel, its DaemonSet is planned for it as any other, not as prepared.
    plan = desired_driver_daemonsets(SPEC, facts_of(ubuntu_node('u1', kernel=KERNEL_NEW)), {}, 'kernel',
                                     precompiled_available=[IMAGE_NEW], prepare_versions=[KERNEL_NEW])
    assert plan['prepared'] == [] and plan['assignments']['u1']['daemonset'] == DS_KERNEL_NEW


def test_prepared_kernel_without_a_precompiled_image_is_a_plan_error_naming_kernel_and_image():
    with pytest.raises(PlanError) as error:
        desired_driver_daemonsets(SPEC, facts_of(ubuntu_node('u1')), {}, 'kernel', precompiled_available=[IMAGE_OLD],
                                  prepare_versions=[KERNEL_NEW])
    assert str(error.value) == ('prepare_versions: kernel %s has no precompiled driver image %s, so its driver '
                                'DaemonSet cannot be prepared: publish the image first' % (KERNEL_NEW, IMAGE_NEW))
    assert (error.value.obj, error.value.field) == (DS_KERNEL_NEW, 'prepare_versions')


def test_driver_pods_carry_the_driver_manager_and_the_mounts_of_a_real_node():
    spec = dict(SPEC, manager={'image': 'nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.8.1',
                               'env': [{'name': 'ENABLE_AUTO_DRAIN', 'value': 'false'}]})
    ds = desired_driver_daemonsets(spec, facts_of(rhcos_node('w1')), DTK, 'rhcos')['desired'][0]
    pod = ds['spec']['template']['spec']
    manager, = pod['initContainers']
    assert (manager['name'], manager['command'], manager['args']) == (
        'k8s-driver-manager', ['driver-manager'], ['uninstall_driver'])
    assert {'name': 'ENABLE_AUTO_DRAIN', 'value': 'false'} in manager['env']
    assert {'name': 'NVIDIA_VISIBLE_DEVICES', 'value': 'void'} in manager['env']
    assert {m['mountPath'] for m in manager['volumeMounts']} == {'/run/nvidia', '/host', '/sys', '/run/mellanox/drivers'}
    mounts = dict((m['mountPath'], m['name']) for m in container(ds, 'nvidia-driver-ctr')['volumeMounts'])
    for path in ('/run/nvidia-fabricmanager', '/run/nvidia-topologyd', '/sys/module/firmware_class/parameters/path',
                 '/lib/firmware', '/sys/devices/system/memory/auto_online_blocks', '/usr/local/bin/startup-probe.sh'):
        assert path in mounts, path
    volumes = dict((v['name'], v) for v in pod['volumes'])
    assert volumes[mounts['/lib/firmware']]['hostPath']['path'] == '/run/nvidia/driver/lib/firmware'
    assert volumes['driver-startup-probe-script']['configMap']['name'] == 'nvidia-driver-startup-probe'
    assert container(ds, 'nvidia-driver-ctr')['startupProbe']['exec']['command'] == [
        'sh', '/usr/local/bin/startup-probe.sh']
    # Every mount names a volume of the pod.
    for entry in pod['initContainers'] + pod['containers']:
        assert all(m['name'] in volumes for m in entry['volumeMounts']), entry['name']
    assert 'initContainers' not in desired_driver_daemonsets(
        SPEC, facts_of(rhcos_node('w1')), DTK, 'rhcos')['desired'][0]['spec']['template']['spec']
