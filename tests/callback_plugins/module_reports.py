# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A callback of the tests, not of the collection: for every module result of a run, a JSON line {task, action, report}
in the file ACCELERATORS_GPU_TEST_MODULE_REPORTS names, report being what the result says ran its module
(accelerators_gpu_worker, null when it says nothing). A module result is one that carries `invocation`, as every
AnsibleModule's does, a loop's items each; the result of a no_log task is censored, whether it ran a module or not
(set_fact), and only counted (report "censored"). tests/matrix and tests/cluster/test_deploy.py enable it with ANSIBLE_CALLBACK_PLUGINS pointing here and
ANSIBLE_CALLBACKS_ENABLED=module_reports, and ANSIBLE_INJECT_INVOCATION=true: from ansible-core 2.21 on a result
carries `invocation` only when asked to (before, always; the variable is then unknown, and ignored)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible.plugins.callback import CallbackBase

REPORT = 'accelerators_gpu_worker'


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'module_reports'
    CALLBACK_NEEDS_ENABLED = True

    def _record(self, result):
        # `_result` and `_task`: the names every supported ansible-core has (2.19 adds `result` and `task`).
        data = result._result
        loop = data.get('results')
        results = [item for item in loop if isinstance(item, dict)] if isinstance(loop, list) else [data]
        with open(os.environ['ACCELERATORS_GPU_TEST_MODULE_REPORTS'], 'a') as out:
            for each in results:
                if 'invocation' in each or 'censored' in each:
                    out.write(json.dumps({'task': result._task.get_name(), 'action': result._task.action,
                                          'report': 'censored' if 'censored' in each else each.get(REPORT)}) + '\n')

    def v2_runner_on_ok(self, result):
        self._record(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result)
