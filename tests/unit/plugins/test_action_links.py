# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every module has an action plugin of the collection: a link to one of its two actions, the module worker's
(plugins/plugin_utils/worker_action.py) for the modules of the collection, kubernetes_core_retry.py for k8s, k8s_info
and k8s_drain, whose module files document kubernetes.core's modules of their name run again through API faults; or an
action of its own that subclasses the module worker's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib
import os

from ansible_collections.accelerators.gpu.plugins.plugin_utils import worker_action

PLUGINS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                       'plugins')
RUN_AGAIN_THROUGH_FAULTS = ('k8s.py', 'k8s_drain.py', 'k8s_info.py')


def test_every_module_and_only_a_module_has_an_action_of_the_collection():
    modules = sorted(name for name in os.listdir(os.path.join(PLUGINS, 'modules')) if name.endswith('.py'))
    actions = sorted(name for name in os.listdir(os.path.join(PLUGINS, 'action')) if name.endswith('.py'))
    assert actions == modules
    for name in actions:
        path = os.path.join(PLUGINS, 'action', name)
        if os.path.islink(path):
            action = 'kubernetes_core_retry.py' if name in RUN_AGAIN_THROUGH_FAULTS else 'worker_action.py'
            assert os.readlink(path) == os.path.join('..', 'plugin_utils', action), name
        else:
            plugin = importlib.import_module('ansible_collections.accelerators.gpu.plugins.action.' + name[:-3])
            assert issubclass(plugin.ActionModule, worker_action.ActionModule), name
