# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG layouts of nodes: who can take one, the label patches, the progress read from the MIG manager's labels and the
node's resources, and what the uninstall removes."""

from ansible_collections.accelerators.gpu.plugins.module_utils.mig_config import (
    SET_ANNOTATION, config_patch, expected_resources, layout_progress, refusals, removal_patch)

CONFIG = {'mig-configs': {'all-disabled': [{'devices': 'all', 'mig-enabled': False}],
                          'all-1g.10gb': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 7}}]}}


def node(name, labels=None, annotations=None, allocatable=None):
    return {'metadata': {'name': name, 'labels': labels or {}, 'annotations': annotations or {}},
            'status': {'allocatable': allocatable or {}}}


A100 = {'nvidia.com/gpu.product': 'NVIDIA-A100-SXM4-80GB', 'nvidia.com/gpu.count': '2', 'nvidia.com/mig.capable': 'true'}
L40S = {'nvidia.com/gpu.product': 'NVIDIA-L40S', 'nvidia.com/gpu.count': '1', 'nvidia.com/mig.capable': 'false'}


def test_nodes_without_mig_missing_or_unknown_are_refused_by_name_and_gpu():
    nodes = [node('a', A100), node('l', L40S), node('cpu')]
    assert refusals(nodes, ['a']) == []
    assert refusals(nodes, ['a', 'l', 'cpu', 'gone']) == [
        'node l: GPU NVIDIA-L40S is not MIG-capable',
        'node cpu: MIG capability of its GPU none found unknown (no nvidia.com/mig.capable label from GPU feature '
        'discovery)',
        'node gone not found']


def test_expected_resources_follow_the_gpu_count_and_strategy():
    assert expected_resources(node('a', A100), CONFIG, 'all-1g.10gb', 'mixed') == {
        'nvidia.com/gpu': 0, 'nvidia.com/mig-1g.10gb': 14}
    assert expected_resources(node('a', A100), CONFIG, 'all-disabled', 'mixed') == {'nvidia.com/gpu': 2}


def test_the_patch_asks_for_the_layout_and_resets_the_state_only_when_it_changes():
    asked = config_patch(node('a', dict(A100, **{'nvidia.com/mig.config': 'all-disabled'})), 'all-1g.10gb')
    assert asked == {'metadata': {'labels': {'nvidia.com/mig.config': 'all-1g.10gb',
                                             'nvidia.com/mig.config.state': 'pending'},
                                  'annotations': {SET_ANNOTATION: 'all-1g.10gb'}}}
    assert config_patch(node('a', dict(A100, **{'nvidia.com/mig.config': 'all-1g.10gb'})), 'all-1g.10gb') == {}
    # The default goes only where no layout is named: an admin's choice stays.
    assert config_patch(node('a', dict(A100, **{'nvidia.com/mig.config': 'custom'})), 'all-disabled',
                        only_unlabelled=True) == {}
    assert config_patch(node('a', A100), 'all-disabled', only_unlabelled=True)['metadata']['labels'] == {
        'nvidia.com/mig.config': 'all-disabled', 'nvidia.com/mig.config.state': 'pending'}


def test_progress_needs_success_and_the_resources_and_names_a_failure():
    expected = {'nvidia.com/gpu': 0, 'nvidia.com/mig-1g.10gb': 14}
    labels = dict(A100, **{'nvidia.com/mig.config': 'all-1g.10gb', 'nvidia.com/mig.config.state': 'pending'})
    assert layout_progress(node('a', labels), 'all-1g.10gb', expected) == (
        'waiting', 'node a: nvidia.com/mig.config.state=pending')
    labels['nvidia.com/mig.config.state'] = 'success'
    assert layout_progress(node('a', labels, allocatable={'nvidia.com/gpu': '2'}), 'all-1g.10gb', expected) == (
        'waiting', 'node a: nvidia.com/mig.config.state=success, allocatable nvidia.com/gpu=2 (expected 0), '
        'nvidia.com/mig-1g.10gb=0 (expected 14)')
    done = node('a', labels, allocatable={'nvidia.com/gpu': '0', 'nvidia.com/mig-1g.10gb': '14', 'cpu': '8'})
    assert layout_progress(done, 'all-1g.10gb', expected) == ('success', None)
    labels['nvidia.com/mig.config.state'] = 'failed'
    assert layout_progress(node('a', labels), 'all-1g.10gb', expected)[0] == 'failed'
    assert 'node a: nvidia.com/mig.config.state=failed applying all-1g.10gb' in layout_progress(
        node('a', labels), 'all-1g.10gb', expected)[1]


def test_the_uninstall_removes_only_what_the_collection_set():
    ours = node('a', {'nvidia.com/mig.config': 'all-disabled', 'nvidia.com/mig.config.state': 'success'},
                {SET_ANNOTATION: 'all-disabled'})
    assert removal_patch(ours) == {'metadata': {'annotations': {SET_ANNOTATION: None}, 'labels': {
        'nvidia.com/mig.config': None, 'nvidia.com/mig.config.state': None}}}
    changed_since = node('a', {'nvidia.com/mig.config': 'custom'}, {SET_ANNOTATION: 'all-disabled'})
    assert removal_patch(changed_since) == {'metadata': {'annotations': {SET_ANNOTATION: None}}}
    assert removal_patch(node('a', {'nvidia.com/mig.config': 'custom'})) == {}
