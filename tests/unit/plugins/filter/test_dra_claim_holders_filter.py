# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The dra_claim_holders filter: the pods holding GPUs of the NVIDIA DRA driver through ResourceClaims."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.accelerators.gpu.plugins.filter.dra_claim_holders import FilterModule, dra_claim_holders


def claim(namespace, name, results, holders):
    return {'metadata': {'namespace': namespace, 'name': name},
            'status': {'allocation': {'devices': {'results': results}},
                       'reservedFor': [{'resource': resource, 'name': holder} for resource, holder in holders]}}


def gpu(node, device='gpu-0', driver='gpu.nvidia.com', **extra):
    return dict({'request': 'gpu', 'driver': driver, 'pool': node, 'device': device}, **extra)


def test_pods_of_claims_allocated_nvidia_devices_are_named_with_node_and_claim_once_sorted():
    claims = [
        claim('ml', 'train-gpu', [gpu('gpu-2'), gpu('gpu-1', 'gpu-1')], [('pods', 'train-0'), ('pods', 'train-0')]),
        claim('ml', 'monitor', [gpu('gpu-1', adminAccess=True)], [('pods', 'watch-0')]),
        # Another driver's devices, a claim not allocated yet, one reserved for no pod, the operand namespace's.
        claim('ml', 'nic', [gpu('gpu-1', driver='nic.example.com')], [('pods', 'nic-0')]),
        {'metadata': {'namespace': 'ml', 'name': 'pending'}, 'status': {}},
        claim('ml', 'reserved-elsewhere', [gpu('gpu-3')], [('jobs', 'batch-0')]),
        claim('nvidia-gpu-operator', 'gfd', [gpu('gpu-1', adminAccess=True)], [('pods', 'gfd-0')]),
    ]
    assert dra_claim_holders(claims, 'nvidia-gpu-operator') == [
        'pod ml/train-0 on node gpu-1, gpu-2 (claim train-gpu)', 'pod ml/watch-0 on node gpu-1 (claim monitor)']
    assert 'pod nvidia-gpu-operator/gfd-0 on node gpu-1 (claim gfd)' in dra_claim_holders(claims)
    assert dra_claim_holders(None) == [] and dra_claim_holders([]) == []
    assert FilterModule().filters()['dra_claim_holders'] is dra_claim_holders
