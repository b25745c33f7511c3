# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Open or proprietary kernel modules: the env the driver container gets (as the GPU Operator's transformDriverContainer
sets it), how auto resolves, which GPUs need the open modules, and the plans refused before any write."""

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.driver.kernel_modules import (
    gds_needs_open_modules, kernel_module_refusals, open_modules_needed, resolved_module_type)
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.names import PlanError
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver.role_template import desired_driver_daemonsets
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver.test_driver_plan import (
    DTK, SPEC, container, facts_of)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.node_dicts import rhcos_node, ubuntu_node

B200 = {'nvidia.com/gpu.product': 'NVIDIA-B200', 'nvidia.com/gpu.family': 'blackwell',
        'nvidia.com/gpu.compute.major': '10', 'nvidia.com/gpu.compute.minor': '0'}
GH200 = {'nvidia.com/gpu.product': 'NVIDIA-GH200-480GB', 'nvidia.com/gpu.family': 'hopper',
         'nvidia.com/gpu.compute.major': '9', 'nvidia.com/gpu.compute.minor': '0'}
H100 = {'nvidia.com/gpu.product': 'NVIDIA-H100-80GB-HBM3', 'nvidia.com/gpu.family': 'hopper',
        'nvidia.com/gpu.compute.major': '9', 'nvidia.com/gpu.compute.minor': '0'}
GDS_NEW = 'nvcr.io/nvidia/cloud-native/nvidia-fs:2.20.5'
GDS_OLD = 'nvcr.io/nvidia/cloud-native/nvidia-fs:2.17.3'
SPEC_595 = dict(SPEC, version='595.91.07', branch='595')


def env(daemonset):
    return [(entry['name'], entry.get('value')) for entry in container(daemonset, 'nvidia-driver-ctr')['env']]


@pytest.mark.parametrize('setting, expected', [
    ('open', [('KERNEL_MODULE_TYPE', 'open'), ('OPEN_KERNEL_MODULES_ENABLED', 'true')]),
    ('proprietary', [('KERNEL_MODULE_TYPE', 'proprietary')]),
    # The GPU Operator sets auto too (its default, kernelModuleType: auto).
    ('auto', [('KERNEL_MODULE_TYPE', 'auto')]),
    (None, []),
])
def test_the_driver_container_gets_the_module_type_as_the_gpu_operator_sets_it(setting, expected):
    spec = dict(SPEC, kernel_module_type=setting) if setting else SPEC
    plan = desired_driver_daemonsets(spec, facts_of(rhcos_node('a')), DTK, 'rhcos')
    names = [name for name, _value in env(plan['desired'][0])]
    assert [item for item in env(plan['desired'][0]) if item[0] in (
        'KERNEL_MODULE_TYPE', 'OPEN_KERNEL_MODULES_ENABLED')] == expected
    # After the GPUDirect settings, as transformDriverContainer sets it.
    assert names[:2] == ['NODE_NAME', 'NODE_IP']


@pytest.mark.parametrize('setting, version, expected', [
    ('open', '550.90.07', 'open'), ('proprietary', '595.91.07', 'proprietary'),
    ('auto', '550.90.07', 'proprietary'), ('auto', '560.35.03', 'open'), ('auto', '570', 'open'),
    (None, '555.42.06', 'proprietary'), ('auto', None, None)])
def test_auto_resolves_by_branch_as_the_driver_container_falls_back(setting, version, expected):
    assert resolved_module_type(setting, version) == expected


@pytest.mark.parametrize('labels, needed', [
    (B200, 'Blackwell GPUs (NVIDIA-B200)'),
    (GH200, 'Grace Hopper GPUs (NVIDIA-GH200-480GB)'),
    ({'nvidia.com/gpu.product': 'NVIDIA-GB200'}, 'Blackwell GPUs (NVIDIA-GB200)'),
    ({'nvidia.com/gpu.product': 'NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition'},
     'Blackwell GPUs (NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition)'),
    # An older GFD names compute capability 10 and 12 'undefined'.
    ({'nvidia.com/gpu.product': 'NVIDIA-Thor', 'nvidia.com/gpu.family': 'undefined',
      'nvidia.com/gpu.compute.major': '12'}, 'Blackwell GPUs (NVIDIA-Thor)'),
    ({'nvidia.com/gpu.family': 'blackwell'}, 'Blackwell GPUs (nvidia.com/gpu.family=blackwell)'),
    (H100, None), ({'nvidia.com/gpu.product': 'NVIDIA-A100-SXM4-80GB', 'nvidia.com/gpu.family': 'ampere'}, None),
    # Not labelled by GFD yet: nothing tells.
    ({}, None)])
def test_gpus_that_run_only_on_the_open_modules_by_gfd_labels(labels, needed):
    assert open_modules_needed(labels) == needed


@pytest.mark.parametrize('image, needed', [
    (GDS_NEW, True), ('nvcr.io/nvidia/cloud-native/nvidia-fs:2.17.5', True), ('registry:5000/nvidia-fs:v2.29.4', True),
    (GDS_OLD, False), ('registry:5000/nvidia-fs:2.16.1', False),
    # A digest, as the GPU Operator takes it: a version only the open modules support.
    ('nvcr.io/nvidia/cloud-native/nvidia-fs@sha256:' + 'f' * 64, True),
    ('registry:5000/nvidia-fs:latest', True), ('registry:5000/nvidia-fs', True)])
def test_gds_from_2_17_5_needs_the_open_modules(image, needed):
    assert gds_needs_open_modules(image) is needed


def plan_nodes(*labels_by_node):
    return facts_of(*[rhcos_node(name, extra=labels) for name, labels in labels_by_node])


def test_proprietary_on_blackwell_and_grace_hopper_is_refused_naming_nodes_and_setting():
    nodes = plan_nodes(('b200-0', B200), ('b200-1', B200), ('gh-0', GH200), ('h100-0', H100))
    with pytest.raises(PlanError) as error:
        desired_driver_daemonsets(dict(SPEC_595, kernel_module_type='proprietary'), nodes, DTK, 'rhcos')
    message = str(error.value)
    assert error.value.field == 'kernel_module_type'
    assert 'node(s) b200-0, b200-1 carry Blackwell GPUs (NVIDIA-B200)' in message
    assert 'node(s) gh-0 carry Grace Hopper GPUs (NVIDIA-GH200-480GB)' in message
    assert 'h100-0' not in message
    assert "set kernel_module_type open (the driver role's driver_kernel_module_type)" in message


def test_auto_below_560_on_blackwell_is_refused_and_from_560_planned():
    nodes = plan_nodes(('b200-0', B200))
    with pytest.raises(PlanError) as error:
        desired_driver_daemonsets(dict(SPEC, kernel_module_type='auto'), nodes, DTK, 'rhcos')
    assert ('kernel_module_type auto, which driver nvcr.io/nvidia/driver:550.90.07-rhcos4.16 resolves to proprietary'
            in str(error.value))
    plan = desired_driver_daemonsets(dict(SPEC_595, kernel_module_type='auto'), nodes, DTK, 'rhcos')
    assert [ds['metadata']['name'] for ds in plan['desired']] == ['nvidia-driver-daemonset-416.94.202405081406-0']
    assert desired_driver_daemonsets(dict(SPEC, kernel_module_type='open'), nodes, DTK, 'rhcos')['desired']


def test_a_node_without_a_driver_pod_is_not_refused():
    pre_installed = dict(B200, **{'nvidia.com/gpu.deploy.driver': 'pre-installed'})
    plan = desired_driver_daemonsets(dict(SPEC_595, kernel_module_type='proprietary'),
                                     plan_nodes(('host', pre_installed), ('h100', H100)), DTK, 'rhcos')
    assert plan['assignments']['host']['build'] == 'host'


def test_gds_from_2_17_5_with_proprietary_modules_is_refused_on_every_node():
    nodes = facts_of(ubuntu_node('u-0', extra=H100), ubuntu_node('u-1'))
    with pytest.raises(PlanError) as error:
        desired_driver_daemonsets(dict(SPEC_595, kernel_module_type='proprietary', gds_image=GDS_NEW), nodes, DTK,
                                  'single')
    assert ('GPUDirect Storage %s (from nvidia-fs 2.17.5) is supported only with the open kernel modules, on node(s) '
            'u-0, u-1; set kernel_module_type open' % GDS_NEW) in str(error.value)
    # An older nvidia-fs, open modules, or auto on a branch from 560 are planned.
    for spec in (dict(SPEC_595, kernel_module_type='proprietary', gds_image=GDS_OLD),
                 dict(SPEC, kernel_module_type='open', gds_image=GDS_NEW),
                 dict(SPEC_595, kernel_module_type='auto', gds_image=GDS_NEW)):
        assert desired_driver_daemonsets(spec, nodes, DTK, 'single')['desired']


def test_many_nodes_are_named_up_to_twenty():
    assignments = dict(('n-%02d' % index, {'daemonset': 'ds', 'image': 'nvcr.io/nvidia/driver:595.91.07-ubuntu24.04'})
                       for index in range(25))
    facts = [{'name': name, 'labels': B200} for name in assignments]
    refusal, = kernel_module_refusals('proprietary', assignments, facts)
    assert 'n-19 and 5 more carry' in refusal and 'n-20' not in refusal
