# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG layouts of nodes: who can take one, the label patches, the progress read from the MIG manager's labels and the
node's resources, and what the uninstall removes."""

import pytest
import yaml

from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.errors import TaskError
from ansible_collections.accelerators.gpu.plugins.module_utils.mig.config import (
    CONFIG_LABEL, MIG_MANAGER_LABELS_ANNOTATION, SET_ANNOTATION, STATE_LABEL, config_patch, layout_progress, node_layouts,
    refusals, removal_patch, run, strategy_refusal)
from ansible_collections.accelerators.gpu.plugins.module_utils.mig.parted import advertised_resources
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.fakes import Deadlines, FakeModule

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
    assert advertised_resources(node_layouts(node('a', A100), CONFIG, 'all-1g.10gb'), 'mixed') == {
        'nvidia.com/gpu': 0, 'nvidia.com/mig-1g.10gb': 14}
    assert advertised_resources(node_layouts(node('a', A100), CONFIG, 'all-disabled'), 'mixed') == {'nvidia.com/gpu': 2}


def test_a_layout_enabling_mig_is_refused_under_the_none_strategy_naming_the_setting():
    layouts = {'a': node_layouts(node('a', A100), CONFIG, 'all-1g.10gb'), 'b': [None, None]}
    assert strategy_refusal(layouts, 'all-1g.10gb', 'none') == (
        'MIG layout all-1g.10gb enables MIG on node(s) a, but the MIG strategy is none: the device plugin would keep '
        'advertising whole GPUs (nvidia.com/gpu) and no MIG device would appear. Set common_mig_strategy '
        '(mig_strategy) to single or mixed, as the deploy gave it to the device plugin and GPU feature discovery '
        '(deploy again after changing it); nothing changed')
    # MIG enabled without devices counts too; disabling it, or another strategy, is fine.
    assert strategy_refusal({'a': [{}, None]}, 'all-enabled', 'none') is not None
    assert strategy_refusal({'b': [None, None]}, 'all-disabled', 'none') is None
    for strategy in ('single', 'mixed'):
        assert strategy_refusal(layouts, 'all-1g.10gb', strategy) is None


def test_the_patch_asks_for_the_layout_and_resets_the_state_only_when_it_changes():
    asked = config_patch(node('a', dict(A100, **{'nvidia.com/mig.config': 'all-disabled',
                                                 'nvidia.com/gpu.deploy.nvsm': 'false'})), 'all-1g.10gb')
    # The MIG manager's client labels the node lacks (it sets them to true around a change), for the uninstall.
    assert asked == {'metadata': {'labels': {'nvidia.com/mig.config': 'all-1g.10gb',
                                             'nvidia.com/mig.config.state': 'pending'},
                                  'annotations': {SET_ANNOTATION: 'all-1g.10gb',
                                                  MIG_MANAGER_LABELS_ANNOTATION: 'nvidia.com/gpu.deploy.dcgm'}}}
    # Recorded once: what the node lacked before the first layout the collection asked for.
    later = node('a', {'nvidia.com/mig.config': 'all-1g.10gb', 'nvidia.com/gpu.deploy.dcgm': 'true'},
                 {MIG_MANAGER_LABELS_ANNOTATION: 'nvidia.com/gpu.deploy.dcgm'})
    assert MIG_MANAGER_LABELS_ANNOTATION not in config_patch(later, 'all-disabled')['metadata']['annotations']
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
    # GPU feature discovery, stopped for the change, has not labelled the node again yet.
    relabelling = node('a', {key: value for key, value in labels.items() if key != 'nvidia.com/mig.capable'},
                       allocatable={'nvidia.com/gpu': '0', 'nvidia.com/mig-1g.10gb': '14'})
    assert layout_progress(relabelling, 'all-1g.10gb', expected) == (
        'waiting', 'node a: nvidia.com/mig.config.state=success, no GPU feature discovery labels yet')
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
    # The MIG manager's client labels the node lacked before the collection asked for a layout go; others stay.
    restarted = node('a', {'nvidia.com/mig.config': 'all-1g.10gb', 'nvidia.com/gpu.deploy.dcgm': 'true',
                           'nvidia.com/gpu.deploy.nvsm': 'true'},
                     {SET_ANNOTATION: 'all-1g.10gb', MIG_MANAGER_LABELS_ANNOTATION: 'nvidia.com/gpu.deploy.dcgm'})
    assert removal_patch(restarted) == {'metadata': {
        'annotations': {SET_ANNOTATION: None, MIG_MANAGER_LABELS_ANNOTATION: None},
        'labels': {'nvidia.com/mig.config': None, 'nvidia.com/gpu.deploy.dcgm': None}}}


class FakeAPI(Deadlines):
    """Nodes and the layouts' ConfigMap in memory; a patch of nvidia.com/mig.config is answered, as the MIG manager
    would, with the state `outcome` gives for that node, and the resources."""

    def __init__(self, nodes, outcome=None):
        self.nodes = dict((n['metadata']['name'], n) for n in nodes)
        self.outcome = outcome or {}
        self.patches = []

    def list_nodes(self, label_selector=None):
        key, _sep, value = (label_selector or '=').partition('=')
        return [n for n in self.nodes.values() if not key or n['metadata']['labels'].get(key) == value]

    def read_node(self, name):
        return self.nodes[name]

    def read_optional(self, path):
        assert path == '/api/v1/namespaces/gpu/configmaps/default-mig-parted-config'
        return {'data': {'config.yaml': yaml.safe_dump(CONFIG)}}, True

    def patch_node(self, name, patch):
        self.patches.append((name, patch))
        metadata = self.nodes[name]['metadata']
        for key in ('labels', 'annotations'):
            for label, value in patch['metadata'].get(key, {}).items():
                if value is None:
                    metadata[key].pop(label, None)
                else:
                    metadata[key][label] = value
        if CONFIG_LABEL in (patch['metadata'].get('labels') or {}):
            state, allocatable = self.outcome.get(name, ('success', {}))
            metadata['labels'][STATE_LABEL] = state
            self.nodes[name]['status']['allocatable'] = allocatable


def params(**values):
    base = dict(action='apply', nodes=[], label_selector=None, config='all-1g.10gb', namespace='gpu',
                config_map='default-mig-parted-config', mig_strategy='mixed', timeout=10, poll_interval=1)
    base.update(values)
    return base


def run_module_work(api, check_mode=False, **values):
    clock = iter(range(1000))
    return run(FakeModule(params(**values), check_mode=check_mode), api, clock=lambda: next(clock),
               sleep=lambda seconds: None)


def test_a_node_without_mig_refuses_the_layout_before_any_label():
    api = FakeAPI([node('a', dict(A100)), node('l', dict(L40S))])
    with pytest.raises(TaskError, match='MIG layout all-1g.10gb refused, nothing changed: node l: GPU NVIDIA-L40S'):
        run_module_work(api, nodes=['a', 'l'])
    with pytest.raises(TaskError, match='no MIG layout all-9g.1gb'):
        run_module_work(api, nodes=['a'], config='all-9g.1gb', action='check')
    for action in ('check', 'apply'):
        with pytest.raises(TaskError, match='MIG layout all-1g.10gb enables MIG on node.s. a, but the MIG strategy is '
                                            'none') as refused:
            run_module_work(api, nodes=['a'], action=action, mig_strategy='none')
        assert refused.value.result['refused'][0].endswith('nothing changed')
    assert run_module_work(api, nodes=['a'], action='check', config='all-disabled', mig_strategy='none')['changing'] == ['a']
    assert api.patches == []


def test_apply_labels_the_nodes_not_at_the_layout_and_waits_for_their_devices():
    done = {'nvidia.com/gpu': '0', 'nvidia.com/mig-1g.10gb': '14'}
    api = FakeAPI([node('a', dict(A100)), node('b', dict(A100))], {'a': ('success', done), 'b': ('success', done)})
    checked = run_module_work(api, action='check', nodes=['a', 'b'])
    assert (checked['changed'], checked['changing'], api.patches) == (False, ['a', 'b'], [])
    applied = run_module_work(api, nodes=['a', 'b'])
    assert (applied['changed'], [name for name, _patch in api.patches]) == (True, ['a', 'b'])
    assert run_module_work(api, nodes=['a', 'b'])['changed'] is False


def test_a_failed_node_is_named_and_a_late_one_at_the_timeout():
    api = FakeAPI([node('a', dict(A100)), node('b', dict(A100))],
                  {'a': ('failed', {}), 'b': ('pending', {'nvidia.com/gpu': '2'})})
    with pytest.raises(TaskError, match='MIG layout all-1g.10gb failed on a: node a: nvidia.com/mig.config.state=failed') as failed:
        run_module_work(api, nodes=['a', 'b'])
    assert failed.value.result['failed_nodes'] == ['a']
    with pytest.raises(TaskError, match='not applied within 10 s: node b: nvidia.com/mig.config.state=pending'):
        run_module_work(api, nodes=['b'])


def test_default_labels_only_unlabelled_mig_nodes_and_remove_takes_back_only_those():
    admin = node('c', dict(A100, **{CONFIG_LABEL: 'custom'}))
    api = FakeAPI([node('a', dict(A100)), admin])
    assert run_module_work(api, action='default', config='all-disabled',
                           label_selector='nvidia.com/mig.capable=true')['nodes'] == ['a']
    assert api.nodes['a']['metadata']['labels'][CONFIG_LABEL] == 'all-disabled'
    assert run_module_work(api, action='remove')['nodes'] == ['a']
    assert CONFIG_LABEL not in api.nodes['a']['metadata']['labels']
    assert api.nodes['c']['metadata']['labels'][CONFIG_LABEL] == 'custom'
    with pytest.raises(TaskError, match='nodes not found: gone'):
        run_module_work(api, action='remove', nodes=['gone'])


REMEDIATION_STATE = 'accelerators.gpu/gpu-remediation-state'


def test_a_node_under_gpu_remediation_is_neither_checked_nor_labelled_and_is_named():
    done = {'nvidia.com/gpu': '0', 'nvidia.com/mig-1g.10gb': '14'}
    # Its GPU feature discovery labels may be gone while its GPUs are reset: not refused for that either.
    quarantined = node('q', {REMEDIATION_STATE: 'reset-required'})
    held = node('h', dict(A100, **{REMEDIATION_STATE: 'rma'}))
    api = FakeAPI([node('a', dict(A100)), quarantined, held, node('r', dict(A100, **{REMEDIATION_STATE: 'done'}))],
                  {'a': ('success', done), 'r': ('success', done)})
    checked = run_module_work(api, action='check', nodes=['a', 'q', 'h', 'r'])
    assert checked['changing'] == ['a', 'r'] and checked['nodes'] == ['a', 'r']
    assert checked['remediation'] == [
        'node q: under GPU remediation (accelerators.gpu/gpu-remediation-state=reset-required), its MIG layout not '
        'changed',
        'node h: under GPU remediation (accelerators.gpu/gpu-remediation-state=rma), its MIG layout not changed']
    applied = run_module_work(api, nodes=['a', 'q', 'h', 'r'])
    assert [name for name, _patch in api.patches] == ['a', 'r'] and len(applied['remediation']) == 2
    defaulted = run_module_work(api, action='default', config='all-disabled',
                                label_selector='nvidia.com/mig.capable=true')
    assert defaulted['nodes'] == [] and CONFIG_LABEL not in api.nodes['h']['metadata']['labels']
    assert defaulted['remediation'] == [
        'node h: under GPU remediation (accelerators.gpu/gpu-remediation-state=rma), its MIG layout not changed']


class DraAPI(FakeAPI):
    """Nodes of the DRA stack: the kubelet plugin's ResourceSlice publishes the devices the node's GPUs had when its
    pod started; a pod deleted is replaced by one that finds the layout applied."""

    def __init__(self, nodes, outcome=None):
        super(DraAPI, self).__init__(nodes, outcome)
        self.found = dict((name, [{'attributes': {'type': {'string': 'gpu'}}}] * 2) for name in self.nodes)
        self.deleted = []

    def list_items(self, path, field_selector=None):
        assert (path, field_selector) == ('/apis/resource.k8s.io/v1/resourceslices', 'spec.driver=gpu.nvidia.com')
        return [{'spec': {'driver': 'gpu.nvidia.com', 'nodeName': name, 'devices': devices}}
                for name, devices in self.found.items()]

    def list_pods(self, namespace, label_selector=None):
        assert label_selector == 'app.kubernetes.io/component=nvidia-dra-driver-kubelet-plugin'
        return [{'metadata': {'name': 'plugin-' + name, 'uid': name}, 'spec': {'nodeName': name}}
                for name in self.nodes]

    def delete_pod(self, namespace, name, uid):
        self.deleted.append('%s/%s' % (namespace, name))
        layout = self.nodes[uid]['metadata']['labels'][CONFIG_LABEL]
        self.found[uid] = [{'attributes': {'type': {'string': 'mig'}, 'profile': {'string': '1g.10gb'}}}] * (
            14 if layout == 'all-1g.10gb' else 0) or [{'attributes': {'type': {'string': 'gpu'}}}] * 2


def test_on_a_dra_node_any_strategy_serves_the_layout_the_kubelet_plugin_restarted_to_publish_it():
    dra = dict(A100, **{'nvidia.com/gpu.deploy.dra-driver': 'true'})
    api = DraAPI([node('d', dict(dra))])
    checked = run_module_work(api, action='check', nodes=['d'], mig_strategy='none')
    assert (checked['changing'], checked['expected']) == (['d'], {'d': {'gpu': 0, 'mig-1g.10gb': 14}})
    applied = run_module_work(api, nodes=['d'], mig_strategy='none')
    # The device plugin's label pinned to false for the MIG manager's change, then removed; the plugin restarted once.
    (first, pinned), (_second, unpinned) = api.patches
    assert (first, pinned['metadata']['labels']['nvidia.com/gpu.deploy.device-plugin']) == ('d', 'false')
    assert unpinned == {'metadata': {'annotations': {'accelerators.gpu/mig.device-plugin-pinned': None},
                                     'labels': {'nvidia.com/gpu.deploy.device-plugin': None}}}
    assert (applied['changed'], applied['restarted'], api.deleted) == (True, ['gpu/plugin-d'], ['gpu/plugin-d'])
    assert 'nvidia.com/gpu.deploy.device-plugin' not in api.nodes['d']['metadata']['labels']
    again = run_module_work(api, nodes=['d'], mig_strategy='none')
    assert (again['changed'], len(api.patches), api.deleted) == (False, 2, ['gpu/plugin-d'])
    # Back to whole GPUs.
    assert run_module_work(api, nodes=['d'], config='all-disabled')['restarted'] == ['gpu/plugin-d']
    assert api.found['d'] == [{'attributes': {'type': {'string': 'gpu'}}}] * 2
