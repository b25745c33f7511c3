# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU feature discovery labels: what a node lacks, what the uninstall removes, the status fallback to NFD."""

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.gfd_labels import (
    MIG_STRATEGY, WAITED, driver_version, gpu_summary, is_gfd_label, label_problems, nodes_label_problems,
    waited_labels)

NFD = 'feature.node.kubernetes.io/'
A100 = {
    'nvidia.com/gpu.product': 'NVIDIA-A100-SXM4-80GB', 'nvidia.com/gpu.memory': '81920', 'nvidia.com/gpu.count': '8',
    'nvidia.com/gpu.family': 'ampere', 'nvidia.com/gpu.compute.major': '8', 'nvidia.com/gpu.compute.minor': '0',
    'nvidia.com/cuda.driver.major': '570', 'nvidia.com/cuda.driver.minor': '172', 'nvidia.com/cuda.driver.rev': '08',
    'nvidia.com/gpu.machine': 'PowerEdge-XE8545', 'nvidia.com/mig.capable': 'true',
}


def node(name, labels):
    return {'metadata': {'name': name, 'labels': labels}}


def test_a_fully_labelled_node_lacks_nothing():
    keys, expected = waited_labels('none')
    assert keys == list(WAITED) and expected == {}
    assert label_problems(A100, keys, expected) == []


def test_mig_strategy_is_waited_for_only_when_gfd_writes_it():
    keys, expected = waited_labels('single')
    assert keys[-1] == MIG_STRATEGY and expected == {MIG_STRATEGY: 'single'}
    assert label_problems(A100, keys, expected) == ['nvidia.com/mig.strategy missing']
    assert label_problems(dict(A100, **{MIG_STRATEGY: 'mixed'}), keys, expected) == [
        'nvidia.com/mig.strategy=mixed, expected single']
    assert label_problems(dict(A100, **{MIG_STRATEGY: 'single'}), keys, expected) == []


@pytest.mark.parametrize('key, value, problem', [
    ('nvidia.com/gpu.memory', '80GiB', 'nvidia.com/gpu.memory=80GiB is not a number'),
    ('nvidia.com/gpu.count', '0', 'nvidia.com/gpu.count=0'),
    ('nvidia.com/mig.capable', 'yes', 'nvidia.com/mig.capable=yes is not true or false'),
    ('nvidia.com/gpu.product', '', 'nvidia.com/gpu.product is empty'),
    ('nvidia.com/cuda.driver.minor', '', 'nvidia.com/cuda.driver.minor= is not a number'),
])
def test_malformed_values_are_named(key, value, problem):
    assert label_problems(dict(A100, **{key: value}), WAITED) == [problem]


def test_an_empty_driver_revision_is_gfds_own_for_a_two_part_version():
    assert label_problems(dict(A100, **{'nvidia.com/cuda.driver.rev': ''}), WAITED) == []


def test_an_invalid_mig_layout_is_explained_once():
    labels = dict(A100, **{'nvidia.com/gpu.product': 'NVIDIA-A100-SXM4-80GB-MIG-INVALID', 'nvidia.com/gpu.count': '0',
                           'nvidia.com/gpu.memory': '0'})
    (problem,) = label_problems(labels, WAITED)
    assert problem.startswith('nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB-MIG-INVALID: GFD found a MIG layout')


def test_nodes_label_problems_names_each_node_and_what_it_lacks():
    bare = dict((key, value) for key, value in A100.items() if key != 'nvidia.com/gpu.memory')
    problems = nodes_label_problems([node('a', A100), node('b', bare), node('c', {})], ['a', 'b', 'c', 'gone'],
                                    WAITED)
    assert sorted(problems) == ['b', 'c', 'gone']
    assert problems['b'] == ['nvidia.com/gpu.memory missing']
    assert len(problems['c']) == len(WAITED)
    assert problems['gone'] == ['node gone not found']


@pytest.mark.parametrize('key', list(A100) + [
    'nvidia.com/gfd.timestamp', 'nvidia.com/gpu.replicas', 'nvidia.com/gpu.mode', 'nvidia.com/mig.strategy',
    'nvidia.com/mps.capable', 'nvidia.com/cuda.runtime.major', 'nvidia.com/cuda.driver-version.full',
    'nvidia.com/cuda.runtime-version.full', 'nvidia.com/gpu.multiprocessors', 'nvidia.com/gpu.slices.gi',
    'nvidia.com/gpu.engines.copy', 'nvidia.com/mig-1g.10gb.count', 'nvidia.com/mig-3g.40gb.memory',
    'nvidia.com/mig-1g.10gb.product', 'nvidia.com/gpu.clique', 'nvidia.com/vgpu.present',
    'nvidia.com/gpu.sharing-strategy'])
def test_gfd_labels_are_recognised(key):
    assert is_gfd_label(key)


@pytest.mark.parametrize('key', [
    'nvidia.com/gpu.present', 'nvidia.com/gpu.deploy.driver', 'nvidia.com/gpu.deploy.gpu-feature-discovery',
    'nvidia.com/gpu-driver-upgrade-state', 'nvidia.com/gpu-driver-upgrade.skip', 'nvidia.com/mig.config',
    'nvidia.com/mig.config.state', 'nvidia.com/device-plugin.config', 'nvidia.com/gpu', 'example.com/gpu.product',
    'nvidia.com/gpu.product.extra', NFD + 'pci-10de.present'])
def test_other_labels_are_not_gfds(key):
    assert not is_gfd_label(key)


def test_gpu_summary_from_gfd():
    assert gpu_summary(A100) == {'product': 'NVIDIA-A100-SXM4-80GB', 'memory': 81920, 'mig_capable': True,
                                 'source': 'gfd'}


@pytest.mark.parametrize('label, product, memory, capable', [
    ('pci-0302_10de_2330.present', 'NVIDIA-H100-80GB-HBM3', 81559, True),
    ('pci-10de_26b9.present', 'NVIDIA-L40S', 46068, False),
    ('pci-0302_10de_1eb8.present', 'Tesla-T4', 15360, False),
    ('pci-0302_10de_ffff.present', 'NVIDIA-10de-ffff', None, None),
])
def test_gpu_summary_falls_back_to_nfd_pci_device_labels(label, product, memory, capable):
    assert gpu_summary({NFD + label: 'true', NFD + 'pci-0200_1af4_1000.present': 'true'}) == {
        'product': product, 'memory': memory, 'mig_capable': capable, 'source': 'pci'}


def test_gpu_summary_without_a_device_id_is_unknown():
    assert gpu_summary({NFD + 'pci-10de.present': 'true'}) == {
        'product': None, 'memory': None, 'mig_capable': None, 'source': None}


@pytest.mark.parametrize('labels, version', [
    # Newer GFD writes both names; the whole version wins.
    (dict(A100, **{'nvidia.com/cuda.driver-version.full': '570.172.08'}), '570.172.08'),
    (A100, '570.172.08'),
    # A two-part version: GFD leaves the revision empty.
    ({'nvidia.com/cuda.driver.major': '575', 'nvidia.com/cuda.driver.minor': '51', 'nvidia.com/cuda.driver.rev': ''},
     '575.51'),
    ({'nvidia.com/gpu.product': 'NVIDIA-L40S'}, None),
    ({}, None),
])
def test_driver_version_is_gfds_whole_version_else_its_parts(labels, version):
    assert driver_version(labels) == version


def test_the_role_waits_for_the_labels_this_module_checks():
    import os
    import yaml
    root = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', '..')
    with open(os.path.join(root, 'roles', 'gpu_feature_discovery', 'vars', 'main.yml')) as handle:
        role_vars = yaml.safe_load(handle)
    assert role_vars['gpu_feature_discovery_waited_labels'] == list(WAITED)
