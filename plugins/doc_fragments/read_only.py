# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The attributes of a module that only reads the cluster."""

    DOCUMENTATION = r'''
options: {}
attributes:
  check_mode:
    description: Reads only, so check mode does the same as a normal run.
    support: full
  diff_mode:
    description: Nothing changes, so there is no diff.
    support: none
'''
