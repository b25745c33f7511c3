# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The operand module's writes: the objects a state declares, server-side applied in order, and the objects it no
longer declares, deleted. An object changed when it differs once the server's bookkeeping is left out, so that a
re-run that writes nothing new reports no change, in check mode (a dry run) as in a real run."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ..k8s.client import describe
from ..k8s.errors import APIError, TaskError

# Set by the API server on writes, or by controllers (status): never declared by a manifest.
SERVER_METADATA = ('managedFields', 'resourceVersion', 'generation')
MASK = 'VALUE_SPECIFIED_IN_NO_LOG_PARAMETER'


def comparable(obj):
    """obj without what the API server and controllers set (None stays None)."""
    if obj is None:
        return None
    metadata = dict((key, value) for key, value in (obj.get('metadata') or {}).items() if key not in SERVER_METADATA)
    return dict(((key, value) for key, value in obj.items() if key != 'status'), metadata=metadata)


def shown(obj):
    """obj as a result or a diff may show it: the values of a Secret masked."""
    if not obj or obj.get('kind') != 'Secret':
        return obj
    return dict(obj, **dict((key, dict.fromkeys(obj[key], MASK)) for key in ('data', 'stringData') if obj.get(key)))


def _diff(obj, before, after):
    return {'before_header': describe(obj), 'after_header': describe(obj),
            'before': shown(comparable(before)) or {}, 'after': shown(comparable(after)) or {}}


def apply_objects(api, definitions, absent):
    """Apply definitions in order, then delete those of absent that exist (api: a ClusterAPI).

    Returns {'changed', 'objects': [{'object': 'Kind ns/name', 'action': created, updated, unchanged, deleted}],
    'diff': [one per object changed]}; TaskError naming the object that could not be written. In check mode an
    object in a namespace the run would create is reported as created, as the API server cannot dry-run it there.
    """
    objects, diffs = [], []
    # In check mode, the namespaces this run would create: nothing can be dry-run inside them.
    new_namespaces = set()
    for obj in definitions:
        path = api.object_path(obj)
        if path is None:
            raise TaskError('%s: the API server does not serve kind %s of %s' % (
                describe(obj), obj.get('kind'), obj.get('apiVersion')), objects=objects)
        if (obj.get('metadata') or {}).get('namespace') in new_namespaces:
            objects.append({'object': describe(obj), 'action': 'created'})
            diffs.append(_diff(obj, None, obj))
            continue
        try:
            before = api.read_optional(path)[0]
            after = api.apply_object(path, obj)
        except APIError as error:
            raise TaskError('%s: %s' % (describe(obj), error), objects=objects)
        changed = comparable(before) != comparable(after)
        objects.append({'object': describe(obj),
                        'action': 'created' if before is None else 'updated' if changed else 'unchanged'})
        if api.dry_run and before is None and obj.get('kind') == 'Namespace' and obj.get('apiVersion') == 'v1':
            new_namespaces.add(obj['metadata']['name'])
        if changed:
            diffs.append(_diff(obj, before, after))
    for obj in absent:
        # A kind the API server does not serve has no object to delete.
        path = api.object_path(obj)
        before = api.read_optional(path)[0] if path else None
        if before is None:
            continue
        try:
            api.delete_object(path)
        except APIError as error:
            raise TaskError('%s: %s' % (describe(obj), error), objects=objects)
        objects.append({'object': describe(obj), 'action': 'deleted'})
        diffs.append(_diff(obj, before, None))
    return {'changed': any(item['action'] != 'unchanged' for item in objects), 'objects': objects, 'diff': diffs}
