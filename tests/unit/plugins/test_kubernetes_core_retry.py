# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of accelerators.gpu.k8s, k8s_info and k8s_drain (plugins/plugin_utils/kubernetes_core_retry.py): which
failed results are run again, for how long, and what a result says after faults; and that the roles and playbooks
reach the API server through it. tests/cluster/test_api_outage_retries.py runs it through an API server restart."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib
import os

import pytest
import yaml

from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.retry import REFUSED as REFUSED_FAULT, RESET
from ansible_collections.accelerators.gpu.plugins.plugin_utils import kubernetes_core_retry as retry

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
REFUSED = {'failed': True, 'msg': "HTTPSConnectionPool(host='h', port=6443): Max retries exceeded with url: /version "
                                  "(Caused by NewConnectionError('Failed to establish a new connection: [Errno 111] "
                                  "Connection refused'))"}
UNAVAILABLE = {'failed': True, 'msg': "Exception '503\nReason: Service Unavailable\n"}
INVALID = {'failed': True, 'msg': 'Failed to create object: b\'{"kind":"Status","reason":"Invalid","code":422}\''}
READ = {'changed': False, 'resources': [{'metadata': {'name': 'n1'}}], 'api_found': True}


class Clock:
    """time.monotonic and time.sleep of a run: each module run takes `run_seconds`, each sleep its seconds."""

    def __init__(self, run_seconds=0.2):
        self.now, self.run_seconds, self.slept = 100.0, run_seconds, []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def scripted(clock, results):
    """A module run that returns each of results in turn (copies), then the last again."""
    left = list(results)

    def run():
        clock.now += clock.run_seconds
        return dict(left.pop(0) if len(left) > 1 else left[0])
    return run


@pytest.mark.parametrize('result, fault', [
    (REFUSED, REFUSED_FAULT),
    (UNAVAILABLE, '503'),
    # ansible-core 2.16: a module that raised has its traceback in module_stderr, its message says nothing.
    ({'failed': True, 'msg': 'MODULE FAILURE\nSee stdout/stderr for the exact error',
      'module_stderr': 'urllib3.exceptions.ProtocolError: (\'Connection aborted.\', ConnectionResetError(104, '
                       '\'Connection reset by peer\'))'}, RESET),
    # kubernetes.core.k8s_drain gives the status beside its words.
    ({'failed': True, 'msg': "Failed to retrieve node 'n1' due to: Service Unavailable", 'status': 503}, '503'),
    (INVALID, None),
    (READ, None),
    # A result that did not fail is no fault, whatever it says.
    (dict(READ, msg='Connection refused'), None),
])
def test_the_fault_of_a_result(result, fault):
    assert retry.failure_fault(result) == fault


def test_a_run_that_meets_faults_runs_again_with_backoff_and_says_so():
    clock = Clock()
    result = retry.retried(scripted(clock, [REFUSED, REFUSED, UNAVAILABLE, READ]), 'kubernetes.core.k8s_info', 120,
                           clock, clock.sleep)
    assert result['resources'] == READ['resources'] and not result.get('failed')
    assert clock.slept == [0.5, 1.0, 2.0]
    assert result['api_faults'] == {'faults': {'refused': 2, '503': 1}, 'tries': 4, 'given_up': 0, 'seconds': 4.1}
    assert result['warnings'] == ['kubernetes.core.k8s_info: the API server answered 503 x1 and refused connections '
                                  'x2; ran 4 times, 4.1 s']


def test_a_permanent_error_is_the_result_at_once():
    clock = Clock()
    result = retry.retried(scripted(clock, [INVALID, READ]), 'kubernetes.core.k8s', 120, clock, clock.sleep)
    assert result == INVALID and clock.slept == []


def test_a_fault_that_outlasts_the_budget_fails_with_its_tries_and_no_try_starts_after_it():
    clock = Clock(run_seconds=1.0)
    result = retry.retried(scripted(clock, [UNAVAILABLE]), 'kubernetes.core.k8s', 10, clock, clock.sleep)
    assert result['failed'] and result['api_faults']['given_up'] == 1
    # Faults at 101, 102.5, 104.5, 107.5: the next try, 4 s after the last, would start past 101 + 10.
    assert clock.slept == [0.5, 1.0, 2.0] and result['api_faults']['tries'] == 4
    assert result['msg'] == "Exception '503\nReason: Service Unavailable (tried 4 times in 6.5 s)"
    assert result['warnings'][0].endswith('ran 4 times, 6.5 s, failed after its retries')


def test_a_budget_of_0_runs_the_module_once():
    clock = Clock()
    result = retry.retried(scripted(clock, [REFUSED, READ]), 'kubernetes.core.k8s_info', 0, clock, clock.sleep)
    assert result['failed'] and result['api_faults']['tries'] == 1 and clock.slept == []
    # One try: the message is the module's own.
    assert result['msg'] == REFUSED['msg']


@pytest.mark.parametrize('value, seconds', [('30', 30.0), (0, 0.0), (2.5, 2.5)])
def test_the_budget_is_seconds_0_or_more(value, seconds):
    assert retry.retry_budget(value) == seconds


@pytest.mark.parametrize('value', ['-1', 'soon', None])
def test_a_budget_that_is_no_such_number_is_refused(value):
    with pytest.raises(ValueError, match='api_retry_seconds is %s' % value):
        retry.retry_budget(value)


def _tasks(node):
    """Every task-like mapping in a YAML document (tasks, blocks, rescue, always, handlers, plays' task lists)."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _tasks(value)
    elif isinstance(node, list):
        for item in node:
            yield from _tasks(item)


def module_calls(prefix):
    """(file, module, its options) of every task of the roles and playbooks that calls a module named prefix*."""
    for top in ('roles', 'playbooks'):
        for directory, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for name in sorted(files):
                if name.endswith(('.yml', '.yaml')):
                    path = os.path.join(directory, name)
                    with open(path) as stream:
                        documents = list(yaml.safe_load_all(stream))
                    for task in _tasks(documents):
                        for key, options in task.items():
                            if str(key).startswith(prefix):
                                yield os.path.relpath(path, ROOT), key, options


def test_the_roles_and_playbooks_call_no_kubernetes_core_module_but_through_the_collection():
    assert ['%s: %s' % (path, module) for path, module, _options in module_calls('kubernetes.core.')] == []


def unknown_options(options, spec):
    """The options (nested ones as parent.child) that spec, an argument spec, does not have."""
    names = dict((alias, name) for name, entry in spec.items() for alias in [name] + list(entry.get('aliases') or []))
    unknown = []
    for option, value in (options or {}).items():
        if option not in names:
            unknown.append(option)
        elif isinstance(value, dict) and spec[names[option]].get('options'):
            children = spec[names[option]]['options']
            unknown.extend('%s.%s' % (option, child) for child in unknown_options(value, children))
    return unknown


@pytest.mark.parametrize('module', ['k8s', 'k8s_info', 'k8s_drain'])
def test_every_option_the_roles_give_is_one_of_the_kubernetes_core_module(module):
    """What ansible-lint's args rule checks of a kubernetes.core task, which it cannot of this collection's module
    (its documentation is kubernetes.core's): a misspelt option would fail only when the task runs."""
    spec = dict(importlib.import_module('ansible_collections.kubernetes.core.plugins.modules.%s' % module).argspec(),
                api_retry_seconds={})
    calls = [(path, options) for path, name, options in module_calls('accelerators.gpu.%s' % module)
             if name == 'accelerators.gpu.%s' % module]
    assert calls
    assert [(path, unknown_options(options, spec)) for path, options in calls if unknown_options(options, spec)] == []
    assert unknown_options({'name': 'n1', 'labl_selectors': []}, spec) == ['labl_selectors']
