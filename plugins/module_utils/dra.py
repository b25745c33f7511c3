# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Dynamic Resource Allocation as the NVIDIA DRA driver uses it: which claims hold NVIDIA GPUs, and which pods use
which claims. Pure functions over objects as the API returns them (plain dicts)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The driver name of the NVIDIA DRA driver's GPUs (and MIG devices), and the DeviceClasses a workload asks them by.
DRIVER = 'gpu.nvidia.com'
CLASSES = ('gpu.nvidia.com', 'mig.nvidia.com')
API = '/apis/resource.k8s.io/v1'


def published_devices(slices):
    """{node: the devices its ResourceSlices of the NVIDIA DRA driver publish}."""
    published = {}
    for resource_slice in slices:
        spec = resource_slice.get('spec') or {}
        if spec.get('driver') == DRIVER and spec.get('nodeName'):
            published[spec['nodeName']] = published.get(spec['nodeName'], 0) + len(spec.get('devices') or [])
    return published


def published_kinds(slices, node):
    """{kind: count} of the devices the node's ResourceSlices of the NVIDIA DRA driver publish, as
    mig.parted.dra_devices counts them: `gpu`, or `mig-<profile>`."""
    kinds = {}
    for resource_slice in slices:
        spec = resource_slice.get('spec') or {}
        if spec.get('driver') != DRIVER or spec.get('nodeName') != node:
            continue
        for device in spec.get('devices') or []:
            attributes = device.get('attributes') or {}
            kind = (attributes.get('type') or {}).get('string')
            if kind == 'mig':
                kind = 'mig-' + str((attributes.get('profile') or {}).get('string'))
            kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def allocation_results(claim):
    """The devices the scheduler allocated to a ResourceClaim: [{request, driver, pool, device}]."""
    return ((((claim.get('status') or {}).get('allocation') or {}).get('devices') or {}).get('results')) or []


def exclusive_gpus(claim):
    """The devices of the NVIDIA DRA driver allocated to a ResourceClaim other than with admin access (the monitoring
    view of the node agents' claims, which keeps the devices from no one): [{request, driver, pool, device}]."""
    return [result for result in allocation_results(claim)
            if result.get('driver') == DRIVER and not result.get('adminAccess')]


def holds_gpus(claim):
    """Whether a ResourceClaim was allocated devices of the NVIDIA DRA driver, other than with admin access: a claim
    of the node agents (GFD, DCGM) neither makes its pod a GPU workload to evict nor counts as allocating devices,
    as the GPU Operator's PodHasNVIDIAGPUClaim without admin access counts them."""
    return bool(exclusive_gpus(claim))


def asks_for_gpus(claim):
    """Whether a ResourceClaim asks for a device of the NVIDIA DeviceClasses (CLASSES)."""
    requests = (((claim.get('spec') or {}).get('devices') or {}).get('requests')) or []
    return any(choice.get('deviceClassName') in CLASSES for request in requests
               for choice in [request.get('exactly') or {}] + (request.get('firstAvailable') or []))


def claim_names(pod):
    """The names of the ResourceClaims a pod uses (in its namespace): named ones, and those generated from its
    templates (its status)."""
    names = set(ref.get('resourceClaimName') for ref in (pod.get('spec') or {}).get('resourceClaims') or [])
    names.update(status.get('resourceClaimName') for status in
                 (pod.get('status') or {}).get('resourceClaimStatuses') or [])
    names.discard(None)
    return names


def claim_key(claim):
    metadata = claim.get('metadata') or {}
    return '%s/%s' % (metadata.get('namespace'), metadata.get('name'))


def uses_any(pod, keys):
    """Whether the pod uses one of the claims keys names (namespace/name)."""
    namespace = (pod.get('metadata') or {}).get('namespace')
    return any('%s/%s' % (namespace, name) in keys for name in claim_names(pod))


def claim_holders(claims, skip_namespace=None):
    """The pods holding devices of the NVIDIA DRA driver through ResourceClaims (admin access too: their claims are
    unprepared by the kubelet plugin as well), each as 'pod <namespace>/<name> on node <nodes> (claim <name>)',
    sorted, once; the claims of skip_namespace (the operand namespace, whose pods go with it) left out."""
    found = set()
    for claim in claims or []:
        metadata = claim.get('metadata') or {}
        if metadata.get('namespace') == skip_namespace:
            continue
        nodes = sorted(set(result.get('pool') for result in allocation_results(claim)
                           if result.get('driver') == DRIVER and result.get('pool')))
        if not nodes:
            continue
        for holder in (claim.get('status') or {}).get('reservedFor') or []:
            if holder.get('resource') == 'pods':
                found.add('pod %s/%s on node %s (claim %s)' % (
                    metadata.get('namespace'), holder.get('name'), ', '.join(nodes), metadata.get('name')))
    return sorted(found)
