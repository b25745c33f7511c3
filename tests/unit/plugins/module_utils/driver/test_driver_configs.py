# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The repository, certificate and kernel-module configurations and the secret env in the driver DaemonSets, against
the GPU Operator's NVIDIADriver (internal/state/driver_volumes.go, manifests/state-driver/0500_daemonset.yaml)."""

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.driver.configs import (
    missing_objects_refusal, os_id_of_tag)
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.daemonsets import run
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.names import PlanError
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.errors import TaskError
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver.role_template import desired_driver_daemonsets
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver.test_driver_daemonsets import params
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver.test_driver_plan import (
    DTK, SPEC, container, facts_of)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.fakes import FakeCluster, FakeModule
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.node_dicts import (
    NFD, rhcos_node, ubuntu_node)

CONFIGS = dict(repo_config='mirror-repo', cert_config='mirror-ca', kernel_module_config='module-params',
               secret_env='driver-secrets')
KEYS = {'mirror-repo': ['mirror.sources'], 'mirror-ca': ['site-ca.crt', 'proxy-ca.crt'],
        'module-params': ['nvidia.conf']}
GPUDIRECT = dict(rdma=True, gds_image='nvcr.io/nvidia/cloud-native/nvidia-fs:2.20.5',
                 gdrcopy_image='nvcr.io/nvidia/cloud-native/gdrdrv:v2.5',
                 # GPUDirect Storage from nvidia-fs 2.17.5 goes only with the open modules.
                 kernel_module_type='open')
APT = '/etc/apt/sources.list.d/'
UBUNTU_CA = '/usr/local/share/ca-certificates/'


def mounts(entry):
    """{mountPath: (volume, subPath)} of the read-only subPath mounts of a container."""
    return dict((m['mountPath'], (m['name'], m['subPath'])) for m in entry.get('volumeMounts') or []
                if 'subPath' in m and m.get('readOnly'))


def config_volumes(daemonset):
    return dict((v['name'], v['configMap']) for v in daemonset['spec']['template']['spec']['volumes']
                if v['name'] in KEYS)


def single(spec, node=None, keys=None):
    return desired_driver_daemonsets(spec, facts_of(node or ubuntu_node('w1')), {}, 'single',
                                     config_map_keys=KEYS if keys is None else keys)['desired'][0]


def test_the_os_id_of_an_os_tag():
    assert [os_id_of_tag(tag) for tag in ('ubuntu22.04', 'rhcos4.18', 'rhel9.6', 'sl-micro6.0', 'ol8', None)] == [
        'ubuntu', 'rhcos', 'rhel', 'sl-micro', 'ol', None]


def test_unset_the_daemonset_is_as_before():
    plain = single(dict(SPEC, **GPUDIRECT), keys={})
    assert single(dict(SPEC, **GPUDIRECT), keys=KEYS) == plain
    assert 'envFrom' not in container(plain, 'nvidia-driver-ctr')


def test_ubuntu_each_key_is_mounted_by_subpath_where_apt_and_the_trust_store_read_it():
    ds = single(dict(SPEC, **CONFIGS))
    expected = {
        APT + 'mirror.sources': ('mirror-repo', 'mirror.sources'),
        UBUNTU_CA + 'proxy-ca.crt': ('mirror-ca', 'proxy-ca.crt'),
        UBUNTU_CA + 'site-ca.crt': ('mirror-ca', 'site-ca.crt'),
        '/drivers/nvidia.conf': ('module-params', 'nvidia.conf'),
    }
    driver = container(ds, 'nvidia-driver-ctr')
    assert mounts(driver) == expected
    # Upstream's order: repository, certificates, module parameters; keys sorted.
    paths = [m['mountPath'] for m in driver['volumeMounts']]
    assert paths[-4:] == [APT + 'mirror.sources', UBUNTU_CA + 'proxy-ca.crt', UBUNTU_CA + 'site-ca.crt',
                          '/drivers/nvidia.conf']
    assert config_volumes(ds) == {
        'mirror-repo': {'name': 'mirror-repo', 'items': [{'key': 'mirror.sources', 'path': 'mirror.sources'}]},
        'mirror-ca': {'name': 'mirror-ca', 'items': [{'key': 'proxy-ca.crt', 'path': 'proxy-ca.crt'},
                                                     {'key': 'site-ca.crt', 'path': 'site-ca.crt'}]},
        'module-params': {'name': 'module-params', 'items': [{'key': 'nvidia.conf', 'path': 'nvidia.conf'}]}}
    assert driver['envFrom'] == [{'secretRef': {'name': 'driver-secrets'}}]


def test_the_gpudirect_containers_get_the_mounts_and_the_secret_env_as_upstream():
    ds = single(dict(SPEC, **dict(CONFIGS, **GPUDIRECT)))
    driver_mounts = mounts(container(ds, 'nvidia-driver-ctr'))
    assert len(driver_mounts) == 4
    for name in ('nvidia-fs-ctr', 'nvidia-gdrcopy-ctr'):
        assert mounts(container(ds, name)) == driver_mounts
        assert container(ds, name)['envFrom'] == [{'secretRef': {'name': 'driver-secrets'}}]
    # nvidia-peermem gets the mounts (AdditionalConfigs) but not the secret env.
    peermem = container(ds, 'nvidia-peermem-ctr')
    assert mounts(peermem) == driver_mounts and 'envFrom' not in peermem


def test_rhcos_yum_repositories_and_the_rhel_trust_store_not_on_the_dtk_side_car():
    ds = desired_driver_daemonsets(dict(SPEC, **CONFIGS), facts_of(rhcos_node('w1')), DTK, 'rhcos',
                                   config_map_keys=KEYS)['desired'][0]
    assert set(mounts(container(ds, 'nvidia-driver-ctr'))) >= {
        '/etc/yum.repos.d/mirror.sources', '/etc/pki/ca-trust/extracted/pem/site-ca.crt', '/drivers/nvidia.conf'}
    assert mounts(container(ds, 'openshift-driver-toolkit-ctr')) == {}


def test_a_precompiled_driver_gets_module_parameters_but_no_repository_or_certificates():
    ds = desired_driver_daemonsets(dict(SPEC, **CONFIGS), facts_of(ubuntu_node('w1')), {}, 'kernel',
                                   config_map_keys=KEYS)['desired'][0]
    assert set(config_volumes(ds)) == {'module-params'}
    assert '/drivers/nvidia.conf' in mounts(container(ds, 'nvidia-driver-ctr'))
    assert container(ds, 'nvidia-driver-ctr')['envFrom'] == [{'secretRef': {'name': 'driver-secrets'}}]


def test_a_configmap_without_keys_adds_nothing():
    ds = single(dict(SPEC, repo_config='mirror-repo'), keys={'mirror-repo': []})
    assert config_volumes(ds) == {} and APT not in str(ds)


def test_an_os_upstream_does_not_map_is_a_plan_error_naming_the_setting():
    node = ubuntu_node('w1', extra={NFD + 'system-os_release.ID': 'flatcar', NFD + 'system-os_release.VERSION_ID':
                                    '4081.2'})
    with pytest.raises(PlanError) as error:
        single(dict(SPEC, repo_config='mirror-repo'), node=node)
    assert error.value.field == 'repo_config'
    assert 'mirror-repo' in str(error.value) and 'flatcar4081.2' in str(error.value)
    # Module parameters need no OS path.
    assert '/drivers/nvidia.conf' in mounts(container(single(dict(SPEC, kernel_module_config='module-params'),
                                                             node=node), 'nvidia-driver-ctr'))


def test_a_configmap_named_as_a_volume_of_the_pod_is_a_plan_error():
    with pytest.raises(PlanError) as error:
        single(dict(SPEC, kernel_module_config='run-nvidia'), keys={'run-nvidia': ['nvidia.conf']})
    assert 'two volumes of the pod are named run-nvidia' in str(error.value)


def test_the_refusal_names_each_missing_object_its_setting_and_variable():
    spec = dict(SPEC, **CONFIGS)
    found = {('ConfigMap', 'mirror-repo'), ('ConfigMap', 'module-params')}
    assert missing_objects_refusal(spec, 'gpu', found) == (
        'ConfigMap mirror-ca (driver.cert_config, role variable driver_cert_config) does not exist in namespace gpu; '
        'Secret driver-secrets (driver.secret_env, role variable driver_secret_env) does not exist in namespace gpu. '
        'Create them in namespace gpu, or unset the setting; nothing was changed')
    assert missing_objects_refusal(spec, 'gpu', found | {('ConfigMap', 'mirror-ca'), ('Secret', 'driver-secrets')}) \
        is None
    # A ConfigMap of the Secret's name is not the Secret.
    assert 'Secret driver-secrets' in missing_objects_refusal(dict(SPEC, secret_env='driver-secrets'), 'gpu',
                                                              {('ConfigMap', 'driver-secrets')})


def objects_in(namespace, config_maps=(), secrets=()):
    found = dict(('/api/v1/namespaces/%s/configmaps/%s' % (namespace, name), {'data': dict.fromkeys(KEYS[name], 'x')})
                 for name in config_maps)
    found.update(('/api/v1/namespaces/%s/secrets/%s' % (namespace, name), {'data': {'TOKEN': 'c2VjcmV0'}})
                 for name in secrets)
    return found


def test_the_module_refuses_a_missing_configmap_before_any_write_and_mounts_the_keys_it_read():
    driver = dict(params()['driver'], **CONFIGS)
    nodes = [ubuntu_node('w1', extra={'nvidia.com/gpu.deploy.driver': 'true'})]
    cluster = FakeCluster(nodes, objects=objects_in('gpu', config_maps=('mirror-repo', 'module-params'),
                                                    secrets=('driver-secrets',)))
    with pytest.raises(TaskError) as error:
        run(FakeModule(params(mode='single', driver=driver)), cluster)
    assert str(error.value).startswith('ConfigMap mirror-ca (driver.cert_config, role variable driver_cert_config) '
                                       'does not exist in namespace gpu.')
    assert cluster.writes == []

    cluster.objects.update(objects_in('gpu', config_maps=('mirror-ca',)))
    result = run(FakeModule(params(mode='single', driver=driver)), cluster)
    # The node's owner label first, then the DaemonSet selecting it.
    assert cluster.writes == [('PATCH', 'w1'), ('APPLY', 'nvidia-driver-daemonset')]
    stored = cluster.daemonsets['nvidia-driver-daemonset']
    assert set(config_volumes(stored)) == {'mirror-repo', 'mirror-ca', 'module-params'}
    assert result['created'] == ['nvidia-driver-daemonset']
