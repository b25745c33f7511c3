# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Images and registries: whether an image exists in an OCI registry (client), OpenShift's image mirror rules
(mirrors), and the image lists a disconnected site mirrors with (image_list, filter image_list)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
