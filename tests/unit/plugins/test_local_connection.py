# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The connection accelerators.gpu.local (plugins/connection/local.py): a module piped into its interpreter with
nothing in front of it goes to the module worker; every other command, and whatever the worker does not take, runs as
ansible.builtin.local runs it. tests/cluster/test_module_worker_playbooks.py runs it through ansible-playbook."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import gc
import multiprocessing

import pytest

from ansible.playbook.play_context import PlayContext
from ansible.plugins.connection.local import Connection as BuiltinLocal
from ansible_collections.accelerators.gpu.plugins.connection.local import Connection
from ansible_collections.accelerators.gpu.plugins.module_utils.runner import worker as module_worker
from ansible_collections.accelerators.gpu.plugins.plugin_utils import worker_action

WRAPPER = (b"#!/venv/bin/python3\n_ANSIBALLZ_WRAPPER = True\n"
           b"run_module(module_fqn='ansible_collections.kubernetes.core.plugins.modules.k8s_info')\n")
PIPED = "/bin/sh -c '/venv/bin/python3 && sleep 0'"
RAN_BY_ANSIBLE = (0, b'{"ran_by": "ansible"}', b'')
RAN_BY_WORKER = (0, b'{"ran_by": "the worker"}', b'')


@pytest.mark.parametrize('cmd', [PIPED, '/bin/sh -c /venv/bin/python3'])
def test_the_interpreter_alone_is_a_piped_module(cmd):
    assert worker_action.piped_interpreter(cmd, WRAPPER) == '/venv/bin/python3'


@pytest.mark.parametrize('cmd', [
    "/bin/sh -c 'K8S_AUTH_CONTEXT=other /venv/bin/python3 && sleep 0'",  # the task's environment
    "/bin/sh -c '/usr/bin/python3 && sleep 0'",  # not the wrapper's interpreter
    "sudo -H -S -n -u root /bin/sh -c 'echo BECOME-SUCCESS-x ; /venv/bin/python3'",
    "/bin/sh -c '/venv/bin/python3 && sleep 0",  # unbalanced quote
    "/bin/sh -c 'rm -f -r /tmp/ansible-tmp-1/ > /dev/null 2>&1 && sleep 0'",
])
def test_anything_more_than_the_interpreter_is_not(cmd):
    assert worker_action.piped_interpreter(cmd, WRAPPER) is None


def test_a_wrapper_without_an_interpreter_line_is_not_piped():
    assert worker_action.piped_interpreter(PIPED, WRAPPER.split(b'\n', 1)[1]) is None


@pytest.mark.parametrize('wrapper, module', [
    (WRAPPER, 'kubernetes.core.k8s_info'),
    (b"runpy.run_module(mod_name='ansible.modules.command', init_globals=None)", 'ansible.builtin.command'),
    (b"run_module(module_fqn='ansible_collections.accelerators.gpu.plugins.modules.operand')", 'accelerators.gpu.operand'),
    (b"print('no module named')", 'a module'),
])
def test_the_worker_log_names_the_module_of_the_wrapper(wrapper, module):
    assert worker_action.wrapper_module(wrapper) == module


@pytest.fixture
def connection(monkeypatch, tmp_path):
    """The connection without Ansible's constructor, ansible.builtin.local's exec_command recording what it ran; the
    requests the worker was handed; what the collection says in verbose output."""
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
        made.handed.append((executable, module_fqn, cwd, handed_by))
        return made.worker_answer
    made.worker_answer = RAN_BY_WORKER
    monkeypatch.setattr(BuiltinLocal, 'exec_command', builtin_exec_command)
    monkeypatch.setattr(module_worker, 'run_wrapper', run_wrapper)
    monkeypatch.setattr(worker_action.display, 'vv', made.said.append)
    return made


def test_a_piped_module_runs_in_the_worker_and_other_commands_as_ansible_runs_them(connection):
    assert connection.exec_command(PIPED, in_data=WRAPPER) == RAN_BY_WORKER
    assert connection.handed == [('/venv/bin/python3', 'kubernetes.core.k8s_info', '/playbooks', 'connection')]
    assert connection.exec_command('echo ~ && sleep 0', sudoable=False) == RAN_BY_ANSIBLE
    assert connection.ran == ['echo ~ && sleep 0'] and connection.said == []


def test_with_become_or_the_worker_off_the_module_runs_as_ansible_runs_it(connection, monkeypatch):
    connection.become = object()
    assert connection.exec_command(PIPED, in_data=WRAPPER) == RAN_BY_ANSIBLE
    connection.become = None
    monkeypatch.setenv(module_worker.SWITCH, 'off')
    assert connection.exec_command(PIPED, in_data=WRAPPER) == RAN_BY_ANSIBLE
    assert connection.handed == [] and connection.ran == [PIPED, PIPED]


def test_a_module_no_worker_takes_runs_as_ansible_runs_it(connection):
    connection.worker_answer = None
    assert connection.exec_command(PIPED, in_data=WRAPPER) == RAN_BY_ANSIBLE
    assert len(connection.handed) == 1 and connection.ran == [PIPED] and connection.said == []


def test_a_worker_whose_entry_point_changed_runs_the_module_as_usual_and_says_so_once(connection, monkeypatch):
    monkeypatch.setattr(module_worker, 'run_wrapper', lambda wrapper, environ: RAN_BY_WORKER)
    for _task in range(2):
        assert connection.exec_command(PIPED, in_data=WRAPPER) == RAN_BY_ANSIBLE
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
