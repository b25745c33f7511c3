# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every module has the collection's action (plugins/plugin_utils/worker_action.py) as its action plugin: a link to it,
or an action of its own that subclasses it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib
import os

from ansible_collections.accelerators.gpu.plugins.plugin_utils import worker_action

PLUGINS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                       'plugins')


def test_every_module_and_only_a_module_has_the_worker_action():
    modules = sorted(name for name in os.listdir(os.path.join(PLUGINS, 'modules')) if name.endswith('.py'))
    actions = sorted(name for name in os.listdir(os.path.join(PLUGINS, 'action')) if name.endswith('.py'))
    assert actions == modules
    for name in actions:
        path = os.path.join(PLUGINS, 'action', name)
        if os.path.islink(path):
            assert os.readlink(path) == os.path.join('..', 'plugin_utils', 'worker_action.py'), name
        else:
            action = importlib.import_module('ansible_collections.accelerators.gpu.plugins.action.' + name[:-3])
            assert issubclass(action.ActionModule, worker_action.ActionModule), name
