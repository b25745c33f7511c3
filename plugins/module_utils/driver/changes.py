# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure comparison of the desired driver DaemonSets (plan.py) with those that exist: what to create, update,
keep or delete, and which nodes a kept DaemonSet still serves. Inputs are DaemonSet dicts as the API returns them and
node facts (node_facts.node_facts)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from fractions import Fraction

from ..k8s.applied_fields import applied_fields, dropped_fields
from ..nodes.facts import KERNEL_LABEL, OSTREE_LABEL
from ..nodes.selection import affinity_matches, required_node_terms
from .names import COMPONENT_LABEL, MANAGED_BY, MANAGED_BY_LABEL, PREPARED_ANNOTATION

_QUANTITY_RE = re.compile(r'^([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]([+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$')
_QUANTITY_SUFFIX = {
    None: 1, 'n': Fraction(1, 10 ** 9), 'u': Fraction(1, 10 ** 6), 'm': Fraction(1, 1000),
    'k': 10 ** 3, 'M': 10 ** 6, 'G': 10 ** 9, 'T': 10 ** 12, 'P': 10 ** 15, 'E': 10 ** 18,
    'Ki': 2 ** 10, 'Mi': 2 ** 20, 'Gi': 2 ** 30, 'Ti': 2 ** 40, 'Pi': 2 ** 50, 'Ei': 2 ** 60,
}


def _quantity(value):
    match = _QUANTITY_RE.match(str(value).strip())
    if not match:
        return str(value)
    number = Fraction(match.group(1))
    if match.group(2):
        number *= Fraction(10) ** int(match.group(2))
    return number * _QUANTITY_SUFFIX[match.group(3)]


def is_subset(desired, existing, quantities=False):
    """True when everything desired sets is in existing; extra keys in existing (server defaults) are fine.

    Lists must have the same length and match item by item (the API keeps their order); empty or zero desired
    values match absent ones; resource quantities compare by value (1 == '1000m').
    """
    if isinstance(desired, dict):
        if existing is None:
            return not desired
        return isinstance(existing, dict) and all(
            is_subset(value, existing.get(key), quantities or key in ('limits', 'requests'))
            for key, value in desired.items())
    if isinstance(desired, list):
        existing = [] if existing is None else existing
        return (isinstance(existing, list) and len(existing) == len(desired)
                and all(is_subset(d, e, quantities) for d, e in zip(desired, existing)))
    if existing is None:
        # The API omits zero values (false, 0, ''), so an absent field matches them.
        return desired in (None, False, '') or desired == 0
    if quantities:
        return _quantity(desired) == _quantity(existing)
    return desired == existing


def _pod_spec(daemonset):
    return ((daemonset.get('spec') or {}).get('template') or {}).get('spec') or {}


def _runs_correct_driver(node_selector, terms, facts):
    """True when a DaemonSet with this selection schedules on the node and builds for what the node runs."""
    labels = facts['labels']
    if any(labels.get(key) != value for key, value in node_selector.items()):
        return False
    if not affinity_matches(terms, labels):
        return False
    if OSTREE_LABEL in node_selector and node_selector[OSTREE_LABEL] != facts['rhcos_version']:
        return False
    return KERNEL_LABEL not in node_selector or node_selector[KERNEL_LABEL] == facts['kernel']['effective']


def _nodes_with_version(node_selector, gpu_facts):
    """GPU nodes that have the DaemonSet's RHCOS version or kernel, by NFD label or by what they run."""
    if OSTREE_LABEL in node_selector:
        version = node_selector[OSTREE_LABEL]
        return [f['name'] for f in gpu_facts if version in (f['rhcos_label'], f['rhcos_os_image'])]
    if KERNEL_LABEL in node_selector:
        version = node_selector[KERNEL_LABEL]
        return [f['name'] for f in gpu_facts if version in (f['kernel']['full'], f['kernel']['effective'])]
    return []


def _why_keep_stale(daemonset, gpu_facts):
    status = daemonset.get('status') or {}
    counts = dict((key, status.get(key))
                  for key in ('desiredNumberScheduled', 'currentNumberScheduled', 'numberMisscheduled'))
    if any(value is None for value in counts.values()):
        return 'not desired, but its status does not report scheduled pods yet'
    if any(counts.values()):
        return 'not desired, but it still has pods (%s)' % ', '.join(
            '%s=%d' % item for item in sorted(counts.items()))
    holders = _nodes_with_version(_pod_spec(daemonset).get('nodeSelector') or {}, gpu_facts)
    if holders:
        return 'not desired, but GPU node(s) %s still have its version (by NFD label or osImage)' % ', '.join(
            sorted(holders))
    prepared = ((daemonset.get('metadata') or {}).get('annotations') or {}).get(PREPARED_ANNOTATION)
    if prepared:
        return ('prepared for an upgrade to %s (annotation %s) that no GPU node runs yet; the upgrade playbook uses '
                'it; delete it by hand if that upgrade was given up' % (prepared, PREPARED_ANNOTATION))
    return None


def is_managed_driver(daemonset):
    labels = (daemonset.get('metadata') or {}).get('labels') or {}
    return labels.get(MANAGED_BY_LABEL) == MANAGED_BY and labels.get(COMPONENT_LABEL) == 'nvidia-driver'


def serves(daemonset, facts):
    """True when the driver DaemonSet schedules on the node (facts: node_facts) with a driver for what it runs."""
    pod_spec = _pod_spec(daemonset)
    return _runs_correct_driver(pod_spec.get('nodeSelector') or {}, required_node_terms(pod_spec), facts)


def plan_driver_changes(desired, existing, nodes_facts):
    """Compare desired driver DaemonSets with the existing ones.

    Only driver DaemonSets this collection labelled (app.kubernetes.io/managed-by=accelerators.gpu and
    app.kubernetes.io/component=nvidia-driver) are touched. One that is not desired is deleted only when it
    has no scheduled, current or misscheduled pods and no GPU node has its version; otherwise it is kept
    (with the reason), so a DaemonSet still serving a node, such as the one of a blocked version, stays.
    A DaemonSet is unchanged when it holds everything declared and nothing this collection applied before and no
    longer declares (a label taken out of driver.labels is still there until the next apply removes it).

    Returns {create: [DaemonSet], update: [(existing, desired)], unchanged: [name], delete: [name],
    keep: [{name, reason, node_selector, node_selector_terms}]}.
    """
    gpu_facts = [facts for facts in nodes_facts if facts['gpu_present']]
    plan = {'create': [], 'update': [], 'unchanged': [], 'delete': [], 'keep': []}
    existing_by_name = dict((daemonset['metadata']['name'], daemonset) for daemonset in existing)
    managed = dict((name, daemonset) for name, daemonset in existing_by_name.items() if is_managed_driver(daemonset))

    def keep(daemonset, reason):
        pod_spec = _pod_spec(daemonset)
        plan['keep'].append({'name': daemonset['metadata']['name'], 'reason': reason,
                             'node_selector': dict(pod_spec.get('nodeSelector') or {}),
                             'node_selector_terms': required_node_terms(pod_spec)})

    desired_names = set()
    for daemonset in desired:
        name = daemonset['metadata']['name']
        desired_names.add(name)
        if name in existing_by_name and name not in managed:
            keep(existing_by_name[name],
                 'a DaemonSet of this name exists that this collection does not manage (no labels %s=%s, %s=%s; '
                 'the GPU Operator\'s?): it is not changed; delete it to let this collection manage it'
                 % (MANAGED_BY_LABEL, MANAGED_BY, COMPONENT_LABEL, 'nvidia-driver'))
        elif name not in managed:
            plan['create'].append(daemonset)
        elif all(is_subset(daemonset.get(part), managed[name].get(part)) for part in ('metadata', 'spec')) and not \
                dropped_fields(applied_fields(managed[name], MANAGED_BY), daemonset):
            plan['unchanged'].append(name)
        else:
            plan['update'].append((managed[name], daemonset))
    for name in sorted(set(managed) - desired_names):
        reason = _why_keep_stale(managed[name], gpu_facts)
        if reason:
            keep(managed[name], reason)
        else:
            plan['delete'].append(name)
    return plan


def nodes_left_without_driver(plan, blocked, facts):
    """Blocked nodes that no kept DaemonSet serves with a driver built for what they run."""
    by_name = dict((node['name'], node) for node in facts)
    left = []
    for entry in blocked:
        for name in entry['nodes']:
            node = by_name.get(name)
            served = node is not None and any(
                _runs_correct_driver(kept['node_selector'], kept['node_selector_terms'], node)
                for kept in plan['keep'])
            if not served and name not in left:
                left.append(name)
    return sorted(left)
