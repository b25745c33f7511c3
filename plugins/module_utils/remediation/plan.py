# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a remediation run does to each GPU node of a cluster, within its budgets: pure functions.

Input: the health records of the cluster's GPU nodes (one per node: node, healthy, action, gpus, faults,
unschedulable, labels, taints) and the Node objects (their remediation state and record, state.py, and the marks of
the other owners). Output: the plan, per node the step it needs next and the state it moves to after, the nodes only
reported and why, the wave and the circuit breaker. A run acts on the wave, re-reads the nodes and plans again: the
nodes say where each one stands, so an interrupted run resumes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ..driver.upgrade_plan import STATE_LABEL as DRIVER_STATE_LABEL, UPGRADE_DONE
from ..mig.config import STATE_LABEL as MIG_STATE_LABEL
from ..nodes.facts import DEPLOY_LABEL_PREFIX, DEVICE_PLUGIN, DRA_DRIVER
from ..operands.checks.objects import json_annotation
from ..upgrade.rhcos import CURRENT_CONFIG, DESIRED_CONFIG, MCD_STATE, RECORD_ANNOTATION as RHCOS_RECORD_ANNOTATION
from .state import (
    FAILED, HELD, IN_PROGRESS, QUARANTINE_REQUIRED, REBOOT_REQUIRED, REFUSED, RESET_REQUIRED, RMA, STATE_LABEL,
    STATES, STEPS, TAINT_KEY, VALIDATION_REQUIRED, attempts_within, fault_words, merged_record, new_record,
    next_state, node_state, open_attempt, read_record,
)

# The opt-out, as the driver rollout's nvidia.com/gpu-driver-upgrade.skip=true.
OPT_OUT_LABEL = 'accelerators.gpu/gpu-remediation.skip=true'

# The operands that hold a node's GPUs open (NVML handles), which nvidia-smi --gpu-reset refuses to reset under: as
# NVSentinel's janitor stops them, by their deploy labels (nodes.facts.OPERANDS). The DRA driver's kubelet plugin
# holds them as the device plugin does. The MIG manager has no deploy label here (it runs on MIG-capable nodes) and
# opens the GPUs only while it applies a layout, which is a change of another owner (other_owner).
GPU_CLIENTS = (DEVICE_PLUGIN, DRA_DRIVER, 'dcgm-exporter', 'dcgm', 'gpu-feature-discovery')
# The value of a deploy label while its operand is stopped for a reset, as the GPU Operator's
# paused-for-driver-upgrade: no DaemonSet selects it, the deploy roles keep it, and it says why.
PAUSED_FOR_RESET = 'paused-for-gpu-reset'

# NVIDIA NVSentinel: the state label it sets on a node it acts on, the prefix of the labels its labeler sets on every
# GPU node it manages, and its opt-outs (the second is the one of its earlier releases).
NVSENTINEL_STATE_LABEL = 'dgxc.nvidia.com/nvsentinel-state'
NVSENTINEL_LABEL_PREFIX = 'nvsentinel.dgxc.nvidia.com/'
NVSENTINEL_OPT_OUTS = ('nvsentinel.dgxc.nvidia.com/managed', 'k8saas.nvidia.com/ManagedByNVSentinel')
# The MIG manager's states of a layout change under way.
MIG_CHANGING = ('pending', 'rebooting')


class SettingsError(ValueError):
    pass


def operands_to_stop(labels):
    """The deploy labels to set before a reset of the node (its labels), those of GPU_CLIENTS set to 'true' now, in
    the order to set them: the DRA driver's kubelet plugin last, once the pods holding claims it prepared are gone (a
    kubelet unprepares a claim through the plugin: without it they would stay Terminating). [] when none is set."""
    def paused(operands):
        return dict((DEPLOY_LABEL_PREFIX + operand, PAUSED_FOR_RESET) for operand in operands
                    if labels.get(DEPLOY_LABEL_PREFIX + operand) == 'true')
    phases = [paused([operand for operand in GPU_CLIENTS if operand != DRA_DRIVER]), paused([DRA_DRIVER])]
    return [phase for phase in phases if phase]


def operands_to_restore(labels):
    """The deploy labels to set back after a reset: those still paused for it (an admin's change since stays). The
    device plugin restarts with its label, the only way its devices become Healthy again."""
    return dict((key, 'true') for key, value in labels.items()
                if key.startswith(DEPLOY_LABEL_PREFIX) and value == PAUSED_FOR_RESET)


def parse_label(text):
    """A 'key=value' label setting as (key, value); a key alone means the value 'true'."""
    key, _sep, value = str(text or '').partition('=')
    if not key.strip():
        raise SettingsError('opt_out_label %r is not a label such as %s' % (text, OPT_OUT_LABEL))
    return key.strip(), value.strip() if _sep else 'true'


def nvsentinel_managed(labels):
    """Whether NVIDIA NVSentinel manages the node (its labels): it acts on it now (its state label), or its labeler
    labelled it and the node is not opted out of NVSentinel."""
    if NVSENTINEL_STATE_LABEL in labels:
        return True
    if any(labels.get(key) == 'false' for key in NVSENTINEL_OPT_OUTS):
        return False
    return any(key.startswith(NVSENTINEL_LABEL_PREFIX) for key in labels)


def other_owner(node):
    """The change of another owner the node (a Node dict) is in, in words, or '': a driver rollout (its state label
    set and not upgrade-done), an RHCOS or kernel rollout of the rhcos_upgrade role (its record not validated yet), the
    machine-config operator updating it, or a MIG layout change (pending or rebooting)."""
    metadata = node.get('metadata') or {}
    labels, annotations = metadata.get('labels') or {}, metadata.get('annotations') or {}
    driver = labels.get(DRIVER_STATE_LABEL)
    if driver and driver != UPGRADE_DONE:
        return 'in a driver rollout (%s=%s)' % (DRIVER_STATE_LABEL, driver)
    record = json_annotation(annotations, RHCOS_RECORD_ANNOTATION)
    if record.get('to') and record.get('result') != 'validated':
        return 'in an RHCOS or kernel rollout to %s (%s not validated yet)' % (record['to'], RHCOS_RECORD_ANNOTATION)
    current, desired, mcd = (annotations.get(key) for key in (CURRENT_CONFIG, DESIRED_CONFIG, MCD_STATE))
    if (desired and current != desired) or mcd not in (None, 'Done'):
        return 'updated by the machine-config operator (state %s, config %s, desired %s)' % (mcd, current, desired)
    if labels.get(MIG_STATE_LABEL) in MIG_CHANGING:
        return 'in a MIG layout change (%s=%s)' % (MIG_STATE_LABEL, labels[MIG_STATE_LABEL])
    return ''


def _when(seconds):
    """A time of a record (seconds since the epoch) in UTC, as people read it."""
    try:
        return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(float(seconds)))
    except (TypeError, ValueError):
        return 'an unknown time'


def _where(cluster, name):
    return 'cluster %s, node %s' % (cluster, name)


def _faults_words(faults):
    return '; '.join(fault_words(fault) for fault in faults) or 'no fault named'


def _counted(record, now, window):
    """The attempts that count against max_attempts: those within the window, but refused ones (nothing was tried)."""
    return [attempt for attempt in attempts_within(record, now, window) if attempt.get('result') != REFUSED]


def _entry(cluster, name, health, node, settings, opt_out):
    """One node's part of the plan (see remediation_plan)."""
    labels = dict((node.get('metadata') or {}).get('labels') or health.get('labels') or {})
    state, record = node_state(node), read_record(node)
    faults = health.get('faults') or []
    action = health.get('action') or ('none' if health.get('healthy', True) else 'rma')
    entry = {'node': name, 'state': state, 'health_action': action, 'faults': faults, 'disposition': 'healthy',
             'reason': '', 'target_state': state, 'record': None, 'step': None, 'next_state': None,
             'open_attempt': open_attempt(record), 'gpu_uuids': record.get('gpu_uuids') or [],
             'pci_bus_ids': record.get('pci_bus_ids') or [], 'xids': record.get('xids') or []}
    where = _where(cluster, name)

    def report(reason):
        entry.update(disposition='reported', reason='%s: %s' % (where, reason))
        return entry

    in_progress = state in IN_PROGRESS
    tainted = any(taint.get('key') == TAINT_KEY for taint in (node.get('spec') or {}).get('taints') or [])
    if state and state not in STATES:
        return report('%s=%s is no state of the remediation: left alone (%s)' % (
            STATE_LABEL, state, _faults_words(faults)))
    if state == RMA:
        return report('quarantined for RMA since %s: %s; left alone until an admin removes the label %s' % (
            _when(record.get('updated')), record.get('reason', 'no reason recorded'), STATE_LABEL))
    if state == FAILED:
        attempt = (record.get('attempts') or [{}])[-1]
        return report('remediation failed (%s): %s; left quarantined until an admin removes the label %s' % (
            attempt.get('message') or record.get('failure') or 'no message recorded',
            record.get('reason', 'no reason recorded'), STATE_LABEL))
    faulty = action != 'none'
    # Released by an admin: the state label of a quarantined node removed, its GPUs healthy now.
    released = not state and tainted and not faulty
    if not (in_progress or faulty or released):
        if faults:
            return report('application XIDs only, reported: %s (restart the application; nothing done)'
                          % _faults_words(faults))
        return entry
    if labels.get(opt_out[0]) == opt_out[1]:
        return report('opted out (label %s=%s)%s: %s' % (
            opt_out[0], opt_out[1], ', left as it stands in state %s' % state if in_progress else '',
            _faults_words(faults)))
    if nvsentinel_managed(labels):
        return report('managed by NVIDIA NVSentinel, which remediates it (label it %s=false to hand it over): %s' % (
            NVSENTINEL_OPT_OUTS[0], _faults_words(faults)))
    owner = other_owner(node)
    if owner:
        return report('%s: remediated once that ends; %s' % (owner, _faults_words(faults)))

    now, window = settings['now'], settings['attempt_window']
    if in_progress:
        entry['disposition'] = 'in_progress'
        updated = merged_record(record, health, now) if faulty else record
        target = state
        if updated.get('action') == 'rma' and state != QUARANTINE_REQUIRED:
            target = RMA
        elif updated.get('action') == 'reboot' and state == RESET_REQUIRED and not entry['open_attempt']:
            target = REBOOT_REQUIRED
        changed = dict(updated, updated=None) != dict(record, updated=None)
        entry.update(target_state=target, record=updated if changed else None)
        if target != state:
            entry['reason'] = '%s: a worse fault found during the remediation (%s): %s' % (
                where, updated['action'], _faults_words(faults))
    elif released:
        entry.update(disposition='start', target_state=VALIDATION_REQUIRED,
                     reason='%s: released by an admin (%s removed) and healthy: validated, then returned' % (
                         where, STATE_LABEL))
        updated = record
    else:
        entry['disposition'] = 'start'
        counted = _counted(record, now, window)
        updated = new_record(health, now, window, record)
        if action not in ('reset', 'reboot', 'rma'):
            updated['action'] = 'rma'
            entry['reason'] = '%s: fault action %r unknown: treated as contact support' % (where, action)
        elif action != 'rma' and len(counted) >= settings['max_attempts']:
            updated['action'] = 'rma'
            entry['reason'] = '%s: faulty again after %d attempts within %d s: quarantined for RMA' % (
                where, len(counted), window)
        elif action == 'reset' and counted and counted[-1].get('action') == 'reset':
            updated['action'] = 'reboot'
            entry['reason'] = '%s: faulty again after the reset of %s: rebooted this time' % (
                where, _when(counted[-1].get('started')))
        entry.update(target_state=QUARANTINE_REQUIRED, record=updated)
    for key in ('gpu_uuids', 'pci_bus_ids', 'xids'):
        entry[key] = updated.get(key) or []
    if entry['target_state'] in IN_PROGRESS:
        entry['step'] = STEPS[entry['target_state']]
        entry['next_state'] = next_state(entry['target_state'], updated.get('action', 'rma'))
    return entry


def after_failed_attempt(record, settings):
    """The state of a node whose reset or reboot did not bring its GPUs back (validation failed, or the step
    failed): rma once max_attempts attempts count within the window, else a reboot (a reset that did not help is
    followed by a reboot)."""
    counted = _counted(record, settings['now'], settings['attempt_window'])
    return RMA if len(counted) >= settings['max_attempts'] else REBOOT_REQUIRED


def likely_cause(entries):
    """Words on what makes many nodes faulty at once, from their faults."""
    by_xid = {}
    for entry in entries:
        for xid in set(fault.get('xid') for fault in entry['faults'] if fault.get('xid') is not None):
            by_xid.setdefault(xid, []).append(entry['node'])
    if not by_xid:
        return ('no XID behind the faults: look at the device plugin and the driver on these nodes (an NVML error '
                'marks every GPU of a node unhealthy)')
    xid, nodes = max(sorted(by_xid.items()), key=lambda item: len(item[1]))
    if 2 * len(nodes) < len(entries):
        return 'different XIDs on the nodes (%s): look at the driver, the GPU firmware, power and cooling' % (
            ', '.join(str(xid) for xid in sorted(by_xid)))
    if xid == 79:
        cause = 'GPUs fallen off the bus on many nodes at once: power, cooling or the platform\'s PCIe firmware'
    elif xid in (119, 120):
        cause = 'GSP timeouts and errors on many nodes at once: the driver or the GPU (GSP) firmware'
    else:
        cause = 'the same XID on many nodes at once points to the driver or the GPU firmware, not to the GPUs'
    return 'XID %s on %d of them (%s): %s' % (xid, len(nodes), ', '.join(nodes), cause)


def remediation_plan(cluster, records, nodes, settings):
    """The plan of one run over one cluster.

    records: the health records of the cluster's GPU nodes; nodes: its Node objects (dicts); settings: max_parallel
    (M: nodes under remediation at once, 0 no limit), max_faulty_percent (P), max_attempts (N), attempt_window
    (seconds), opt_out_label ('key=value', OPT_OUT_LABEL when absent), now (seconds since the epoch) and nodes (the
    only nodes to act on, as an event's rule names one; empty: every node).

    Returns {cluster, total (GPU nodes), faulty (nodes with a GPU fault calling for an action, but those held: rma
    or failed), breaker ('' or why nothing is done), wave (the nodes acted on now: those in progress first, then new
    ones in name order, at most M in all), waiting (faulty nodes left for a later run by M), reported (nodes left
    alone, each with its reason), nodes: one entry per node with a fault, a remediation state or the quarantine
    taint: node, state (its label now), disposition (in_progress, start, reported or healthy), reason, target_state
    (the state to write before its step), record (the record to write, None when unchanged), step (quarantine,
    drain, reset, reboot, validate, uncordon, or None), next_state (after the step succeeds), open_attempt (a reset
    or reboot a stopped run left open), gpu_uuids, pci_bus_ids and xids (of its record), faults (its health now) and
    text (one line for check mode)}.

    More than P % of the GPU nodes faulty at once (and at least two) trips the breaker: the run acts on no node.
    """
    opt_out = parse_label(settings.get('opt_out_label') or OPT_OUT_LABEL)
    by_name = dict(((node.get('metadata') or {}).get('name'), node) for node in nodes)
    health = dict((record['node'], record) for record in records)
    marked = [name for name, node in by_name.items()
              if node_state(node) or any(taint.get('key') == TAINT_KEY
                                         for taint in (node.get('spec') or {}).get('taints') or [])]
    entries = []
    for name in sorted(set(health) | set(marked)):
        record = health.get(name) or {'node': name, 'healthy': True, 'action': 'none', 'faults': []}
        node = by_name.get(name) or {'metadata': {'name': name, 'labels': record.get('labels') or {}}}
        entry = _entry(cluster, name, record, node, settings, opt_out)
        if entry['disposition'] != 'healthy':
            entries.append(entry)
    total = len(health)
    named = settings.get('nodes') or []
    for entry in entries:
        if named and entry['node'] not in named and entry['disposition'] in ('in_progress', 'start'):
            # Still counted by the breaker: the cluster's health is the whole cluster's.
            entry.update(disposition='reported', reason='%s: not among the nodes this run is for (%s)' % (
                _where(cluster, entry['node']), ', '.join(named)))
    faulty = [entry for entry in entries if entry['health_action'] != 'none' and entry['state'] not in HELD]
    acting = [entry for entry in entries if entry['disposition'] in ('in_progress', 'start')]
    in_progress = [entry['node'] for entry in acting if entry['disposition'] == 'in_progress']
    starting = [entry['node'] for entry in acting if entry['disposition'] == 'start']
    limit = settings['max_parallel']
    room = max(0, limit - len(in_progress)) if limit else len(starting)
    plan = {
        'cluster': cluster,
        'total': total,
        'faulty': [entry['node'] for entry in faulty],
        'breaker': '',
        'wave': in_progress + starting[:room],
        'waiting': starting[room:],
        'reported': [entry['node'] for entry in entries if entry['disposition'] == 'reported'],
        'nodes': entries,
    }
    percent = settings['max_faulty_percent']
    if len(faulty) > 1 and len(faulty) * 100 > percent * total:
        plan['breaker'] = (
            'cluster %s: %d of %d GPU nodes (%d %%) have GPU faults at once, more than max_faulty_percent %s %%: '
            'no node is remediated. Likely a cluster-wide cause: %s. Faults: %s' % (
                cluster, len(faulty), total, len(faulty) * 100 // total, percent, likely_cause(faulty),
                ' | '.join('node %s: %s' % (entry['node'], _faults_words(entry['faults'])) for entry in faulty)))
        plan['waiting'] = in_progress + starting
        plan['wave'] = []
    for entry in entries:
        entry['text'] = entry_text(cluster, entry, entry['node'] in plan['wave'])
    return plan


def entry_text(cluster, entry, in_wave):
    """One node's line of the plan, as check mode prints it."""
    where = _where(cluster, entry['node'])
    if entry['disposition'] == 'reported':
        return entry['reason']
    gpus = ', '.join('%s (PCI %s)' % pair for pair in zip(entry['gpu_uuids'], entry['pci_bus_ids'])) or 'none named'
    xids = ', '.join(str(xid) for xid in entry['xids']) or 'none'
    if entry['step']:
        what = '%s -> %s, then %s' % (entry['state'] or 'no state', entry['step'], entry['next_state'])
    else:
        what = '%s -> %s' % (entry['state'] or 'no state', entry['target_state'])
    return '%s: %s%s; GPUs %s; XIDs %s%s' % (
        where, what, '' if in_wave else ' (waits: budget or breaker)', gpus, xids,
        '; ' + entry['reason'].split(': ', 1)[1] if entry['reason'] else '')


def plan_lines(plan):
    """The plan as check mode prints it: the breaker, then one line per node."""
    lines = [plan['breaker']] if plan['breaker'] else []
    lines.extend(entry['text'] for entry in plan['nodes'])
    return lines or ['cluster %s: %d GPU nodes, none faulty, nothing to do' % (plan['cluster'], plan['total'])]
