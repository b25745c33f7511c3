# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of every module of this collection (plugins/action/<module>.py are links to this file, or subclass it):
the module runs as any module does, except that on this host (connection local, no become, not async) the module
worker runs the AnsiballZ wrapper Ansible would have piped into a new interpreter. The result is the same; no module
process starts (about 0.25 s of a Python start and of importing ansible.module_utils from the payload, each task).
See plugins/module_utils/runner/worker.py.

Only public interfaces of ansible-core are changed, and only for the task's run: the connection's `pipelining` option
(so that Ansible hands the wrapper over whole, as it would pipe it) and its `exec_command`, the connection plugins'
documented entry point, which this action wraps on the task's connection object. Whatever this version of Ansible
does not offer as expected, the module runs as Ansible runs it, and verbose output says so once a run.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import os
import re
import shlex

from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action.normal import ActionModule as NormalAction
from ansible.utils.display import Display
from ansible_collections.accelerators.gpu.plugins.module_utils.runner import worker as module_worker

display = Display()

# The interpreter line of a wrapper this action can hand over: an absolute path, no arguments.
SHEBANG = re.compile(br'^#!(/\S+)\r?$')
# The arguments of ConnectionBase.exec_command(cmd, in_data=None, sudoable=True) this action knows.
_EXEC_COMMAND_KEYWORDS = frozenset(('in_data', 'sudoable'))
# Where an AnsiballZ wrapper names its module: module_fqn= (ansible-core 2.19 on) or runpy's mod_name= (before).
_WRAPPER_MODULE = re.compile(br"\b(?:module_fqn|mod_name)=['\"](?:ansible_collections\.)?([\w.]+)['\"]")


class ActionModule(NormalAction):
    """Ansible's normal action, with the module's run handed to the module worker on this host."""

    def run(self, tmp=None, task_vars=None):
        restore = self._hand_over_to_the_worker()
        try:
            return super(ActionModule, self).run(tmp, task_vars)
        finally:
            restore()

    def _on_this_host(self):
        return (getattr(self._connection, 'transport', None) == 'local'
                and not getattr(self._play_context, 'become', True) and not getattr(self._task, 'async_val', True))

    def _hand_over_to_the_worker(self):
        """Wrap this task's connection so that the module's wrapper goes to the worker; returns what undoes it."""
        if module_worker.switched_off(os.environ) or not self._on_this_host():
            return _nothing
        connection = self._connection
        try:
            pipelining = connection.get_option('pipelining')
            connection.set_option('pipelining', True)
            exec_command = connection.exec_command
        except Exception as error:  # pylint: disable=broad-except  # any Ansible: the module runs as usual
            fell_back('the connection plugin %s has no pipelining option (%s)'
                      % (getattr(connection, 'transport', '?'), to_text(error)))
            return _nothing

        def handed_over(cmd, *args, **kwargs):
            in_data = kwargs.get('in_data', args[0] if args else None)
            if in_data is not None and len(args) <= 2 and set(kwargs) <= _EXEC_COMMAND_KEYWORDS:
                ran = self._run_in_worker(in_data)
                if ran is not None:
                    return ran
            return exec_command(cmd, *args, **kwargs)

        connection.exec_command = handed_over

        def restore():
            if connection.__dict__.get('exec_command') is handed_over:
                del connection.exec_command
            connection.set_option('pipelining', pipelining)
        return restore

    def _run_in_worker(self, wrapper):
        """(rc, stdout bytes, stderr bytes) of the wrapper run by the worker, as its interpreter's process would have
        ended; None when the worker does not take it (none running yet, or this Ansible not as expected)."""
        interpreter = SHEBANG.match(wrapper.split(b'\n', 1)[0])
        if not interpreter:
            return None
        try:
            environment = {}
            # The task's environment (its `environment:` keyword), which Ansible puts on the interpreter's command line.
            self._compute_environment_string(environment)
            environ = dict(os.environ, **dict((str(name), to_text(value)) for name, value in environment.items()))
            return module_worker.run_wrapper(to_text(interpreter.group(1)), wrapper, self._task.resolved_action,
                                             environ, to_text(self._loader.get_basedir()))
        except Exception as error:  # pylint: disable=broad-except  # never a reason for the task to fail
            fell_back('%s: %s' % (type(error).__name__, to_text(error)))
            return None


def _nothing():
    pass


def piped_interpreter(cmd, wrapper):
    """The interpreter of an AnsiballZ wrapper when cmd, the command a connection is asked to pipe it into, runs that
    interpreter and nothing else: Ansible's `/bin/sh -c '<interpreter> && sleep 0'`, with no task environment and no
    become in front of it. None for any other command, which then runs as Ansible built it."""
    shebang = SHEBANG.match(wrapper.split(b'\n', 1)[0])
    if not shebang:
        return None
    try:
        words = shlex.split(to_text(cmd))
    except ValueError:
        return None
    interpreter = to_text(shebang.group(1))
    if len(words) == 3 and words[1] == '-c' and words[2] in (interpreter, interpreter + ' && sleep 0'):
        return interpreter
    return None


def wrapper_module(wrapper):
    """The module an AnsiballZ wrapper runs (kubernetes.core.k8s_info), for the worker's log; 'a module' when the
    wrapper does not say it the way this Ansible's did."""
    named = _WRAPPER_MODULE.search(wrapper)
    if not named:
        return 'a module'
    name = to_text(named.group(1))
    return 'ansible.builtin.' + name[len('ansible.modules.'):] if name.startswith('ansible.modules.') \
        else name.replace('.plugins.modules.', '.')


def run_piped(cmd, wrapper, cwd):
    """For a connection on this host: (rc, stdout, stderr) of the module wrapper cmd would pipe into its interpreter,
    run by the worker with this process's environment, as the interpreter's process would have ended; None when cmd
    is more than that interpreter or the worker does not take it (the connection then runs cmd itself)."""
    if module_worker.switched_off(os.environ):
        return None
    try:
        interpreter = piped_interpreter(cmd, wrapper)
        if interpreter is None:
            return None
        return module_worker.run_wrapper(interpreter, wrapper, wrapper_module(wrapper), dict(os.environ),
                                         to_text(cwd) if cwd else os.getcwd(), handed_by='connection')
    except Exception as error:  # pylint: disable=broad-except  # never a reason for the task to fail
        fell_back('%s: %s' % (type(error).__name__, to_text(error)))
        return None


def fell_back(reason):
    """Say once a run (of the ansible-playbook process whose worker processes run the tasks) that the modules run in
    their own processes, and why."""
    marker = _once_marker(os.getppid(), reason)
    if marker is None:
        return
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as error:
        if error.errno == errno.EEXIST:
            return
    display.vv('accelerators.gpu: modules run in their own processes, not in the module worker: %s' % reason)


def _once_marker(run_pid, reason):
    directory = module_worker.private_socket_dir(os.environ)
    if directory is None:
        return None
    for name in os.listdir(directory):
        # Markers of runs that have ended.
        if name.startswith('fallback-') and not _alive(int(name.split('-')[1])):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass
    return os.path.join(directory, 'fallback-%d-%s' % (run_pid, hashlib.sha256(reason.encode('utf-8')).hexdigest()[:12]))


def _alive(pid):
    try:
        os.kill(pid, 0)
    except OSError as error:
        return error.errno == errno.EPERM
    return True
