# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health records of the GPU nodes, made of what the cluster exposes: capacity against allocatable GPUs (for a
node in DRA mode, the GPUs its ResourceSlices publish against GPU feature discovery's count), the DCGM exporter's XID
and row-remap fields per GPU, and the node conditions other health monitors write (NVSentinel's among them). Pure.

A record (the remediation consumes it): {node, healthy, action (the worst of its faults' actions), gpus: {capacity,
allocatable}, faults: [{gpu_uuid, pci_bus_id, gpu_index, xid, source, action, message}], unschedulable, labels,
taints}. A node is healthy while none of its faults asks for an action: application errors are reported only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re

from ..nodes.facts import DEPLOY_LABEL_PREFIX, DRA_DRIVER, GFD_LABELS
from .metrics import ROW_REMAP_FAILURE, UNCORRECTABLE_REMAPPED_ROWS, XID_ERRORS
from .xid import ACTIONS, NONE, REBOOT, RESET, RMA, worst, xid_action

GPU = 'nvidia.com/gpu'
MIG_PREFIX = 'nvidia.com/mig-'
DRA_LABEL = DEPLOY_LABEL_PREFIX + DRA_DRIVER
GPU_COUNT_LABEL = GFD_LABELS['gpu_count']
# Pods per GPU where the device plugin shares them (time-slicing, MPS): a GPU marked Unhealthy takes that many away.
REPLICAS_LABEL = 'nvidia.com/gpu.replicas'
# The node conditions NVSentinel's health monitors write (docs/OVERVIEW.md); any other condition whose type names a
# GPU or an XID is another monitor's.
NVSENTINEL_CONDITIONS = ('GpuMemWatch', 'GpuThermalWatch', 'GpuPcieWatch', 'GpuNvlinkWatch', 'SysLogsXIDError',
                         'SysLogsSXIDError', 'SysLogsGPUFallenOff')
GPU_CONDITION = re.compile(r'gpu|xid', re.IGNORECASE)
# XID 79's condition: the GPU fell off the bus, a node reboot (RESTART_BM) whatever its message says.
FALLEN_OFF = 'SysLogsGPUFallenOff'
# NVSentinel's recommended actions (its message ends "RecommendedAction: X"), as this collection's actions; any other
# (RUN_FIELDDIAG, REPLACE_VM, UNKNOWN...) is contact support, as NVSentinel treats all but none and reset.
RECOMMENDED_ACTIONS = {'NONE': NONE, 'RESTART_APP': NONE, 'IGNORE': NONE, 'COMPONENT_RESET': RESET,
                       'RESET_GPU': RESET, 'RESTART_VM': REBOOT, 'RESTART_BM': REBOOT}
SOURCES = ('exporter', 'prometheus', 'allocatable', 'condition', 'row_remap')
ACTION_WORDS = {NONE: 'application error, reported only', RESET: 'reset the GPU', REBOOT: 'reboot the node',
                RMA: 'contact support'}
# A condition's message is kept this long in a fault.
MESSAGE_LENGTH = 160

_CODES = re.compile(r'^\s*\[([0-9 ,]+)\]')
_RECOMMENDED = re.compile(r'RecommendedAction\s*[:=]\s*([A-Za-z_]+)')
_GPU_UUID = re.compile(r'\b(GPU-[0-9a-fA-F-]{8,})')
_PCI = re.compile(r'\b(?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\b')


def is_gpu_condition(condition):
    """Whether a node condition is a GPU health monitor's: NVSentinel's types, or a type naming a GPU or an XID."""
    kind = condition.get('type') or ''
    return kind in NVSENTINEL_CONDITIONS or bool(GPU_CONDITION.search(kind))


def health_parts(node):
    """What records() reads of a Node beyond its name, labels, capacity and allocatable: its schedulability, taints
    and GPU conditions, as {'spec': ..., 'status': {'conditions': ...}}: a reader of thousands of full Nodes keeps
    only this."""
    spec = node.get('spec') or {}
    return {'spec': {'unschedulable': bool(spec.get('unschedulable')), 'taints': spec.get('taints') or []},
            'status': {'conditions': [dict((key, condition.get(key)) for key in ('type', 'status', 'reason', 'message'))
                                      for condition in (node.get('status') or {}).get('conditions') or []
                                      if is_gpu_condition(condition)]}}


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def in_dra_mode(node):
    """Whether the node's GPUs are the DRA driver's (its kubelet plugin's deploy label), not the device plugin's."""
    return ((node.get('metadata') or {}).get('labels') or {}).get(DRA_LABEL) == 'true'


def gpu_counts(node, dra_gpus=None):
    """{capacity, allocatable} GPU devices of a Node: nvidia.com/gpu and the MIG devices of the mixed strategy; for a
    node in DRA mode (nvidia.com/gpu.deploy.dra-driver=true), GPU feature discovery's count (else what is published)
    and the GPUs its ResourceSlices publish (dra_gpus: {node: GPUs}, dra_gpus())."""
    metadata = node.get('metadata') or {}
    labels = metadata.get('labels') or {}
    if in_dra_mode(node):
        published = (dra_gpus or {}).get(metadata.get('name'), 0)
        counted = _int(labels.get(GPU_COUNT_LABEL))
        return {'capacity': published if counted is None else counted, 'allocatable': published}
    status = node.get('status') or {}
    return dict((field, sum(_int(value) or 0 for key, value in (status.get(field) or {}).items()
                            if key == GPU or key.startswith(MIG_PREFIX)))
                for field in ('capacity', 'allocatable'))


def dra_gpus(slices):
    """{node: the GPUs its ResourceSlices publish}: devices of type gpu, and the parents of MIG devices."""
    found = {}
    for resource_slice in slices:
        spec = resource_slice.get('spec') or {}
        for device in spec.get('devices') or []:
            attributes = device.get('attributes') or {}
            kind = (attributes.get('type') or {}).get('string')
            uuid = (attributes.get('parentUUID' if kind == 'mig' else 'uuid') or {}).get('string')
            if kind in ('gpu', 'mig'):
                found.setdefault(spec.get('nodeName'), set()).add(uuid or device.get('name'))
    return dict((node, len(gpus)) for node, gpus in found.items())


def _fault(source, action, message, xid=None, gpu_uuid=None, pci_bus_id=None, gpu_index=None):
    return {'gpu_uuid': gpu_uuid, 'pci_bus_id': pci_bus_id, 'gpu_index': gpu_index, 'xid': xid, 'source': source,
            'action': action, 'message': message}


def _gpu_words(labels):
    return 'GPU %s%s' % (labels.get('gpu', '?'), ' (%s)' % labels['UUID'] if labels.get('UUID') else '')


def sample_faults(samples, source):
    """The faults the DCGM exporter's samples (metrics' {name, labels, value}) of one node show, source 'exporter'
    (its own page) or 'prometheus': a GPU's last XID (0: none), and a row-remap failure (source 'row_remap'; XID 64's
    cause, which the catalog resets)."""
    remapped = dict((sample['labels'].get('UUID') or sample['labels'].get('gpu'), sample['value'])
                    for sample in samples if sample['name'] == UNCORRECTABLE_REMAPPED_ROWS)
    faults = []
    for sample in samples:
        labels, value = sample['labels'], sample['value']
        if math.isnan(value) or value <= 0:
            continue
        where = dict(gpu_uuid=labels.get('UUID') or None, pci_bus_id=labels.get('pci_bus_id') or None,
                     gpu_index=_int(labels.get('gpu')))
        if sample['name'] == XID_ERRORS:
            xid = int(value)
            action = xid_action(xid)
            faults.append(_fault(source, action, 'XID %d on %s: %s%s' % (
                xid, _gpu_words(labels), ACTION_WORDS[action],
                '' if action != RMA or xid in ACTIONS else ' (an XID the catalog table does not know)'),
                xid=xid, **where))
        elif sample['name'] == ROW_REMAP_FAILURE:
            rows = remapped.get(labels.get('UUID') or labels.get('gpu'))
            faults.append(_fault('row_remap', RESET, 'row remapping failed on %s%s: reset the GPU' % (
                _gpu_words(labels), ', %d uncorrectable remapped rows' % rows if rows else ''), **where))
    return faults


def condition_faults(condition):
    """The faults a GPU health monitor's condition (True) tells: one per XID its message names ("[79, 48] ..."),
    else one. The action: the message's "RecommendedAction: X" where it says one (NVSentinel's), else the catalog's
    of its XIDs; else a node reboot for NVSentinel's SysLogsGPUFallenOff (XID 79); else contact support: the monitor
    judged the GPU faulty and nothing says a reset or a reboot would help, which is how NVSentinel treats every fault
    not in its none and reset buckets."""
    message = condition.get('message') or condition.get('reason') or ''
    codes = _CODES.match(message)
    xids = [int(code) for code in re.findall(r'\d+', codes.group(1))] if codes else []
    recommended = _RECOMMENDED.search(message)
    uuid, pci = _GPU_UUID.search(message), _PCI.search(message)
    where = dict(gpu_uuid=uuid.group(1) if uuid else None, pci_bus_id=pci.group(1) if pci else None)
    text = '%s: %s' % (condition.get('type'), message)
    text = text if len(text) <= MESSAGE_LENGTH else text[:MESSAGE_LENGTH - 3] + '...'
    if recommended:
        action = RECOMMENDED_ACTIONS.get(recommended.group(1).upper(), RMA)
        return [_fault('condition', action, text, xid=xid, **where) for xid in xids or [None]]
    if xids:
        return [_fault('condition', xid_action(xid), text, xid=xid, **where) for xid in xids]
    return [_fault('condition', REBOOT if condition.get('type') == FALLEN_OFF else RMA, text, **where)]


def _gpu_key(index, fault):
    """What tells a fault's GPU apart: its UUID, PCI bus ID or index; a fault naming none is a GPU of its own."""
    for key in (fault['gpu_uuid'], fault['pci_bus_id'], fault['gpu_index']):
        if key is not None:
            return key
    return ('fault', index)


def allocatable_fault(gpus, faults, replicas=1, dra=False):
    """The fault of the GPUs missing from allocatable (DRA: from the ResourceSlices) that no fault asking for an action
    explains, None when none is missing: the device plugin marked them Unhealthy (k8s-device-plugin's health
    check) for an XID no source here shows, so a reset (xid null)."""
    missing = int(math.ceil(float(gpus['capacity'] - gpus['allocatable']) / max(replicas, 1)))
    explained = len(set(_gpu_key(index, fault) for index, fault in enumerate(faults) if fault['action'] != NONE))
    if missing <= explained:
        return None
    return _fault('allocatable', RESET, '%s %d of %d %s and no XID seen for %d GPU%s: %s' % (
        'published' if dra else 'allocatable', gpus['allocatable'], gpus['capacity'],
        'GPUs' if dra else GPU, missing - explained, '' if missing - explained == 1 else 's',
        'the DRA driver does not publish them' if dra else 'the device plugin marked them Unhealthy'))


def records(nodes, samples=None, source='exporter', dra_gpu_counts=None):
    """The health record of each GPU node, in the order of nodes (Node dicts, or their status_node() and
    health_parts() parts). samples: {node: the DCGM exporter's samples of its GPUs}, read from source ('exporter' or
    'prometheus'); dra_gpu_counts: dra_gpus() of the ResourceSlices."""
    found = []
    for node in nodes:
        metadata = node.get('metadata') or {}
        name, labels = metadata.get('name'), metadata.get('labels') or {}
        spec = node.get('spec') or {}
        gpus = gpu_counts(node, dra_gpu_counts)
        faults = sample_faults((samples or {}).get(name) or [], source)
        for condition in (node.get('status') or {}).get('conditions') or []:
            if condition.get('status') == 'True' and is_gpu_condition(condition):
                faults.extend(condition_faults(condition))
        missing = allocatable_fault(gpus, faults, _int(labels.get(REPLICAS_LABEL)) or 1,
                                    in_dra_mode(node))
        if missing:
            faults.append(missing)
        action = worst(fault['action'] for fault in faults)
        found.append({'node': name, 'healthy': action == NONE, 'action': action, 'gpus': gpus, 'faults': faults,
                      'unschedulable': bool(spec.get('unschedulable')), 'labels': labels,
                      'taints': spec.get('taints') or []})
    return found


def unhealthy(health):
    """{node: its faults} of the records of nodes that are not healthy."""
    return dict((record['node'], record['faults']) for record in health if not record['healthy'])


def summary(health):
    """Counts of the records: GPU nodes, healthy ones, nodes by their action, faults by source."""
    by_action = dict((action, 0) for action in (NONE, RESET, REBOOT, RMA))
    by_source = dict((source, 0) for source in SOURCES)
    for record in health:
        by_action[record['action']] += 1
        for fault in record['faults']:
            by_source[fault['source']] += 1
    return {'gpu_nodes': len(health), 'healthy': sum(1 for record in health if record['healthy']),
            'nodes_by_action': by_action, 'faults_by_source': by_source}
