# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the status playbook; the logic lives in module_utils/stack_status.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.accelerators.gpu.plugins.module_utils.stack_status import node_rows, table_lines


class FilterModule(object):
    def filters(self):
        return {'stack_status_rows': node_rows, 'stack_status_lines': table_lines}
