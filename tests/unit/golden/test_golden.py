# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every object a deploy of each reference fleet writes is its golden file's, field for field: render.py renders them
with the roles, the collection's plugins and the driver planning, tests/golden/<fleet> holds them. A difference names
the object, its file and the field."""

import copy
from concurrent.futures import ThreadPoolExecutor

import pytest

from ansible_collections.accelerators.gpu.tests.unit.golden import render
from ansible_collections.accelerators.gpu.tests.unit.golden.compare import differences

HINT = ('A change meant to alter these objects: `make golden` rewrites tests/golden, and the change\'s changelog '
        'fragment says what changed for users (docs/docsite/rst/development.rst).')


def describe(value):
    text = repr(value)
    return text if len(text) <= 160 else text[:160] + '...'


def describe_change(was, now):
    """Both values, or for two texts of several lines the first line that differs (if only their ends differ, both)."""
    if isinstance(was, str) and isinstance(now, str) and '\n' in was + now:
        old, new = was.splitlines(), now.splitlines()
        old += [None] * (len(new) - len(old))
        new += [None] * (len(old) - len(new))
        line = next((index for index, (was_line, now_line) in enumerate(zip(old, new)) if was_line != now_line), None)
        if line is not None:
            return 'line %d: golden %s, rendered %s' % (line + 1, describe(old[line]), describe(new[line]))
    return 'golden %s, rendered %s' % (describe(was), describe(now))


def golden_differences(fleet, golden, rendered):
    """One line per object written and not in the golden files, golden and no longer written, or field that differs."""
    lines = []
    for path in sorted(set(golden) | set(rendered)):
        where = '%s (tests/golden/%s/%s)' % (render.object_label(golden.get(path) or rendered[path]), fleet, path)
        if path not in rendered:
            lines.append('%s: no longer written' % where)
        elif path not in golden:
            lines.append('%s: written, and no golden file' % where)
        else:
            lines += ['%s: %s: %s' % (where, field, describe_change(was, now))
                      for field, was, now in differences(golden[path], rendered[path])]
    return lines


@pytest.fixture(scope='module')
def rendered():
    """{fleet: {path: object}}, the three deploys rendered side by side (each is an ansible-playbook run)."""
    with ThreadPoolExecutor(len(render.FLEETS)) as pool:
        return dict(zip(render.FLEETS, pool.map(render.render, render.FLEETS)))


@pytest.mark.parametrize('fleet', render.FLEETS)
def test_a_deploy_of_the_fleet_writes_its_golden_objects(fleet, rendered):
    found = golden_differences(fleet, render.read_golden(fleet), rendered[fleet])
    assert not found, '\n'.join(found + [HINT])


def test_a_changed_character_is_named_with_its_object_file_and_field():
    golden = render.read_golden('openshift')
    path = 'DaemonSet/nvidia-gpu-operator/nvidia-device-plugin-daemonset.yaml'
    rendered = copy.deepcopy(golden)
    plugin = rendered[path]['spec']['template']['spec']['containers'][0]
    mps_root = next(entry for entry in plugin['env'] if entry['name'] == 'MPS_ROOT')
    mps_root['value'] = mps_root['value'].replace('mps', 'mpx')
    script = rendered['ConfigMap/nvidia-gpu-operator/nvidia-driver-startup-probe.yaml']['data']
    key = sorted(script)[0]
    lines = script[key].splitlines(True)
    lines[2] = lines[2].upper()
    script[key] = ''.join(lines)
    del rendered['Service/nvidia-gpu-operator/nvidia-dcgm.yaml']

    assert golden_differences('openshift', golden, rendered) == [
        "ConfigMap nvidia-gpu-operator/nvidia-driver-startup-probe (tests/golden/openshift/ConfigMap/"
        "nvidia-gpu-operator/nvidia-driver-startup-probe.yaml): data.%s: line 3: golden %r, rendered %r"
        % (key, golden['ConfigMap/nvidia-gpu-operator/nvidia-driver-startup-probe.yaml']['data'][key].splitlines()[2],
           lines[2].rstrip('\n')),
        "DaemonSet nvidia-gpu-operator/nvidia-device-plugin-daemonset (tests/golden/openshift/%s): "
        "spec.template.spec.containers[nvidia-device-plugin].env[MPS_ROOT].value: golden '/run/nvidia/mps', "
        "rendered '/run/nvidia/mpx'" % path,
        "Service nvidia-gpu-operator/nvidia-dcgm (tests/golden/openshift/Service/nvidia-gpu-operator/"
        "nvidia-dcgm.yaml): no longer written"]


def test_texts_that_differ_only_at_their_end_are_shown_whole():
    assert describe_change('a\nb', 'a\nb\n') == "golden 'a\\nb', rendered 'a\\nb\\n'"


def test_a_value_of_another_type_is_another_value():
    assert differences({'a': ['true', 1]}, {'a': [True, True]}) == [('a[0]', 'true', True), ('a[1]', 1, True)]
