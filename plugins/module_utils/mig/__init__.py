# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG: layouts in mig-parted's format and the resources they advertise (parted), and the mig_config module's work
through the MIG manager's labels (config)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
