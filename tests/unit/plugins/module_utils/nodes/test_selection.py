# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.selection import (
    affinity_matches, daemonset_schedules_on, expression_matches, selector_matches, tolerates)

LABELS = {'nvidia.com/gpu.present': 'true', 'kubernetes.io/arch': 'amd64'}


@pytest.mark.parametrize('expression, matches', [
    ({'key': 'kubernetes.io/arch', 'operator': 'In', 'values': ['amd64', 'arm64']}, True),
    ({'key': 'kubernetes.io/arch', 'operator': 'In', 'values': ['arm64']}, False),
    ({'key': 'kubernetes.io/arch', 'operator': 'NotIn', 'values': ['arm64']}, True),
    ({'key': 'missing', 'operator': 'NotIn', 'values': ['x']}, True),
    ({'key': 'nvidia.com/gpu.present', 'operator': 'Exists'}, True),
    ({'key': 'nvidia.com/gpu.present', 'operator': 'DoesNotExist'}, False),
    ({'key': 'nvidia.com/gpu.present', 'operator': 'Gt', 'values': ['1']}, False),
])
def test_expressions(expression, matches):
    assert expression_matches(expression, LABELS) is matches


def test_selectors_and_affinity():
    assert selector_matches(None, {}) and selector_matches({'matchLabels': {'kubernetes.io/arch': 'amd64'}}, LABELS)
    assert not selector_matches({'matchLabels': {'kubernetes.io/arch': 'arm64'}}, LABELS)
    assert affinity_matches([], {})
    terms = [{'matchExpressions': [{'key': 'kubernetes.io/arch', 'operator': 'In', 'values': ['arm64']}]},
             {'matchExpressions': [{'key': 'nvidia.com/gpu.present', 'operator': 'Exists'}]}]
    assert affinity_matches(terms, LABELS) and not affinity_matches(terms[:1], LABELS)


@pytest.mark.parametrize('toleration, tolerated', [
    ({'operator': 'Exists'}, True),
    ({'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}, True),
    ({'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoExecute'}, False),
    ({'key': 'nvidia.com/gpu', 'value': 'present'}, True),
    ({'key': 'nvidia.com/gpu', 'value': 'other'}, False),
    ({'key': 'other', 'operator': 'Exists'}, False),
    ({'value': 'present'}, False),
])
def test_tolerations(toleration, tolerated):
    assert tolerates([toleration], {'key': 'nvidia.com/gpu', 'value': 'present', 'effect': 'NoSchedule'}) is tolerated


def node(labels, taints=()):
    return {'metadata': {'name': 'n', 'labels': labels}, 'spec': {'taints': list(taints)}}


def test_a_daemonset_schedules_where_selector_affinity_and_taints_let_it():
    spec = {'nodeSelector': {'nvidia.com/gpu.present': 'true'},
            'affinity': {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': [
                {'matchExpressions': [{'key': 'kubernetes.io/arch', 'operator': 'In', 'values': ['amd64']}]}]}}},
            'tolerations': [{'key': 'nvidia.com/gpu', 'operator': 'Exists'}]}
    assert daemonset_schedules_on(spec, node(LABELS))
    assert not daemonset_schedules_on(spec, node({'kubernetes.io/arch': 'amd64'}))
    assert not daemonset_schedules_on(spec, node(dict(LABELS, **{'kubernetes.io/arch': 'arm64'})))
    assert daemonset_schedules_on(spec, node(LABELS, [{'key': 'nvidia.com/gpu', 'effect': 'NoSchedule'}]))
    # The controller's own tolerations (a cordoned or not yet ready node), and a taint that only prefers.
    assert daemonset_schedules_on(spec, node(LABELS, [
        {'key': 'node.kubernetes.io/unschedulable', 'effect': 'NoSchedule'},
        {'key': 'node.kubernetes.io/not-ready', 'effect': 'NoExecute'},
        {'key': 'dedicated', 'effect': 'PreferNoSchedule'}]))
    assert not daemonset_schedules_on(spec, node(LABELS, [{'key': 'dedicated', 'value': 'x', 'effect': 'NoExecute'}]))
