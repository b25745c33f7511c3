# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The modules' action (plugins/plugin_utils/worker_action.py) on a task's connection: the wrapper goes to the module
worker, and whatever this Ansible or the worker does not offer as expected, the connection runs it as Ansible would;
the result says which ran it, and a fallback is said once a run at -v.
tests/cluster/test_module_worker_playbooks.py runs it through ansible-playbook."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible.plugins.action.normal import ActionModule as NormalAction
from ansible_collections.accelerators.gpu.plugins.module_utils.runner import worker as module_worker
from ansible_collections.accelerators.gpu.plugins.plugin_utils import worker_action

PIPED = '/bin/sh -c /venv/bin/python3'
RAN_BY_ANSIBLE = (0, b'{"ran_by": "ansible"}', b'')
RAN_BY_WORKER = (0, b'{"ran_by": "the worker"}', b'')
REPORT = module_worker.REPORT


class Connection:
    """A local connection plugin's public face: its options and exec_command(cmd, in_data=None, sudoable=True)."""

    transport = 'local'

    def __init__(self, options=None):
        self.options = {'pipelining': False} if options is None else options
        self.commands = []

    def get_option(self, name):
        return self.options[name]

    def set_option(self, name, value):
        self.options[name] = value

    def exec_command(self, cmd, in_data=None, sudoable=True):
        self.commands.append((cmd, in_data, sudoable))
        return RAN_BY_ANSIBLE


class Loader:
    @staticmethod
    def get_basedir():
        return '/playbooks'


def action(connection, become=False, async_val=0):
    """The collection's action for a task of module accelerators.gpu.cluster_facts, without Ansible's constructor."""
    made = worker_action.ActionModule.__new__(worker_action.ActionModule)
    made._connection = connection
    made._play_context = type('PlayContext', (), {'become': become})()
    made._task = type('Task', (), {'async_val': async_val, 'resolved_action': 'accelerators.gpu.cluster_facts'})()
    made._loader = Loader()
    return made


@pytest.fixture
def said(monkeypatch, tmp_path):
    """What the action says at -v; a private socket directory of this test's own."""
    monkeypatch.setenv('XDG_RUNTIME_DIR', str(tmp_path))
    monkeypatch.delenv(module_worker.SWITCH, raising=False)
    lines = []
    monkeypatch.setattr(worker_action.display, 'v', lines.append)
    return lines


@pytest.fixture
def handed(monkeypatch):
    """The requests the worker was handed; it runs each."""
    requests = []

    def run_wrapper(executable, wrapper, module_fqn, environ, cwd):
        requests.append((executable, module_fqn, environ.get('TASK_VARIABLE'), cwd))
        return RAN_BY_WORKER
    monkeypatch.setattr(module_worker, 'run_wrapper', run_wrapper)
    return requests


@pytest.fixture
def wrapper(ansiballz_wrapper):
    return ansiballz_wrapper()


def environment_of_the_task(self, raw_environment_out=None):
    raw_environment_out.update(TASK_VARIABLE='from the task')
    return 'TASK_VARIABLE="from the task"'


def running_the_module(monkeypatch, wrapper):
    """Ansible's normal action reduced to what matters here: it pipes the wrapper into the connection and reads the
    module's result from the output."""
    def run(self, tmp=None, task_vars=None):
        return json.loads(self._connection.exec_command(PIPED, in_data=wrapper, sudoable=True)[1])
    monkeypatch.setattr(NormalAction, 'run', run)


def test_on_this_host_the_wrapper_goes_to_the_worker_for_the_task_only(monkeypatch, said, handed, wrapper):
    monkeypatch.setattr(worker_action.ActionModule, '_compute_environment_string', environment_of_the_task)
    connection = Connection()
    made = action(connection)
    restore = made._hand_over_to_the_worker()
    assert connection.get_option('pipelining') is True
    assert connection.exec_command(PIPED, in_data=wrapper, sudoable=True) == RAN_BY_WORKER
    assert handed == [('/venv/bin/python3', 'accelerators.gpu.cluster_facts', 'from the task', '/playbooks')]
    assert made._worker_report == {'served_by': 'worker', 'handed_by': 'action'}
    # Commands without a wrapper (none on this host while pipelining, but any Ansible may) run as Ansible runs them.
    assert connection.exec_command('echo ~', sudoable=False) == RAN_BY_ANSIBLE
    restore()
    assert connection.options == {'pipelining': False} and 'exec_command' not in vars(connection)
    assert connection.exec_command(PIPED, in_data=wrapper) == RAN_BY_ANSIBLE
    assert said == []


def test_the_result_says_the_worker_ran_the_module(monkeypatch, said, handed, wrapper):
    monkeypatch.setattr(worker_action.ActionModule, '_compute_environment_string', environment_of_the_task)
    running_the_module(monkeypatch, wrapper)
    result = action(Connection()).run(task_vars={})
    assert result == {'ran_by': 'the worker', REPORT: {'served_by': 'worker', 'handed_by': 'action'}}
    assert said == []


@pytest.mark.parametrize('task, reason', [(dict(become=True), 'the task has become'),
                                          (dict(async_val=30), 'the task is async')])
def test_elsewhere_the_connection_is_left_as_it_is_and_the_result_says_why(
        monkeypatch, said, handed, wrapper, task, reason):
    connection = Connection()
    running_the_module(monkeypatch, wrapper)
    result = action(connection, **task).run(task_vars={})
    assert 'exec_command' not in vars(connection) and connection.options == {'pipelining': False}
    assert result[REPORT] == {'served_by': 'module', 'reason': reason} and handed == []
    assert said == ['accelerators.gpu: modules run in their own processes, not in the module worker: ' + reason]


def test_a_module_process_that_handed_its_module_to_the_worker_keeps_its_report(monkeypatch, said, wrapper):
    ran_by_the_worker = {'ran_by': 'the worker', REPORT: {'served_by': 'worker', 'handed_by': 'module'}}
    connection = Connection()
    connection.exec_command = lambda cmd, in_data=None, sudoable=True: (0, json.dumps(ran_by_the_worker).encode(), b'')
    running_the_module(monkeypatch, wrapper)
    assert action(connection, become=True).run(task_vars={}) == ran_by_the_worker
    assert said == []


def test_on_the_collections_connection_the_action_leaves_the_handover_and_the_report_to_it(
        monkeypatch, said, handed, wrapper):
    class CollectionConnection(Connection):
        hands_piped_modules_to_the_worker = True
        module_report = None

        def exec_command(self, cmd, in_data=None, sudoable=True):
            self.module_report = module_worker.served('connection')
            return 1, b'Traceback (most recent call last):', b''
    connection = CollectionConnection()
    action(connection)._hand_over_to_the_worker()()
    assert 'exec_command' not in vars(connection) and connection.options == {'pipelining': False}
    # A module whose output holds no result to say what ran it (it crashed): the connection says it.
    monkeypatch.setattr(NormalAction, 'run', lambda self, tmp=None, task_vars=None: dict(
        failed=True, module_stdout=self._connection.exec_command(PIPED, in_data=wrapper)[1]))
    assert action(connection).run(task_vars={})[REPORT] == {'served_by': 'worker', 'handed_by': 'connection'}
    assert handed == [] and said == []


def test_with_the_worker_off_the_result_says_so_and_so_does_verbose_output_once(monkeypatch, said, handed, wrapper):
    monkeypatch.setenv(module_worker.SWITCH, 'off')
    running_the_module(monkeypatch, wrapper)
    results = [action(Connection()).run(task_vars={}) for _task in range(3)]
    assert handed == []
    assert [result[REPORT] for result in results] == [
        {'served_by': 'module', 'reason': 'ACCELERATORS_GPU_WORKER=off'}] * 3
    assert said == ['accelerators.gpu: modules run in their own processes, not in the module worker: '
                    'ACCELERATORS_GPU_WORKER=off']


def test_an_ansible_whose_environment_method_changed_signature_runs_the_module_as_usual(
        monkeypatch, said, handed, wrapper):
    # The private method the action reads the task's environment with takes other arguments.
    monkeypatch.setattr(worker_action.ActionModule, '_compute_environment_string', lambda self: '')
    running_the_module(monkeypatch, wrapper)
    connection = Connection()
    results = [action(connection).run(task_vars={}) for _task in range(2)]
    assert handed == [] and len(connection.commands) == 2
    reason = results[0][REPORT]['reason']
    assert results[1][REPORT] == results[0][REPORT] == {'served_by': 'module', 'reason': reason}
    assert 'ActionBase._compute_environment_string takes no raw_environment_out' in reason
    assert said == ['accelerators.gpu: modules run in their own processes, not in the module worker: ' + reason]


def test_a_wrapper_that_does_not_name_its_module_as_this_ansible_does_runs_as_usual(
        monkeypatch, said, handed, ansiballz_wrapper):
    monkeypatch.setattr(worker_action.ActionModule, '_compute_environment_string', environment_of_the_task)
    renamed = ansiballz_wrapper().replace(b'module_fqn=', b'module_name=').replace(b'mod_name=', b'module_name=')
    running_the_module(monkeypatch, renamed)
    result = action(Connection()).run(task_vars={})
    assert handed == [] and result['ran_by'] == 'ansible'
    assert result[REPORT]['served_by'] == 'module' and 'names its module with no' in result[REPORT]['reason']
    assert len(said) == 1 and result[REPORT]['reason'] in said[0]


def test_a_worker_whose_entry_point_changed_signature_runs_the_module_as_usual(monkeypatch, said, wrapper):
    monkeypatch.setattr(worker_action.ActionModule, '_compute_environment_string', environment_of_the_task)
    monkeypatch.setattr(module_worker, 'run_wrapper', lambda wrapper, environ: RAN_BY_WORKER)
    running_the_module(monkeypatch, wrapper)
    result = action(Connection()).run(task_vars={})
    assert result['ran_by'] == 'ansible' and result[REPORT]['reason'].startswith('TypeError: ')
    assert len(said) == 1 and 'TypeError' in said[0]


def test_an_exec_command_called_with_arguments_it_does_not_know_is_ansibles(monkeypatch, said, handed, wrapper):
    monkeypatch.setattr(worker_action.ActionModule, '_compute_environment_string', environment_of_the_task)

    class NewerConnection(Connection):
        def exec_command(self, cmd, in_data=None, sudoable=True, timeout=None):
            return super(NewerConnection, self).exec_command(cmd, in_data, sudoable)
    connection = NewerConnection()
    made = action(connection)
    made._hand_over_to_the_worker()
    assert connection.exec_command(PIPED, in_data=wrapper, timeout=5) == RAN_BY_ANSIBLE
    assert handed == [] and made._worker_report['served_by'] == 'module'


def test_a_connection_without_a_pipelining_option_runs_the_module_as_usual(said, handed):
    connection = Connection(options={})
    made = action(connection)
    made._hand_over_to_the_worker()()
    assert 'exec_command' not in vars(connection)
    assert 'no pipelining option' in made._worker_report['reason']


def test_a_fallback_is_said_once_a_run(said):
    worker_action.fell_back('a reason')
    worker_action.fell_back('a reason')
    worker_action.fell_back('another reason')
    assert len(said) == 2
    markers = os.listdir(module_worker.private_socket_dir(os.environ))
    assert len(markers) == 2 and all(name.startswith('fallback-%d-' % os.getppid()) for name in markers)
