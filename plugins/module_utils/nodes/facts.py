# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure functions reading GPU, kernel and OS facts from Kubernetes Node dicts.

Nothing here talks to an API: inputs are nodes as the API returns them (plain dicts).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from .gfd_labels import gfd_labels_to_remove, int_or_none

NFD_PREFIX = 'feature.node.kubernetes.io/'
OLD_NFD_PREFIX = 'node.alpha.kubernetes-incubator.io/nfd-'
NFD_FEATURE_LABELS_ANNOTATION = 'nfd.node.kubernetes.io/feature-labels'
GPU_PCI_LABELS = (
    NFD_PREFIX + 'pci-10de.present',
    NFD_PREFIX + 'pci-0302_10de.present',
    NFD_PREFIX + 'pci-0300_10de.present',
)
KERNEL_LABEL = NFD_PREFIX + 'kernel-version.full'
OS_RELEASE_PREFIX = NFD_PREFIX + 'system-os_release.'
OSTREE_LABEL = OS_RELEASE_PREFIX + 'OSTREE_VERSION'

GPU_PRESENT_LABEL = 'nvidia.com/gpu.present'
# Written by the driver rollout (driver.upgrade_plan.STATE_LABEL), removed with the stack.
DRIVER_UPGRADE_STATE_LABEL = 'nvidia.com/gpu-driver-upgrade-state'
# The driver configuration owning a node (upstream's NVIDIADriver owner label), and ours for the one it moves to
# (driver/configurations.py).
DRIVER_OWNER_LABEL = 'nvidia.com/gpu-operator.driver.owner'
DRIVER_NEXT_OWNER_LABEL = 'accelerators.gpu/driver-owner-next'
DEPLOY_LABEL_PREFIX = 'nvidia.com/gpu.deploy.'
OPERANDS_SWITCH = 'operands'
# One deploy label per state the collection deploys; the roles pass the states enabled (common_deploy_operands).
OPERANDS = (
    'driver',
    'container-toolkit',
    'device-plugin',
    'dcgm-exporter',
    'gpu-feature-discovery',
    # The standalone DCGM hostengine (role dcgm), when enabled.
    'dcgm',
    # The validator DaemonSet (role container_toolkit), writing the node files the operands wait on.
    'operator-validator',
    # The NVIDIA DRA driver's kubelet plugin (role dra_driver), on the nodes in DRA mode instead of the device plugin.
    'dra-driver',
)
# The two ways a node's GPUs reach workloads: one or the other on each GPU node, by its stack mode.
DEVICE_PLUGIN = 'device-plugin'
DRA_DRIVER = 'dra-driver'
GFD_LABELS = {
    'gpu_count': 'nvidia.com/gpu.count',
    'gpu_product': 'nvidia.com/gpu.product',
    'gpu_memory': 'nvidia.com/gpu.memory',
}
GPU_RESOURCE = 'nvidia.com/gpu'

RHCOS_VERSION_RE = re.compile(r'\d+\.\d+\.\d+-\d+')
_LABEL_VALUE_RE = re.compile(r'^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$')
_NFD_FORBIDDEN_RE = re.compile(r'[^-A-Za-z0-9_.]')
_OLD_NFD_PCI_RE = re.compile(re.escape(OLD_NFD_PREFIX) + r'pci-([0-9a-f]{4}_)?10de\.present$')


def sanitize_label_value(value):
    """Return value as NFD writes it into a label: forbidden characters become '_', ends trimmed of '-_.'."""
    return _NFD_FORBIDDEN_RE.sub('_', value).strip('-_.')


def is_valid_label_value(value):
    """True when Kubernetes accepts value as a label value (empty, or <= 63 chars, alphanumeric at both ends)."""
    return len(value) <= 63 and _LABEL_VALUE_RE.match(value) is not None


def parse_rhcos_version(text):
    """Return the first RHCOS version (e.g. '416.94.202405081406-0', '9.6.20260217-1') found in text, or None."""
    match = RHCOS_VERSION_RE.search(text or '')
    return match.group(0) if match else None


def parse_runtime(runtime_version):
    """Split 'containerd://1.7.2' into ('containerd', '1.7.2'); unknown strings keep their scheme as the name."""
    if not runtime_version:
        return None, None
    name, sep, version = runtime_version.partition('://')
    if not sep:
        return runtime_version, None
    return name, version


def _gpu_evidence(labels, allocatable):
    """Signs, other than NFD's PCI labels, that a node carries NVIDIA GPUs."""
    evidence = []
    if labels.get(GPU_PRESENT_LABEL) == 'true':
        evidence.append('%s=true' % GPU_PRESENT_LABEL)
    evidence.extend('%s=%s' % (key, labels[key]) for key in sorted(GFD_LABELS.values()) if key in labels)
    if str(allocatable.get(GPU_RESOURCE, '0')) not in ('0', ''):
        evidence.append('allocatable %s=%s' % (GPU_RESOURCE, allocatable[GPU_RESOURCE]))
    evidence.extend(key for key in sorted(labels) if _OLD_NFD_PCI_RE.match(key))
    return evidence


# Taints the node lifecycle controller and cloud providers set for a node's passing state.
CONDITION_TAINT_PREFIXES = ('node.kubernetes.io/', 'node.cloudprovider.kubernetes.io/')


def node_facts(node):
    """Facts about one node (a Node dict): GPU presence, kernel, OS, RHCOS version, runtime, deploy labels, warnings."""
    metadata = node.get('metadata') or {}
    status = node.get('status') or {}
    info = status.get('nodeInfo') or {}
    labels = dict(metadata.get('labels') or {})
    name = metadata.get('name')

    nfd_labelled = any(key.startswith(NFD_PREFIX) for key in labels)
    old_nfd = any(key.startswith(OLD_NFD_PREFIX) for key in labels)
    gpu_present = any(labels.get(key) == 'true' for key in GPU_PCI_LABELS)

    running_kernel = info.get('kernelVersion')
    kernel = {
        'full': labels.get(KERNEL_LABEL),
        'major': labels.get(NFD_PREFIX + 'kernel-version.major'),
        'minor': labels.get(NFD_PREFIX + 'kernel-version.minor'),
        'revision': labels.get(NFD_PREFIX + 'kernel-version.revision'),
        'running': running_kernel,
    }
    # The running kernel decides which driver build works; the label is only how selectors see it.
    kernel['effective'] = sanitize_label_value(running_kernel) if running_kernel else kernel['full']

    rhcos_label = labels.get(OSTREE_LABEL)
    rhcos_os_image = parse_rhcos_version(info.get('osImage'))
    runtime, runtime_version = parse_runtime(info.get('containerRuntimeVersion'))

    facts = {
        'name': name,
        'labels': labels,
        'gpu_present': gpu_present,
        'nfd_labelled': nfd_labelled,
        'ready': any(condition.get('type') == 'Ready' and condition.get('status') == 'True'
                     for condition in status.get('conditions') or []),
        # Pods without a matching toleration, nfd-worker's among them, do not run there. The taints of a node's
        # passing conditions (not-ready while it registers, unreachable...) do not count: they go with the condition.
        'tainted': any(taint.get('effect') in ('NoSchedule', 'NoExecute')
                       and not (taint.get('key') or '').startswith(CONDITION_TAINT_PREFIXES)
                       for taint in (node.get('spec') or {}).get('taints') or []),
        'kernel': kernel,
        'os': {
            'id': labels.get(OS_RELEASE_PREFIX + 'ID'),
            'version_id': labels.get(OS_RELEASE_PREFIX + 'VERSION_ID'),
            'rhel_version': labels.get(OS_RELEASE_PREFIX + 'RHEL_VERSION'),
            'openshift_version': labels.get(OS_RELEASE_PREFIX + 'OPENSHIFT_VERSION'),
            'os_image': info.get('osImage'),
        },
        'rhcos_version': rhcos_os_image or rhcos_label,
        'rhcos_label': rhcos_label,
        'rhcos_os_image': rhcos_os_image,
        'runtime': runtime,
        'runtime_version': runtime_version,
        'deploy_labels': dict(
            (key[len(DEPLOY_LABEL_PREFIX):], value)
            for key, value in labels.items() if key.startswith(DEPLOY_LABEL_PREFIX)
        ),
    }
    gpu_count = int_or_none(labels.get(GFD_LABELS['gpu_count']))
    facts['gpu_count'] = gpu_count
    facts['gpu_product'] = labels.get(GFD_LABELS['gpu_product'])
    facts['gpu_memory'] = int_or_none(labels.get(GFD_LABELS['gpu_memory']))
    facts['warnings'] = _warnings(facts, old_nfd, _gpu_evidence(labels, status.get('allocatable') or {}))
    return facts


def _warnings(facts, old_nfd, evidence):
    name = facts['name']
    kernel = facts['kernel']
    warnings = []
    if old_nfd:
        warnings.append(
            'node %s: carries labels with the pre-v0.4.0 NFD prefix %s; this NFD is too old, '
            'upgrade it so the node gets %s labels' % (name, OLD_NFD_PREFIX, NFD_PREFIX))
    if evidence and not facts['nfd_labelled']:
        warnings.append(
            'node %s: looks like a GPU node (%s) but has no %s labels: NFD is missing or not running on it, '
            'so it is not treated as a GPU node and gets no driver' % (name, ', '.join(evidence), NFD_PREFIX))
    if facts['rhcos_label'] and facts['rhcos_os_image'] and facts['rhcos_label'] != facts['rhcos_os_image']:
        warnings.append(
            'node %s: stale NFD label %s=%s, status.nodeInfo.osImage says %s; using %s (osImage). '
            'NFD relabels within its sleepInterval; if this persists, restart nfd-worker on the node'
            % (name, OSTREE_LABEL, facts['rhcos_label'], facts['rhcos_os_image'], facts['rhcos_os_image']))
    if facts['gpu_present'] and facts['rhcos_os_image'] and not facts['rhcos_label']:
        warnings.append(
            'node %s: runs RHCOS %s but has no %s label, which per-RHCOS driver DaemonSets select on; '
            'use OpenShift NFD or a NodeFeatureRule labelling @system.osrelease.OSTREE_VERSION'
            % (name, facts['rhcos_os_image'], OSTREE_LABEL))
    if kernel['full'] and kernel['running'] and kernel['full'] != kernel['effective']:
        warnings.append(
            'node %s: NFD label %s=%s does not match the running kernel %s (as NFD writes it: %s); '
            'the label is stale' % (name, KERNEL_LABEL, kernel['full'], kernel['running'], kernel['effective']))
    if facts['nfd_labelled']:
        expected = ((KERNEL_LABEL, kernel['effective']), (OSTREE_LABEL, facts['rhcos_os_image']))
        for key, value in expected:
            if value and facts['labels'].get(key) is None and not is_valid_label_value(value):
                warnings.append(
                    'node %s: NFD cannot label %s=%s (a label value must be <= 63 characters, alphanumeric '
                    'at both ends); NFD drops it, so selectors on %s never match this node' % (name, key, value, key))
    return warnings


def os_key(facts):
    """Name of a node's OS build: 'rhcos-<version>' on RHCOS, else '<ID><VERSION_ID>' (e.g. 'ubuntu22.04')."""
    if facts['rhcos_version']:
        return 'rhcos-' + facts['rhcos_version']
    if facts['os']['id']:
        return '%s%s' % (facts['os']['id'], facts['os']['version_id'] or '')
    return 'unknown'


def group_nodes(facts_list):
    """Group GPU node names by effective RHCOS version, effective kernel and OS build; names sorted."""
    groups = {'by_rhcos': {}, 'by_kernel': {}, 'by_os': {}}
    for facts in facts_list:
        if not facts['gpu_present']:
            continue
        keys = {
            'by_rhcos': facts['rhcos_version'],
            'by_kernel': facts['kernel']['effective'],
            'by_os': os_key(facts),
        }
        for group, key in keys.items():
            if key:
                groups[group].setdefault(key, []).append(facts['name'])
    for group in groups.values():
        for names in group.values():
            names.sort()
    return groups


def in_dra_mode(facts, dra_selector):
    """Whether a node runs the DRA stack: its labels carry every label of dra_selector (an empty one: no node)."""
    labels = facts['labels']
    return bool(dra_selector) and all(labels.get(key) == str(value) for key, value in dra_selector.items())


def _allocator(facts, operands, dra_selector):
    """(the allocator operand the node's mode wants, the other one, whether the other still holds the node).

    The other holds it while its label is set to anything but 'false' (true, or paused by the MIG manager) if it is
    among operands; if it is not (the DRA stack switched off altogether), while its label is 'true' and the wanted one's
    is not: its plugin runs there until the switch has taken away the pods it serves."""
    deploy = facts['deploy_labels']
    wanted, other = ((DRA_DRIVER, DEVICE_PLUGIN) if DRA_DRIVER in operands and in_dra_mode(facts, dra_selector)
                     else (DEVICE_PLUGIN, DRA_DRIVER))
    if other in operands:
        holds = deploy.get(other) not in (None, 'false')
    else:
        holds = wanted in operands and deploy.get(other) == 'true' and deploy.get(wanted) != 'true'
    return wanted, other, holds


def mode_switch(node_facts_or_node, operands, dra_selector):
    """The allocator operand a GPU node must switch to (device-plugin or dra-driver), or None: the node's mode wants
    one while the other's deploy label is 'true', the other deployed or not (a node of the DRA stack switched off
    altogether switches to the device plugin). The switch is a rollout (GPU workloads evicted first, the leaving
    plugin last), which plan_gpu_node_labels leaves to the dra_driver role."""
    facts = node_facts_or_node if 'labels' in node_facts_or_node else node_facts(node_facts_or_node)
    deploy = facts['deploy_labels']
    if not facts['gpu_present'] or deploy.get(OPERANDS_SWITCH) == 'false':
        return None
    wanted, other, holds = _allocator(facts, operands, dra_selector)
    if wanted in operands and holds and deploy.get(other) == 'true' and deploy.get(wanted) != 'true':
        return wanted
    return None


def plan_gpu_node_labels(node_facts_or_node, operands=None, present=True, dra_selector=None):
    """Label changes for one node: {label: value to set, or None to remove}; {} means nothing to change.

    present=True: a GPU node gets nvidia.com/gpu.present=true and nvidia.com/gpu.deploy.<operand>=true for
    each operand of operands (None: OPERANDS) whose label is absent. A label that exists, whatever its value (even
    empty), is the admin's or an upgrade's and is never overwritten, as the GPU Operator does. The 'true' label of
    an operand the collection manages (OPERANDS) that is not in operands goes: its state is
    switched off, so nothing is deployed behind it.
    A node NFD labelled without an NVIDIA PCI device but with gpu.present (its GPU is gone) gets
    gpu.present=false, as the GPU Operator does. A node without NFD labels is left alone: nothing says
    its GPU is gone, NFD may just be down.
    present=False with operands: removes the 'true' deploy labels of those operands only (a state switched off).
    present=False without operands removes what this collection manages (uninstall): gpu.present, deploy labels set
    to 'true', the driver rollout's nvidia.com/gpu-driver-upgrade-state, the driver configuration's owner labels and
    the labels GPU feature discovery wrote
    (gfd_labels.is_gfd_label: nvidia.com/gpu.product, cuda.*, mig.capable, ...; not mig.config, an admin's).

    The device plugin and the DRA kubelet plugin (dra-driver) are one or the other: a node whose labels match
    dra_selector (in_dra_mode) gets dra-driver when it is among operands, any other gets device-plugin; a node whose
    other one is set (other than 'false') keeps its labels (a mode switch, mode_switch(), is the dra_driver role's
    rollout), and so does a node labelled dra-driver=true when dra-driver is no longer among operands (the DRA stack
    switched off: its switch to the device plugin too).
    Removal (kill switch nvidia.com/gpu.deploy.operands=false, GPU gone, present=False) takes away every
    nvidia.com/gpu.deploy.* label whose value is 'true'. Other values ('false', 'pre-installed',
    'paused-for-driver-upgrade') are kept, unlike the GPU Operator, which removes all: they schedule no
    operand either way, and keeping them keeps the admin's choices when the switch is lifted.
    """
    facts = node_facts_or_node if 'labels' in node_facts_or_node else node_facts(node_facts_or_node)
    labels = facts['labels']
    deploy = facts['deploy_labels']

    def remove_true(selected):
        return dict((DEPLOY_LABEL_PREFIX + operand, None) for operand, value in deploy.items()
                    if value == 'true' and operand != OPERANDS_SWITCH and selected(operand))

    if not present:
        if operands is not None:
            return remove_true(lambda operand: operand in operands)
        changes = remove_true(lambda operand: True)
        for label in (GPU_PRESENT_LABEL, DRIVER_UPGRADE_STATE_LABEL, DRIVER_OWNER_LABEL, DRIVER_NEXT_OWNER_LABEL):
            if label in labels:
                changes[label] = None
        changes.update(gfd_labels_to_remove(labels))
        return changes
    operands = OPERANDS if operands is None else operands
    if not facts['gpu_present']:
        # Only a node this stack labelled (gpu.present set) loses its deploy labels.
        if not facts['nfd_labelled'] or GPU_PRESENT_LABEL not in labels:
            return {}
        changes = remove_true(lambda operand: True)
        if labels[GPU_PRESENT_LABEL] == 'true':
            changes[GPU_PRESENT_LABEL] = 'false'
        return changes
    changes = {}
    if labels.get(GPU_PRESENT_LABEL) != 'true':
        changes[GPU_PRESENT_LABEL] = 'true'
    if deploy.get(OPERANDS_SWITCH) == 'false':
        changes.update(remove_true(lambda operand: True))
        return changes
    wanted, other, holds = _allocator(facts, operands, dra_selector)
    # The allocator that holds the node keeps its label, even switched off, until the switch.
    changes.update(remove_true(lambda operand: operand in OPERANDS and operand not in operands
                               and not (holds and operand == other)))
    for operand in operands:
        if operand in (DEVICE_PLUGIN, DRA_DRIVER) and (operand != wanted or holds):
            continue
        if operand not in deploy:
            changes[DEPLOY_LABEL_PREFIX + operand] = 'true'
    return changes
