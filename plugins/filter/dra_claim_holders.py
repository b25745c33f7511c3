# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pods that hold GPUs of the NVIDIA DRA driver through ResourceClaims; the logic lives in module_utils/dra.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.accelerators.gpu.plugins.module_utils.dra import claim_holders


def dra_claim_holders(claims, skip_namespace=None):
    return claim_holders(claims, skip_namespace)


class FilterModule(object):
    def filters(self):
        return {'dra_claim_holders': dra_claim_holders}
