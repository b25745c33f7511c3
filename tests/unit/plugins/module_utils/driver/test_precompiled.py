# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.driver.names import PlanError
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.precompiled import precompiled_available
from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.facts import node_facts
from ansible_collections.accelerators.gpu.plugins.module_utils.registry.client import RegistryClient
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver.role_template import desired_driver_daemonsets
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.node_dicts import (
    KERNEL_416, KERNEL_418, RHCOS_418, rhcos_node, ubuntu_node)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.registry.test_registry_client import (
    DIGEST, FakeRegistries, answer, manifest_url)


def test_precompiled_available_feeds_the_kernel_mode_plan():
    """Kernels with a published image get precompiled DaemonSets; the others fall back to a DTK build."""
    nodes = [node_facts(node) for node in (
        rhcos_node('gpu-416', ocp='4.16'),
        rhcos_node('gpu-418', rhcos=RHCOS_418, kernel=KERNEL_418, ocp='4.18'),
        rhcos_node('cpu', gpu=False, kernel='5.14.0-1.el9.x86_64'),
        ubuntu_node('ubuntu'))]
    published = 'registry.example.com/nvidia/driver:535-%s-rhcos4.16' % KERNEL_416
    transport = FakeRegistries({
        manifest_url('registry.example.com', 'nvidia/driver', '535-%s-rhcos4.16' % KERNEL_416): answer(200),
        manifest_url('registry.example.com', 'nvidia/driver', '535-%s-rhcos4.18' % KERNEL_418): answer(404),
        manifest_url('registry.example.com', 'nvidia/driver', '535-5.15.0-100-generic-ubuntu22.04'): answer(404),
    })
    spec = {'namespace': 'nvidia-gpu-operator', 'repository': 'registry.example.com/nvidia', 'branch': '535',
            'version': '535.230.02'}
    available, checks = precompiled_available(spec, nodes, RegistryClient(transport))
    assert available == {published}
    # The CPU node's kernel is not asked about.
    assert sorted(checks) == sorted([published, 'registry.example.com/nvidia/driver:535-%s-rhcos4.18' % KERNEL_418,
                                     'registry.example.com/nvidia/driver:535-5.15.0-100-generic-ubuntu22.04'])

    dtk = {RHCOS_418: {'status': 'resolved', 'image': 'quay.io/openshift/dtk@' + DIGEST}}
    plan = desired_driver_daemonsets(spec, nodes, dtk, 'kernel', available)
    builds = dict((node, entry['build']) for node, entry in plan['assignments'].items())
    assert builds == {'gpu-416': 'precompiled', 'gpu-418': 'dtk', 'ubuntu': 'blocked'}


def test_precompiled_available_asks_about_the_kernels_to_prepare_on_the_nodes_os():
    nodes = [node_facts(ubuntu_node('ubuntu'))]
    target = 'registry.example.com/nvidia/driver:535-5.15.0-105-generic-ubuntu22.04'
    transport = FakeRegistries({
        manifest_url('registry.example.com', 'nvidia/driver', '535-5.15.0-100-generic-ubuntu22.04'): answer(200),
        manifest_url('registry.example.com', 'nvidia/driver', '535-5.15.0-105-generic-ubuntu22.04'): answer(404),
    })
    spec = {'namespace': 'gpu', 'repository': 'registry.example.com/nvidia', 'branch': '535'}
    available, checks = precompiled_available(spec, nodes, RegistryClient(transport),
                                              prepare_versions=['5.15.0-105-generic'])
    assert target in checks and target not in available
    with pytest.raises(PlanError) as error:
        desired_driver_daemonsets(spec, nodes, {}, 'kernel', available, prepare_versions=['5.15.0-105-generic'])
    assert target in str(error.value)
