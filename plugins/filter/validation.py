# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of the common role's validate entry point; the logic lives in module_utils/operands/validation.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.accelerators.gpu.plugins.module_utils.operands.validation import validation_plan


class FilterModule(object):
    def filters(self):
        return {'validation_plan': validation_plan}
