# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.facts import (
    GPU_PRESENT_LABEL, OPERANDS, group_nodes, mode_switch, is_valid_label_value, node_facts, parse_rhcos_version,
    plan_gpu_node_labels, sanitize_label_value)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.node_dicts import (
    KERNEL, NFD, OSTREE, RHCOS_416, RHCOS_418, apply_label_changes, layered_rhcos_node, make_node, rhcos_node,
    ubuntu_node)

DEPLOY = 'nvidia.com/gpu.deploy.'


@pytest.mark.parametrize('text, expected', [
    ('Red Hat Enterprise Linux CoreOS 416.94.202405081406-0 (Plow)', '416.94.202405081406-0'),
    ('Red Hat Enterprise Linux CoreOS 9.6.20260217-1 (Plow)', '9.6.20260217-1'),
    ('Red Hat Enterprise Linux CoreOS 9.6.20260303-1 (Plow)', '9.6.20260303-1'),
    ('Red Hat Enterprise Linux CoreOS 10.1.20260126-0 (Coughlan)', '10.1.20260126-0'),
    ('Red Hat Enterprise Linux CoreOS 49.84.202110081407-0 (Ootpa)', '49.84.202110081407-0'),
    ('413.92.202303221220-0', '413.92.202303221220-0'),
    ('Ubuntu 22.04.4 LTS', None),
    ('', None),
    (None, None),
])
def test_parse_rhcos_version(text, expected):
    assert parse_rhcos_version(text) == expected


@pytest.mark.parametrize('raw, expected', [
    ('5.14.0-427.33.1.el9_4.x86_64+rt', '5.14.0-427.33.1.el9_4.x86_64_rt'),
    ('5.14.0-427.33.1.el9_4.aarch64+64k', '5.14.0-427.33.1.el9_4.aarch64_64k'),
    ('5.15.0-100-generic', '5.15.0-100-generic'),
    ('+weird~kernel.', 'weird_kernel'),
])
def test_sanitize_label_value(raw, expected):
    assert sanitize_label_value(raw) == expected


@pytest.mark.parametrize('value, valid', [
    ('', True), ('a', True), ('416.94.202405081406-0', True), ('x' * 63, True), ('x' * 64, False),
    ('-a', False), ('a_', False), ('a+b', False),
])
def test_is_valid_label_value(value, valid):
    assert is_valid_label_value(value) is valid


@pytest.mark.parametrize('pci_label', ['pci-10de.present', 'pci-0302_10de.present', 'pci-0300_10de.present'])
def test_both_pci_label_shapes_mean_gpu(pci_label):
    facts = node_facts(make_node('n1', {NFD + pci_label: 'true'}))
    assert facts['gpu_present'] is True
    assert facts['nfd_labelled'] is True


def test_other_vendor_is_not_gpu():
    facts = node_facts(make_node('n1', {NFD + 'pci-0300_1002.present': 'true', NFD + 'pci-10de.present': 'false'}))
    assert facts['gpu_present'] is False


def test_facts_of_rhcos_416_node():
    node = rhcos_node('w1', extra={
        'nvidia.com/gpu.count': '8', 'nvidia.com/gpu.product': 'NVIDIA-A100-SXM4-80GB',
        'nvidia.com/gpu.memory': '81920',
        DEPLOY + 'driver': 'pre-installed', DEPLOY + 'device-plugin': 'true'})
    facts = node_facts(node)
    assert facts['name'] == 'w1'
    assert facts['gpu_count'] == 8
    assert facts['gpu_product'] == 'NVIDIA-A100-SXM4-80GB'
    assert facts['gpu_memory'] == 81920
    assert facts['kernel'] == {
        'full': '5.14.0-427.33.1.el9_4.x86_64', 'major': '5', 'minor': '14', 'revision': '0',
        'running': '5.14.0-427.33.1.el9_4.x86_64', 'effective': '5.14.0-427.33.1.el9_4.x86_64'}
    assert facts['os']['id'] == 'rhcos'
    assert facts['os']['version_id'] == '4.16'
    assert facts['os']['rhel_version'] == '9.4'
    assert facts['rhcos_version'] == RHCOS_416
    assert facts['rhcos_label'] == RHCOS_416
    assert facts['rhcos_os_image'] == RHCOS_416
    assert facts['runtime'] == 'cri-o'
    assert facts['runtime_version'] == '1.29.1'
    assert facts['deploy_labels'] == {'driver': 'pre-installed', 'device-plugin': 'true'}
    assert facts['warnings'] == []


def test_facts_of_layered_rhcos_node():
    facts = node_facts(layered_rhcos_node('w2'))
    assert facts['os'] == {'id': 'rhel', 'version_id': '9.6', 'rhel_version': None, 'openshift_version': '4.21',
                           'os_image': 'Red Hat Enterprise Linux CoreOS 9.6.20260303-1 (Plow)'}
    assert facts['rhcos_version'] == '9.6.20260303-1'
    assert facts['gpu_count'] is None and facts['gpu_product'] is None and facts['gpu_memory'] is None


def test_ubuntu_node_has_no_rhcos_and_containerd():
    facts = node_facts(ubuntu_node('u1'))
    assert facts['rhcos_version'] is None
    assert facts['runtime'] == 'containerd'
    assert facts['runtime_version'] == '1.7.12'


@pytest.mark.parametrize('kernel', ['5.14.0-427.33.1.el9_4.x86_64+rt', '5.14.0-427.33.1.el9_4.aarch64+64k'])
def test_rt_and_64k_kernels_match_their_sanitised_label(kernel):
    facts = node_facts(rhcos_node('rt1', kernel=kernel))
    assert facts['kernel']['full'] == kernel.replace('+', '_')
    assert facts['kernel']['effective'] == kernel.replace('+', '_')
    assert facts['warnings'] == []


def test_stale_kernel_label_warns():
    node = rhcos_node('w1', kernel='5.14.0-570.42.1.el9_6.x86_64+rt')
    node['metadata']['labels'][KERNEL] = '5.14.0-427.33.1.el9_4.x86_64_rt'
    facts = node_facts(node)
    assert facts['kernel']['effective'] == '5.14.0-570.42.1.el9_6.x86_64_rt'
    assert facts['warnings'] == [
        'node w1: NFD label %s=5.14.0-427.33.1.el9_4.x86_64_rt does not match the running kernel '
        '5.14.0-570.42.1.el9_6.x86_64+rt (as NFD writes it: 5.14.0-570.42.1.el9_6.x86_64_rt); the label is stale'
        % KERNEL]


def test_stale_ostree_label_uses_os_image():
    facts = node_facts(rhcos_node('w3', rhcos=RHCOS_418, label_rhcos=RHCOS_416))
    assert facts['rhcos_version'] == RHCOS_418
    assert facts['rhcos_label'] == RHCOS_416
    assert facts['rhcos_os_image'] == RHCOS_418
    assert len(facts['warnings']) == 1
    warning = facts['warnings'][0]
    assert warning.startswith('node w3: stale NFD label %s=%s' % (OSTREE, RHCOS_416))
    assert 'osImage says %s; using %s (osImage)' % (RHCOS_418, RHCOS_418) in warning


def test_gpu_looking_node_without_nfd_warns():
    node = make_node('g1', {GPU_PRESENT_LABEL: 'true'}, allocatable={'nvidia.com/gpu': '4'})
    facts = node_facts(node)
    assert facts['gpu_present'] is False
    assert facts['nfd_labelled'] is False
    assert facts['warnings'] == [
        'node g1: looks like a GPU node (nvidia.com/gpu.present=true, allocatable nvidia.com/gpu=4) but has no '
        'feature.node.kubernetes.io/ labels: NFD is missing or not running on it, so it is not treated as a GPU '
        'node and gets no driver']


def test_old_nfd_prefix_warns_too_old():
    node = make_node('old1', {'node.alpha.kubernetes-incubator.io/nfd-pci-0300_10de.present': 'true'})
    warnings = node_facts(node)['warnings']
    assert len(warnings) == 2
    assert 'pre-v0.4.0 NFD prefix' in warnings[0] and 'too old' in warnings[0]
    assert 'node.alpha.kubernetes-incubator.io/nfd-pci-0300_10de.present' in warnings[1]


def test_plain_node_without_gpu_has_no_warnings():
    assert node_facts(make_node('cpu1', {}))['warnings'] == []


def test_kernel_nfd_would_reject_warns():
    long_kernel = '5.14.0-' + '1' * 60 + '.el9.x86_64'
    node = make_node('k1', {NFD + 'pci-10de.present': 'true'}, kernel=long_kernel)
    warnings = node_facts(node)['warnings']
    assert warnings == [
        'node k1: NFD cannot label %s=%s (a label value must be <= 63 characters, alphanumeric at both ends); '
        'NFD drops it, so selectors on %s never match this node' % (KERNEL, long_kernel, KERNEL)]


def test_rhcos_without_ostree_label_warns():
    node = rhcos_node('u2')
    del node['metadata']['labels'][OSTREE]
    facts = node_facts(node)
    assert facts['rhcos_version'] == RHCOS_416
    assert facts['rhcos_label'] is None
    assert len(facts['warnings']) == 1 and 'NodeFeatureRule' in facts['warnings'][0]


def test_group_nodes_mixed_cluster_mid_upgrade():
    facts = [node_facts(n) for n in (
        rhcos_node('w2'), rhcos_node('w1'),
        rhcos_node('w3', rhcos=RHCOS_418, kernel='5.14.0-570.42.1.el9_6.x86_64', ocp='4.18'),
        rhcos_node('w4', rhcos=RHCOS_418, kernel='5.14.0-570.42.1.el9_6.x86_64', label_rhcos=RHCOS_416, ocp='4.18'),
        ubuntu_node('u1'),
        rhcos_node('cpu', gpu=False),
    )]
    groups = group_nodes(facts)
    assert groups['by_rhcos'] == {RHCOS_416: ['w1', 'w2'], RHCOS_418: ['w3', 'w4']}
    assert groups['by_kernel'] == {
        '5.14.0-427.33.1.el9_4.x86_64': ['w1', 'w2'],
        '5.14.0-570.42.1.el9_6.x86_64': ['w3', 'w4'],
        '5.15.0-100-generic': ['u1'],
    }
    assert groups['by_os'] == {
        'rhcos-' + RHCOS_416: ['w1', 'w2'], 'rhcos-' + RHCOS_418: ['w3', 'w4'], 'ubuntu22.04': ['u1']}


def _deploy_all(value='true'):
    """The deploy labels of a GPU node in device-plugin mode: every operand's but the DRA kubelet plugin's."""
    return dict((DEPLOY + operand, value) for operand in OPERANDS if operand != 'dra-driver')


def test_label_plan_for_new_gpu_node():
    changes = plan_gpu_node_labels(rhcos_node('w1'), OPERANDS)
    expected = _deploy_all()
    expected[GPU_PRESENT_LABEL] = 'true'
    assert changes == expected


def test_label_plan_never_overwrites_admin_values():
    node = rhcos_node('w1', extra={
        GPU_PRESENT_LABEL: 'true',
        DEPLOY + 'driver': 'pre-installed',
        DEPLOY + 'device-plugin': 'paused-for-driver-upgrade',
        DEPLOY + 'dcgm-exporter': 'false',
        DEPLOY + 'gpu-feature-discovery': '',
    })
    assert plan_gpu_node_labels(node, OPERANDS) == {
        DEPLOY + 'container-toolkit': 'true', DEPLOY + 'operator-validator': 'true', DEPLOY + 'dcgm': 'true'}


def test_label_plan_only_for_requested_operands():
    assert plan_gpu_node_labels(rhcos_node('w1'), ['driver']) == {
        GPU_PRESENT_LABEL: 'true', DEPLOY + 'driver': 'true'}


def test_label_plan_removes_the_true_label_of_a_state_switched_off():
    extra = dict(_deploy_all(), **{GPU_PRESENT_LABEL: 'true', DEPLOY + 'mig-manager': 'true'})
    enabled = [operand for operand in OPERANDS if operand not in ('gpu-feature-discovery', 'operator-validator')]
    # mig-manager is no state of the collection: whoever set it keeps it.
    assert plan_gpu_node_labels(rhcos_node('w1', extra=extra), enabled) == {
        DEPLOY + 'gpu-feature-discovery': None, DEPLOY + 'operator-validator': None}
    # An admin's value other than 'true' stays.
    extra[DEPLOY + 'gpu-feature-discovery'] = 'false'
    extra[DEPLOY + 'operator-validator'] = 'false'
    assert plan_gpu_node_labels(rhcos_node('w1', extra=extra), enabled) == {}


def test_absent_with_operands_removes_only_their_true_deploy_labels():
    extra = dict(_deploy_all(), **{GPU_PRESENT_LABEL: 'true', 'nvidia.com/gpu.product': 'NVIDIA-L40S'})
    assert plan_gpu_node_labels(rhcos_node('w1', extra=extra), ['gpu-feature-discovery'], present=False) == {
        DEPLOY + 'gpu-feature-discovery': None}
    extra[DEPLOY + 'gpu-feature-discovery'] = 'false'
    assert plan_gpu_node_labels(rhcos_node('w1', extra=extra), ['gpu-feature-discovery'], present=False) == {}


def test_kill_switch_removes_only_true_deploy_labels():
    extra = _deploy_all()
    extra.update({GPU_PRESENT_LABEL: 'true', DEPLOY + 'operands': 'false', DEPLOY + 'driver': 'pre-installed',
                  DEPLOY + 'mig-manager': 'true'})
    changes = plan_gpu_node_labels(rhcos_node('w1', extra=extra), OPERANDS)
    expected = dict((DEPLOY + op, None) for op in OPERANDS if op not in ('driver', 'dra-driver'))
    expected[DEPLOY + 'mig-manager'] = None
    assert changes == expected


def test_node_that_lost_its_gpu_gets_present_false():
    extra = _deploy_all()
    extra[GPU_PRESENT_LABEL] = 'true'
    extra[DEPLOY + 'driver'] = 'false'
    changes = plan_gpu_node_labels(rhcos_node('w1', gpu=False, extra=extra), OPERANDS)
    expected = dict((DEPLOY + op, None) for op in OPERANDS if op not in ('driver', 'dra-driver'))
    expected[GPU_PRESENT_LABEL] = 'false'
    assert changes == expected


def test_node_without_nfd_labels_is_left_alone():
    node = make_node('g1', dict(_deploy_all(), **{GPU_PRESENT_LABEL: 'true'}))
    assert plan_gpu_node_labels(node, OPERANDS) == {}


def test_cpu_node_never_labelled_is_left_alone():
    assert plan_gpu_node_labels(rhcos_node('cpu', gpu=False), OPERANDS) == {}


def test_absent_removes_managed_labels_and_keeps_admin_values():
    extra = _deploy_all()
    extra.update({GPU_PRESENT_LABEL: 'true', DEPLOY + 'driver': 'pre-installed',
                  'nvidia.com/gpu-driver-upgrade-state': 'upgrade-done',
                  'nvidia.com/gpu-operator.driver.owner': 'a100', 'accelerators.gpu/driver-owner-next': 'default'})
    changes = plan_gpu_node_labels(rhcos_node('w1', extra=extra), present=False)
    expected = dict((DEPLOY + op, None) for op in OPERANDS if op not in ('driver', 'dra-driver'))
    expected[GPU_PRESENT_LABEL] = None
    # The driver rollout's state and the driver configuration's owner labels go with the stack.
    for label in ('nvidia.com/gpu-driver-upgrade-state', 'nvidia.com/gpu-operator.driver.owner',
                  'accelerators.gpu/driver-owner-next'):
        expected[label] = None
    assert changes == expected


@pytest.mark.parametrize('node, present', [
    (rhcos_node('w1'), True),
    (rhcos_node('w1', extra={DEPLOY + 'operands': 'false', DEPLOY + 'driver': 'true'}), True),
    (rhcos_node('w1', gpu=False, extra=dict(_deploy_all(), **{GPU_PRESENT_LABEL: 'true'})), True),
    (rhcos_node('w1', extra=dict(_deploy_all(), **{GPU_PRESENT_LABEL: 'true'})), False),
])
def test_label_plan_is_idempotent(node, present):
    operands = OPERANDS if present else None
    first = plan_gpu_node_labels(node, operands, present)
    assert first != {}
    relabelled = apply_label_changes(node, first)
    assert plan_gpu_node_labels(relabelled, operands, present) == {}
    assert plan_gpu_node_labels(node_facts(relabelled), operands, present) == {}


def test_absent_removes_the_labels_gfd_wrote_and_only_those():
    gfd = {'nvidia.com/gpu.product': 'NVIDIA-A100-SXM4-80GB', 'nvidia.com/gpu.count': '8',
           'nvidia.com/cuda.driver.major': '570', 'nvidia.com/mig.capable': 'true', 'nvidia.com/mig.strategy': 'single',
           'nvidia.com/gfd.timestamp': '1764000000'}
    admin = {'nvidia.com/mig.config': 'all-1g.10gb', 'nvidia.com/device-plugin.config': 'a100-x4',
             DEPLOY + 'dcgm-exporter': 'false'}
    node = rhcos_node('w1', extra=dict(gfd, **admin))
    changes = plan_gpu_node_labels(node, present=False)
    assert changes == dict((key, None) for key in gfd)
    assert plan_gpu_node_labels(apply_label_changes(node, changes), present=False) == {}


DRA = {'nvidia.com/gpu.stack': 'dra'}


def test_a_new_gpu_node_gets_the_allocator_of_its_mode():
    dra_node = rhcos_node('w1', extra=DRA)
    changes = plan_gpu_node_labels(dra_node, OPERANDS, dra_selector=DRA)
    assert changes[DEPLOY + 'dra-driver'] == 'true' and DEPLOY + 'device-plugin' not in changes
    changes = plan_gpu_node_labels(rhcos_node('w2'), OPERANDS, dra_selector=DRA)
    assert changes[DEPLOY + 'device-plugin'] == 'true' and DEPLOY + 'dra-driver' not in changes
    # Without dra-driver among the operands deployed, a node matching the selector gets the device plugin.
    without = [operand for operand in OPERANDS if operand != 'dra-driver']
    assert plan_gpu_node_labels(dra_node, without, dra_selector=DRA)[DEPLOY + 'device-plugin'] == 'true'
    assert mode_switch(dra_node, OPERANDS, DRA) is None


@pytest.mark.parametrize('labelled, selector, target', [
    ({'device-plugin': 'true'}, DRA, 'dra-driver'),
    ({'dra-driver': 'true'}, {}, 'device-plugin'),
    ({'device-plugin': 'paused-for-mig-change'}, DRA, None),
    ({'device-plugin': 'true', 'operands': 'false'}, DRA, None),
])
def test_a_node_changing_mode_is_left_to_the_switch(labelled, selector, target):
    """The label plan never flips a node's allocator: the switch (workloads evicted first) does."""
    extra = dict(DRA, **{GPU_PRESENT_LABEL: 'true'})
    extra.update((DEPLOY + operand, value) for operand, value in labelled.items())
    node = rhcos_node('w1', extra=extra)
    changes = plan_gpu_node_labels(node, OPERANDS, dra_selector=selector)
    assert not [key for key, value in changes.items()
                if key in (DEPLOY + 'device-plugin', DEPLOY + 'dra-driver') and value is not None]
    assert mode_switch(node, OPERANDS, selector) == target


@pytest.mark.parametrize('role', [DRA, {}])
def test_a_dra_node_of_a_dra_stack_switched_off_is_left_to_the_switch_to_the_device_plugin(role):
    """DRA off altogether (no dra-driver among the operands, no selector): a node labelled dra-driver=true, in the
    DRA role or out of it, keeps its label and gets no device plugin label until the switch (pods holding claims
    evicted while the kubelet plugin can still unprepare them); then the plan has nothing left to do."""
    without = [operand for operand in OPERANDS if operand != 'dra-driver']
    labels = dict(role, **{GPU_PRESENT_LABEL: 'true'})
    labels.update((key, value) for key, value in _deploy_all().items() if key != DEPLOY + 'device-plugin')
    labels[DEPLOY + 'dra-driver'] = 'true'
    node = rhcos_node('w1', extra=labels)
    assert plan_gpu_node_labels(node, without, dra_selector={}) == {}
    assert mode_switch(node, without, {}) == 'device-plugin'
    switched = apply_label_changes(node, {DEPLOY + 'dra-driver': None, DEPLOY + 'device-plugin': 'true'})
    assert plan_gpu_node_labels(switched, without, dra_selector={}) == {}
    assert mode_switch(switched, without, {}) is None


@pytest.mark.parametrize('labelled, changes', [
    # Both set: the device plugin is there already, nothing to switch; the label of the state switched off goes.
    ({'dra-driver': 'true', 'device-plugin': 'true'}, {DEPLOY + 'dra-driver': None}),
    # Paused (no kubelet plugin runs there) or opted out: the device plugin's label at once, the other value kept.
    ({'dra-driver': 'paused-for-mig-change'}, {DEPLOY + 'device-plugin': 'true'}),
    ({'dra-driver': 'false'}, {DEPLOY + 'device-plugin': 'true'}),
])
def test_a_dra_stack_switched_off_switches_only_nodes_its_kubelet_plugin_runs_on(labelled, changes):
    without = [operand for operand in OPERANDS if operand != 'dra-driver']
    extra = dict(_deploy_all(), **{GPU_PRESENT_LABEL: 'true'})
    del extra[DEPLOY + 'device-plugin']
    extra.update((DEPLOY + operand, value) for operand, value in labelled.items())
    node = rhcos_node('w1', extra=extra)
    assert plan_gpu_node_labels(node, without, dra_selector={}) == changes
    assert mode_switch(node, without, {}) is None


def test_a_node_without_gpu_loses_the_dra_label_of_a_dra_stack_switched_off():
    without = [operand for operand in OPERANDS if operand != 'dra-driver']
    node = rhcos_node('w1', gpu=False, extra={GPU_PRESENT_LABEL: 'true', DEPLOY + 'dra-driver': 'true'})
    assert plan_gpu_node_labels(node, without, dra_selector={}) == {
        DEPLOY + 'dra-driver': None, GPU_PRESENT_LABEL: 'false'}
    assert mode_switch(node, without, {}) is None
