# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a GPU node stands in its remediation, read from and written to the node alone: pure functions.

The state is the node label STATE_LABEL, the step the node needs next, as the driver rollout's
nvidia.com/gpu-driver-upgrade-state is; the record is the JSON annotation RECORD_ANNOTATION (why: reason, xids,
gpu_uuids, pci_bus_ids, action; attempts: [{action, started, finished, result}], a reboot's also with the boot ID
before it and when and by what it was asked of the node; since, updated; and whether the node was unschedulable
before). Nothing is kept anywhere else, so a run that was interrupted resumes from what the nodes
say. Times are seconds since the epoch, as the rhcos_upgrade record has them.

The quarantine is a cordon and the NoSchedule taint TAINT_KEY. NoSchedule, not NoExecute: NoExecute would make the
kubelet kill every pod without a toleration at once, PodDisruptionBudgets ignored; the GPU workloads leave through the
Eviction API instead, under their budgets, in the drain step. The taint keeps new pods off after an admin's
uncordon and marks the node for people and for the other owners (driver rollout, RHCOS rollout, MIG change), which
leave it alone. The stack's operands tolerate only nvidia.com/gpu, so the taint comes off, the cordon staying, when
the node's GPUs come back (validation-required: after a reset or a reboot): the DaemonSet controller then puts the
device plugin back (DaemonSet pods tolerate a cordon), and the validation Job tolerates the cordon as the driver
rollout's does. Adding the toleration to the operands instead would change every operand's pod template, and so
restart the operands of every node. Until then, and whenever a node is held (rma, failed), it is cordoned and tainted.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ..operands.checks.objects import json_annotation

STATE_LABEL = 'accelerators.gpu/gpu-remediation-state'
RECORD_ANNOTATION = 'accelerators.gpu/gpu-remediation'
TAINT_KEY = 'accelerators.gpu/gpu-remediation'
TAINT_EFFECT = 'NoSchedule'

QUARANTINE_REQUIRED = 'quarantine-required'
DRAIN_REQUIRED = 'drain-required'
RESET_REQUIRED = 'reset-required'
REBOOT_REQUIRED = 'reboot-required'
VALIDATION_REQUIRED = 'validation-required'
UNCORDON_REQUIRED = 'uncordon-required'
DONE = 'done'
RMA = 'rma'
FAILED = 'failed'
# The states of a node taken and not yet back, in the order a node passes them (reset or reboot, not both in a row).
IN_PROGRESS = (QUARANTINE_REQUIRED, DRAIN_REQUIRED, RESET_REQUIRED, REBOOT_REQUIRED, VALIDATION_REQUIRED,
               UNCORDON_REQUIRED)
# Left alone, cordoned and tainted, until an admin removes the state label.
HELD = (RMA, FAILED)
STATES = IN_PROGRESS + (DONE,) + HELD
# The step each state in progress asks for.
STEPS = {QUARANTINE_REQUIRED: 'quarantine', DRAIN_REQUIRED: 'drain', RESET_REQUIRED: 'reset',
         REBOOT_REQUIRED: 'reboot', VALIDATION_REQUIRED: 'validate', UNCORDON_REQUIRED: 'uncordon'}

# NVIDIA's XID catalog actions, as the health records name them, mildest first.
ACTIONS = ('none', 'reset', 'reboot', 'rma')
# Results of an attempt (a reset or a reboot): refused is a reset nvidia-smi would not do (the GPU in use).
SUCCEEDED, ATTEMPT_FAILED, REFUSED = 'succeeded', 'failed', 'refused'


def worse(first, second):
    """The worse of two actions (ACTIONS); an action the table does not know counts as rma (contact support)."""
    rank = [ACTIONS.index(action) if action in ACTIONS else len(ACTIONS) - 1 for action in (first, second)]
    return ACTIONS[max(rank)]


def next_state(state, action):
    """The state a node moves to once the step of `state` succeeded, for a remediation by `action` (reset, reboot
    or rma): a node for RMA stays quarantined; the others are drained, reset or rebooted, validated and released."""
    if state == QUARANTINE_REQUIRED:
        return RMA if action == 'rma' else DRAIN_REQUIRED
    if state == DRAIN_REQUIRED:
        return RESET_REQUIRED if action == 'reset' else REBOOT_REQUIRED
    if state in (RESET_REQUIRED, REBOOT_REQUIRED):
        return VALIDATION_REQUIRED
    if state == VALIDATION_REQUIRED:
        return UNCORDON_REQUIRED
    if state == UNCORDON_REQUIRED:
        return DONE
    raise ValueError('no step follows state %r' % state)


def under_remediation(labels):
    """Whether a node (its labels) is under GPU remediation, in words for the other owners' reports, or '': its
    state in progress or held (rma, failed). Done, absent or a value the remediation does not know is not: the
    remediation itself reports an unknown value and leaves that node alone."""
    state = (labels or {}).get(STATE_LABEL, '')
    if state in IN_PROGRESS + HELD:
        return 'under GPU remediation (%s=%s)' % (STATE_LABEL, state)
    return ''


def _metadata(node):
    return node.get('metadata') or {}


def node_state(node):
    """The remediation state of a node (a Node dict): its label's value, '' when it has none."""
    return (_metadata(node).get('labels') or {}).get(STATE_LABEL, '')


def read_record(node):
    """The remediation record of a node (a Node dict): {} when it has none or it is not a JSON object."""
    return json_annotation(_metadata(node).get('annotations') or {}, RECORD_ANNOTATION)


def fault_words(fault):
    """One fault (a health record's) in words: GPU UUID, PCI bus ID, index and XID."""
    where = 'GPU %s (PCI %s, index %s)' % (
        fault.get('gpu_uuid') or 'unknown', fault.get('pci_bus_id') or 'unknown', fault.get('gpu_index', '?'))
    what = 'XID %s' % fault['xid'] if fault.get('xid') is not None else 'no XID'
    return '%s: %s, %s%s' % (where, what, fault.get('action') or 'rma',
                             ' (%s)' % fault['message'] if fault.get('message') else '')


def _unique(values):
    found = []
    for value in values:
        if value is not None and value != '' and value not in found:
            found.append(value)
    return found


def attempts_within(record, now, window):
    """The attempts of a record started within `window` seconds before now."""
    return [attempt for attempt in record.get('attempts') or [] if attempt.get('started', 0) >= now - window]


def new_record(health, now, window, previous=None):
    """The record of a node entering remediation for the faults of its health record: reason, XIDs, GPU UUIDs, PCI
    bus IDs, the action (the worst of its faults), whether it was unschedulable before, since and updated now; the
    attempts of `previous` (its earlier record) within the window are kept, to count against max_attempts."""
    faults = [fault for fault in health.get('faults') or [] if fault.get('action', 'rma') != 'none']
    return {
        'reason': '; '.join(fault_words(fault) for fault in faults) or 'GPUs unhealthy, no fault named',
        'xids': sorted(_unique(fault.get('xid') for fault in faults)),
        'gpu_uuids': _unique(fault.get('gpu_uuid') for fault in faults),
        'pci_bus_ids': _unique(fault.get('pci_bus_id') for fault in faults),
        'action': health.get('action') or 'rma',
        'unschedulable_before': bool(health.get('unschedulable')),
        'attempts': attempts_within(previous or {}, now, window),
        'since': now,
        'updated': now,
    }


def merged_record(record, health, now):
    """The record of a node in progress with the faults its health shows now added: XIDs, GPUs, and the action made
    the worse of both (a reboot fault found during a reset escalates it)."""
    update = new_record(health, now, 0)
    merged = dict(record, updated=now, action=worse(record.get('action', 'rma'), update['action']))
    for key in ('xids', 'gpu_uuids', 'pci_bus_ids'):
        merged[key] = _unique(list(record.get(key) or []) + update[key])
    merged['xids'] = sorted(merged['xids'])
    if update['reason'] not in record.get('reason', ''):
        merged['reason'] = '%s; then %s' % (record.get('reason'), update['reason']) if record.get('reason') \
            else update['reason']
    return merged


def open_attempt(record):
    """The last attempt of the record when it has not finished (a run stopped during it), else None."""
    attempts = record.get('attempts') or []
    return attempts[-1] if attempts and attempts[-1].get('finished') is None else None


def start_attempt(record, action, now, boot_id=None):
    """The record with an attempt of `action` (reset or reboot) started now; a reboot notes the boot ID before it, so
    that a resumed run tells whether the node has rebooted since."""
    attempt = {'action': action, 'started': now, 'finished': None, 'result': None}
    if boot_id is not None:
        attempt['boot_id'] = boot_id
    return dict(record, attempts=list(record.get('attempts') or []) + [attempt], updated=now)


def open_reboot(record):
    """The record's open attempt when it is a reboot (started, the node not back yet), else None."""
    attempt = open_attempt(record)
    return attempt if attempt and attempt.get('action') == 'reboot' else None


def reboot_requested(record, now, by):
    """The record with its open reboot marked as asked of the node now, by the reboot Job or the site's reboot tasks
    (`by`: job or tasks): a resumed run waits for that reboot rather than asking for another."""
    attempts = [dict(attempt) for attempt in record.get('attempts') or []]
    if not open_reboot(record):
        raise ValueError('no reboot open in the record to mark requested')
    attempts[-1].update(requested=now, by=by)
    return dict(record, attempts=attempts, updated=now)


def reboot_to_request(node):
    """Whether the node (a Node dict) waits for the site's reboot tasks: in reboot-required, its reboot recorded (the
    boot ID before it) and not asked of it yet."""
    attempt = open_reboot(read_record(node))
    return node_state(node) == REBOOT_REQUIRED and attempt is not None and attempt.get('requested') is None


def finish_attempt(record, result, now, message=''):
    """The record with its open attempt finished now with `result` (SUCCEEDED, ATTEMPT_FAILED or REFUSED) and what
    the step said."""
    attempts = [dict(attempt) for attempt in record.get('attempts') or []]
    if not attempts or attempts[-1].get('finished') is not None:
        raise ValueError('no attempt open in the record to finish')
    attempts[-1].update(finished=now, result=result)
    if message:
        attempts[-1]['message'] = message
    return dict(record, attempts=attempts, updated=now)


def state_patch(state, record=None):
    """A merge patch of a node's metadata: its state label (None removes it) and, given, its record."""
    metadata = {'labels': {STATE_LABEL: state}}
    if record is not None:
        metadata['annotations'] = {RECORD_ANNOTATION: json.dumps(record, sort_keys=True)}
    return {'metadata': metadata}


def quarantine_taint(action):
    """The quarantine taint; its value is the remediation's action (reset, reboot, rma), for people to read."""
    return {'key': TAINT_KEY, 'value': action, 'effect': TAINT_EFFECT}


def _other_taints(node):
    return [taint for taint in (node.get('spec') or {}).get('taints') or [] if taint.get('key') != TAINT_KEY]


def quarantine_patch(node, action):
    """A merge patch cordoning the node and setting the quarantine taint; its other taints stay (a merge patch
    replaces the whole list)."""
    return {'spec': {'unschedulable': True, 'taints': _other_taints(node) + [quarantine_taint(action)]}}


def release_patch(node, record):
    """A merge patch taking the quarantine taint off the node and uncordoning it, unless it was unschedulable
    before its remediation (an admin's cordon stays)."""
    return {'spec': {'unschedulable': bool(record.get('unschedulable_before')), 'taints': _other_taints(node)}}


def untaint_patch(node):
    """A merge patch taking the quarantine taint off the node, its cordon staying: its GPUs are back for the operands
    and the validation, not for workloads yet."""
    return {'spec': {'taints': _other_taints(node)}}
