# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a server-side apply would remove: fields a field manager applied before and no longer declares.

Comparing the declared object with the stored one finds values to add or change, not fields to drop: a label
taken out of the declaration is still on the object, and the object still looks up to date. The API server
records in managedFields (fieldsV1, see the Kubernetes "Server-Side Apply" documentation) which fields each
manager applied; a field there that the declaration no longer has is one the next apply removes.
Nothing here talks to an API.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json


def applied_fields(obj, manager):
    """The fieldsV1 tree that manager last applied to obj, {} when it never applied it."""
    for entry in (obj.get('metadata') or {}).get('managedFields') or []:
        if entry.get('manager') == manager and entry.get('operation') == 'Apply':
            return entry.get('fieldsV1') or {}
    return {}


def _list_item(items, key):
    """The item of a declared list that a fieldsV1 key (k:{...}, v:..., i:N) designates, or None."""
    kind, _sep, text = key.partition(':')
    if kind == 'i':
        index = int(text)
        return (True, items[index]) if index < len(items) else (False, None)
    value = json.loads(text)
    if kind == 'v':
        return value in items, value
    # A key field the declaration leaves out was defaulted by the server before it recorded the key
    # (a container port's protocol: k:{"containerPort":80,"protocol":"TCP"}), so only the declared ones compare.
    for item in items:
        if isinstance(item, dict) and all(item.get(name, wanted) == wanted for name, wanted in value.items()):
            return True, item
    return False, None


def dropped_fields(fields, declared, path=''):
    """Paths of the fields in fields (fieldsV1) that declared (the object as now declared) no longer sets."""
    dropped = []
    for key, subtree in sorted(fields.items()):
        if key == '.':
            continue
        if key.startswith('f:'):
            name = key[2:]
            found = isinstance(declared, dict) and declared.get(name) is not None
            value = declared.get(name) if found else None
            where = '%s.%s' % (path, name) if path else name
        else:
            found, value = _list_item(declared, key) if isinstance(declared, list) else (False, None)
            where = '%s[%s]' % (path, key[2:])
        if not found:
            dropped.append(where)
        elif subtree:
            dropped.extend(dropped_fields(subtree, value, where))
    return dropped
