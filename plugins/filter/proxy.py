# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the common role's proxy settings; the logic lives in module_utils/cluster/proxy.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.accelerators.gpu.plugins.module_utils.cluster.proxy import proxy_settings


class FilterModule(object):
    def filters(self):
        return {'proxy_settings': proxy_settings}
