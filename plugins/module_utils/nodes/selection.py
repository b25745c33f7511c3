# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure label and node selection as the API server and the DaemonSet controller read them: label selectors,
node selectors and required node affinity, taints and tolerations. Inputs are plain dicts as the API returns them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Taints the DaemonSet controller tolerates on every DaemonSet pod it creates (pkg/controller/daemon/util).
DAEMONSET_TOLERATED_TAINTS = ('node.kubernetes.io/not-ready', 'node.kubernetes.io/unreachable',
                              'node.kubernetes.io/disk-pressure', 'node.kubernetes.io/memory-pressure',
                              'node.kubernetes.io/pid-pressure', 'node.kubernetes.io/unschedulable')


def expression_matches(expression, labels):
    """One matchExpressions entry (In, NotIn, Exists, DoesNotExist) against labels; another operator matches
    nothing."""
    key, operator, values = expression.get('key'), expression.get('operator'), expression.get('values') or []
    if operator == 'In':
        return labels.get(key) in values
    if operator == 'NotIn':
        return key not in labels or labels[key] not in values
    if operator == 'Exists':
        return key in labels
    if operator == 'DoesNotExist':
        return key not in labels
    return False


def selector_matches(selector, labels):
    """A LabelSelector (matchLabels, matchExpressions) against labels; an empty selector selects everything."""
    selector = selector or {}
    return (all(labels.get(key) == value for key, value in (selector.get('matchLabels') or {}).items())
            and all(expression_matches(expression, labels) for expression in selector.get('matchExpressions') or []))


def required_node_terms(pod_spec):
    """The nodeSelectorTerms of a pod spec's required node affinity ([] when it has none)."""
    required = ((pod_spec.get('affinity') or {}).get('nodeAffinity') or {}).get(
        'requiredDuringSchedulingIgnoredDuringExecution') or {}
    return required.get('nodeSelectorTerms') or []


def affinity_matches(terms, labels):
    """Required node affinity: any term whose every expression matches (no terms: every node)."""
    return not terms or any(all(expression_matches(expression, labels)
                                for expression in term.get('matchExpressions') or []) for term in terms)


def tolerates(tolerations, taint):
    """Whether one of tolerations tolerates taint, by the API's rule (an empty key with Exists tolerates all)."""
    for toleration in tolerations or ():
        if toleration.get('effect') and toleration['effect'] != taint.get('effect'):
            continue
        if not toleration.get('key'):
            if toleration.get('operator') == 'Exists':
                return True
            continue
        if toleration['key'] != taint.get('key'):
            continue
        if toleration.get('operator') == 'Exists' or toleration.get('value', '') == taint.get('value', ''):
            return True
    return False


def daemonset_schedules_on(pod_spec, node):
    """Whether the DaemonSet controller places a pod of this template on node: node selector, required node
    affinity, and every NoSchedule or NoExecute taint tolerated (those the controller adds itself included)."""
    labels = (node.get('metadata') or {}).get('labels') or {}
    if any(labels.get(key) != value for key, value in (pod_spec.get('nodeSelector') or {}).items()):
        return False
    if not affinity_matches(required_node_terms(pod_spec), labels):
        return False
    return all(taint.get('effect') not in ('NoSchedule', 'NoExecute') or taint.get('key') in DAEMONSET_TOLERATED_TAINTS
               or tolerates(pod_spec.get('tolerations'), taint)
               for taint in (node.get('spec') or {}).get('taints') or ())
