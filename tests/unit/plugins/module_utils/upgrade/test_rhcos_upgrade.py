# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the nodes of a pool stand in an RHCOS upgrade (module_utils/rhcos_upgrade.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.accelerators.gpu.plugins.module_utils.upgrade import rhcos as rhcos_upgrade
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.node_dicts import (
    KERNEL, RHCOS_416, RHCOS_418, rhcos_node, ubuntu_node)

OLD, NEW = 'rendered-gpu-old', 'rendered-gpu-new'
POOL = {'spec': {'configuration': {'name': NEW}, 'paused': True}}


def pool_node(name, current, desired, state='Done', rhcos=RHCOS_416, ready=True, cordoned=False, record=None,
              gpu=True):
    node = rhcos_node(name, rhcos=rhcos, gpu=gpu)
    node['metadata']['annotations'] = {rhcos_upgrade.CURRENT_CONFIG: current, rhcos_upgrade.DESIRED_CONFIG: desired,
                                       rhcos_upgrade.MCD_STATE: state}
    if record is not None:
        node['metadata']['annotations'][rhcos_upgrade.RECORD_ANNOTATION] = json.dumps(record)
    node['status']['conditions'] = [{'type': 'Ready', 'status': 'True' if ready else 'False',
                                     'message': '' if ready else 'rebooting'}]
    node['spec'] = {'unschedulable': cordoned}
    return node


def phases(*nodes):
    state = rhcos_upgrade.upgrade_state(list(nodes), POOL, RHCOS_418)
    return dict((entry['name'], entry['phase']) for entry in state['nodes']), state


def test_phases_of_an_upgrade():
    validated = {'from': RHCOS_416, 'to': RHCOS_418, 'started': 1.0, 'validated': 2.0, 'result': 'validated'}
    found, state = phases(
        pool_node('waiting', OLD, OLD),
        pool_node('taken', OLD, NEW, state='Working'),
        pool_node('rebooting', OLD, NEW, state='Working', ready=False, cordoned=True),
        pool_node('back', NEW, NEW, rhcos=RHCOS_418),
        pool_node('validated', NEW, NEW, rhcos=RHCOS_418, record=validated),
        pool_node('cpu', NEW, NEW, rhcos=RHCOS_418, gpu=False),
        pool_node('cordoned', OLD, OLD, cordoned=True),
        pool_node('wrong-build', NEW, NEW, rhcos=RHCOS_416))
    assert found == {'waiting': 'waiting', 'taken': 'moving', 'rebooting': 'moving', 'back': 'moving',
                     'validated': 'done', 'cpu': 'done', 'cordoned': 'blocked', 'wrong-build': 'mismatch'}
    assert state['out'] == ['back', 'rebooting', 'taken']
    assert state['config'] == NEW and state['paused']
    back = [entry for entry in state['nodes'] if entry['back']]
    assert [entry['name'] for entry in back] == ['back', 'cpu', 'validated']


REMEDIATION_STATE = 'accelerators.gpu/gpu-remediation-state'


def under_remediation(node, state):
    node['metadata']['labels'][REMEDIATION_STATE] = state
    return node


def test_a_node_under_gpu_remediation_is_left_alone_by_the_pools_waves():
    found, state = phases(
        under_remediation(pool_node('quarantined', OLD, OLD, cordoned=True), 'reset-required'),
        under_remediation(pool_node('held', OLD, OLD, cordoned=True, ready=False), 'rma'),
        under_remediation(pool_node('remediated', OLD, OLD), 'done'),
        # Taken by the machine-config operator before its remediation began: the upgrade's, which the remediation
        # waits for.
        under_remediation(pool_node('taken', OLD, NEW, state='Working'), 'quarantine-required'),
        under_remediation(pool_node('upgraded', NEW, NEW, rhcos=RHCOS_418, gpu=False), 'reboot-required'))
    assert found == {'quarantined': 'remediation', 'held': 'remediation', 'remediated': 'waiting',
                     'taken': 'moving', 'upgraded': 'done'}
    assert state['remediation'] == ['held', 'quarantined'] and state['waiting'] == ['remediated']
    assert state['blocked'] == []  # not refused as a cordoned node would be: reported, and the others move
    words = dict((entry['name'], entry['remediation']) for entry in state['nodes'])
    assert words['quarantined'] == 'under GPU remediation (accelerators.gpu/gpu-remediation-state=reset-required)'
    assert words['remediated'] == ''


def test_a_validation_of_another_build_does_not_count():
    earlier = {'from': RHCOS_416, 'to': '417.94.202410211619-0', 'result': 'validated'}
    found, _state = phases(pool_node('n', NEW, NEW, rhcos=RHCOS_418, record=earlier))
    assert found == {'n': 'moving'}


def test_a_node_taken_before_a_run_noted_it_is_noted_over_an_earlier_upgrades_record():
    # Records stay after an upgrade: the machine-config operator may take a node that carries one before a run
    # notes it (the pool left unpaused, or a run interrupted in between).
    earlier = {'from': RHCOS_416, 'to': '417.94.202410211619-0', 'started': 1.0, 'validated': 2.0,
               'result': 'validated'}
    _found, state = phases(pool_node('n', OLD, NEW, state='Working', record=earlier))
    [entry] = state['nodes']
    assert (entry['phase'], entry['taken'], entry['validated']) == ('moving', False, False)
    [note] = rhcos_upgrade.record_patches([entry], RHCOS_418, 10.0)
    noted = json.loads(note['metadata']['annotations'][rhcos_upgrade.RECORD_ANNOTATION])
    assert noted == {'from': RHCOS_416, 'to': RHCOS_418, 'started': 10.0}
    _found, state = phases(pool_node('n', NEW, NEW, rhcos=RHCOS_418, record=noted))
    [entry] = state['nodes']
    assert (entry['phase'], entry['taken'], entry['back']) == ('moving', True, True)
    [patch] = rhcos_upgrade.record_patches([entry], RHCOS_418, 40.0, validated=True)
    found, _state = phases(pool_node('n', NEW, NEW, rhcos=RHCOS_418, record=json.loads(
        patch['metadata']['annotations'][rhcos_upgrade.RECORD_ANNOTATION])))
    assert found == {'n': 'done'}


def test_a_node_whose_update_failed_reports_why():
    node = pool_node('n', OLD, NEW, state='Degraded')
    node['metadata']['annotations'][rhcos_upgrade.MCD_REASON] = 'failed to drain'
    _found, state = phases(node)
    assert (state['nodes'][0]['phase'], state['nodes'][0]['mcd_reason']) == ('moving', 'failed to drain')


def test_an_unreadable_record_is_no_record():
    node = pool_node('n', NEW, NEW, rhcos=RHCOS_418)
    node['metadata']['annotations'][rhcos_upgrade.RECORD_ANNOTATION] = 'not json'
    _found, state = phases(node)
    assert state['nodes'][0]['record'] == {}


def test_records_say_where_a_node_comes_from_and_when_it_was_validated():
    _found, state = phases(pool_node('taken', OLD, NEW, state='Working'),
                           pool_node('resumed', NEW, NEW, rhcos=RHCOS_418))
    [resumed, taken] = [json.loads(patch['metadata']['annotations'][rhcos_upgrade.RECORD_ANNOTATION])
                        for patch in rhcos_upgrade.record_patches(state['nodes'], RHCOS_418, 10.0)]
    assert taken == {'from': RHCOS_416, 'to': RHCOS_418, 'started': 10.0}
    assert resumed['from'] == 'unknown'  # it rebooted before a run noted where it came from
    entry = dict(state['nodes'][1], record=taken)
    [patch] = rhcos_upgrade.record_patches([entry], RHCOS_418, 40.5, validated=True)
    assert patch['metadata']['name'] == 'taken' and patch['kind'] == 'Node'
    assert json.loads(patch['metadata']['annotations'][rhcos_upgrade.RECORD_ANNOTATION]) == dict(
        taken, validated=40.5, result='validated')


def test_label_patches_set_ostree_version_from_os_image():
    node = pool_node('stale', NEW, NEW, rhcos=RHCOS_418)
    node['metadata']['labels'][rhcos_upgrade.OSTREE_LABEL] = RHCOS_416
    _found, state = phases(node)
    assert (state['nodes'][0]['rhcos'], state['nodes'][0]['rhcos_label']) == (RHCOS_418, RHCOS_416)
    assert rhcos_upgrade.label_patches(state['nodes'], RHCOS_418) == [{'apiVersion': 'v1', 'kind': 'Node', 'metadata': {
        'name': 'stale', 'labels': {'feature.node.kubernetes.io/system-os_release.OSTREE_VERSION': RHCOS_418}}}]


# The drain method: a kernel upgrade without a pool, by cordon, drain and the user's reboot step
OLD_KERNEL, NEW_KERNEL = '5.15.0-100-generic', '5.15.0-105-generic'
NEW_KERNEL_DS = 'nvidia-driver-daemonset-5.15.0-105-generic-ubuntu22.04'


def kernel_node(name, kernel=OLD_KERNEL, ready=True, cordoned=False, record=None, label=None):
    node = ubuntu_node(name, kernel=kernel)
    if label:
        node['metadata']['labels'][KERNEL] = label
    if record is not None:
        node['metadata']['annotations'] = {rhcos_upgrade.RECORD_ANNOTATION: json.dumps(record)}
    node['status']['conditions'] = [{'type': 'Ready', 'status': 'True' if ready else 'False',
                                     'message': '' if ready else 'rebooting'}]
    node['spec'] = {'unschedulable': cordoned}
    return node


def kernel_phases(*nodes):
    state = rhcos_upgrade.upgrade_state(list(nodes), {}, NEW_KERNEL)
    return dict((entry['name'], entry['phase']) for entry in state['nodes']), state


def test_phases_of_a_kernel_upgrade_by_drain_and_reboot():
    taken = {'from': OLD_KERNEL, 'to': NEW_KERNEL, 'started': 1.0, 'cordoned': False}
    rebooted = dict(taken, rebooted=2.0)
    validated = dict(rebooted, validated=3.0, result='validated')
    found, state = kernel_phases(
        kernel_node('waiting'),
        kernel_node('down', ready=False),
        kernel_node('taken', cordoned=True, record=taken),
        kernel_node('rebooting', ready=False, cordoned=True, record=rebooted),
        kernel_node('back', kernel=NEW_KERNEL, cordoned=True, record=rebooted),
        kernel_node('validated-still-cordoned', kernel=NEW_KERNEL, cordoned=True, record=validated),
        kernel_node('done', kernel=NEW_KERNEL, record=validated),
        kernel_node('cordoned-before', kernel=NEW_KERNEL, cordoned=True, record=dict(validated, cordoned=True)),
        kernel_node('already', kernel=NEW_KERNEL),
        # An earlier upgrade's record does not make a node taken by this one.
        kernel_node('upgraded-before', record=dict(validated, **{'from': '5.15.0-90-generic', 'to': OLD_KERNEL})))
    assert found == {'waiting': 'waiting', 'upgraded-before': 'waiting', 'down': 'blocked', 'taken': 'moving',
                     'rebooting': 'moving', 'back': 'moving', 'validated-still-cordoned': 'moving', 'done': 'done',
                     'cordoned-before': 'done', 'already': 'done'}
    assert state['reboot'] == ['taken']  # cordoned, its reboot step never ran: a re-run runs it
    assert (state['label_key'], state['label_value'], state['mismatch']) == (KERNEL, NEW_KERNEL, [])
    back = [entry for entry in state['nodes'] if entry['name'] == 'back'][0]
    assert (back['back'], back['runs'], back['driver_daemonset']) == (True, NEW_KERNEL, NEW_KERNEL_DS)
    rebooting = [entry for entry in state['nodes'] if entry['name'] == 'rebooting'][0]
    assert rebooting['diagnosis'] == 'NotReady (rebooting), runs kernel %s' % OLD_KERNEL
    assert [entry for entry in state['nodes'] if entry['name'] == 'taken'][0]['diagnosis'].endswith(
        'its reboot step never ran')


def test_a_node_under_gpu_remediation_is_not_put_in_a_kernel_wave():
    taken = {'from': OLD_KERNEL, 'to': NEW_KERNEL, 'started': 1.0, 'cordoned': False}
    found, state = kernel_phases(
        under_remediation(kernel_node('quarantined', cordoned=True), 'drain-required'),
        under_remediation(kernel_node('failed', cordoned=True, ready=False), 'failed'),
        under_remediation(kernel_node('already', kernel=NEW_KERNEL, cordoned=True), 'validation-required'),
        under_remediation(kernel_node('taken', cordoned=True, record=taken), 'quarantine-required'),
        kernel_node('waiting'))
    assert found == {'quarantined': 'remediation', 'failed': 'remediation', 'already': 'done', 'taken': 'moving',
                     'waiting': 'waiting'}
    assert state['remediation'] == ['failed', 'quarantined'] and state['waiting'] == ['waiting']
    assert state['reboot'] == ['taken'] and state['blocked'] == []


def test_kernel_records_keep_the_cordon_and_the_reboot_and_labels_follow_as_nfd_writes_them():
    _found, state = kernel_phases(kernel_node('a', cordoned=True), kernel_node('b'))
    records = [json.loads(patch['metadata']['annotations'][rhcos_upgrade.RECORD_ANNOTATION])
               for patch in rhcos_upgrade.record_patches(state['nodes'], NEW_KERNEL, 5.0)]
    assert records == [{'from': OLD_KERNEL, 'to': NEW_KERNEL, 'started': 5.0, 'cordoned': True},
                       {'from': OLD_KERNEL, 'to': NEW_KERNEL, 'started': 5.0, 'cordoned': False}]
    entry = dict(state['nodes'][0], record=records[0])
    [patch] = rhcos_upgrade.record_patches([entry], NEW_KERNEL, 7.0, mark='rebooted')
    record = json.loads(patch['metadata']['annotations'][rhcos_upgrade.RECORD_ANNOTATION])
    assert record == dict(records[0], rebooted=7.0)
    assert rhcos_upgrade.label_patches(state['nodes'][:1], '5.15.0-105+rt', key=KERNEL) == [
        {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'a', 'labels': {KERNEL: '5.15.0-105_rt'}}}]


def test_without_driver_names_the_gpu_nodes_no_ready_pod_of_their_target_daemonset_serves():
    _found, state = kernel_phases(kernel_node('a', kernel=NEW_KERNEL), kernel_node('b', kernel=NEW_KERNEL),
                                  kernel_node('c', kernel=NEW_KERNEL))
    daemonsets = [{'name': NEW_KERNEL_DS, 'pods': [{'node': 'a', 'ready': True}, {'node': 'b', 'ready': False}]},
                  {'name': 'nvidia-driver-daemonset-5.15.0-100-generic-ubuntu22.04',
                   'pods': [{'node': 'c', 'ready': True}]}]
    assert rhcos_upgrade.without_driver(daemonsets, state['nodes']) == ['b', 'c']
    _found, pool_state = phases(pool_node('n', NEW, NEW, rhcos=RHCOS_418))
    assert pool_state['nodes'][0]['driver_daemonset'] == 'nvidia-driver-daemonset-' + RHCOS_418
