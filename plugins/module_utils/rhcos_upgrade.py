# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the nodes of a MachineConfigPool stand in an RHCOS upgrade, from Node objects and the pool alone.

The rhcos_upgrade role keeps no state of its own: a re-run reads the same objects and resumes. What the role adds
to the cluster is one annotation per node (RECORD_ANNOTATION, JSON: from, to, started, validated, result) and one
on the pool (POOL_ANNOTATION, JSON: the pool's paused and maxUnavailable before the role took it in hand).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.accelerators.gpu.plugins.module_utils.node_facts import node_facts

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
# mismatch (at the pool's config, but running another build than the target).
PHASES = ('done', 'moving', 'waiting', 'blocked', 'mismatch')


def _record(annotations):
    try:
        record = json.loads(annotations.get(RECORD_ANNOTATION) or '{}')
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _ready_condition(node):
    for condition in (node.get('status') or {}).get('conditions') or []:
        if condition.get('type') == 'Ready':
            return condition
    return {}


def node_state(node, config, target):
    """One node's standing: its facts for the upgrade and its phase (PHASES)."""
    facts = node_facts(node)
    annotations = (node.get('metadata') or {}).get('annotations') or {}
    ready = _ready_condition(node)
    record = _record(annotations)
    entry = {
        'name': facts['name'],
        'gpu': facts['gpu_present'],
        'rhcos': facts['rhcos_os_image'],
        'rhcos_label': facts['rhcos_label'],
        'ready': ready.get('status') == 'True',
        'ready_message': ready.get('message') or ready.get('reason') or '',
        'cordoned': bool((node.get('spec') or {}).get('unschedulable')),
        'current_config': annotations.get(CURRENT_CONFIG),
        'desired_config': annotations.get(DESIRED_CONFIG),
        'mcd_state': annotations.get(MCD_STATE),
        'mcd_reason': annotations.get(MCD_REASON) or '',
        'record': record,
        'validated': record.get('to') == target and record.get('result') == 'validated',
    }
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
    elif entry['cordoned'] or not entry['ready']:
        entry['phase'] = 'blocked'
    else:
        entry['phase'] = 'waiting'
    return entry


def upgrade_state(nodes, pool, target):
    """The pool's nodes (Node dicts, as k8s_info returns them) in the upgrade to RHCOS `target`.

    Returns {config: the pool's target rendered config, paused, nodes: [node_state()], and by phase the names of
    the nodes in it (done, moving, waiting, blocked, mismatch), out: GPU nodes moving}.
    """
    spec = pool.get('spec') or {}
    config = (spec.get('configuration') or {}).get('name')
    entries = [node_state(node, config, target) for node in sorted(nodes, key=lambda n: n['metadata']['name'])]
    state = {'config': config, 'paused': bool(spec.get('paused')), 'nodes': entries}
    for phase in PHASES:
        state[phase] = [entry['name'] for entry in entries if entry['phase'] == phase]
    state['out'] = [entry['name'] for entry in entries if entry['phase'] == 'moving' and entry['gpu']]
    return state


def record_patches(entries, target, now, validated=False):
    """Node patches (for kubernetes.core.k8s, state patched) writing RECORD_ANNOTATION on the nodes of `entries`
    (node_state() entries): where a node taken comes from and when it left or, with `validated`, when it was
    validated on the target."""
    patches = []
    for entry in entries:
        if validated:
            record = dict(entry['record'], validated=now, result='validated')
        else:
            record = {'from': entry['rhcos'] if entry['rhcos'] != target else 'unknown', 'to': target, 'started': now}
        patches.append({'apiVersion': 'v1', 'kind': 'Node', 'metadata': {
            'name': entry['name'], 'annotations': {RECORD_ANNOTATION: json.dumps(record, sort_keys=True)}}})
    return patches


def label_patches(entries, target):
    """Node patches setting the NFD OSTREE_VERSION label of the nodes of `entries` to `target`, the build their
    osImage says they run, for when NFD has not relabelled them yet."""
    return [{'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': entry['name'], 'labels': {OSTREE_LABEL: target}}}
            for entry in entries]
