# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Nodes' allocatable resources: which nodes advertise a resource (a name or a shell-style pattern such as
nvidia.com/mig-*), and which one a workload there requests."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch

from .objects import as_int, metadata_of, status_of


def allocatable_count(node, pattern):
    """Sum of a node's allocatable resources whose name matches pattern (e.g. nvidia.com/gpu, nvidia.com/mig-*)."""
    allocatable = status_of(node).get('allocatable') or {}
    return sum(as_int(value) for name, value in allocatable.items() if fnmatch.fnmatchcase(name, pattern))


def advertised_resource(node, patterns):
    """(the resource a workload on the node can request, the sum of those matching its pattern): the first of
    patterns (names or shell-style patterns, in order) the node advertises more than zero of, and by name the
    first of that pattern's resources it has; (None, 0) when it advertises none."""
    allocatable = status_of(node).get('allocatable') or {}
    for pattern in patterns:
        found = sorted(name for name, value in allocatable.items()
                       if fnmatch.fnmatchcase(name, pattern) and as_int(value) > 0)
        if found:
            return found[0], allocatable_count(node, pattern)
    return None, 0


def allocatable_state(nodes, patterns, expected=None):
    """Which nodes advertise any of patterns (> 0; a name, a shell-style pattern or a list of them, in order of
    preference). expected: node names that must; those absent from nodes count as lacking it (a node that left the
    cluster). Returns {'allocatable': {node: n}, 'node_resources': {node: resource}, 'missing': [node, ...]}, n the
    sum of the resources matching the node's first advertised pattern, resource the one a workload there requests
    (advertised_resource)."""
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    found = dict((metadata_of(n).get('name'), advertised_resource(n, patterns)) for n in nodes)
    wanted = [(name, found.get(name, (None, 0))) for name in (sorted(expected) if expected is not None else sorted(found))]
    return {'allocatable': dict((name, count) for name, (_resource, count) in wanted),
            'node_resources': dict((name, resource) for name, (resource, _count) in wanted if resource),
            'missing': [name for name, (resource, _count) in wanted if not resource]}
