# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Taking nodes down and back for an upgrade: where the nodes of an RHCOS or kernel upgrade stand (rhcos, the
rhcos_upgrade filters and role), and evicting GPU workloads before a node goes down (gpu_workload_eviction, module
gpu_workload_eviction and the driver upgrade). The driver upgrade itself is driver.upgrade."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
