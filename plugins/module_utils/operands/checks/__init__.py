# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The readiness checks of each kind of object, pure functions over objects as the API returns them (plain dicts):
pods, DaemonSets, Deployments, Jobs, nodes' allocatable resources, Services' endpoints, OLM Subscriptions. Each says
whether its objects are ready and, when not, the problems that say why (problems: each naming the node, the pod and
the cause). Nothing here reads the cluster or sleeps: operands.waiter does.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
