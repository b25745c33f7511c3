# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of every module of this collection (plugins/action/<module>.py are links to this file, or subclass
it), and what the connection accelerators.gpu.local shares with it: a module Ansible would pipe into a new interpreter
goes to the module worker instead (see plugins/module_utils/runner/worker.py), its result says what ran it
(module_worker.REPORT), and a module the worker did not run is said once a run, at -v.

The action: the module runs as any module does, except that on this host (connection local, no become, not async) the
module worker runs the AnsiballZ wrapper Ansible would have piped into a new interpreter. The result is the same; no
module process starts (about 0.25 s of a Python start and of importing ansible.module_utils from the payload, each
task). On the connection accelerators.gpu.local, which hands every piped module to the worker itself, the action
leaves it to the connection.

Only public interfaces of ansible-core are changed, and only for the task's run: the connection's `pipelining` option
(so that Ansible hands the wrapper over whole, as it would pipe it) and its `exec_command`, the connection plugins'
documented entry point, which this action wraps on the task's connection object. What else the worker relies on is
checked once per ansible-core version (plugins/module_utils/runner/worker_compatibility.py). Whatever this version of
Ansible does not offer as expected, the module runs as Ansible runs it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import os
import re
import shlex

from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase
from ansible.plugins.action.normal import ActionModule as NormalAction
from ansible.release import __version__ as ANSIBLE_CORE_VERSION
from ansible.utils.display import Display
from ansible_collections.accelerators.gpu.plugins.module_utils.runner import worker as module_worker
from ansible_collections.accelerators.gpu.plugins.module_utils.runner.worker import NotServed
from ansible_collections.accelerators.gpu.plugins.module_utils.runner import worker_compatibility

display = Display()

# The interpreter line of a wrapper the worker can run: an absolute path, no arguments.
SHEBANG = re.compile(br'^#!(/\S+)\r?$')
# The arguments of ConnectionBase.exec_command(cmd, in_data=None, sudoable=True) this action knows.
_EXEC_COMMAND_KEYWORDS = frozenset(('in_data', 'sudoable'))
# A name of the task environment that Ansible's shell plugin puts in front of the interpreter.
_VARIABLE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')
NOT_PIPED = 'Ansible did not pipe the module into its interpreter'


class ActionModule(NormalAction):
    """Ansible's normal action, with the module's run handed to the module worker on this host."""

    def run(self, tmp=None, task_vars=None):
        self._worker_report = None  # what ran the module, as the handover found (None: it saw no module run)
        restore = self._hand_over_to_the_worker()
        try:
            result = super(ActionModule, self).run(tmp, task_vars)
        finally:
            restore()
        if module_worker.REPORT not in result and not result.get('skipped'):
            # No report in the module's result (its output held none, a crash say): what the handover saw.
            report = self._worker_report or getattr(self._connection, 'module_report', None) or \
                module_worker.not_served(NOT_PIPED)
            result[module_worker.REPORT] = report
            if report['served_by'] != 'worker':
                fell_back(report['reason'])
        return result

    def _not_on_this_host(self):
        """Why the module is not handed over here, or None."""
        off = module_worker.switched_off(os.environ)
        if off:
            return off
        transport = getattr(self._connection, 'transport', None)
        if transport != 'local':
            return 'the connection is %s, not local' % transport
        if getattr(self._play_context, 'become', True):
            return 'the task has become'
        if getattr(self._task, 'async_val', True):
            return 'the task is async'
        return None

    def _hand_over_to_the_worker(self):
        """Wrap this task's connection so that the module's wrapper goes to the worker; returns what undoes it."""
        connection = self._connection
        not_here = self._not_on_this_host()
        if not_here:
            self._worker_report = module_worker.not_served(not_here)
            return _nothing
        if getattr(connection, 'hands_piped_modules_to_the_worker', False):
            return _nothing
        try:
            pipelining = connection.get_option('pipelining')
            connection.set_option('pipelining', True)
            exec_command = connection.exec_command
        except Exception as error:  # pylint: disable=broad-except  # any Ansible: the module runs as usual
            self._worker_report = module_worker.not_served('the connection plugin %s has no pipelining option (%s)'
                                                           % (getattr(connection, 'transport', '?'), to_text(error)))
            return _nothing

        def handed_over(cmd, *args, **kwargs):
            in_data = kwargs.get('in_data', args[0] if args else None)
            if in_data is None:  # not a module piped into its interpreter
                return exec_command(cmd, *args, **kwargs)
            if len(args) <= 2 and set(kwargs) <= _EXEC_COMMAND_KEYWORDS:
                try:
                    ran = self._run_in_worker(in_data)
                except NotServed as declined:
                    self._worker_report = module_worker.not_served(to_text(declined))
                else:
                    self._worker_report = module_worker.served('action')
                    return ran
            else:
                self._worker_report = module_worker.not_served('exec_command was called with arguments unknown here')
            return exec_command(cmd, *args, **kwargs)

        connection.exec_command = handed_over

        def restore():
            if connection.__dict__.get('exec_command') is handed_over:
                del connection.exec_command
            connection.set_option('pipelining', pipelining)
        return restore

    def _run_in_worker(self, wrapper):
        """(rc, stdout bytes, stderr bytes) of the wrapper run by the worker, as its interpreter's process would have
        ended; NotServed, saying why, when the worker does not run it."""
        try:
            interpreter = wrapper_interpreter(wrapper)
            check_ansible_core(wrapper, self._compute_environment_string)
            environment = {}
            # The task's environment (its `environment:` keyword), which Ansible puts on the interpreter's command line.
            self._compute_environment_string(environment)
            environ = dict(os.environ, **dict((str(name), to_text(value)) for name, value in environment.items()))
            return module_worker.run_wrapper(interpreter, wrapper, self._task.resolved_action, environ,
                                             to_text(self._loader.get_basedir()))
        except NotServed:
            raise
        except Exception as error:  # pylint: disable=broad-except  # never a reason for the task to fail
            raise NotServed('%s: %s' % (type(error).__name__, to_text(error)))


def _nothing():
    pass


def wrapper_interpreter(wrapper):
    """The interpreter of an AnsiballZ wrapper, from its first line; NotServed when that is not #! and an absolute path
    alone (the worker runs the interpreter a path names)."""
    shebang = SHEBANG.match(wrapper.split(b'\n', 1)[0])
    if not shebang:
        raise NotServed("the module's interpreter line is not #! and an absolute path alone")
    return to_text(shebang.group(1))


def check_ansible_core(wrapper, environment_method):
    """NotServed, saying why, unless this ansible-core offers what the worker relies on: checked with wrapper, the
    first AnsiballZ wrapper of this ansible-core version, and kept for the version's later runs."""
    if not worker_compatibility.ANSIBALLZ_WRAPPER.search(wrapper):
        raise NotServed('the piped module is not an AnsiballZ wrapper (no line _ANSIBALLZ_WRAPPER = True)')
    reason = worker_compatibility.verdict(ANSIBLE_CORE_VERSION, wrapper, environment_method,
                                          module_worker.private_socket_dir(os.environ))
    if reason:
        raise NotServed(reason)


def piped_command(cmd, wrapper):
    """(interpreter, task environment) of the AnsiballZ wrapper a connection is asked to pipe into cmd, when cmd runs
    that interpreter and nothing else, as Ansible builds it: `/bin/sh -c '[NAME=value ...] <interpreter>[ && sleep 0]'`,
    the task's environment quoted as Ansible's shell plugin quotes it (shlex.quote), which makes it read back exactly.
    NotServed for any other command (become, a wrapper in front of the interpreter), which then runs as Ansible built
    it."""
    interpreter = wrapper_interpreter(wrapper)
    try:
        words = shlex.split(to_text(cmd))
        inner = shlex.split(words[2]) if len(words) == 3 and words[1] == '-c' else []
    except ValueError:
        inner = []
    if interpreter in inner:
        assignments = [word.split('=', 1) for word in inner[:inner.index(interpreter)]]
        if all(len(pair) == 2 and _VARIABLE.match(pair[0]) for pair in assignments):
            exact = ' '.join(['%s=%s' % (name, shlex.quote(value)) for name, value in assignments] + [interpreter])
            if words[2] in (exact, exact + ' && sleep 0'):
                return interpreter, dict(assignments)
    raise NotServed('the command runs more than the interpreter and the task environment (become, say)')


def run_piped(cmd, wrapper, cwd, become):
    """For the connection accelerators.gpu.local: (rc, stdout, stderr) of the module wrapper cmd would pipe into its
    interpreter, run by the worker with this process's environment and the task's, as the interpreter's process would
    have ended, its result saying so; NotServed, saying why, when the worker does not run it (the connection then
    runs cmd itself)."""
    off = module_worker.switched_off(os.environ)
    if off:
        raise NotServed(off)
    if become:
        raise NotServed('the task has become')
    try:
        interpreter, environment = piped_command(cmd, wrapper)
        check_ansible_core(wrapper, ActionBase._compute_environment_string)
        rc, stdout, stderr = module_worker.run_wrapper(
            interpreter, wrapper, worker_compatibility.wrapper_module(wrapper) or 'a module',
            dict(os.environ, **environment), to_text(cwd) if cwd else os.getcwd(), handed_by='connection')
    except NotServed:
        raise
    except Exception as error:  # pylint: disable=broad-except  # never a reason for the task to fail
        raise NotServed('%s: %s' % (type(error).__name__, to_text(error)))
    return rc, module_worker.with_report(stdout, module_worker.served('connection'))[0], stderr


def ran_by_ansible(stdout, reason):
    """(stdout, report) of a module Ansible ran because the worker did not, for reason: its result says so, unless its
    module process handed it to the worker itself (runner/worker.py, forward), whose report then stays; a reason is said
    once a run."""
    report = module_worker.not_served(reason)
    stdout, carried = module_worker.with_report(stdout, report)
    if carried and carried.get('served_by') == 'worker':
        return stdout, carried
    fell_back(reason)
    return stdout, report


def fell_back(reason):
    """Say once a run (of the ansible-playbook process whose worker processes run the tasks), at -v, that modules run
    in their own processes, and why."""
    marker = _once_marker(os.getppid(), reason)
    if marker is not None:
        try:
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError as error:
            if error.errno == errno.EEXIST:
                return
    display.v('accelerators.gpu: modules run in their own processes, not in the module worker: %s' % reason)


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
