# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The connection accelerators.gpu.local (plugins/connection/local.py): a module piped into its interpreter with
nothing but the task's environment in front of it goes to the module worker; every other command, and whatever the
worker does not take, runs as ansible.builtin.local runs it. The module's result says which ran it, and a fallback is
said once a run at -v. tests/cluster/test_module_worker_playbooks.py runs it through ansible-playbook."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import gc
import json
import multiprocessing

import pytest

from ansible.playbook.play_context import PlayContext
from ansible.plugins.connection.local import Connection as BuiltinLocal
from ansible_collections.accelerators.gpu.plugins.connection.local import Connection
from ansible_collections.accelerators.gpu.plugins.module_utils.runner import worker as module_worker
from ansible_collections.accelerators.gpu.plugins.module_utils.runner.worker import NotServed
from ansible_collections.accelerators.gpu.plugins.plugin_utils import worker_action

PIPED = "/bin/sh -c '/venv/bin/python3 && sleep 0'"
RAN_BY_ANSIBLE = (0, b'{"ran_by": "ansible"}', b'')
RAN_BY_WORKER = (0, b'{"ran_by": "the worker"}', b'')
K8S_INFO = 'ansible_collections.kubernetes.core.plugins.modules.k8s_info'
SAID = 'accelerators.gpu: modules run in their own processes, not in the module worker: '


@pytest.fixture
def wrapper(ansiballz_wrapper):
    return ansiballz_wrapper(module_fqn=K8S_INFO)


@pytest.mark.parametrize('cmd, environment', [
    (PIPED, {}),
    ('/bin/sh -c /venv/bin/python3', {}),  # ansible-core 2.21
    # The task's environment, as Ansible's shell plugin puts it in front of the interpreter.
    ("/bin/sh -c 'A='\"'\"'x y'\"'\"' B=1 C='\"'\"'$HOME'\"'\"' /venv/bin/python3 && sleep 0'",
     {'A': 'x y', 'B': '1', 'C': '$HOME'}),
])
def test_the_interpreter_alone_or_after_the_task_environment_is_a_piped_module(cmd, environment, wrapper):
    assert worker_action.piped_command(cmd, wrapper) == ('/venv/bin/python3', environment)


@pytest.mark.parametrize('cmd', [
    "/bin/sh -c '/usr/bin/python3 && sleep 0'",  # not the wrapper's interpreter
    "sudo -H -S -n -u root /bin/sh -c 'echo BECOME-SUCCESS-x ; /venv/bin/python3'",
    "/bin/sh -c '/venv/bin/python3 && sleep 0",  # unbalanced quote
    "/bin/sh -c 'rm -f -r /tmp/ansible-tmp-1/ > /dev/null 2>&1 && sleep 0'",
    "/bin/sh -c 'A=$HOME /venv/bin/python3 && sleep 0'",  # the shell would expand it: not as Ansible quotes it
    "/bin/sh -c 'A=1 exec /venv/bin/python3 && sleep 0'",
    "/bin/sh -c '/venv/bin/python3 -u && sleep 0'",
])
def test_anything_more_than_the_interpreter_and_the_task_environment_is_not(cmd, wrapper):
    with pytest.raises(NotServed, match='runs more than the interpreter'):
        worker_action.piped_command(cmd, wrapper)


def test_a_wrapper_without_an_interpreter_line_is_not_piped(wrapper):
    with pytest.raises(NotServed, match='interpreter line'):
        worker_action.piped_command(PIPED, wrapper.split(b'\n', 1)[1])


@pytest.fixture
def connection(monkeypatch, tmp_path):
    """The connection without Ansible's constructor, ansible.builtin.local's exec_command recording what it ran; the
    requests the worker was handed; what the collection says at -v."""
    monkeypatch.setenv('XDG_RUNTIME_DIR', str(tmp_path))
    monkeypatch.delenv(module_worker.SWITCH, raising=False)
    made = Connection.__new__(Connection)
    made.become = None
    made.cwd = b'/playbooks'
    made.ran, made.handed, made.said = [], [], []

    def builtin_exec_command(self, cmd, in_data=None, sudoable=True):
        self.ran.append(cmd)
        return RAN_BY_ANSIBLE

    def run_wrapper(executable, wrapper, module_fqn, environ, cwd, handed_by='action'):
        made.handed.append((executable, module_fqn, cwd, handed_by, environ.get('A')))
        if made.worker_declines:
            raise NotServed(made.worker_declines)
        return RAN_BY_WORKER
    made.worker_declines = None  # the reason the worker does not run the module
    monkeypatch.setattr(BuiltinLocal, 'exec_command', builtin_exec_command)
    monkeypatch.setattr(module_worker, 'run_wrapper', run_wrapper)
    monkeypatch.setattr(worker_action.display, 'v', made.said.append)
    return made


def report(stdout):
    return json.loads(stdout)[module_worker.REPORT]


def test_a_piped_module_runs_in_the_worker_its_result_says_so_and_other_commands_run_as_ansible_runs_them(
        connection, wrapper):
    rc, stdout, stderr = connection.exec_command(PIPED, in_data=wrapper)
    assert (rc, stderr, json.loads(stdout)['ran_by']) == (0, b'', 'the worker')
    assert report(stdout) == connection.module_report == {'served_by': 'worker', 'handed_by': 'connection'}
    with_environment = "/bin/sh -c 'A=1 /venv/bin/python3 && sleep 0'"
    assert report(connection.exec_command(with_environment, in_data=wrapper)[1])['served_by'] == 'worker'
    assert connection.handed == [('/venv/bin/python3', 'kubernetes.core.k8s_info', '/playbooks', 'connection', None),
                                 ('/venv/bin/python3', 'kubernetes.core.k8s_info', '/playbooks', 'connection', '1')]
    assert connection.exec_command('echo ~ && sleep 0', sudoable=False) == RAN_BY_ANSIBLE
    assert connection.ran == ['echo ~ && sleep 0'] and connection.said == []


def test_with_become_or_the_worker_off_the_module_runs_as_ansible_runs_it_and_says_why(connection, monkeypatch,
                                                                                       wrapper):
    connection.become = object()
    become = connection.exec_command(PIPED, in_data=wrapper)
    connection.become = None
    monkeypatch.setenv(module_worker.SWITCH, 'off')
    off = [connection.exec_command(PIPED, in_data=wrapper) for _task in range(2)]
    assert connection.handed == [] and connection.ran == [PIPED] * 3
    assert report(become[1]) == {'served_by': 'module', 'reason': 'the task has become'}
    assert [report(stdout) for _rc, stdout, _stderr in off] == [
        {'served_by': 'module', 'reason': 'ACCELERATORS_GPU_WORKER=off'}] * 2
    assert connection.said == [SAID + 'the task has become', SAID + 'ACCELERATORS_GPU_WORKER=off']


def test_a_module_the_worker_does_not_take_runs_as_ansible_runs_it_and_says_why(connection, wrapper):
    connection.worker_declines = 'the worker did not listen within 30 s of its start'
    stdout = connection.exec_command(PIPED, in_data=wrapper)[1]
    assert len(connection.handed) == 1 and connection.ran == [PIPED]
    assert report(stdout) == connection.module_report == {
        'served_by': 'module', 'reason': 'the worker did not listen within 30 s of its start'}
    assert connection.said == [SAID + 'the worker did not listen within 30 s of its start']


def test_a_wrapper_this_ansible_core_would_not_write_runs_as_ansible_runs_it_and_says_why(connection, wrapper):
    renamed = wrapper.replace(b'module_fqn=', b'module_name=').replace(b'mod_name=', b'module_name=')
    stdout = connection.exec_command(PIPED, in_data=renamed)[1]
    assert connection.handed == [] and connection.ran == [PIPED]
    assert 'names its module with no' in report(stdout)['reason'] and len(connection.said) == 1


def test_a_worker_whose_entry_point_changed_runs_the_module_as_usual_and_says_so_once(connection, monkeypatch,
                                                                                      wrapper):
    monkeypatch.setattr(module_worker, 'run_wrapper', lambda wrapper, environ: RAN_BY_WORKER)
    for _task in range(2):
        assert report(connection.exec_command(PIPED, in_data=wrapper)[1])['reason'].startswith('TypeError: ')
    assert connection.ran == [PIPED, PIPED]
    assert len(connection.said) == 1 and 'TypeError' in connection.said[0]


def _freeze_count_after_a_connection(answer):
    Connection(PlayContext())
    answer.put(gc.get_freeze_count())


def test_in_the_process_ansible_forks_for_a_task_the_inherited_objects_leave_the_garbage_collection():
    forking = multiprocessing.get_context('fork')  # how Ansible starts a task's worker process
    answer = forking.Queue()
    worker = forking.Process(target=_freeze_count_after_a_connection, args=(answer,))
    worker.start()
    frozen_in_the_worker = answer.get(timeout=60)
    worker.join()
    assert frozen_in_the_worker > 0
    # Not in the controller (here, pytest's process), whose objects must be collected as usual.
    Connection(PlayContext())
    assert gc.get_freeze_count() == 0
