# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of accelerators.gpu.driver_daemonsets: the collection's action of every module
(plugins/plugin_utils/worker_action.py), which also hands the module the driver role's DaemonSet template when the
task gives none (option daemonset_template). The module renders each driver DaemonSet it plans from that text; it
cannot read the file itself, as a module runs from its payload, which carries Python only."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.accelerators.gpu.plugins.plugin_utils.worker_action import ActionModule as WorkerAction

TEMPLATE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        'roles', 'driver', 'templates', 'daemonset.yml.j2')


def driver_daemonset_template():
    """The text of the driver role's DaemonSet template, read from this collection."""
    with open(TEMPLATE) as template:
        return template.read()


class ActionModule(WorkerAction):
    """The worker action, with the driver role's template as the module's daemonset_template when none is given."""

    def run(self, tmp=None, task_vars=None):
        if self._task.args.get('daemonset_template') is None:
            self._task.args = dict(self._task.args, daemonset_template=driver_daemonset_template())
        return super(ActionModule, self).run(tmp, task_vars)
