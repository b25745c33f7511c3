# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Field-by-field differences of two Kubernetes objects, each named by its path (spec.template.spec.containers
[nvidia-driver-ctr].env[NODE_NAME].value): the items of a list whose entries all have distinct names (containers,
env, volumes, mounts) are matched by name, other lists by position."""


class _Absent(object):
    """The value of a field one side does not have."""

    def __repr__(self):
        return '<absent>'


ABSENT = _Absent()


def named(items):
    """{name: item} when every item is a mapping with a distinct name, else None."""
    if not all(isinstance(item, dict) and 'name' in item for item in items):
        return None
    names = [item['name'] for item in items]
    return dict(zip(names, items)) if len(set(names)) == len(names) else None


def _same(left, right):
    # True == 1 and 'true' != True: a value of another type is another value.
    return type(left) is type(right) and left == right


def differences(left, right, path=''):
    """[(path, left value, right value)] of the leaves where left and right differ (ABSENT where one has none)."""
    if isinstance(left, dict) and isinstance(right, dict):
        found = []
        for key in list(left) + [key for key in right if key not in left]:
            found += differences(left.get(key, ABSENT), right.get(key, ABSENT), '%s.%s' % (path, key) if path else key)
        return found
    if isinstance(left, list) and isinstance(right, list):
        left_named, right_named = named(left), named(right)
        if left_named is not None and right_named is not None:
            keys = list(left_named) + [name for name in right_named if name not in left_named]
            pairs = [('%s[%s]' % (path, name), left_named.get(name, ABSENT), right_named.get(name, ABSENT))
                     for name in keys]
        else:
            pairs = [('%s[%d]' % (path, index), left[index] if index < len(left) else ABSENT,
                      right[index] if index < len(right) else ABSENT) for index in range(max(len(left), len(right)))]
        found = []
        for item_path, left_item, right_item in pairs:
            found += differences(left_item, right_item, item_path)
        return found
    return [] if _same(left, right) else [(path, left, right)]
