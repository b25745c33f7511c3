# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the nodes of a pool stand in an RHCOS upgrade (module_utils/rhcos_upgrade.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.accelerators.gpu.plugins.module_utils import rhcos_upgrade
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.nodes import RHCOS_416, RHCOS_418, rhcos_node

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


def test_a_validation_of_another_build_does_not_count():
    earlier = {'from': RHCOS_416, 'to': '417.94.202410211619-0', 'result': 'validated'}
    found, _state = phases(pool_node('n', NEW, NEW, rhcos=RHCOS_418, record=earlier))
    assert found == {'n': 'moving'}


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
