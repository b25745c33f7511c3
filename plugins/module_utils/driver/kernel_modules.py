# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Open or proprietary NVIDIA kernel modules: what a driver pod loads, which GPUs need the open ones, and the driver
plans that cannot work. Pure functions.

- The setting is the GPU Operator's kernelModuleType (auto | open | proprietary), handed to the driver container as
  KERNEL_MODULE_TYPE. The driver container (gpu-driver-container, nvidia-driver `_resolve_kernel_type`) resolves auto
  with `nvidia-installer --print-recommended-kernel-module-type`, else by branch: below 560 proprietary, from 560 open
  (NVIDIA's transition to the open modules, R560). Here auto resolves by branch, the only part known before a pod runs.
- Grace Hopper and Blackwell GPUs run only on the open modules: the proprietary ones print "NVRM: ... requires use of
  the NVIDIA open kernel modules" and RmInitAdapter fails. They are recognised from GPU feature discovery's labels.
- GPUDirect Storage's nvidia-fs from v2.17.5 works only with the open modules (the GPU Operator's
  consts.MinimumGDSVersionForOpenRM; a digest is taken to be such a version, as there).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ..nodes.gfd_labels import COMPUTE_MAJOR, FAMILY, PRODUCT, int_or_none
from .names import DRIVER_CONTAINER
from .versions import NAMED_NODES, image_driver_version, template_driver_image

AUTO, OPEN, PROPRIETARY = 'auto', 'open', 'proprietary'
# The first branch whose driver container resolves auto to the open modules.
FIRST_OPEN_BRANCH = 560
# The first nvidia-fs (GPUDirect Storage) version supported only with the open modules.
FIRST_OPEN_ONLY_GDS = (2, 17, 5)
# Blackwell (compute capability 10.x, 12.x) and Grace Hopper by GFD's product names (NVML's, spaces as '-'):
# NVIDIA-B200, NVIDIA-GB200, NVIDIA-GH200-480GB, NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition.
_BLACKWELL_PRODUCT_RE = re.compile(r'^NVIDIA-G?B\d{3}(?:-|$)|-Blackwell(?:-|$)')
_GRACE_HOPPER_PRODUCT_RE = re.compile(r'^NVIDIA-GH\d{3}(?:-|$)')
_GDS_TAG_RE = re.compile(r'^v?(\d+)\.(\d+)\.(\d+)')


def resolved_module_type(setting, driver_version):
    """The modules a driver container loads: open or proprietary as set; with auto (or no setting, which the driver
    container takes as auto) by the branch of driver_version (570.172.08, or a precompiled image's 570); None when
    auto and the version is unknown (an image tag without one)."""
    if setting in (OPEN, PROPRIETARY):
        return setting
    if not driver_version:
        return None
    return OPEN if int(driver_version.split('.')[0]) >= FIRST_OPEN_BRANCH else PROPRIETARY


def daemonset_kernel_modules(daemonset):
    """(setting, modules) of a driver DaemonSet's pods: its driver container's KERNEL_MODULE_TYPE (auto when unset,
    as the driver container takes it) and the modules that resolves to with its image (None when unknown)."""
    pod_spec = ((daemonset.get('spec') or {}).get('template') or {}).get('spec') or {}
    setting = AUTO
    for container in pod_spec.get('containers') or []:
        if container.get('name') == DRIVER_CONTAINER:
            setting = dict((entry.get('name'), entry.get('value')) for entry in container.get('env') or []).get(
                'KERNEL_MODULE_TYPE') or AUTO
    return setting, resolved_module_type(setting, image_driver_version(template_driver_image(daemonset)))


def open_modules_needed(labels):
    """Why a node's GPUs run only on the open modules, by GPU feature discovery's labels, or None: Blackwell (family
    blackwell, compute capability 10 or later, or a Blackwell product) or Grace Hopper (a GH product)."""
    product = labels.get(PRODUCT) or ''
    if (labels.get(FAMILY) == 'blackwell' or (int_or_none(labels.get(COMPUTE_MAJOR)) or 0) >= 10
            or _BLACKWELL_PRODUCT_RE.search(product)):
        return 'Blackwell GPUs (%s)' % (product or 'nvidia.com/gpu.family=blackwell')
    if _GRACE_HOPPER_PRODUCT_RE.search(product):
        return 'Grace Hopper GPUs (%s)' % product
    return None


def gds_needs_open_modules(gds_image):
    """Whether GPUDirect Storage's nvidia-fs image is of a version supported only with the open modules: its tag from
    2.17.5 (with or without a leading v); a digest, or a tag that names no version, is taken to be one, as the GPU
    Operator takes a digest."""
    name = gds_image.split('@', 1)[0]
    last = name.rsplit('/', 1)[-1]
    if '@' in gds_image or ':' not in last:
        return True
    match = _GDS_TAG_RE.match(last.rsplit(':', 1)[1])
    return match is None or tuple(int(part) for part in match.groups()) >= FIRST_OPEN_ONLY_GDS


def _named(nodes):
    return ', '.join(nodes[:NAMED_NODES]) + (' and %d more' % (len(nodes) - NAMED_NODES)
                                             if len(nodes) > NAMED_NODES else '')


def _why_proprietary(setting, image):
    if setting == PROPRIETARY:
        return 'kernel_module_type proprietary'
    return 'kernel_module_type %s, which driver %s resolves to proprietary (branch below %d)' % (
        setting, image, FIRST_OPEN_BRANCH)


def kernel_module_refusals(setting, assignments, nodes_facts, gds_image=None):
    """What makes a driver plan unworkable for its kernel module type, one message each, [] when nothing does.

    setting: the driver spec's kernel_module_type (None: auto); assignments: the plan's ({node: {daemonset, image...}},
    nodes without an image get no driver pod); nodes_facts: node_facts of the nodes (their labels); gds_image: the
    nvidia-fs image when GPUDirect Storage is on. A node whose driver would load the proprietary modules is refused
    where its GPUs need the open ones, and every such node when GPUDirect Storage needs them."""
    setting = setting or AUTO
    labels = dict((facts['name'], facts.get('labels') or {}) for facts in nodes_facts)
    proprietary = {}
    for node, entry in sorted(assignments.items()):
        if entry.get('image') and resolved_module_type(setting, image_driver_version(entry['image'])) == PROPRIETARY:
            proprietary.setdefault(_why_proprietary(setting, entry['image']), []).append(node)
    refusals = []
    for why, nodes in sorted(proprietary.items()):
        needing = {}
        for node in nodes:
            reason = open_modules_needed(labels.get(node) or {})
            if reason:
                needing.setdefault(reason, []).append(node)
        for reason, members in sorted(needing.items()):
            refusals.append('%s: node(s) %s carry %s, which run only on the open kernel modules (the proprietary '
                            'ones fail: "requires use of the NVIDIA open kernel modules"); set kernel_module_type '
                            'open (the driver role\'s driver_kernel_module_type)' % (why, _named(members), reason))
        if gds_image and gds_needs_open_modules(gds_image):
            refusals.append('%s: GPUDirect Storage %s (from nvidia-fs 2.17.5) is supported only with the open kernel '
                            'modules, on node(s) %s; set kernel_module_type open (driver_kernel_module_type), or '
                            'switch GPUDirect Storage off (driver_gds)' % (why, gds_image, _named(nodes)))
    return refusals
