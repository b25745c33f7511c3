# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of driver_daemonsets hands the module the driver role's DaemonSet template unless the task gives one."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.accelerators.gpu.plugins.action import driver_daemonsets
from ansible_collections.accelerators.gpu.plugins.plugin_utils import worker_action

ROLE_TEMPLATE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))), 'roles', 'driver', 'templates', 'daemonset.yml.j2')


@pytest.fixture
def module_args(monkeypatch):
    """The arguments the module gets: what the task's args are when the worker action runs it."""
    ran = []

    def run(self, tmp=None, task_vars=None):
        ran.append(dict(self._task.args))
        return {'changed': False}
    monkeypatch.setattr(worker_action.ActionModule, 'run', run)

    def args_of(task_args):
        action = driver_daemonsets.ActionModule.__new__(driver_daemonsets.ActionModule)
        action._task = type('Task', (), {'args': task_args})()
        assert action.run(task_vars={}) == {'changed': False}
        return ran.pop()
    return args_of


def test_the_module_gets_the_driver_roles_template_unless_the_task_gives_one(module_args):
    with open(ROLE_TEMPLATE) as template:
        role_template = template.read()
    assert 'kind: DaemonSet' in role_template
    assert module_args({'namespace': 'gpu'}) == {'namespace': 'gpu', 'daemonset_template': role_template}
    assert module_args({'namespace': 'gpu', 'daemonset_template': None})['daemonset_template'] == role_template
    assert module_args({'namespace': 'gpu', 'daemonset_template': 'kind: DaemonSet'}) == {
        'namespace': 'gpu', 'daemonset_template': 'kind: DaemonSet'}
