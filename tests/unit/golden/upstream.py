# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The golden DaemonSets of the GPU Operator's operands, field by field beside the GPU Operator's own manifests
(assets/state-* of github.com/NVIDIA/gpu-operator, cached by tools/fetch-gpu-operator.sh), and the tables of their
differences on docs/docsite/rst/gpu-operator-compatibility.rst, each with its reason from
tests/golden/upstream-differences.yml.

The assets are what the GPU Operator starts from; its code then fills the images, the namespace and the values a
ClusterPolicy sets (env values, resources, pull policies), and adds what the ClusterPolicy asks for (OpenShift's
Driver Toolkit, precompiled drivers, GPUDirect, sharing). So each is compared with the golden DaemonSet of the fleet
that asks for none of that (fleet kubernetes, the defaults; DCGM is off there, so the hostengine is fleet dra's),
and only the structure the assets fix is compared (projection()): labels, selectors, annotations, the update
strategy, the pod's scheduling and identity, each container (by name) with its command, args, env names,
securityContext, mounts, ports and probes, and each volume (by name) with its source. A value the asset leaves to
the GPU Operator ("FILLED BY THE OPERATOR") is not compared.

`python tests/unit/golden/upstream.py` (make golden) rewrites the page's tables.
"""

import csv
import io
import json
import re
import subprocess
import textwrap
from pathlib import Path

import yaml

from ansible_collections.accelerators.gpu.tests.unit.golden.compare import ABSENT, differences
from ansible_collections.accelerators.gpu.tests.unit.golden.render import GOLDEN, ROOT, read_golden

REASONS = GOLDEN / 'upstream-differences.yml'
PAGE = ROOT / 'docs' / 'docsite' / 'rst' / 'gpu-operator-compatibility.rst'
TABLE_START = '.. The tables below are generated (make golden) from tests/golden/upstream-differences.yml.'
TABLE_END = '.. End of the generated tables.'
# The GPU Operator's manifest of each operand, and the golden DaemonSet it is compared with.
COMPARED = (
    ('state-driver/0500_daemonset.yaml', 'kubernetes', 'nvidia-driver-daemonset'),
    ('state-container-toolkit/0500_daemonset.yaml', 'kubernetes', 'nvidia-container-toolkit-daemonset'),
    ('state-device-plugin/0500_daemonset.yaml', 'kubernetes', 'nvidia-device-plugin-daemonset'),
    ('gpu-feature-discovery/0500_daemonset.yaml', 'kubernetes', 'gpu-feature-discovery'),
    ('state-mig-manager/0600_daemonset.yaml', 'kubernetes', 'nvidia-mig-manager'),
    ('state-dcgm/0400_dcgm.yml', 'dra', 'nvidia-dcgm'),
    ('state-dcgm-exporter/0900_daemonset.yaml', 'kubernetes', 'nvidia-dcgm-exporter'),
)
POD_FIELDS = ('nodeSelector', 'tolerations', 'affinity', 'priorityClassName', 'serviceAccountName', 'hostPID',
              'hostNetwork', 'hostIPC', 'runtimeClassName', 'dnsPolicy')
CONTAINER_FIELDS = ('command', 'args', 'securityContext', 'ports', 'startupProbe', 'livenessProbe', 'readinessProbe',
                    'lifecycle')
MOUNT_FIELDS = ('name', 'mountPath', 'subPath', 'readOnly', 'mountPropagation')
# How the assets mark a value the GPU Operator's code fills ("FILLED BY THE OPERATOR", "FILLED_BY_OPERATOR").
FILLED = re.compile(r'FILLED.BY.(THE.)?OPERATOR')


def assets_dir():
    """The cached assets; a missing cache fails, saying how to fill it."""
    found = subprocess.run(['bash', str(ROOT / 'tools' / 'fetch-gpu-operator.sh'), '--cached'],
                           capture_output=True, text=True, check=False)
    if found.returncode != 0:
        raise AssertionError(found.stderr.strip())
    return Path(found.stdout.strip())


def _picked(mapping, keys):
    return dict((key, mapping[key]) for key in keys if key in mapping)


def _container(container):
    projected = _picked(container, CONTAINER_FIELDS)
    projected['env'] = [{'name': entry['name']} for entry in container.get('env') or []]
    projected['volumeMounts'] = [_picked(mount, MOUNT_FIELDS) for mount in container.get('volumeMounts') or []]
    return dict(projected, name=container['name'])


def projection(daemonset):
    """What of a DaemonSet is compared (the module docstring says why)."""
    template = daemonset['spec']['template']
    pod = template['spec']
    return {
        'metadata': _picked(daemonset['metadata'], ('name', 'labels', 'annotations')),
        'spec': {
            'selector': daemonset['spec']['selector'],
            'updateStrategy': daemonset['spec'].get('updateStrategy', ABSENT),
            'template': {
                'metadata': _picked(template.get('metadata') or {}, ('labels', 'annotations')),
                'spec': dict(_picked(pod, POD_FIELDS),
                             initContainers=[_container(c) for c in pod.get('initContainers') or []],
                             containers=[_container(c) for c in pod['containers']],
                             volumes=pod.get('volumes') or []),
            },
        },
    }


def _filled(value):
    return isinstance(value, str) and bool(FILLED.search(value))


def compared(theirs, ours):
    """[(field, the GPU Operator's value, the collection's value)] where the projections of two DaemonSets differ."""
    return [(field, upstream, golden) for field, upstream, golden in differences(projection(theirs), projection(ours))
            if not _filled(upstream)]


def upstream_differences():
    """[(DaemonSet, field, the GPU Operator's value, the collection's value)] of every operand compared."""
    assets = assets_dir()
    found = []
    for asset, fleet, name in COMPARED:
        theirs = yaml.safe_load((assets / asset).read_text())
        ours = read_golden(fleet)['DaemonSet/nvidia-gpu-operator/%s.yaml' % name]
        found += [(name, field, upstream, golden) for field, upstream, golden in compared(theirs, ours)]
    return found


def reasons():
    """[(reason, [(DaemonSet, field)])] of the reasons file, in its order; a difference listed twice fails."""
    groups, seen = [], set()
    for entry in yaml.safe_load(REASONS.read_text()):
        keys = [tuple(difference.split(': ', 1)) for difference in entry['differences']]
        for key in keys:
            assert key not in seen, 'listed twice in %s: %s: %s' % (REASONS.name, key[0], key[1])
            seen.add(key)
        groups.append((' '.join(entry['reason'].split()), keys))
    return groups


def unexplained(found, groups):
    """Lines naming each difference found that the reasons file does not list, and each it lists that is gone."""
    listed = set(key for _reason, keys in groups for key in keys)
    unlisted = ['not in %s: "%s: %s" (the GPU Operator: %s, accelerators.gpu: %s)'
                % (REASONS.name, daemonset, field, shown(upstream), shown(golden))
                for daemonset, field, upstream, golden in found if (daemonset, field) not in listed]
    gone = listed - set((daemonset, field) for daemonset, field, _upstream, _golden in found)
    return unlisted + ['in %s, and no longer a difference: "%s: %s"' % (REASONS.name, daemonset, field)
                       for daemonset, field in sorted(gone)]


def shown(value):
    """A value in a table cell: absent, present (a whole structure), a script, or the value (a string quoted only
    where YAML would read it as something else: "true", "")."""
    if value is ABSENT:
        return 'absent'
    if isinstance(value, (dict, list)):
        return 'present'
    if isinstance(value, str) and '\n' in value.strip():
        return 'a script of %d lines' % len(value.strip().splitlines())
    if isinstance(value, str) and value and yaml.safe_load(value) == value:
        return '``%s``' % value
    return '``%s``' % json.dumps(value)


def table(found, groups):
    """The page's generated part: each reason, then a table of the differences it explains, in the order found."""
    by_key = dict(((daemonset, field), (upstream, golden)) for daemonset, field, upstream, golden in found)
    order = list(by_key)
    lines = [TABLE_START, '']
    for reason, keys in groups:
        rows = io.StringIO()
        csv.writer(rows, lineterminator='\n').writerows(
            ['``%s``' % daemonset, '``%s``' % field] + [shown(value) for value in by_key[(daemonset, field)]]
            for daemonset, field in sorted(keys, key=order.index))
        lines += [textwrap.fill(reason, 120), '', '.. csv-table::',
                  '   :header: DaemonSet, field, GPU Operator, accelerators.gpu', '   :widths: 22, 48, 15, 15', '']
        lines += ['   ' + row for row in rows.getvalue().splitlines()] + ['']
    return '\n'.join(lines + [TABLE_END])


def page_table():
    text = PAGE.read_text()
    return text[text.index(TABLE_START):text.index(TABLE_END) + len(TABLE_END)]


def write_table():
    found, groups = upstream_differences(), reasons()
    problems = unexplained(found, groups)
    if problems:
        raise SystemExit('\n'.join(problems))
    PAGE.write_text(PAGE.read_text().replace(page_table(), table(found, groups)))


if __name__ == '__main__':
    write_table()
