# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's remediation state, record and quarantine (module_utils/remediation/state.py)."""

import json

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.remediation import state
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.remediation.remediation_dicts import (
    HOUR, NOW, fault, gpu_node, health)


@pytest.mark.parametrize('action, path', [
    ('reset', [state.DRAIN_REQUIRED, state.RESET_REQUIRED, state.VALIDATION_REQUIRED, state.UNCORDON_REQUIRED,
               state.DONE]),
    ('reboot', [state.DRAIN_REQUIRED, state.REBOOT_REQUIRED, state.VALIDATION_REQUIRED, state.UNCORDON_REQUIRED,
                state.DONE]),
    ('rma', [state.RMA]),
])
def test_a_node_passes_the_states_of_its_action_from_quarantine(action, path):
    walked, current = [], state.QUARANTINE_REQUIRED
    while current in state.IN_PROGRESS:
        current = state.next_state(current, action)
        walked.append(current)
    assert walked == path


@pytest.mark.parametrize('held', [state.DONE, state.RMA, state.FAILED, ''])
def test_no_step_follows_a_state_not_in_progress(held):
    with pytest.raises(ValueError):
        state.next_state(held, 'reset')


def test_worse_ranks_the_actions_and_takes_an_unknown_one_for_contact_support():
    assert state.worse('reset', 'reboot') == 'reboot'
    assert state.worse('rma', 'reset') == 'rma'
    assert state.worse('none', 'none') == 'none'
    assert state.worse('reset', 'power-cycle') == 'rma'


def test_the_state_and_record_are_read_from_the_node():
    record = {'action': 'reset', 'xids': [48]}
    node = gpu_node('gpu-1', state.DRAIN_REQUIRED, record)
    assert state.node_state(node) == state.DRAIN_REQUIRED
    assert state.read_record(node) == record
    assert state.node_state(gpu_node('gpu-2')) == '' and state.read_record(gpu_node('gpu-2')) == {}


@pytest.mark.parametrize('text', ['not json', '[1, 2]'])
def test_a_record_that_is_no_json_object_reads_as_none(text):
    assert state.read_record(gpu_node('gpu-1', annotations={state.RECORD_ANNOTATION: text})) == {}


def test_a_new_record_names_the_faults_keeps_the_attempts_within_the_window_and_the_cordon_before():
    faults = [fault(48, 'reset', 2, 'double-bit ECC error'), fault(13, 'none', 3), fault(48, 'reset', 5)]
    previous = {'attempts': [{'action': 'reset', 'started': NOW - 30 * HOUR, 'result': 'succeeded'},
                             {'action': 'reset', 'started': NOW - HOUR, 'result': 'succeeded'}]}
    record = state.new_record(health('gpu-1', *faults, unschedulable=True), NOW, 24 * HOUR, previous)
    assert record['xids'] == [48]
    assert record['gpu_uuids'] == [faults[0]['gpu_uuid'], faults[2]['gpu_uuid']]
    assert record['pci_bus_ids'] == ['00000000:12:00.0', '00000000:15:00.0']
    assert record['action'] == 'reset' and record['unschedulable_before'] is True
    assert record['attempts'] == previous['attempts'][1:]
    assert record['since'] == record['updated'] == NOW
    assert 'GPU %s (PCI 00000000:12:00.0, index 2): XID 48, reset (double-bit ECC error)' % faults[0]['gpu_uuid'] \
        in record['reason']
    assert 'XID 13' not in record['reason']


def test_a_merged_record_adds_the_new_faults_and_takes_the_worse_action():
    first = state.new_record(health('gpu-1', fault(48, 'reset', 0)), NOW - 60, 0)
    merged = state.merged_record(first, health('gpu-1', fault(79, 'reboot', 1)), NOW)
    assert merged['action'] == 'reboot' and merged['xids'] == [48, 79] and len(merged['gpu_uuids']) == 2
    assert merged['since'] == NOW - 60 and merged['updated'] == NOW
    assert 'then' in merged['reason'] and 'XID 79' in merged['reason']
    again = state.merged_record(first, health('gpu-1', fault(48, 'reset', 0)), NOW)
    assert dict(again, updated=None) == dict(first, updated=None)


def test_an_attempt_is_started_left_open_by_a_stopped_run_and_finished():
    record = state.start_attempt({'action': 'reboot'}, 'reboot', NOW, boot_id='b-1')
    assert state.open_attempt(record) == {'action': 'reboot', 'started': NOW, 'finished': None, 'result': None,
                                          'boot_id': 'b-1'}
    done = state.finish_attempt(record, state.ATTEMPT_FAILED, NOW + 60, 'GPU still unhealthy')
    assert state.open_attempt(done) is None
    assert done['attempts'][-1] == {'action': 'reboot', 'started': NOW, 'finished': NOW + 60, 'result': 'failed',
                                    'boot_id': 'b-1', 'message': 'GPU still unhealthy'}
    assert record['attempts'][-1]['finished'] is None
    with pytest.raises(ValueError):
        state.finish_attempt(done, state.SUCCEEDED, NOW + 120)


def test_a_reboot_is_asked_of_its_node_once_and_waits_for_the_site_s_tasks_until_then():
    record = state.start_attempt({'action': 'reboot'}, 'reboot', NOW, boot_id='b-1')
    assert state.open_reboot(record) == state.open_attempt(record)
    # Recorded, not asked yet: the site's reboot tasks are to reboot the node.
    assert state.reboot_to_request(gpu_node('gpu-1', state.REBOOT_REQUIRED, record))
    asked = state.reboot_requested(record, NOW + 5, 'tasks')
    assert asked['attempts'][-1] == {'action': 'reboot', 'started': NOW, 'finished': None, 'result': None,
                                     'boot_id': 'b-1', 'requested': NOW + 5, 'by': 'tasks'}
    assert asked['updated'] == NOW + 5 and 'requested' not in record['attempts'][-1]
    # Asked (a stopped run's reboot): still open, waited for, never asked again.
    assert state.open_reboot(asked) and not state.reboot_to_request(gpu_node('gpu-1', state.REBOOT_REQUIRED, asked))
    # Only a node in reboot-required with its reboot open.
    assert not state.reboot_to_request(gpu_node('gpu-1', state.VALIDATION_REQUIRED, record))
    assert not state.reboot_to_request(gpu_node('gpu-1', state.REBOOT_REQUIRED, {'action': 'reboot'}))
    reset = state.start_attempt({'action': 'reset'}, 'reset', NOW)
    assert state.open_reboot(reset) is None
    assert not state.reboot_to_request(gpu_node('gpu-1', state.REBOOT_REQUIRED, reset))
    done = state.finish_attempt(asked, state.SUCCEEDED, NOW + 60)
    for closed in (reset, done):
        with pytest.raises(ValueError):
            state.reboot_requested(closed, NOW + 70, 'job')


def test_the_state_patch_writes_the_label_and_the_record_as_json():
    patch = state.state_patch(state.RMA, {'action': 'rma', 'xids': [79]})
    assert patch['metadata']['labels'] == {state.STATE_LABEL: state.RMA}
    assert json.loads(patch['metadata']['annotations'][state.RECORD_ANNOTATION]) == {'action': 'rma', 'xids': [79]}
    assert state.state_patch(None) == {'metadata': {'labels': {state.STATE_LABEL: None}}}


def test_the_quarantine_cordons_and_taints_keeping_the_other_taints():
    other = {'key': 'nvidia.com/gpu', 'value': 'present', 'effect': 'NoSchedule'}
    node = gpu_node('gpu-1', taints=[other, state.quarantine_taint('reset')])
    patch = state.quarantine_patch(node, 'rma')
    assert patch == {'spec': {'unschedulable': True, 'taints': [
        other, {'key': state.TAINT_KEY, 'value': 'rma', 'effect': 'NoSchedule'}]}}


@pytest.mark.parametrize('before', [False, True])
def test_the_release_untaints_and_uncordons_but_an_admin_cordon_stays(before):
    other = {'key': 'example.com/maintenance', 'effect': 'NoExecute'}
    node = gpu_node('gpu-1', taints=[state.quarantine_taint('reset'), other], unschedulable=True)
    assert state.release_patch(node, {'unschedulable_before': before}) == {
        'spec': {'unschedulable': before, 'taints': [other]}}


def test_the_untaint_keeps_the_cordon_and_the_other_taints():
    other = {'key': 'example.com/maintenance', 'effect': 'NoExecute'}
    node = gpu_node('gpu-1', taints=[state.quarantine_taint('reset'), other], unschedulable=True)
    assert state.untaint_patch(node) == {'spec': {'taints': [other]}}


@pytest.mark.parametrize('value, under', [(value, True) for value in state.IN_PROGRESS + state.HELD] + [
    (state.DONE, False), (None, False), ('repaired', False)])
def test_under_remediation_says_so_with_the_state_for_a_node_in_progress_or_held(value, under):
    labels = {'kubernetes.io/hostname': 'gpu-1'}
    if value is not None:
        labels[state.STATE_LABEL] = value
    words = state.under_remediation(labels)
    assert bool(words) is under
    if under:
        assert words == 'under GPU remediation (accelerators.gpu/gpu-remediation-state=%s)' % value
    assert state.under_remediation(None) == ''
