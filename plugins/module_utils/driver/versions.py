# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Driver versions in NVIDIA's order, and which GPU nodes a driver plan would move to an older driver: pure functions.

A version is read from a driver image's tag: <version>-<osTag> for builds (570.172.08-rhcos4.18), <branch>-<kernel>-
<osTag> for precompiled images (570-5.14.0-427.33.1.el9_4.x86_64-rhcos4.16: the branch alone). What a node runs is
told by the DaemonSet that serves it (its driver image) and by GPU feature discovery's label of the loaded driver
(nvidia.com/cuda.driver-version.full, or cuda.driver.major/minor/rev): both are read anyway, so the guard costs no
request.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ..nodes.gfd_labels import DRIVER_MAJOR, DRIVER_MINOR, DRIVER_REV, DRIVER_VERSION_FULL
from .changes import is_managed_driver
from .names import DRIVER_CONTAINER

_TAG_VERSION_RE = re.compile(r'^(\d+(?:\.\d+)*)(?:-|$)')
_VERSION_RE = re.compile(r'^\d+(?:\.\d+)*$')
# Nodes named in a refusal before "and N more".
NAMED_NODES = 20


def image_driver_version(image):
    """The driver version an image's tag starts with (570.172.08, or a precompiled image's branch 570), or None: no
    tag (a digest alone), or a tag that starts with no version (latest)."""
    name = (image or '').split('@', 1)[0]
    last = name.rsplit('/', 1)[-1]
    if ':' not in last:
        return None
    match = _TAG_VERSION_RE.match(last.rsplit(':', 1)[1])
    return match.group(1) if match else None


def label_driver_version(labels):
    """The version of the driver loaded on a node, by GPU feature discovery's labels, or None."""
    full = labels.get(DRIVER_VERSION_FULL)
    if not full:
        parts = [labels.get(key) for key in (DRIVER_MAJOR, DRIVER_MINOR, DRIVER_REV)]
        full = '.'.join(part for part in parts if part)
    return full if full and _VERSION_RE.match(full) else None


def is_older(version, than):
    """True when version comes before than in NVIDIA's order: number by number, over the components both have (a
    branch, 570, is neither older nor newer than 570.172.08). 570.86.15 < 570.172.08 < 580.95.05."""
    mine, theirs = [int(part) for part in version.split('.')], [int(part) for part in than.split('.')]
    common = min(len(mine), len(theirs))
    return mine[:common] < theirs[:common]


def template_driver_image(daemonset):
    """The image of a driver DaemonSet's driver container, or None."""
    pod_spec = ((daemonset.get('spec') or {}).get('template') or {}).get('spec') or {}
    for container in pod_spec.get('containers') or []:
        if container.get('name') == DRIVER_CONTAINER:
            return container.get('image')
    return None


def driver_downgrades(assignments, existing, nodes_facts):
    """The GPU nodes a plan moves to an older driver: {node: {running, requested, daemonset}}.

    assignments: plan's (node: {daemonset, image...}); existing: the namespace's DaemonSets as read; nodes_facts:
    node_facts of the nodes (their labels). A node's requested version is that of the image planned for it; what it
    runs is the newer of its DaemonSet's image as it exists (the driver its pod runs, or a rollout brings) and the
    driver GPU feature discovery reports loaded. Nodes with a pre-installed driver, opted out or blocked, and images
    whose tag names no version are left out: nothing tells their order.
    """
    templates = dict((daemonset['metadata']['name'], image_driver_version(template_driver_image(daemonset)))
                     for daemonset in existing if is_managed_driver(daemonset))
    loaded = dict((facts['name'], label_driver_version(facts.get('labels') or {})) for facts in nodes_facts)
    found = {}
    for node, entry in sorted(assignments.items()):
        requested = image_driver_version(entry.get('image'))
        if requested is None:
            continue
        newer = [version for version in (templates.get(entry['daemonset']), loaded.get(node))
                 if version and is_older(requested, version)]
        if newer:
            running = max(newer, key=lambda version: [int(part) for part in version.split('.')])
            found[node] = {'running': running, 'requested': requested, 'daemonset': entry['daemonset']}
    return found


def downgrade_refusal(downgrades):
    """What a refusal of these downgrades says: each move from a running to a requested version, with its nodes."""
    moves = {}
    for node, entry in sorted(downgrades.items()):
        moves.setdefault((entry['running'], entry['requested']), []).append(node)
    parts = []
    for (running, requested), nodes in sorted(moves.items()):
        named = ', '.join(nodes[:NAMED_NODES]) + (' and %d more' % (len(nodes) - NAMED_NODES)
                                                  if len(nodes) > NAMED_NODES else '')
        parts.append('from %s to %s on %d GPU node(s) (%s)' % (running, requested, len(nodes), named))
    return 'refusing to downgrade the driver %s' % '; '.join(parts)
