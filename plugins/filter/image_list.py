# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the image list; the logic lives in module_utils/registry/image_list.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.accelerators.gpu.plugins.module_utils.registry.image_list import (
    image_list, image_set_configuration, nfd_image, skopeo_sync)


class FilterModule(object):
    def filters(self):
        return {'image_list': image_list, 'image_set_configuration': image_set_configuration,
                'skopeo_sync': skopeo_sync, 'nfd_image': nfd_image}
