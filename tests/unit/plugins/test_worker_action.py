# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The modules' action (plugins/plugin_utils/worker_action.py) on a task's connection: the wrapper goes to the module
worker, and whatever this Ansible or the worker does not offer as expected, the connection runs it as Ansible would.
tests/cluster/test_module_worker_playbooks.py runs it through ansible-playbook."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.runner import worker as module_worker
from ansible_collections.accelerators.gpu.plugins.plugin_utils import worker_action

WRAPPER = b'#!/usr/bin/python3\nprint("module")\n'
RAN_BY_ANSIBLE = (0, b'{"ran_by": "ansible"}', b'')
RAN_BY_WORKER = (0, b'{"ran_by": "the worker"}', b'')


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
    """What the action says in verbose output; a private socket directory of this test's own."""
    monkeypatch.setenv('XDG_RUNTIME_DIR', str(tmp_path))
    monkeypatch.delenv(module_worker.SWITCH, raising=False)
    lines = []
    monkeypatch.setattr(worker_action.display, 'vv', lines.append)
    return lines


@pytest.fixture
def handed(monkeypatch):
    """The requests the worker was handed; it runs each."""
    requests = []

    def run_wrapper(executable, wrapper, module_fqn, environ, cwd):
        requests.append((executable, wrapper, module_fqn, environ.get('TASK_VARIABLE'), cwd))
        return RAN_BY_WORKER
    monkeypatch.setattr(module_worker, 'run_wrapper', run_wrapper)
    return requests


def environment_of_the_task(self, raw_environment_out=None):
    raw_environment_out.update(TASK_VARIABLE='from the task')
    return 'TASK_VARIABLE="from the task"'


def test_on_this_host_the_wrapper_goes_to_the_worker_for_the_task_only(monkeypatch, said, handed):
    monkeypatch.setattr(worker_action.ActionModule, '_compute_environment_string', environment_of_the_task)
    connection = Connection()
    restore = action(connection)._hand_over_to_the_worker()
    assert connection.get_option('pipelining') is True
    assert connection.exec_command('/bin/sh -c python3', in_data=WRAPPER, sudoable=True) == RAN_BY_WORKER
    assert handed == [('/usr/bin/python3', WRAPPER, 'accelerators.gpu.cluster_facts', 'from the task', '/playbooks')]
    # Commands without a wrapper (none on this host while pipelining, but any Ansible may) run as Ansible runs them.
    assert connection.exec_command('echo ~', sudoable=False) == RAN_BY_ANSIBLE
    restore()
    assert connection.options == {'pipelining': False} and 'exec_command' not in vars(connection)
    assert connection.exec_command('/bin/sh -c python3', in_data=WRAPPER) == RAN_BY_ANSIBLE
    assert said == []


@pytest.mark.parametrize('task', [dict(become=True), dict(async_val=30)])
def test_elsewhere_the_connection_is_left_as_it_is(said, handed, task):
    connection = Connection()
    action(connection, **task)._hand_over_to_the_worker()()
    assert 'exec_command' not in vars(connection) and connection.options == {'pipelining': False}
    assert said == []


def test_an_ansible_whose_environment_method_changed_signature_runs_the_module_as_usual(monkeypatch, said, handed):
    # The worker broken on purpose: the private method it reads the task's environment with takes other arguments.
    monkeypatch.setattr(worker_action.ActionModule, '_compute_environment_string', lambda self: '')
    connection = Connection()
    restore = action(connection)._hand_over_to_the_worker()
    for _task in range(2):
        assert connection.exec_command('/bin/sh -c python3', in_data=WRAPPER, sudoable=True) == RAN_BY_ANSIBLE
    restore()
    assert handed == [] and len(connection.commands) == 2
    assert len(said) == 1 and 'not in the module worker' in said[0] and 'TypeError' in said[0]


def test_a_worker_whose_entry_point_changed_signature_runs_the_module_as_usual(monkeypatch, said):
    monkeypatch.setattr(worker_action.ActionModule, '_compute_environment_string', environment_of_the_task)
    monkeypatch.setattr(module_worker, 'run_wrapper', lambda wrapper, environ: RAN_BY_WORKER)
    connection = Connection()
    action(connection)._hand_over_to_the_worker()
    assert connection.exec_command('/bin/sh -c python3', in_data=WRAPPER, sudoable=True) == RAN_BY_ANSIBLE
    assert len(said) == 1 and 'TypeError' in said[0]


def test_an_exec_command_called_with_arguments_it_does_not_know_is_ansibles(monkeypatch, said, handed):
    monkeypatch.setattr(worker_action.ActionModule, '_compute_environment_string', environment_of_the_task)

    class NewerConnection(Connection):
        def exec_command(self, cmd, in_data=None, sudoable=True, timeout=None):
            return super(NewerConnection, self).exec_command(cmd, in_data, sudoable)
    connection = NewerConnection()
    action(connection)._hand_over_to_the_worker()
    assert connection.exec_command('/bin/sh -c python3', in_data=WRAPPER, timeout=5) == RAN_BY_ANSIBLE
    assert handed == []


def test_a_connection_without_a_pipelining_option_runs_the_module_as_usual(said, handed):
    connection = Connection(options={})
    action(connection)._hand_over_to_the_worker()()
    assert 'exec_command' not in vars(connection)
    assert len(said) == 1 and 'no pipelining option' in said[0]


def test_a_fallback_is_said_once_a_run(said):
    worker_action.fell_back('a reason')
    worker_action.fell_back('a reason')
    worker_action.fell_back('another reason')
    assert len(said) == 2
    markers = os.listdir(module_worker.private_socket_dir(os.environ))
    assert len(markers) == 2 and all(name.startswith('fallback-%d-' % os.getppid()) for name in markers)
