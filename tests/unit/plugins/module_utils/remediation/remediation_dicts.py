# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU nodes and their health records, shaped as the cluster and the health reading give them, for the remediation
tests."""

import json

from ansible_collections.accelerators.gpu.plugins.module_utils.remediation import state

NOW = 1800000000.0
HOUR = 3600.0
SETTINGS = {'max_parallel': 1, 'max_faulty_percent': 50, 'max_attempts': 3, 'attempt_window': 24 * HOUR, 'now': NOW}


def fault(xid, action, index=0, message=''):
    return {'gpu_uuid': 'GPU-%08d-0000-0000-0000-000000000000' % index, 'pci_bus_id': '00000000:%02X:00.0' % (
        0x10 + index), 'gpu_index': index, 'xid': xid, 'source': 'dcgm-exporter', 'action': action,
        'message': message}


def health(name, *faults, **fields):
    order = ('none', 'reset', 'reboot', 'rma')
    action = fields.pop('action', None) or max([f['action'] for f in faults] or ['none'], key=order.index)
    record = {'node': name, 'healthy': not faults, 'action': action, 'gpus': {'capacity': 8, 'allocatable': 8},
              'faults': list(faults), 'unschedulable': False, 'labels': {}, 'taints': []}
    record.update(fields)
    return record


def gpu_node(name, remediation_state=None, record=None, labels=None, annotations=None, taints=None,
             unschedulable=False):
    node_labels = {'nvidia.com/gpu.present': 'true'}
    node_labels.update(labels or {})
    if remediation_state:
        node_labels[state.STATE_LABEL] = remediation_state
    node_annotations = dict(annotations or {})
    if record is not None:
        node_annotations[state.RECORD_ANNOTATION] = json.dumps(record)
    return {'apiVersion': 'v1', 'kind': 'Node',
            'metadata': {'name': name, 'labels': node_labels, 'annotations': node_annotations},
            'spec': {'unschedulable': unschedulable, 'taints': list(taints or [])}}
