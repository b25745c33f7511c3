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
from ansible.plugins.action.normal import ActionModule as NormalAction
from ansible_collections.accelerators.gpu.plugins.module_utils import module_worker

# The interpreter line of a wrapper this action can hand over: an absolute path, no arguments.
SHEBANG = re.compile(r'^#!(/\S+)$')


class ActionModule(NormalAction):
    """Ansible's normal action, with the module's run handed to the module worker on this host."""

    def _on_this_host(self):
        return self._connection.transport == 'local' and not self._play_context.become and not self._task.async_val

    def _is_pipelining_enabled(self, module_style, wrap_async=False):
        # The wrapper is then handed over whole, as it would be piped: no temporary directory, no file to copy.
        if module_style == 'new' and self._on_this_host():
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
