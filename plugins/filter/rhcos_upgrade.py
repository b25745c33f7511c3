# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the rhcos_upgrade role; the logic lives in module_utils/upgrade/rhcos.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.accelerators.gpu.plugins.module_utils.upgrade.rhcos import (
    label_patches, record_patches, upgrade_state, without_driver)


class FilterModule(object):
    def filters(self):
        return {'rhcos_upgrade_state': upgrade_state, 'rhcos_upgrade_record_patches': record_patches,
                'rhcos_upgrade_label_patches': label_patches, 'rhcos_upgrade_without_driver': without_driver}
