# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Services: the nodes with a ready endpoint in a Service's EndpointSlices, and the Service's newest Warning event."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .objects import event_time


def served_nodes(slices):
    """The nodes with a ready endpoint in a Service's EndpointSlices, sorted."""
    return sorted(set(endpoint['nodeName'] for piece in slices for endpoint in piece.get('endpoints') or []
                      if (endpoint.get('conditions') or {}).get('ready') and endpoint.get('nodeName')))


def service_warning(events, service):
    """'reason: message' of the newest Warning event about Service service among events, '' when there is none."""
    mine = [event for event in events
            if (event.get('involvedObject') or {}).get('kind') == 'Service'
            and (event.get('involvedObject') or {}).get('name') == service]
    newest = max(mine, key=event_time) if mine else {}
    return '%s: %s' % (newest.get('reason'), newest.get('message')) if newest else ''
