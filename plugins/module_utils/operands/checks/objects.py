# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every check reads of any object: its metadata, status and owners, the node its pod spec is bound or pinned to,
the Warning events about it, and a label selector as the list API takes it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json


def selector_string(selector):
    """A label selector (matchLabels, matchExpressions) as the string the list API takes."""
    selector = selector or {}
    terms = ['%s=%s' % (key, value) for key, value in sorted((selector.get('matchLabels') or {}).items())]
    for expression in selector.get('matchExpressions') or []:
        key, operator, values = expression['key'], expression['operator'], expression.get('values') or []
        if operator == 'In':
            terms.append('%s in (%s)' % (key, ','.join(values)))
        elif operator == 'NotIn':
            terms.append('%s notin (%s)' % (key, ','.join(values)))
        elif operator == 'Exists':
            terms.append(key)
        elif operator == 'DoesNotExist':
            terms.append('!' + key)
    return ','.join(terms)


def json_annotation(annotations, key):
    """The JSON object an annotation holds (annotations: an object's), {} when it is absent or not a JSON object."""
    try:
        value = json.loads(annotations.get(key) or '{}')
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def metadata_of(obj):
    return obj.get('metadata') or {}


def status_of(obj):
    return obj.get('status') or {}


def as_int(value):
    """A count of a status or of a resource quantity, 0 when absent or not a whole number."""
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def owned_by(obj, owner):
    """True when obj names owner (by uid) among its owner references."""
    uid = metadata_of(owner).get('uid')
    return any(ref.get('uid') == uid for ref in metadata_of(obj).get('ownerReferences') or [])


def pinned_node(pod_spec):
    """The node a pod is bound or pinned to: spec.nodeName, else the node named by a metadata.name node
    affinity (as DaemonSet pods and validation Jobs are pinned), else a kubernetes.io/hostname nodeSelector."""
    if pod_spec.get('nodeName'):
        return pod_spec['nodeName']
    required = (((pod_spec.get('affinity') or {}).get('nodeAffinity') or {})
                .get('requiredDuringSchedulingIgnoredDuringExecution') or {})
    for term in required.get('nodeSelectorTerms') or []:
        for field in term.get('matchFields') or []:
            values = field.get('values') or []
            if field.get('key') == 'metadata.name' and field.get('operator') == 'In' and len(values) == 1:
                return values[0]
    return (pod_spec.get('nodeSelector') or {}).get('kubernetes.io/hostname')


def pod_node(pod):
    return pinned_node(pod.get('spec') or {})


def event_time(event):
    series = event.get('series') or {}
    return (series.get('lastObservedTime') or event.get('lastTimestamp') or event.get('eventTime')
            or metadata_of(event).get('creationTimestamp') or '')


def warning_events(events, obj, limit=5):
    """The newest Warning events about obj (matched by uid), newest first: reason, message, count, last seen."""
    uid = metadata_of(obj).get('uid')
    mine = [e for e in events if e.get('type') == 'Warning' and (e.get('involvedObject') or {}).get('uid') == uid]
    mine.sort(key=event_time, reverse=True)
    return [{'reason': e.get('reason') or '', 'message': e.get('message') or '',
             'count': (e.get('series') or {}).get('count') or e.get('count') or 1, 'last_seen': event_time(e)}
            for e in mine[:limit]]
