# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver DaemonSets planned as module driver_daemonsets plans them: rendered from the driver role's template,
which the module's action hands it."""

import functools

from ansible_collections.accelerators.gpu.plugins.action.driver_daemonsets import driver_daemonset_template
from ansible_collections.accelerators.gpu.plugins.module_utils.driver import plan as driver_plan

TEMPLATE = driver_daemonset_template()
desired_driver_daemonsets = functools.partial(driver_plan.desired_driver_daemonsets, TEMPLATE)
