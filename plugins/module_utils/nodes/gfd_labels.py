# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU feature discovery (GFD) node labels: which a node lacks or carries malformed, which are GFD's (for the
uninstall), and a node's GPU product, memory and MIG capability with NFD's PCI labels as the fallback.

Pure functions over label maps and Node dicts; nothing here talks to an API. The label names and value shapes are
those of GFD's labelers (NVIDIA/k8s-device-plugin internal/lm: nvml.go, resource.go, mig-strategy.go,
machine-type.go).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

PREFIX = 'nvidia.com/'
PRODUCT = PREFIX + 'gpu.product'
MEMORY = PREFIX + 'gpu.memory'
COUNT = PREFIX + 'gpu.count'
FAMILY = PREFIX + 'gpu.family'
COMPUTE_MAJOR = PREFIX + 'gpu.compute.major'
COMPUTE_MINOR = PREFIX + 'gpu.compute.minor'
DRIVER_MAJOR = PREFIX + 'cuda.driver.major'
DRIVER_MINOR = PREFIX + 'cuda.driver.minor'
DRIVER_REV = PREFIX + 'cuda.driver.rev'
# The same version in newer GFD's names (it writes both), whole.
DRIVER_VERSION_FULL = PREFIX + 'cuda.driver-version.full'
MACHINE = PREFIX + 'gpu.machine'
MIG_CAPABLE = PREFIX + 'mig.capable'
MIG_STRATEGY = PREFIX + 'mig.strategy'

# What the deploy waits for on every node running GFD. GFD writes nvidia.com/mig.strategy only under the single and
# mixed MIG strategies (mig-strategy.go: the strategy labeler is part of the MIG labeler, which `none` skips).
WAITED = (PRODUCT, MEMORY, COUNT, FAMILY, COMPUTE_MAJOR, COMPUTE_MINOR, DRIVER_MAJOR, DRIVER_MINOR, DRIVER_REV,
          MACHINE, MIG_CAPABLE)
MIG_STRATEGIES = ('none', 'single', 'mixed')

# Value shapes. cuda.driver.rev is empty for a two-part driver version (nvml.go); gpu.memory and gpu.count are 0 on a
# node whose MIG layout is invalid for the single strategy (its product then ends in -MIG-INVALID).
_NUMBERS = (MEMORY, COUNT, COMPUTE_MAJOR, COMPUTE_MINOR, DRIVER_MAJOR, DRIVER_MINOR)
_POSITIVE = (MEMORY, COUNT)
_BOOLEANS = (MIG_CAPABLE, PREFIX + 'mps.capable')
_CHOICES = {MIG_STRATEGY: MIG_STRATEGIES}
_NON_EMPTY = (PRODUCT, FAMILY, MACHINE)

# Every label GFD writes, for the uninstall: nvidia.com/gpu.<attribute> of full GPUs and of MIG devices under the
# single strategy, nvidia.com/mig-<profile>.<attribute> under the mixed one, nvidia.com/cuda.* (driver and runtime
# versions), and a few others. Not nvidia.com/gpu.present or nvidia.com/gpu.deploy.* (the stack's own labels, see
# node_facts), nor nvidia.com/mig.config and mig.config.state (the MIG manager's and the admin's).
_RESOURCE_ATTRIBUTES = (
    'product', 'count', 'replicas', 'memory', 'family', 'compute.major', 'compute.minor', 'multiprocessors',
    'slices.gi', 'slices.ci', 'engines.copy', 'engines.decoder', 'engines.encoder', 'engines.jpeg', 'engines.ofa',
    'sharing-strategy')
_GPU_ONLY = ('machine', 'mode', 'clique', 'imex-domain')
_OTHERS = ('gfd.timestamp', 'mig.capable', 'mig.strategy', 'mps.capable', 'vgpu.present', 'vgpu.host-driver-version',
           'vgpu.host-driver-branch')
_GFD_LABEL_RE = re.compile(r'^nvidia\.com/(?:cuda\.[-\w.]+|(?:gpu|mig-[\w.]+)\.(?:%s)|gpu\.(?:%s)|(?:%s))$' % (
    '|'.join(re.escape(a) for a in _RESOURCE_ATTRIBUTES), '|'.join(re.escape(a) for a in _GPU_ONLY),
    '|'.join(re.escape(a) for a in _OTHERS)))

# NFD's PCI device labels with the device id (deviceLabelFields including `device`): pci-10de_20b2.present,
# pci-0302_10de_20b2.present. The default fields (class, vendor or vendor alone) carry no device id.
_PCI_DEVICE_RE = re.compile(r'^feature\.node\.kubernetes\.io/pci-(?:[0-9a-f]{4}_)?10de_([0-9a-f]{4})(?:_[^.]*)?\.present$')
# NVIDIA data-centre GPUs by PCI device id (pci.ids): product as GFD names it, memory (MiB) as NVML reports it, MIG.
PCI_DEVICES = {
    '20b0': ('NVIDIA-A100-SXM4-40GB', 40960, True),
    '20b2': ('NVIDIA-A100-SXM4-80GB', 81920, True),
    '20b5': ('NVIDIA-A100-80GB-PCIe', 81920, True),
    '20f1': ('NVIDIA-A100-PCIE-40GB', 40960, True),
    '20b7': ('NVIDIA-A30', 24576, True),
    '2236': ('NVIDIA-A10', 23028, False),
    '2330': ('NVIDIA-H100-80GB-HBM3', 81559, True),
    '2331': ('NVIDIA-H100-PCIe', 81559, True),
    '2335': ('NVIDIA-H200', 143771, True),
    '26b9': ('NVIDIA-L40S', 46068, False),
    '27b8': ('NVIDIA-L4', 23034, False),
    '1eb8': ('Tesla-T4', 15360, False),
}


def is_gfd_label(key):
    """True for a label GPU feature discovery writes (see _GFD_LABEL_RE), which the uninstall removes."""
    return _GFD_LABEL_RE.match(key) is not None


def gfd_labels_to_remove(labels):
    """{label: None} for each GFD label of a node's label map: the patch removing them."""
    return dict((key, None) for key in labels if is_gfd_label(key))


def waited_labels(mig_strategy):
    """The labels the deploy waits for, and the values it expects, under a MIG strategy: (keys, {key: value})."""
    if mig_strategy == 'none':
        return list(WAITED), {}
    return list(WAITED) + [MIG_STRATEGY], {MIG_STRATEGY: mig_strategy}


def label_problems(labels, keys, expected=None):
    """What is wrong with a node's labels for the keys it must carry: each key missing, of a malformed value (GFD's
    numbers, booleans and MIG strategies) or of another value than expected. [] when nothing is."""
    expected = expected or {}
    problems = []
    for key in keys:
        if key not in labels:
            problems.append('%s missing' % key)
            continue
        value = labels[key]
        if key in expected and value != expected[key]:
            problems.append('%s=%s, expected %s' % (key, value, expected[key]))
        elif key in _NUMBERS and not value.isdigit():
            problems.append('%s=%s is not a number' % (key, value))
        elif key in _POSITIVE and int(value) == 0 and not labels.get(PRODUCT, '').endswith('-MIG-INVALID'):
            problems.append('%s=0' % key)
        elif key in _BOOLEANS and value not in ('true', 'false'):
            problems.append('%s=%s is not true or false' % (key, value))
        elif key in _CHOICES and value not in _CHOICES[key]:
            problems.append('%s=%s is not one of %s' % (key, value, ', '.join(_CHOICES[key])))
        elif key in _NON_EMPTY and not value:
            problems.append('%s is empty' % key)
    if labels.get(PRODUCT, '').endswith('-MIG-INVALID'):
        problems.append('%s=%s: GFD found a MIG layout the single strategy cannot serve (MIG enabled on some GPUs '
                        'only, an enabled GPU without MIG devices, or several MIG profiles)' % (PRODUCT, labels[PRODUCT]))
    return problems


def nodes_label_problems(nodes, names, keys, expected=None):
    """{node name: problems} for each of names (Node dicts in nodes) whose labels are not as they must be; a name
    without a Node (it left the cluster) counts as missing every key."""
    by_name = dict(((node.get('metadata') or {}).get('name'), node) for node in nodes)
    found = {}
    for name in names:
        node = by_name.get(name)
        labels = ((node or {}).get('metadata') or {}).get('labels') or {}
        problems = label_problems(labels, keys, expected) if node is not None else ['node %s not found' % name]
        if problems:
            found[name] = problems
    return found


def int_or_none(value):
    """A label value as an int, None when absent or not a number."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def gpu_summary(labels):
    """A node's GPU product, memory (MiB) and MIG capability: from GFD's labels, else from an NFD PCI device label
    that names the device id (PCI_DEVICES), else unknown. source says which: 'gfd', 'pci' or None."""
    if PRODUCT in labels:
        capable = labels.get(MIG_CAPABLE)
        return {'product': labels[PRODUCT], 'memory': int_or_none(labels.get(MEMORY)),
                'mig_capable': None if capable is None else capable == 'true', 'source': 'gfd'}
    devices = sorted(match.group(1) for match in (_PCI_DEVICE_RE.match(key) for key, value in labels.items()
                                                  if value == 'true') if match)
    for device in devices:
        if device in PCI_DEVICES:
            product, memory, capable = PCI_DEVICES[device]
            return {'product': product, 'memory': memory, 'mig_capable': capable, 'source': 'pci'}
    if devices:
        return {'product': 'NVIDIA-10de-%s' % devices[0], 'memory': None, 'mig_capable': None, 'source': 'pci'}
    return {'product': None, 'memory': None, 'mig_capable': None, 'source': None}


def driver_version(labels):
    """The version of the driver loaded on a node, as GFD labels it from NVML: nvidia.com/cuda.driver-version.full,
    else major.minor[.rev] of the older cuda.driver.* labels (rev is empty for a two-part version); None on a node
    GFD has not labelled (GFD not running there, switched off, or no driver loaded)."""
    if labels.get(DRIVER_VERSION_FULL):
        return labels[DRIVER_VERSION_FULL]
    if labels.get(DRIVER_MAJOR) and labels.get(DRIVER_MINOR):
        return '.'.join(part for part in (labels[DRIVER_MAJOR], labels[DRIVER_MINOR], labels.get(DRIVER_REV)) if part)
    return None
