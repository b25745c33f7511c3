# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPUDirect RDMA, Storage and GDRCopy in the driver DaemonSets, against the GPU Operator's state-driver asset and
transforms (controllers/object_controls.go)."""

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.driver.changes import is_subset, plan_driver_changes
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.gpudirect import side_image
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.names import PlanError
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver.role_template import desired_driver_daemonsets
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver.test_driver_plan import (
    DTK, SPEC, container, facts_of, server_applied)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.node_dicts import rhcos_node, ubuntu_node

MANAGER = {'image': 'nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.8.1', 'env': []}
GDS = 'nvcr.io/nvidia/cloud-native/nvidia-fs:2.20.5'
GDRCOPY = 'nvcr.io/nvidia/cloud-native/gdrdrv:v2.5'
# nvidia-fs 2.20.5 works only with the open kernel modules, which the driver container's auto gives from branch 560.
SPEC_OPEN = dict(SPEC, version='570.172.08', branch='570')
ALL = dict(SPEC_OPEN, manager=MANAGER, rdma=True, gds_image=GDS, gdrcopy_image=GDRCOPY)


def names(daemonset):
    return [c['name'] for c in daemonset['spec']['template']['spec']['containers']]


def env(entry):
    return dict((e['name'], e.get('value')) for e in entry.get('env') or [])


def volumes(daemonset):
    return dict((v['name'], v) for v in daemonset['spec']['template']['spec']['volumes'])


def dtk_daemonset(spec):
    return desired_driver_daemonsets(spec, facts_of(rhcos_node('w1')), DTK, 'rhcos')['desired'][0]


def test_without_gpudirect_the_daemonset_is_as_before():
    plain = dtk_daemonset(dict(SPEC, manager=MANAGER))
    assert names(plain) == ['nvidia-driver-ctr', 'openshift-driver-toolkit-ctr']
    assert dtk_daemonset(dict(SPEC, manager=MANAGER, rdma=False, use_host_mofed=True)) == plain


def test_a_dtk_build_gets_the_three_containers_in_the_gpu_operators_order_and_settings():
    ds = dtk_daemonset(ALL)
    assert names(ds) == ['nvidia-driver-ctr', 'nvidia-peermem-ctr', 'nvidia-fs-ctr', 'nvidia-gdrcopy-ctr',
                         'openshift-driver-toolkit-ctr']
    driver, peermem = container(ds, 'nvidia-driver-ctr'), container(ds, 'nvidia-peermem-ctr')
    assert {'GPU_DIRECT_RDMA_ENABLED': 'true', 'GDS_ENABLED': 'true', 'GDRCOPY_ENABLED': 'true'}.items() <= \
        env(driver).items()
    assert 'USE_HOST_MOFED' not in env(driver)
    manager, = ds['spec']['template']['spec']['initContainers']
    assert env(manager)['GPU_DIRECT_RDMA_ENABLED'] == 'true' and 'USE_HOST_MOFED' not in env(manager)
    dtk = container(ds, 'openshift-driver-toolkit-ctr')
    assert {'GDS_ENABLED': 'true', 'GDRCOPY_ENABLED': 'true'}.items() <= env(dtk).items()
    assert 'GPU_DIRECT_RDMA_ENABLED' not in env(dtk)
    # nvidia-peermem ships in the driver image; it runs as in the asset, on OpenShift too.
    assert (peermem['image'], peermem['command'], peermem['args']) == (
        driver['image'], ['nvidia-driver'], ['reload_nvidia_peermem'])
    assert 'env' not in peermem
    assert peermem['startupProbe']['exec']['command'] == ['sh', '-c', 'nvidia-driver probe_nvidia_peermem']
    assert (peermem['startupProbe']['failureThreshold'], peermem['livenessProbe']['periodSeconds'],
            peermem['livenessProbe']['failureThreshold']) == (120, 30, 1)
    assert {m['mountPath']: m.get('mountPropagation') for m in peermem['volumeMounts']} == {
        '/run/nvidia': 'Bidirectional', '/var/log': None, '/dev/log': None,
        '/run/mellanox/drivers': 'HostToContainer'}
    # GDS and GDRCopy: their own images with the driver image's osTag, built through the Driver Toolkit.
    for name, image, entry, module in (('nvidia-fs-ctr', GDS, 'nv-fs-ctr-run-with-dtk', 'nvidia_fs'),
                                       ('nvidia-gdrcopy-ctr', GDRCOPY, 'gdrcopy-ctr-run-with-dtk', 'gdrdrv')):
        side = container(ds, name)
        assert side['image'] == image + '-rhcos4.16', side['image']
        assert driver['image'].endswith('-rhcos4.16')
        assert (side['command'], side['args']) == (['ocp_dtk_entrypoint'], [entry])
        assert side['startupProbe']['exec']['command'] == ['sh', '-c', 'lsmod | grep %s' % module]
        assert {m['mountPath'] for m in side['volumeMounts']} == {
            '/run/nvidia', '/var/log', '/dev/log', '/mnt/shared-nvidia-driver-toolkit'}
    # Every mount names a volume of the pod; the MOFED sources stay the Network Operator's.
    for entry in ds['spec']['template']['spec']['containers']:
        assert all(m['name'] in volumes(ds) for m in entry['volumeMounts']), entry['name']
    assert volumes(ds)['mlnx-ofed-usr-src']['hostPath']['path'] == '/run/mellanox/drivers/usr/src'


def test_the_gpudirect_settings_replace_the_same_names_of_the_drivers_env_in_their_place():
    spec = dict(ALL, env=[{'name': 'GDS_ENABLED', 'value': 'false'}, {'name': 'X', 'value': '1'}])
    driver = container(dtk_daemonset(spec), 'nvidia-driver-ctr')
    assert [entry['name'] for entry in driver['env']] == [
        'NODE_NAME', 'NODE_IP', 'GDS_ENABLED', 'X', 'GPU_DIRECT_RDMA_ENABLED', 'GDRCOPY_ENABLED', 'DRIVER_CONFIG_DIGEST']
    assert env(driver)['GDS_ENABLED'] == 'true'


def test_host_mofed_sets_use_host_mofed_and_builds_against_the_hosts_sources():
    ds = dtk_daemonset(dict(SPEC, manager=MANAGER, rdma=True, use_host_mofed=True))
    assert names(ds) == ['nvidia-driver-ctr', 'nvidia-peermem-ctr', 'openshift-driver-toolkit-ctr']
    manager, = ds['spec']['template']['spec']['initContainers']
    for entry in (container(ds, 'nvidia-driver-ctr'), container(ds, 'nvidia-peermem-ctr'), manager):
        assert env(entry).get('USE_HOST_MOFED') == 'true', entry['name']
    assert volumes(ds)['mlnx-ofed-usr-src']['hostPath']['path'] == '/usr/src'
    assert 'GDS_ENABLED' not in env(container(ds, 'nvidia-driver-ctr'))


def test_a_single_daemonset_builds_gds_and_gdrcopy_without_the_driver_toolkit():
    spec = dict(SPEC_OPEN, gds_image=GDS, gdrcopy_image=GDRCOPY + '@sha256:' + 'e' * 64)
    ds = desired_driver_daemonsets(spec, facts_of(ubuntu_node('u1')), {}, 'single')['desired'][0]
    assert names(ds) == ['nvidia-driver-ctr', 'nvidia-fs-ctr', 'nvidia-gdrcopy-ctr']
    fs = container(ds, 'nvidia-fs-ctr')
    assert fs['image'] == GDS + '-ubuntu22.04'
    assert fs['command'] == ['bash', '-xc'] and fs['args'][0].endswith('exec nvidia-gds-driver install')
    assert 'until [ -d /run/nvidia/driver/usr/src ] && lsmod | grep nvidia;' in fs['args'][0]
    # A digest reference is used as it is (resolveDriverTag).
    assert container(ds, 'nvidia-gdrcopy-ctr')['image'] == GDRCOPY + '@sha256:' + 'e' * 64
    assert side_image(GDS, 'rhel9.6') == GDS + '-rhel9.6'


def test_precompiled_daemonsets_get_rdma_but_refuse_gds_and_gdrcopy_naming_the_daemonset():
    spec = dict(SPEC, rdma=True, resources={'limits': {'memory': '1Gi'}})
    plan = desired_driver_daemonsets(spec, facts_of(ubuntu_node('u1')), {}, 'kernel')
    ds, = plan['desired']
    assert names(ds) == ['nvidia-driver-ctr', 'nvidia-peermem-ctr']
    peermem = container(ds, 'nvidia-peermem-ctr')
    assert peermem['image'] == container(ds, 'nvidia-driver-ctr')['image'] == \
        'nvcr.io/nvidia/driver:550-5.15.0-100-generic-ubuntu22.04'
    assert peermem['resources'] == {'limits': {'memory': '1Gi'}}
    with pytest.raises(PlanError) as error:
        desired_driver_daemonsets(dict(spec, gdrcopy_image=GDRCOPY), facts_of(ubuntu_node('u1')), {}, 'kernel')
    assert error.value.obj == ds['metadata']['name'] and error.value.field == 'gdrcopy_image'
    assert 'runs a precompiled driver image' in str(error.value) and 'nvidia-gdrcopy-ctr' in str(error.value)


def test_gds_needs_the_os_tag_of_the_driver_image():
    spec = dict(SPEC, image_ref='registry.local/driver:550', gds_image=GDS)
    nodes = facts_of(ubuntu_node('u1'), rhcos_node('w1'))
    with pytest.raises(PlanError) as error:
        desired_driver_daemonsets(spec, nodes, {}, 'single')
    assert error.value.field == 'gds_image' and 'osTag' in str(error.value)


def test_turning_gpudirect_on_or_off_is_a_change_of_the_pod_template():
    plain = dtk_daemonset(dict(SPEC_OPEN, manager=MANAGER))
    full = dtk_daemonset(ALL)
    facts = facts_of(rhcos_node('w1'))
    for existing, desired in ((plain, full), (full, plain)):
        changes = plan_driver_changes([desired], [server_applied(existing)], facts)
        assert [old['metadata']['name'] for old, _new in changes['update']] == [desired['metadata']['name']]
        assert not is_subset(desired['spec']['template'], server_applied(existing)['spec']['template'])
    assert plan_driver_changes([full], [server_applied(full)], facts)['unchanged'] == [full['metadata']['name']]
