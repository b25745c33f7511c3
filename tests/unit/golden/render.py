# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every object the deploy playbook writes for a reference fleet, rendered without a cluster.

`ansible-playbook accelerators.gpu.deploy` runs as a user runs it (the roles' defaults and vars, their set_fact
tasks, conditions, templates, filters and the collection's template lookup), with the fleet's variables, against
shadow copies of accelerators.gpu and kubernetes.core whose module actions are replay_action.py: no module runs, each
module task's templated arguments are recorded and its result is the one tests/golden/inputs/<fleet>.yml gives under
the task's register name (what the module returned at that point of a deploy of that fleet). The objects written are
then those of the recorded arguments: `accelerators.gpu.operand`'s definitions, `accelerators.gpu.k8s`' definitions
(not its patches nor deletions), and the driver DaemonSets `accelerators.gpu.driver_daemonsets` plans, planned by the
function the module calls (planned_driver_daemonsets), for the fleet's nodes as the simulator makes them.

`python tests/unit/golden/render.py` (make golden) writes them to tests/golden/<fleet>/<Kind>/[<namespace>/]<name>.yaml.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

import ansible_collections.kubernetes.core
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from localcluster import fleet as simulated

# The collection's code the render uses: the driver planning of accelerators.gpu.driver_daemonsets and its action's
# template.
from ansible_collections.accelerators.gpu.plugins.action.driver_daemonsets import driver_daemonset_template
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.daemonsets import given_dtk_images
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.plan import desired_driver_daemonsets
from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.facts import node_facts
from ansible_collections.accelerators.gpu.plugins.modules.driver_daemonsets import DRIVER_OPTIONS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
GOLDEN = ROOT / 'tests' / 'golden'
INPUTS = GOLDEN / 'inputs'
FLEETS = ('openshift', 'kubernetes', 'dra')


def inputs_of(fleet):
    with open(INPUTS / ('%s.yml' % fleet)) as handle:
        return yaml.safe_load(handle)


def _link_all_but(source, target, replaced):
    target.mkdir(parents=True)
    for entry in source.iterdir():
        if entry.name not in replaced and entry.name not in ('.git', '.build', '.cluster'):
            (target / entry.name).symlink_to(entry)


def _shadow(collection, target):
    """collection's tree linked under target, with plugins/action holding replay_action.py for each of its modules."""
    _link_all_but(collection, target, ('plugins',))
    _link_all_but(collection / 'plugins', target / 'plugins', ('action',))
    (target / 'plugins' / 'action').mkdir()
    for module in (collection / 'plugins' / 'modules').glob('*.py'):
        if module.name != '__init__.py':
            (target / 'plugins' / 'action' / module.name).symlink_to(HERE / 'replay_action.py')


def deploy_calls(fleet, workdir):
    """The module tasks of a deploy of fleet, in order: {module, task, register, args}."""
    inputs = inputs_of(fleet)
    collections = Path(workdir) / 'collections' / 'ansible_collections'
    _shadow(ROOT, collections / 'accelerators' / 'gpu')
    _shadow(Path(list(ansible_collections.kubernetes.core.__path__)[0]), collections / 'kubernetes' / 'core')
    files = {name: Path(workdir) / name for name in ('variables.json', 'results.json', 'calls.jsonl')}
    files['variables.json'].write_text(json.dumps(inputs['variables']))
    files['results.json'].write_text(json.dumps(inputs['results']))
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(('ANSIBLE_', 'K8S_AUTH_', 'GOLDEN_')) and key not in ('PYTHONPATH', 'KUBECONFIG')}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(collections.parent), ANSIBLE_LOCALHOST_WARNING='false',
               ANSIBLE_NOCOLOR='true', ANSIBLE_RETRY_FILES_ENABLED='false', GOLDEN_CALLS=str(files['calls.jsonl']),
               GOLDEN_RESULTS=str(files['results.json']))
    process = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', 'localhost,',
         'accelerators.gpu.deploy', '-e', '@%s' % files['variables.json']],
        env=env, cwd=workdir, capture_output=True, text=True, timeout=300, check=False)
    if process.returncode != 0 or 'WARNING' in process.stderr:
        raise AssertionError('the deploy of fleet %s did not render cleanly (rc=%d):\n%s\n%s' % (
            fleet, process.returncode, process.stdout[-4000:], process.stderr[-4000:]))
    return [json.loads(line) for line in files['calls.jsonl'].read_text().splitlines()]


def fleet_nodes(fleet_spec):
    """The fleet's Node objects as the simulator creates them (tools/localcluster/fleet.py)."""
    return [{'apiVersion': 'v1', 'kind': 'Node',
             'metadata': {'name': node['name'], 'labels': node['labels'], 'annotations': node['annotations']},
             'status': node['status']} for node in simulated.expand_groups(fleet_spec)]


def fleet_dtk_images(fleet_spec):
    """{RHCOS build: its Driver Toolkit image} as the simulated cluster's image stream holds them."""
    if fleet_spec.get('openshift') is None:
        return {}
    return dict((version, simulated.dtk_image(version)) for version in simulated.rhcos_versions(fleet_spec))


def planned_driver_daemonsets(args, nodes, dtk_images):
    """The DaemonSets accelerators.gpu.driver_daemonsets plans for the task's args, as it plans them for the nodes it
    reads and the DTK images it finds (driver/daemonsets.py, _plan), rendered from the template its action hands it:
    the driver role's, unless the task gives one (plugins/action/driver_daemonsets.py)."""
    driver = ArgumentSpecValidator(DRIVER_OPTIONS).validate(args['driver']).validated_parameters
    spec = dict((key, value) for key, value in driver.items() if value is not None)
    spec['namespace'] = args['namespace']
    template = args.get('daemonset_template')
    plan = desired_driver_daemonsets(driver_daemonset_template() if template is None else template, spec,
                                     [node_facts(node) for node in nodes], given_dtk_images(dtk_images),
                                     args['mode'], args.get('precompiled_available'), args.get('prepare_versions', []))
    return plan['desired']


def written_objects(fleet, calls):
    """The objects the deploy writes, from its module calls, each once (the last write of it)."""
    inputs = inputs_of(fleet)
    objects = {}
    for call in calls:
        module, args = call['module'], call['args']
        if module == 'accelerators.gpu.operand':
            written = args.get('definitions') or []
        elif module == 'accelerators.gpu.k8s' and args.get('state', 'present') == 'present':
            written = args.get('definition') or args.get('resource_definition') or []
        elif module == 'accelerators.gpu.driver_daemonsets':
            written = planned_driver_daemonsets(args, fleet_nodes(inputs['fleet']), fleet_dtk_images(inputs['fleet']))
            names = [daemonset['metadata']['name'] for daemonset in written]
            given = inputs['results'][call['register']]['created']
            assert names == given, ('%s: the driver DaemonSets planned for the fleet are %s, the inputs say the module '
                                    'created %s' % (fleet, names, given))
        else:
            continue
        for obj in written if isinstance(written, list) else [written]:
            objects[object_path(obj)] = obj
    return objects


def object_path(obj):
    """<Kind>/[<namespace>/]<name>.yaml, the object's golden file under its fleet's directory."""
    metadata = obj['metadata']
    parts = [obj['kind']] + ([metadata['namespace']] if metadata.get('namespace') else []) + [metadata['name']]
    return '/'.join(parts) + '.yaml'


def object_label(obj):
    metadata = obj['metadata']
    return '%s %s%s' % (obj['kind'], metadata['namespace'] + '/' if metadata.get('namespace') else '', metadata['name'])


def render(fleet):
    """{golden file path under tests/golden/<fleet>: object} of a deploy of fleet."""
    with tempfile.TemporaryDirectory(prefix='accelerators-gpu-golden-') as workdir:
        return written_objects(fleet, deploy_calls(fleet, workdir))


_Loader = getattr(yaml, 'CSafeLoader', yaml.SafeLoader)


class _Dumper(yaml.SafeDumper):
    """Block style for text of several lines (scripts, configuration files), so that a diff of it reads by line."""


_Dumper.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    'tag:yaml.org,2002:str', text, style='|' if '\n' in text else None))


def dump(obj):
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)


def read_golden(fleet):
    """{path: object} of tests/golden/<fleet>."""
    directory = GOLDEN / fleet
    return dict((path.relative_to(directory).as_posix(), yaml.load(path.read_text(), Loader=_Loader))
                for path in sorted(directory.rglob('*.yaml')))


def write_golden(fleet, objects):
    directory = GOLDEN / fleet
    for path in directory.rglob('*.yaml'):
        path.unlink()
    for path, obj in objects.items():
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(dump(obj))
    for folder in sorted(directory.rglob('*'), reverse=True):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


if __name__ == '__main__':
    for name in FLEETS:
        write_golden(name, render(name))
        print('tests/golden/%s: %d objects' % (name, len(read_golden(name))))
