# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a remediation run does to each GPU node, within its budgets (module_utils/remediation/plan.py)."""

import json

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.facts import DEPLOY_LABEL_PREFIX, OPERANDS
from ansible_collections.accelerators.gpu.plugins.module_utils.remediation import plan as remediation, state
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.remediation.remediation_dicts import (
    HOUR, NOW, SETTINGS, fault, gpu_node, health)

CLUSTER = 'prod-east'


def run(records, nodes=None, **settings):
    known = dict((node['metadata']['name'], node) for node in nodes or [])
    all_nodes = [known.get(record['node']) or gpu_node(record['node']) for record in records]
    all_nodes += [node for name, node in known.items() if name not in [r['node'] for r in records]]
    return remediation.remediation_plan(CLUSTER, records, all_nodes, dict(SETTINGS, **settings))


def entry(plan, name):
    return [e for e in plan['nodes'] if e['node'] == name][0]


def healthy(count, start=0):
    return [health('gpu-%d' % index) for index in range(start, start + count)]


def test_a_healthy_cluster_plans_nothing():
    plan = run(healthy(4))
    assert plan['nodes'] == [] and plan['wave'] == [] and plan['total'] == 4 and not plan['breaker']
    assert remediation.plan_lines(plan) == ['cluster prod-east: 4 GPU nodes, none faulty, nothing to do']


def test_a_double_bit_ecc_error_starts_a_reset_with_the_quarantine():
    ecc = fault(48, 'reset', 2, 'double-bit ECC error')
    plan = run(healthy(3) + [health('gpu-9', ecc)])
    node = entry(plan, 'gpu-9')
    assert plan['wave'] == ['gpu-9'] and plan['faulty'] == ['gpu-9']
    assert (node['disposition'], node['state'], node['target_state'], node['step'], node['next_state']) == (
        'start', '', state.QUARANTINE_REQUIRED, 'quarantine', state.DRAIN_REQUIRED)
    assert node['record']['action'] == 'reset' and node['record']['xids'] == [48]
    assert node['gpu_uuids'] == [ecc['gpu_uuid']] and node['pci_bus_ids'] == [ecc['pci_bus_id']]
    line = remediation.plan_lines(plan)[0]
    for words in ('cluster prod-east', 'node gpu-9', ecc['gpu_uuid'], ecc['pci_bus_id'], 'XIDs 48', 'quarantine'):
        assert words in line


def test_a_run_for_named_nodes_acts_on_them_only_and_reports_the_others():
    """As the rulebook's rule runs it for the node of its event: another faulty node waits for its own event."""
    ecc = fault(48, 'reset', 2, 'double-bit ECC error')

    def for_node_9(records, **settings):
        nodes = [gpu_node(record['node']) for record in records]
        return remediation.remediation_plan(CLUSTER, records, nodes, dict(SETTINGS, nodes=['gpu-9'], **settings))
    plan = for_node_9(healthy(6) + [health('gpu-8', ecc), health('gpu-9', fault(79, 'reboot', 0, 'off the bus'))],
                      max_parallel=0)
    assert plan['wave'] == ['gpu-9'] and plan['reported'] == ['gpu-8']
    assert 'not among the nodes this run is for (gpu-9)' in entry(plan, 'gpu-8')['reason']
    # The breaker counts the whole cluster: 2 of 8 faulty is more than 20 %.
    assert for_node_9(healthy(6) + [health('gpu-8', ecc), health('gpu-9', ecc)], max_faulty_percent=20)['breaker']


@pytest.mark.parametrize('current, action, step, after', [
    (state.DRAIN_REQUIRED, 'reset', 'drain', state.RESET_REQUIRED),
    (state.DRAIN_REQUIRED, 'reboot', 'drain', state.REBOOT_REQUIRED),
    (state.RESET_REQUIRED, 'reset', 'reset', state.VALIDATION_REQUIRED),
    (state.REBOOT_REQUIRED, 'reboot', 'reboot', state.VALIDATION_REQUIRED),
    (state.VALIDATION_REQUIRED, 'reboot', 'validate', state.UNCORDON_REQUIRED),
    (state.UNCORDON_REQUIRED, 'reset', 'uncordon', state.DONE),
])
def test_a_node_in_progress_resumes_at_its_state(current, action, step, after):
    record = {'action': action, 'xids': [48], 'gpu_uuids': ['GPU-1'], 'pci_bus_ids': ['00000000:10:00.0']}
    plan = run([health('gpu-1')], [gpu_node('gpu-1', current, record)])
    node = entry(plan, 'gpu-1')
    assert (node['disposition'], node['target_state'], node['step'], node['next_state'], node['record']) == (
        'in_progress', current, step, after, None)
    assert node['gpu_uuids'] == ['GPU-1'] and plan['wave'] == ['gpu-1']


def test_a_reboot_a_stopped_run_left_open_is_resumed_not_started_again():
    record = state.start_attempt({'action': 'reboot', 'gpu_uuids': ['GPU-1']}, 'reboot', NOW - 60, boot_id='b-1')
    node = entry(run([health('gpu-1', fault(79, 'reboot'))], [gpu_node('gpu-1', state.REBOOT_REQUIRED, record)]),
                 'gpu-1')
    assert node['step'] == 'reboot' and node['open_attempt']['boot_id'] == 'b-1'


def test_a_contact_support_fault_is_quarantined_then_held_for_rma():
    node = entry(run([health('gpu-1', fault(None, 'rma', 0, 'NVLink fabric degraded'))]), 'gpu-1')
    assert (node['target_state'], node['step'], node['next_state']) == (
        state.QUARANTINE_REQUIRED, 'quarantine', state.RMA)


def test_an_action_the_table_does_not_know_is_contact_support():
    node = entry(run([health('gpu-1', fault(999, 'power-cycle'), action='power-cycle')]), 'gpu-1')
    assert node['record']['action'] == 'rma' and node['next_state'] == state.RMA
    assert 'unknown' in node['reason']


def test_application_xids_are_reported_and_nothing_is_touched():
    faults = [fault(13, 'none', 0), fault(31, 'none', 1), fault(43, 'none', 2)]
    plan = run([health('gpu-1', *faults)])
    node = entry(plan, 'gpu-1')
    assert plan['wave'] == [] and plan['reported'] == ['gpu-1'] and plan['faulty'] == []
    assert node['step'] is None and node['record'] is None
    for words in ('cluster prod-east, node gpu-1', 'application XIDs only', 'XID 13', 'XID 31', 'XID 43',
                  faults[1]['gpu_uuid'], faults[1]['pci_bus_id']):
        assert words in node['text']


def test_a_node_held_for_rma_is_left_alone_and_not_counted_faulty():
    record = {'action': 'rma', 'reason': 'GPU GPU-7 (PCI 00000000:17:00.0, index 7): XID 95', 'updated': NOW - HOUR}
    plan = run([health('gpu-1', fault(95, 'reset', 7))], [gpu_node('gpu-1', state.RMA, record)])
    node = entry(plan, 'gpu-1')
    assert plan['wave'] == [] and plan['faulty'] == [] and node['step'] is None and node['record'] is None
    assert 'quarantined for RMA since 2027-01-15T07:00:00Z' in node['text']
    assert 'XID 95' in node['text'] and state.STATE_LABEL in node['text']


def test_a_failed_remediation_is_reported_with_its_message_and_left_alone():
    record = state.finish_attempt(state.start_attempt({'reason': 'XID 48'}, 'reset', NOW - 60), state.REFUSED, NOW,
                                  'the GPU is in use, the reset refused')
    plan = run([health('gpu-1', fault(48, 'reset'))], [gpu_node('gpu-1', state.FAILED, record)])
    assert plan['wave'] == [] and 'in use' in entry(plan, 'gpu-1')['text']


def test_an_unknown_state_value_is_left_alone():
    plan = run([health('gpu-1', fault(48, 'reset'))], [gpu_node('gpu-1', 'resetting')])
    assert plan['wave'] == [] and 'no state of the remediation' in entry(plan, 'gpu-1')['text']


@pytest.mark.parametrize('labels, setting', [
    ({'accelerators.gpu/gpu-remediation.skip': 'true'}, None),
    ({'example.com/no-auto-repair': 'yes'}, 'example.com/no-auto-repair=yes'),
    ({'example.com/no-auto-repair': 'true'}, 'example.com/no-auto-repair'),
])
def test_an_opted_out_node_is_reported_only(labels, setting):
    settings = {'opt_out_label': setting} if setting else {}
    plan = run([health('gpu-1', fault(48, 'reset'))], [gpu_node('gpu-1', labels=labels)], **settings)
    assert plan['wave'] == [] and 'opted out' in entry(plan, 'gpu-1')['text']


def test_an_opted_out_node_in_progress_stays_where_it_is():
    plan = run([health('gpu-1')], [gpu_node('gpu-1', state.DRAIN_REQUIRED, {'action': 'reset'},
                                            labels={'accelerators.gpu/gpu-remediation.skip': 'true'})])
    assert plan['wave'] == [] and 'left as it stands in state drain-required' in entry(plan, 'gpu-1')['text']


@pytest.mark.parametrize('labels, reported', [
    ({'nvsentinel.dgxc.nvidia.com/driver.installed': 'true'}, True),
    ({'dgxc.nvidia.com/nvsentinel-state': 'quarantined'}, True),
    ({'nvsentinel.dgxc.nvidia.com/driver.installed': 'true', 'nvsentinel.dgxc.nvidia.com/managed': 'false'}, False),
    ({'nvsentinel.dgxc.nvidia.com/dcgm.version': '4.x', 'k8saas.nvidia.com/ManagedByNVSentinel': 'false'}, False),
])
def test_a_node_nvsentinel_manages_is_reported_only(labels, reported):
    plan = run([health('gpu-1', fault(48, 'reset'))], [gpu_node('gpu-1', labels=labels)])
    assert (plan['wave'] == []) is reported
    if reported:
        assert 'NVSentinel' in entry(plan, 'gpu-1')['text']


RHCOS_RECORD = 'accelerators.gpu/rhcos-upgrade'
MCO = 'machineconfiguration.openshift.io/'


@pytest.mark.parametrize('labels, annotations, owner', [
    ({'nvidia.com/gpu-driver-upgrade-state': 'pod-restart-required'}, {}, 'driver rollout'),
    ({'nvidia.com/gpu-driver-upgrade-state': 'upgrade-required'}, {}, 'driver rollout'),
    ({'nvidia.com/gpu-driver-upgrade-state': 'upgrade-done'}, {}, ''),
    ({}, {RHCOS_RECORD: json.dumps({'to': '418.94.1-0', 'started': 1})}, 'RHCOS or kernel rollout'),
    ({}, {RHCOS_RECORD: json.dumps({'to': '418.94.1-0', 'result': 'validated'})}, ''),
    ({}, {MCO + 'currentConfig': 'rendered-a', MCO + 'desiredConfig': 'rendered-b', MCO + 'state': 'Working'},
     'machine-config operator'),
    ({}, {MCO + 'currentConfig': 'rendered-b', MCO + 'desiredConfig': 'rendered-b', MCO + 'state': 'Done'}, ''),
    ({'nvidia.com/mig.config.state': 'pending'}, {}, 'MIG layout change'),
    ({'nvidia.com/mig.config.state': 'success'}, {}, ''),
])
def test_a_node_in_another_owners_change_waits_for_it_to_end(labels, annotations, owner):
    node = gpu_node('gpu-1', labels=labels, annotations=annotations)
    assert owner in remediation.other_owner(node) and bool(remediation.other_owner(node)) is bool(owner)
    plan = run([health('gpu-1', fault(48, 'reset'))], [node])
    assert (plan['wave'] == []) is bool(owner)
    if owner:
        assert 'remediated once that ends' in entry(plan, 'gpu-1')['text']


def test_the_wave_takes_the_nodes_in_progress_first_then_new_ones_up_to_max_parallel():
    records = healthy(10, 10) + [health('gpu-%d' % index, fault(48, 'reset')) for index in (1, 2, 3)]
    records.append(health('gpu-4'))
    nodes = [gpu_node('gpu-4', state.VALIDATION_REQUIRED, {'action': 'reset'})]
    plan = run(records, nodes, max_parallel=2)
    assert plan['wave'] == ['gpu-4', 'gpu-1'] and plan['waiting'] == ['gpu-2', 'gpu-3']
    assert 'waits' in entry(plan, 'gpu-2')['text'] and 'waits' not in entry(plan, 'gpu-1')['text']
    assert run(records, nodes, max_parallel=1)['wave'] == ['gpu-4']
    assert run(records, nodes, max_parallel=0)['wave'] == ['gpu-4', 'gpu-1', 'gpu-2', 'gpu-3']


def test_more_than_max_faulty_percent_of_the_nodes_trips_the_breaker_naming_the_likely_cause():
    faults = [fault(79, 'reboot', index, 'GPU has fallen off the bus') for index in range(3)]
    records = healthy(2) + [health('gpu-%d' % (10 + index), faults[index]) for index in range(3)]
    records.append(health('gpu-20', fault(48, 'reset', 5)))
    nodes = [gpu_node('gpu-20', state.RESET_REQUIRED, {'action': 'reset'})]
    plan = run(records, nodes, max_faulty_percent=50)
    assert plan['wave'] == [] and plan['faulty'] == ['gpu-10', 'gpu-11', 'gpu-12', 'gpu-20']
    assert plan['waiting'] == ['gpu-20', 'gpu-10', 'gpu-11', 'gpu-12']
    for words in ('cluster prod-east', '4 of 6 GPU nodes (66 %)', 'max_faulty_percent 50', 'XID 79 on 3 of them',
                  'gpu-10, gpu-11, gpu-12', 'power, cooling', faults[2]['gpu_uuid'], faults[2]['pci_bus_id']):
        assert words in plan['breaker']
    assert remediation.plan_lines(plan)[0] == plan['breaker']


def test_nodes_held_for_rma_or_failed_do_not_trip_the_breaker():
    records = [health('gpu-%d' % index, fault(48, 'reset', index)) for index in range(3)] + healthy(1, 3)
    nodes = [gpu_node('gpu-0', state.RMA, {'action': 'rma'}), gpu_node('gpu-1', state.FAILED, {'action': 'reset'})]
    plan = run(records, nodes, max_faulty_percent=25)
    assert not plan['breaker'] and plan['faulty'] == ['gpu-2'] and plan['wave'] == ['gpu-2']


def test_the_breaker_allows_max_faulty_percent_itself_and_a_single_faulty_node():
    records = healthy(2) + [health('gpu-8', fault(48, 'reset')), health('gpu-9', fault(48, 'reset', 1))]
    assert not run(records, max_faulty_percent=50)['breaker']
    assert not run([health('gpu-1', fault(48, 'reset'))], max_faulty_percent=0)['breaker']
    assert run(records, max_faulty_percent=49)['breaker']


@pytest.mark.parametrize('xids, words', [
    ([119, 119, 48], 'XID 119 on 2 of them'),
    ([48, 48, 48], 'driver or the GPU firmware'),
    ([48, 79, 95], 'different XIDs on the nodes (48, 79, 95)'),
    ([None, None, None], 'no XID behind the faults'),
])
def test_the_likely_cause_follows_the_xids_the_faulty_nodes_share(xids, words):
    entries = [{'node': 'gpu-%d' % index, 'faults': [fault(xid, 'reset', index)]} for index, xid in enumerate(xids)]
    assert words in remediation.likely_cause(entries)


def test_a_worse_fault_during_a_reset_escalates_to_a_reboot_and_is_recorded():
    record = {'action': 'reset', 'xids': [48], 'gpu_uuids': ['GPU-1'], 'pci_bus_ids': ['00000000:10:00.0'],
              'reason': 'XID 48'}
    node = entry(run([health('gpu-1', fault(79, 'reboot', 3))], [gpu_node('gpu-1', state.RESET_REQUIRED, record)]),
                 'gpu-1')
    assert (node['target_state'], node['step'], node['next_state']) == (
        state.REBOOT_REQUIRED, 'reboot', state.VALIDATION_REQUIRED)
    assert node['record']['action'] == 'reboot' and node['record']['xids'] == [48, 79]
    assert 'worse fault' in node['reason']


def test_a_contact_support_fault_during_a_drain_holds_the_node_for_rma():
    drained = gpu_node('gpu-1', state.DRAIN_REQUIRED, {'action': 'reset'})
    node = entry(run([health('gpu-1', fault(None, 'rma'))], [drained]), 'gpu-1')
    assert (node['target_state'], node['step'], node['next_state']) == (state.RMA, None, None)
    assert 'no state' not in node['text'] and 'drain-required -> rma' in node['text']


def _attempt(action, hours_ago, result='succeeded'):
    return {'action': action, 'started': NOW - hours_ago * HOUR, 'finished': NOW - hours_ago * HOUR + 60,
            'result': result}


def test_a_node_faulty_again_after_max_attempts_within_the_window_goes_for_rma():
    record = {'action': 'reboot', 'attempts': [_attempt('reset', 5, 'failed'), _attempt('reboot', 4, 'failed'),
                                               _attempt('reboot', 3)]}
    node = entry(run([health('gpu-1', fault(48, 'reset'))], [gpu_node('gpu-1', state.DONE, record)]), 'gpu-1')
    assert node['record']['action'] == 'rma' and node['next_state'] == state.RMA
    assert 'faulty again after 3 attempts' in node['reason']


def test_attempts_outside_the_window_and_refused_resets_do_not_count():
    record = {'attempts': [_attempt('reboot', 30, 'failed'), _attempt('reboot', 29, 'failed'),
                           _attempt('reset', 2, 'refused'), _attempt('reboot', 1)]}
    node = entry(run([health('gpu-1', fault(79, 'reboot'))], [gpu_node('gpu-1', state.DONE, record)]), 'gpu-1')
    assert node['record']['action'] == 'reboot'
    assert len(node['record']['attempts']) == 2


def test_a_reset_that_did_not_hold_is_followed_by_a_reboot():
    record = {'attempts': [_attempt('reset', 2)]}
    node = entry(run([health('gpu-1', fault(48, 'reset'))], [gpu_node('gpu-1', state.DONE, record)]), 'gpu-1')
    assert node['record']['action'] == 'reboot' and node['next_state'] == state.DRAIN_REQUIRED
    assert 'faulty again after the reset of 2027-01-15T06:00:00Z' in node['reason']


@pytest.mark.parametrize('results, after', [
    (['failed'], state.REBOOT_REQUIRED),
    (['failed', 'failed'], state.REBOOT_REQUIRED),
    (['failed', 'failed', 'failed'], state.RMA),
    (['refused', 'failed', 'failed'], state.REBOOT_REQUIRED),
])
def test_a_failed_attempt_is_followed_by_a_reboot_until_max_attempts_then_rma(results, after):
    record = {'attempts': [_attempt('reset', 1, result) for result in results]}
    assert remediation.after_failed_attempt(record, SETTINGS) == after


def test_a_quarantined_node_an_admin_released_is_validated_then_returned():
    node = gpu_node('gpu-1', taints=[state.quarantine_taint('rma')], unschedulable=True,
                    record={'action': 'rma', 'unschedulable_before': False})
    plan = run([health('gpu-1')], [node])
    released = entry(plan, 'gpu-1')
    assert (released['disposition'], released['target_state'], released['step'], released['next_state']) == (
        'start', state.VALIDATION_REQUIRED, 'validate', state.UNCORDON_REQUIRED)
    assert plan['wave'] == ['gpu-1'] and 'released by an admin' in released['text']


def test_the_gpu_clients_are_stopped_before_a_reset_and_put_back_after():
    assert set(remediation.GPU_CLIENTS) <= set(OPERANDS)
    labels = dict((DEPLOY_LABEL_PREFIX + operand, 'true') for operand in OPERANDS)
    labels[DEPLOY_LABEL_PREFIX + 'dcgm'] = 'false'
    # The DRA driver's kubelet plugin last: the pods holding claims it prepared go first.
    clients, plugin = remediation.operands_to_stop(labels)
    assert clients == dict((DEPLOY_LABEL_PREFIX + operand, 'paused-for-gpu-reset')
                           for operand in ('device-plugin', 'dcgm-exporter', 'gpu-feature-discovery'))
    assert plugin == {DEPLOY_LABEL_PREFIX + 'dra-driver': 'paused-for-gpu-reset'}
    assert remediation.operands_to_stop(dict(labels, **{DEPLOY_LABEL_PREFIX + 'dra-driver': 'false'})) == [clients]
    assert remediation.operands_to_stop(dict(labels, **clients, **plugin)) == []
    stopped = dict(labels, **clients, **plugin)
    stopped[DEPLOY_LABEL_PREFIX + 'dcgm-exporter'] = 'false'
    assert remediation.operands_to_restore(stopped) == dict(
        (DEPLOY_LABEL_PREFIX + operand, 'true') for operand in ('device-plugin', 'dra-driver', 'gpu-feature-discovery'))


@pytest.mark.parametrize('text, parsed', [('a/b=c', ('a/b', 'c')), ('a/b', ('a/b', 'true')), (' a = b ', ('a', 'b'))])
def test_the_opt_out_label_is_a_key_and_a_value(text, parsed):
    assert remediation.parse_label(text) == parsed


def test_an_opt_out_label_without_a_key_is_refused():
    with pytest.raises(remediation.SettingsError):
        remediation.parse_label('=true')


def test_the_line_of_a_node_in_progress_names_what_its_record_holds():
    record = {'action': 'reset', 'xids': [64], 'gpu_uuids': ['GPU-4'], 'pci_bus_ids': ['00000000:14:00.0']}
    line = entry(run([health('gpu-1')], [gpu_node('gpu-1', state.RESET_REQUIRED, record)]), 'gpu-1')['text']
    assert line == ('cluster prod-east, node gpu-1: reset-required -> reset, then validation-required; '
                    'GPUs GPU-4 (PCI 00000000:14:00.0); XIDs 64')
