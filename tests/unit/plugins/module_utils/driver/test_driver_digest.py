# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""DRIVER_CONFIG_DIGEST on the driver DaemonSets the role's template renders: where it is set, what changes it and
what does not (the GPU Operator's internal/config/driver_config_digest.go)."""

import copy
import hashlib

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.driver.digest import DIGEST_ENV, config_digest
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver.role_template import desired_driver_daemonsets
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver.test_driver_plan import DTK, SPEC, facts_of, node_418
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.node_dicts import rhcos_node, ubuntu_node

MANAGER = {'image': 'nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.8.1', 'env': []}
BASE = dict(SPEC, manager=MANAGER, gds_image='nvcr.io/nvidia/cloud-native/nvidia-fs:2.20.5',
            kernel_module_type='open')


def rendered(**settings):
    return desired_driver_daemonsets(dict(BASE, **settings), facts_of(rhcos_node('w1')), DTK, 'rhcos')['desired'][0]


def digests(daemonset):
    """{container: its DRIVER_CONFIG_DIGEST} of the containers that have one."""
    pod_spec = daemonset['spec']['template']['spec']
    return dict((c['name'], e['value']) for c in pod_spec.get('initContainers', []) + pod_spec['containers']
                for e in c.get('env') or [] if e['name'] == DIGEST_ENV)


def digest(**settings):
    values = set(digests(rendered(**settings)).values())
    assert len(values) == 1
    return values.pop()


def test_set_on_the_manager_driver_and_dtk_containers_alike():
    daemonset = rendered()
    found = digests(daemonset)
    assert sorted(found) == ['k8s-driver-manager', 'nvidia-driver-ctr', 'openshift-driver-toolkit-ctr']
    assert len(set(found.values())) == 1
    # The digest of the pod spec leaves its own entry out: recomputed from the rendered DaemonSet it is the same.
    assert found['nvidia-driver-ctr'] == config_digest(daemonset['spec']['template']['spec'])


def test_a_daemonset_without_manager_or_dtk_has_it_on_the_driver_container():
    plan = desired_driver_daemonsets(dict(SPEC), facts_of(ubuntu_node('u1')), {}, 'single')
    assert list(digests(plan['desired'][0])) == ['nvidia-driver-ctr']


@pytest.mark.parametrize('settings', [
    {'version': '570.172.08'},
    {'env': [{'name': 'NVIDIA_DRIVER_PARAMS', 'value': 'NVreg_EnableGpuFirmware=0'}]},
    {'manager': dict(MANAGER, env=[{'name': 'ENABLE_GPU_POD_EVICTION', 'value': 'false'}])},
    {'manager': dict(MANAGER, image='nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.12.0')},
    {'trusted_ca_config_map': 'proxy-ca'},
    {'rdma': True},
    {'gds_image': None},
], ids=','.join)
def test_an_install_setting_changes_it(settings):
    assert digest(**settings) != digest()


@pytest.mark.parametrize('settings', [
    {'labels': {'team': 'ml'}},
    {'annotations': {'example.com/owner': 'ml'}},
    {'tolerations': [{'operator': 'Exists'}]},
    {'node_selector': {'pool': 'a100'}},
    {'resources': {'limits': {'memory': '2Gi'}}},
    {'priority_class_name': 'high'},
    {'image_pull_policy': 'Always'},
    {'image_pull_secrets': ['pull']},
    {'startup_probe': {'exec': {'command': ['true']}}},
], ids=','.join)
def test_a_setting_that_installs_nothing_leaves_it(settings):
    assert digest(**settings) == digest()


def test_another_rhcos_build_is_another_install():
    plan = desired_driver_daemonsets(BASE, facts_of(rhcos_node('w1'), node_418('w2')), DTK, 'rhcos')
    first, second = (set(digests(daemonset).values()) for daemonset in plan['desired'])
    assert first != second


def test_order_of_env_mounts_and_volumes_does_not_count():
    pod_spec = rendered()['spec']['template']['spec']
    shuffled = copy.deepcopy(pod_spec)
    for container in shuffled['containers']:
        container['env'] = list(reversed(container.get('env') or []))
        container['volumeMounts'] = list(reversed(container.get('volumeMounts') or []))
    shuffled['volumes'].reverse()
    assert config_digest(shuffled) == config_digest(pod_spec)


def test_empty_settings_count_as_absent():
    pod_spec = {'containers': [{'name': 'nvidia-driver-ctr', 'image': 'driver:1'}], 'volumes': [{'name': 'scratch'}]}
    padded = {'containers': [{'name': 'nvidia-driver-ctr', 'image': 'driver:1', 'args': [], 'env': [],
                              'volumeMounts': []}],
              'initContainers': [], 'volumes': [{'name': 'scratch', 'emptyDir': {}}]}
    assert config_digest(padded) == config_digest(pod_spec)


def test_the_encoding_is_fixed():
    # sha256 of the sorted, compact JSON of the settings: a change of this encoding would reinstall every driver.
    pod_spec = {'containers': [{'name': 'nvidia-driver-ctr', 'image': 'driver:1', 'command': ['nvidia-driver'],
                                'env': [{'name': 'A', 'value': '1'}, {'name': 'NODE_NAME', 'valueFrom': {}}],
                                'volumeMounts': [{'name': 'run-nvidia', 'mountPath': '/run/nvidia'}]}],
                'volumes': [{'name': 'run-nvidia', 'hostPath': {'path': '/run/nvidia'}}]}
    text = ('{"containers":{"nvidia-driver-ctr":{"command":["nvidia-driver"],"env":[["A","1"]],"image":"driver:1",'
            '"volume_mounts":[["run-nvidia","/run/nvidia","",false]]}},"volumes":{"run-nvidia":{"host_path":'
            '"/run/nvidia"}}}')
    assert config_digest(pod_spec) == hashlib.sha256(text.encode('utf-8')).hexdigest()


def test_the_content_of_a_mounted_config_map_counts_as_an_install_setting():
    """A new module parameter in the kernel-module ConfigMap changes no pod spec field, but what is installed: the
    digest changes with it (so the DaemonSet's template, and a rollout follows), and with nothing else."""
    def with_parameters(text):
        data = {'module-params': {'nvidia.conf': text}} if text is not None else None
        plan = desired_driver_daemonsets(dict(BASE, kernel_module_config='module-params'), facts_of(rhcos_node('w1')),
                                         DTK, 'rhcos', config_map_keys={'module-params': ['nvidia.conf']},
                                         config_map_data=data)
        return set(digests(plan['desired'][0]).values()).pop()
    first = with_parameters('NVreg_EnableGpuFirmware=0\n')
    assert with_parameters('NVreg_EnableGpuFirmware=0\n') == first
    assert with_parameters('NVreg_EnableGpuFirmware=1\n') != first
    # Without the content: the digest of the pod spec alone.
    assert with_parameters(None) != first
