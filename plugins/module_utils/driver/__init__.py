# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVIDIA driver: which driver DaemonSets a fleet needs and bringing them in line (module driver_daemonsets),
the Driver Toolkit images of OpenShift builds (module dtk_image_lookup), precompiled images, GPUDirect side
containers, driver versions, and driver upgrades node by node (module driver_upgrade)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
