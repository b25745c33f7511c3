# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from ansible_collections.accelerators.gpu.plugins.module_utils.operands.checks.objects import (
    pinned_node, selector_string, warning_events)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.operands.operand_objects import event


def test_selector_string_joins_labels_and_expressions():
    selector = {'matchLabels': {'b': '2', 'a': '1'}, 'matchExpressions': [
        {'key': 'c', 'operator': 'In', 'values': ['x', 'y']}, {'key': 'd', 'operator': 'NotIn', 'values': ['z']},
        {'key': 'e', 'operator': 'Exists'}, {'key': 'f', 'operator': 'DoesNotExist'}]}
    assert selector_string(selector) == 'a=1,b=2,c in (x,y),d notin (z),e,!f'
    assert selector_string(None) == ''


def test_pinned_node_prefers_binding_then_affinity_then_hostname():
    affinity = {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': [
        {'matchFields': [{'key': 'metadata.name', 'operator': 'In', 'values': ['gpu-3']}]}]}}}
    assert pinned_node({'nodeName': 'gpu-1', 'affinity': affinity}) == 'gpu-1'
    assert pinned_node({'affinity': affinity}) == 'gpu-3'
    assert pinned_node({'nodeSelector': {'kubernetes.io/hostname': 'gpu-4'}}) == 'gpu-4'
    assert pinned_node({}) is None


def test_warning_events_match_by_uid_newest_first_and_limited():
    events = [event('u1', 'BackOff', 'second', '2026-01-01T00:00:02Z', count=4),
              event('u1', 'Failed', 'first', '2026-01-01T00:00:01Z'),
              event('u1', 'Scheduled', 'normal', '2026-01-01T00:00:03Z', type_='Normal'),
              event('u2', 'Failed', 'other pod', '2026-01-01T00:00:04Z')]
    found = warning_events(events, {'metadata': {'uid': 'u1'}}, limit=1)
    assert found == [{'reason': 'BackOff', 'message': 'second', 'count': 4, 'last_seen': '2026-01-01T00:00:02Z'}]
