# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node selector (labels) as the label selector string the list API takes; the logic lives in
module_utils/operands/checks/objects.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.accelerators.gpu.plugins.module_utils.operands.checks.objects import selector_string


def label_selector(labels):
    return selector_string({'matchLabels': labels or {}})


class FilterModule(object):
    def filters(self):
        return {'label_selector': label_selector}
