# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of accelerators.gpu.k8s, k8s_info and k8s_drain (plugins/action/<module>.py are links to this file):
kubernetes.core's module of the same name, run through kubernetes.core's own action with the task's options, and run
again while it fails on a fault the API server recovers from (module_utils/k8s/retry.py: 429, 500, 502, 503, 504,
a refused, reset or timed-out connection), with the backoff of the collection's own requests, until
api_retry_seconds after its first fault.

A whole module run is tried again, not a request: kubernetes.core's modules declare a state (present, absent,
patched, cordoned, drained) and read the cluster before they write, so a run after a fault finds what the one before
did and does the rest. Any other failure (403, 404, 422, a wait that timed out) is the task's result at once.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import os
import time

from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s import retry

WRAPPED_COLLECTION = 'kubernetes.core'
# The parts of a failed result that may tell of a fault: kubernetes.core's message (the kubernetes client's exception
# as text), the reason it adds, and an interpreter's traceback when the module raised (ansible-core before 2.19).
_FAILURE_TEXT = ('msg', 'reason', 'module_stderr', 'module_stdout', 'exception')


def failure_fault(result):
    """The fault (k8s/retry.py) a failed module result tells of; None for a result that did not fail, or failed
    otherwise."""
    if not result.get('failed'):
        return None
    status = result.get('status')
    text = '\n'.join(to_text(result[key]) for key in _FAILURE_TEXT if result.get(key))
    return retry.message_fault(text, status if isinstance(status, int) else None)


def retried(run, name, budget, clock=time.monotonic, sleep=time.sleep):
    """The result of run() (a module run), run again while it fails on a fault until budget seconds after the first
    fault, with k8s/retry.py's backoff. A result after faults carries api_faults (the faults by kind, the tries, whether
    the last try still failed on one, the seconds from the first fault) and a warning naming the module (name);
    a run that failed for good says its tries in its message."""
    faults = collections.Counter()
    tries, first_fault = 0, None
    while True:
        result = run()
        tries += 1
        fault = failure_fault(result)
        if fault is None:
            break
        faults[fault] += 1
        now = clock()
        if first_fault is None:
            first_fault = now
        wait = retry.next_try(now, tries, first_fault + budget)
        if wait is None:
            break
        sleep(wait)
    if not faults:
        return result
    seconds = clock() - first_fault
    given_up = int(fault is not None)
    result['api_faults'] = {'faults': dict(faults), 'tries': tries, 'given_up': given_up, 'seconds': round(seconds, 1)}
    result['warnings'] = list(result.get('warnings') or []) + ['%s: the API server %s; ran %d times, %.1f s%s' % (
        name, retry.fault_words(faults), tries, seconds, ', failed after its retries' if given_up else '')]
    # A module that raised has no message of its own yet (ansible-core 2.19 on): Ansible words its exception.
    if given_up and tries > 1 and result.get('msg'):
        result['msg'] = '%s (tried %d times in %.1f s)' % (to_text(result['msg']).rstrip(), tries, seconds)
    return result


def retry_budget(value):
    """api_retry_seconds as a float of seconds, 0 or more; ValueError saying what is wrong otherwise."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1
    if seconds < 0:
        raise ValueError('api_retry_seconds is %s: the seconds a module run that met a fault is tried for are 0 or '
                         'more' % value)
    return seconds


class ActionModule(ActionBase):
    """kubernetes.core's action and module of this task's name, tried again through the API server's faults."""

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        # As the collection's modules take it: the option, else the environment variable, else the default.
        budget = args.pop('api_retry_seconds', None)
        if budget is None:
            budget = self._environment_value(retry.RETRY_SECONDS_ENV)
        try:
            budget = retry_budget(retry.RETRY_SECONDS if budget is None else budget)
        except ValueError as error:
            return dict(result, failed=True, msg=to_text(error))
        wrapped = '%s.%s' % (WRAPPED_COLLECTION, self._task.action.rsplit('.', 1)[-1])
        result.update(retried(lambda: self._run_wrapped(wrapped, args, task_vars), wrapped, budget))
        return result

    def _environment_value(self, name):
        """The value the task's environment (its play's, its blocks', its own: the last one wins, as Ansible merges
        them) gives the variable for the module, else this process's."""
        value = os.environ.get(name)
        for environment in self._task.environment or []:
            variables = self._templar.template(environment)
            if isinstance(variables, dict) and variables.get(name) is not None:
                value = variables[name]
        return value

    def _run_wrapped(self, wrapped, args, task_vars):
        """One run of the wrapped module, through its collection's action, as a task of that module would run."""
        task = self._task.copy()
        task.action = wrapped
        task.args = args
        action = self._shared_loader_obj.action_loader.get(
            wrapped, task=task, connection=self._connection, play_context=self._play_context, loader=self._loader,
            templar=self._templar, shared_loader_obj=self._shared_loader_obj)
        return action.run(task_vars=task_vars)
