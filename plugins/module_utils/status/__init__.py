# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-node status of the GPU stack (stack_status: module stack_status, filter fleet_status)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
