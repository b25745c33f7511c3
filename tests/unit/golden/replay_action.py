# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of every cluster module in the golden render's shadow collections (render.py): the module does not run.
The task's arguments, as Ansible templated them, go to the file GOLDEN_CALLS (one JSON line a task); the result is
what the fleet's inputs file says the module returned, under the task's register name (nothing for a task that
registers nothing)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible.plugins.action import ActionBase


def register_name(register):
    """The variable a task registers its result as: ansible-core 2.21 keeps `register: name` as {name: projection}."""
    if isinstance(register, dict):
        return next(iter(register), None)
    return register


class ActionModule(ActionBase):

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        register = register_name(self._task.register)
        call = {'module': self._task.action, 'task': self._task.get_name(), 'register': register,
                'args': self._task.args}
        with open(os.environ['GOLDEN_CALLS'], 'a') as calls:
            calls.write(json.dumps(call) + '\n')
        with open(os.environ['GOLDEN_RESULTS']) as results:
            result.update(json.load(results).get(register or '', {}))
        return result
