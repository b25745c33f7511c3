# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU nodes: the facts read from their labels (facts), GPU feature discovery's labels (gfd_labels), and the nfd_labels
module's work: reading nodes, waiting for NFD, labelling GPU nodes (nfd_labels)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
