# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the nodes of a MachineConfigPool stand in an RHCOS upgrade, from Node objects and the pool alone; or,
without a pool (the drain method), where nodes stand in a kernel upgrade driven by cordon, drain and a reboot.

The rhcos_upgrade role keeps no state of its own: a re-run reads the same objects and resumes. What the role adds
to the cluster is one annotation per node (RECORD_ANNOTATION, JSON: from, to, started, validated, result; with the
drain method also cordoned, whether the node was cordoned before, and rebooted, when its reboot step ran) and, with
a pool, one on the pool (POOL_ANNOTATION, JSON: the pool's paused and maxUnavailable before the role took it in
hand).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ..driver.names import PlanError, driver_daemonset_name, os_tag, precompiled_daemonset_name
from ..nodes.facts import KERNEL_LABEL, node_facts, sanitize_label_value
from ..operands.checks.objects import json_annotation
from ..remediation.state import under_remediation

RECORD_ANNOTATION = 'accelerators.gpu/rhcos-upgrade'
OSTREE_LABEL = 'feature.node.kubernetes.io/system-os_release.OSTREE_VERSION'
POOL_ANNOTATION = 'accelerators.gpu/rhcos-upgrade-pool'
CURRENT_CONFIG = 'machineconfiguration.openshift.io/currentConfig'
DESIRED_CONFIG = 'machineconfiguration.openshift.io/desiredConfig'
MCD_STATE = 'machineconfiguration.openshift.io/state'
MCD_REASON = 'machineconfiguration.openshift.io/reason'
# Phases of a node: done (at the pool's config, on the target build, Ready and, for a GPU node, validated there),
# moving (the pool targets it and it is not done: draining, rebooting, or back and not validated yet),
# waiting (the machine-config operator may pick it), blocked (cordoned or NotReady: the operator never picks it),
# mismatch (at the pool's config, but running another build than the target), remediation (not taken, and under GPU
# remediation: another owner's, left alone until that ends).
PHASES = ('done', 'moving', 'waiting', 'blocked', 'mismatch', 'remediation')


def _ready_condition(node):
    for condition in (node.get('status') or {}).get('conditions') or []:
        if condition.get('type') == 'Ready':
            return condition
    return {}


def _daemonset_name(name_of, *args):
    try:
        return name_of(*args)
    except PlanError:
        return None


def _common_entry(node, facts, target):
    annotations = (node.get('metadata') or {}).get('annotations') or {}
    ready = _ready_condition(node)
    record = json_annotation(annotations, RECORD_ANNOTATION)
    entry = {
        'name': facts['name'],
        'gpu': facts['gpu_present'],
        'ready': ready.get('status') == 'True',
        'ready_message': ready.get('message') or ready.get('reason') or '',
        'cordoned': bool((node.get('spec') or {}).get('unschedulable')),
        'mcd_state': annotations.get(MCD_STATE),
        'record': record,
        # Noted as taken by this upgrade: its record targets the build (or kernel). Records stay after an upgrade:
        # an earlier one's (another `to`) does not count.
        'taken': record.get('to') == target,
        # Why the node is another owner's now, in words, or ''.
        'remediation': under_remediation((node.get('metadata') or {}).get('labels')),
    }
    entry['validated'] = entry['taken'] and record.get('result') == 'validated'
    return entry, annotations


def _readiness(entry):
    return 'Ready' if entry['ready'] else 'NotReady (%s)' % entry['ready_message']


def node_state(node, config, target):
    """One node's standing: its facts for the upgrade and its phase (PHASES)."""
    facts = node_facts(node)
    entry, annotations = _common_entry(node, facts, target)
    entry.update({
        'rhcos': facts['rhcos_os_image'],
        'rhcos_label': facts['rhcos_label'],
        # What the node runs and its NFD label for it, as the drain method's entries have them.
        'runs': facts['rhcos_os_image'],
        'label': facts['rhcos_label'],
        'driver_daemonset': _daemonset_name(driver_daemonset_name, target),
        'current_config': annotations.get(CURRENT_CONFIG),
        'desired_config': annotations.get(DESIRED_CONFIG),
        'mcd_reason': annotations.get(MCD_REASON) or '',
    })
    entry['diagnosis'] = '%s, machine-config state %s%s, config %s (desired %s), runs RHCOS %s' % (
        _readiness(entry), entry['mcd_state'], ' (%s)' % entry['mcd_reason'] if entry['mcd_reason'] else '',
        entry['current_config'], entry['desired_config'], entry['rhcos'])
    at_config = entry['current_config'] == config and entry['desired_config'] == config and \
        entry['mcd_state'] == 'Done'
    # Back from the update: at the config, on the target build and Ready (its GPUs may not be back yet).
    entry['back'] = at_config and entry['rhcos'] == target and entry['ready']
    if entry['desired_config'] == config:
        if at_config and entry['rhcos'] != target:
            entry['phase'] = 'mismatch'
        elif entry['back'] and (entry['validated'] or not entry['gpu']):
            entry['phase'] = 'done'
        else:
            entry['phase'] = 'moving'
    elif entry['remediation']:
        # Cordoned by its quarantine: the machine-config operator would not pick it, and no wave counts on it.
        entry['phase'] = 'remediation'
    elif entry['cordoned'] or not entry['ready']:
        entry['phase'] = 'blocked'
    else:
        entry['phase'] = 'waiting'
    return entry


def kernel_node_state(node, target):
    """One node's standing in a kernel upgrade driven by cordon, drain and the user's reboot (no pool): done (runs
    the target kernel, Ready and, for a node this upgrade took, validated there and as cordoned as before), moving
    (taken: its record targets the kernel, and not done), remediation (not taken, under GPU remediation), waiting
    (Ready, not on the target), blocked (NotReady and not taken)."""
    facts = node_facts(node)
    entry, _annotations = _common_entry(node, facts, target)
    record, taken = entry['record'], entry['taken']
    tag = os_tag(facts)
    entry.update({
        'runs': facts['kernel']['running'],
        'label': facts['kernel']['full'],
        'driver_daemonset': _daemonset_name(precompiled_daemonset_name, sanitize_label_value(target), tag)
        if tag else None,
        'rebooted': taken and 'rebooted' in record,
    })
    entry['back'] = entry['runs'] == target and entry['ready']
    entry['diagnosis'] = '%s, runs kernel %s%s' % (
        _readiness(entry), entry['runs'], '' if entry['rebooted'] else ', its reboot step never ran')
    # A node cordoned before the upgrade stays cordoned; one this upgrade cordoned is done once uncordoned.
    cordon_restored = not entry['cordoned'] or bool(record.get('cordoned'))
    if entry['back'] and (not taken or ((entry['validated'] or not entry['gpu']) and cordon_restored)):
        entry['phase'] = 'done'
    elif taken:
        entry['phase'] = 'moving'
    elif entry['remediation']:
        entry['phase'] = 'remediation'
    elif not entry['ready']:
        entry['phase'] = 'blocked'
    else:
        entry['phase'] = 'waiting'
    return entry


def upgrade_state(nodes, pool, target):
    """The pool's nodes (Node dicts, as k8s_info returns them) in the upgrade to RHCOS `target`; with no pool
    (None or empty: the drain method), the nodes in the upgrade to kernel `target` (kernel_node_state()).

    Returns {config: the pool's target rendered config, paused, nodes: [node_state()], and by phase the names of
    the nodes in it (done, moving, waiting, blocked, mismatch, remediation), out: GPU nodes moving, reboot: nodes moving whose
    reboot step has not run (drain method), label_key and label_value: the NFD label that says what a node runs
    and its value on the target}.
    """
    ordered = sorted(nodes, key=lambda n: n['metadata']['name'])
    if pool:
        spec = pool.get('spec') or {}
        config = (spec.get('configuration') or {}).get('name')
        entries = [node_state(node, config, target) for node in ordered]
        state = {'config': config, 'paused': bool(spec.get('paused')), 'nodes': entries,
                 'label_key': OSTREE_LABEL, 'label_value': target, 'reboot': []}
    else:
        entries = [kernel_node_state(node, target) for node in ordered]
        state = {'config': None, 'paused': False, 'nodes': entries, 'label_key': KERNEL_LABEL,
                 'label_value': sanitize_label_value(target),
                 'reboot': [entry['name'] for entry in entries if entry['phase'] == 'moving' and not entry['rebooted']
                            and entry['runs'] != target]}
    for phase in PHASES:
        state[phase] = [entry['name'] for entry in entries if entry['phase'] == phase]
    state['out'] = [entry['name'] for entry in entries if entry['phase'] == 'moving' and entry['gpu']]
    return state


def record_patches(entries, target, now, validated=False, mark=None):
    """Node patches (for kubernetes.core.k8s, state patched) writing RECORD_ANNOTATION on the nodes of `entries`
    (node_state() or kernel_node_state() entries): where a node taken comes from and when it left (and, for the
    drain method's entries, whether it was cordoned before) or, with `validated`, when it was validated on the
    target, or with `mark`, when that step (`rebooted`) happened."""
    patches = []
    for entry in entries:
        if validated:
            record = dict(entry['record'], validated=now, result='validated')
        elif mark:
            record = dict(entry['record'], **{mark: now})
        else:
            record = {'from': entry['runs'] if entry['runs'] != target else 'unknown', 'to': target, 'started': now}
            if 'rebooted' in entry:
                record['cordoned'] = entry['cordoned']
        patches.append({'apiVersion': 'v1', 'kind': 'Node', 'metadata': {
            'name': entry['name'], 'annotations': {RECORD_ANNOTATION: json.dumps(record, sort_keys=True)}}})
    return patches


def label_patches(entries, target, key=OSTREE_LABEL):
    """Node patches setting the NFD label `key` (OSTREE_VERSION; the kernel-version.full label for a kernel upgrade)
    of the nodes of `entries` to `target`, the build their osImage says they run (or the kernel, as NFD writes
    it), for when NFD has not relabelled them yet."""
    value = sanitize_label_value(target) if key == KERNEL_LABEL else target
    return [{'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': entry['name'], 'labels': {key: value}}}
            for entry in entries]


def without_driver(daemonsets, entries):
    """Names of the GPU nodes of `entries` (state entries) on which no ready pod of their target's driver DaemonSet
    (entry driver_daemonset) runs; `daemonsets` as operand_status returns them (name, pods: node, ready)."""
    served = set((daemonset.get('name'), pod.get('node')) for daemonset in daemonsets or []
                 for pod in daemonset.get('pods') or [] if pod.get('ready'))
    return [entry['name'] for entry in entries
            if entry['gpu'] and (entry['driver_daemonset'], entry['name']) not in served]
