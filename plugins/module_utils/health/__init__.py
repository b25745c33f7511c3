# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health: NVIDIA's XID catalog actions (xid), the metrics of the DCGM exporter (metrics), the health records
of the GPU nodes made of what the cluster exposes (records, pure) and their reading (read)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
