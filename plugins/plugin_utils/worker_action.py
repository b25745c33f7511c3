# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of every module of this collection (plugins/action/<module>.py are links to this file): the module runs
as any module does, except that on this host (connection local, no become, not async) the module worker runs the
AnsiballZ wrapper Ansible would have piped into a new interpreter. The result is the same; no module process starts
(about 0.25 s of a Python start and of importing ansible.module_utils from the payload, each task). See
plugins/module_utils/module_worker.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase
from ansible_collections.accelerators.gpu.plugins.module_utils import module_worker

# The interpreter line of a wrapper this action can hand over: an absolute path, no arguments.
SHEBANG = re.compile(r'^#!(/\S+)$')


class ActionModule(ActionBase):

    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp  # no longer has any effect
        wrap_async = self._task.async_val and not self._connection.has_native_async
        result.update(self._execute_module(task_vars=task_vars, wrap_async=wrap_async))
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    def _on_this_host(self, wrap_async=False):
        return (self._connection.transport == 'local' and not self._play_context.become and not wrap_async
                and not self._task.async_val)

    def _is_pipelining_enabled(self, module_style, wrap_async=False):
        # The wrapper is then handed over whole, as it would be piped: no temporary directory, no file to copy.
        if module_style == 'new' and self._on_this_host(wrap_async):
            return True
        return super(ActionModule, self)._is_pipelining_enabled(module_style, wrap_async)

    def _low_level_execute_command(self, cmd, sudoable=True, in_data=None, executable=None,
                                   encoding_errors='surrogate_then_replace', chdir=None):
        interpreter = SHEBANG.match(to_text(self._used_interpreter or ''))
        if in_data is not None and interpreter and not chdir and self._on_this_host():
            environment = {}
            self._compute_environment_string(environment)
            environ = dict(os.environ, **dict((str(name), to_text(value)) for name, value in environment.items()))
            ran = module_worker.run_wrapper(interpreter.group(1), in_data, self._task.resolved_action, environ,
                                            to_text(self._loader.get_basedir()))
            if ran is not None:
                rc, stdout, stderr = ran
                out, err = to_text(stdout, errors=encoding_errors), to_text(stderr, errors=encoding_errors)
                return dict(rc=rc, stdout=out, stdout_lines=out.splitlines(), stderr=err, stderr_lines=err.splitlines())
        return super(ActionModule, self)._low_level_execute_command(cmd, sudoable, in_data, executable,
                                                                    encoding_errors, chdir)
