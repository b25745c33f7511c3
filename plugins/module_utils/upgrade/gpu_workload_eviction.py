# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which pods of a node to evict before it goes down for an upgrade: the GPU workloads, as the GPU Operator's
upgrade controller chooses them (k8s-operator-libs pkg/upgrade: pods requesting nvidia.com/gpu*, pods labelled
nvidia.com/gpu-driver-upgrade-drain.skip=true left alone), and pods using ResourceClaims allocated GPUs of the NVIDIA
DRA driver, and which PodDisruptionBudgets hold an eviction back.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import time

from ..dra import API as RESOURCE_API, claim_key, holds_gpus, uses_any
from ..k8s.errors import APIError, TaskError
from ..nodes.selection import selector_matches
from ..operands.waiter import Lost

SKIP_LABEL = 'nvidia.com/gpu-driver-upgrade-drain.skip'
# MIG devices under the mixed strategy are GPUs too (the GPU Operator's gpuPodSpecFilter: nvidia.com/gpu*, nvidia.com/mig-*).
GPU_RESOURCE_PREFIXES = ('nvidia.com/gpu', 'nvidia.com/mig-')
MIRROR_ANNOTATION = 'kubernetes.io/config.mirror'
FINISHED_PHASES = ('Succeeded', 'Failed')


def pod_key(pod):
    metadata = pod.get('metadata') or {}
    return '%s/%s' % (metadata.get('namespace'), metadata.get('name'))


def _is_zero(value):
    return str(value).strip() in ('0', '0.0', '')


def gpu_resources(pod):
    """Sorted names of the nvidia.com/gpu* and nvidia.com/mig-* resources (nvidia.com/gpu, nvidia.com/gpu.shared,
    nvidia.com/mig-1g.10gb, ...) any container or init container of the pod requests or limits to a non-zero amount."""
    spec = pod.get('spec') or {}
    names = set()
    for container in (spec.get('initContainers') or []) + (spec.get('containers') or []):
        resources = container.get('resources') or {}
        for kind in ('requests', 'limits'):
            for name, value in (resources.get(kind) or {}).items():
                if name.startswith(GPU_RESOURCE_PREFIXES) and not _is_zero(value):
                    names.add(name)
    return sorted(names)


def _owner_kinds(pod):
    return [owner.get('kind') for owner in (pod.get('metadata') or {}).get('ownerReferences') or []]


def eviction_plan(pods, skip_label=SKIP_LABEL, gpu_claims=frozenset()):
    """The GPU workloads among a node's pods: {evict: [pod], terminating: [key], spared: [{pod, reason}]}.

    Pods that have finished, or request no GPU and use no claim of gpu_claims (namespace/name of the ResourceClaims
    allocated GPUs of the NVIDIA DRA driver, read_gpu_claims), are not GPU workloads. A GPU workload is spared, with the reason,
    when labelled skip_label=true, owned by a DaemonSet (which would put it back at once) or a static pod (the
    kubelet's own). One being deleted already is terminating: waited for, not evicted again.
    """
    plan = {'evict': [], 'terminating': [], 'spared': []}
    for pod in sorted(pods, key=pod_key):
        metadata = pod.get('metadata') or {}
        if (pod.get('status') or {}).get('phase') in FINISHED_PHASES or not (
                gpu_resources(pod) or uses_any(pod, gpu_claims)):
            continue
        if (metadata.get('labels') or {}).get(skip_label) == 'true':
            reason = 'labelled %s=true' % skip_label
        elif 'DaemonSet' in _owner_kinds(pod):
            reason = 'a DaemonSet pod: its DaemonSet would put it back'
        elif MIRROR_ANNOTATION in (metadata.get('annotations') or {}):
            reason = 'a static pod of the kubelet'
        elif metadata.get('deletionTimestamp'):
            plan['terminating'].append(pod_key(pod))
            continue
        else:
            plan['evict'].append(pod)
            continue
        plan['spared'].append({'pod': pod_key(pod), 'reason': reason})
    return plan


def eviction(pod):
    """The policy/v1 Eviction of a pod, POSTed to its eviction subresource; only of the pod read (its uid)."""
    metadata = pod['metadata']
    body = {'apiVersion': 'policy/v1', 'kind': 'Eviction',
            'metadata': {'name': metadata['name'], 'namespace': metadata['namespace']}}
    if metadata.get('uid'):
        body['deleteOptions'] = {'preconditions': {'uid': metadata['uid']}}
    return body


def blocking_budgets(pod, budgets):
    """Names and status of the PodDisruptionBudgets of the pod's namespace that select it: what a 429 answer to its
    eviction refers to."""
    metadata = pod.get('metadata') or {}
    labels = metadata.get('labels') or {}
    found = []
    for budget in budgets:
        if (budget.get('metadata') or {}).get('namespace') != metadata.get('namespace'):
            continue
        if selector_matches((budget.get('spec') or {}).get('selector'), labels):
            status = budget.get('status') or {}
            found.append('%s (disruptionsAllowed %s, currentHealthy %s of desiredHealthy %s)' % (
                budget['metadata']['name'], status.get('disruptionsAllowed', '?'), status.get('currentHealthy', '?'),
                status.get('desiredHealthy', '?')))
    return sorted(found)


def drain_plan(pod_selector=''):
    """A plan function like eviction_plan for a drain: every pod of the node that a DaemonSet would not put back,
    not only GPU workloads (static pods and finished pods stay); with pod_selector ("key=value,..."), only the pods
    it selects, as kubectl drain --pod-selector."""
    wanted = dict(term.split('=', 1) for term in (pod_selector or '').split(',') if '=' in term)

    def plan(pods, skip_label=SKIP_LABEL):
        result = {'evict': [], 'terminating': [], 'spared': []}
        for pod in sorted(pods, key=pod_key):
            metadata = pod.get('metadata') or {}
            labels = metadata.get('labels') or {}
            if ((pod.get('status') or {}).get('phase') in FINISHED_PHASES or 'DaemonSet' in _owner_kinds(pod)
                    or MIRROR_ANNOTATION in (metadata.get('annotations') or {})
                    or any(labels.get(key) != value for key, value in wanted.items())):
                continue
            if labels.get(skip_label) == 'true':
                result['spared'].append({'pod': pod_key(pod), 'reason': 'labelled %s=true' % skip_label})
            elif metadata.get('deletionTimestamp'):
                result['terminating'].append(pod_key(pod))
            else:
                result['evict'].append(pod)
        return result
    return plan


def _not_gone_message(blocked, waiting):
    parts = ['%s: %s' % (key, ('eviction held back by PodDisruptionBudget %s' % ', '.join(budgets)) if budgets
                         else 'eviction refused (429), no PodDisruptionBudget selects it now')
             for key, budgets in sorted(blocked.items())]
    if waiting:
        parts.append('evicted, still terminating: %s' % ', '.join(sorted(set(waiting))))
    return '; '.join(parts)


def evict_until_gone(api, nodes, plan_pods, timeout, poll_interval, check_mode=False, clock=time.monotonic,
                     sleep=time.sleep, skip_label=SKIP_LABEL, dra_claims=False):
    """Evict the pods plan_pods (eviction_plan, drain_plan(...)) chooses on each node and wait until they are gone.
    With dra_claims, each round first reads the ResourceClaims allocated GPUs of the NVIDIA DRA driver
    (read_gpu_claims) and gives them to plan_pods (eviction_plan's gpu_claims).

    An eviction the API server refuses with 429 (a PodDisruptionBudget allows no disruption now) is tried again
    every poll_interval. Returns evicted (pod keys), spared, blocked ({pod: budgets}), terminating, and left: by
    node, what is still there at the timeout ({} when every pod went); in check mode, after one dry-run round.
    """
    deadline = clock() + timeout
    evicted = set()
    lost = Lost(clock)
    while True:
        seen, outcome = lost.attempt(api, lambda: _evict_round(api, nodes, plan_pods, skip_label, evicted, dra_claims),
                                     deadline)
        if not seen:
            # The API server out of reach: what is left is unknown, not failed; try again, to the deadline.
            if clock() >= deadline:
                return {'evicted': sorted(evicted), 'spared': [], 'blocked': {}, 'terminating': [],
                        'left': dict((node, 'unknown%s' % lost.words()) for node in nodes)}
            sleep(poll_interval)
            continue
        result, left = outcome
        if check_mode or not left:
            return result
        if clock() >= deadline:
            result['left'] = dict((node, words + lost.words()) for node, words in left.items())
            return result
        sleep(poll_interval)


def _evict_round(api, nodes, plan_pods, skip_label, evicted, dra_claims):
    """One round of evict_until_gone: (its result without left, by node what is still there), evicted updated."""
    if dra_claims:
        plan_pods = functools.partial(plan_pods, gpu_claims=read_gpu_claims(api))
    by_node = dict((node, plan_pods(api.list_node_pods(node), skip_label)) for node in nodes)
    blocked, left = {}, {}
    for node, plan in by_node.items():
        node_blocked = {}
        for pod in plan['evict']:
            try:
                api.evict_pod(eviction(pod))
            except APIError as error:
                if error.status == 404:
                    continue
                if error.status != 429:
                    raise
                node_blocked[pod_key(pod)] = blocking_budgets(pod, api.list_pod_disruption_budgets(
                    pod['metadata']['namespace']))
                continue
            evicted.add(pod_key(pod))
        blocked.update(node_blocked)
        if plan['evict'] or plan['terminating']:
            waiting = [key for key in plan['terminating'] + [pod_key(pod) for pod in plan['evict']]
                       if key not in node_blocked]
            left[node] = _not_gone_message(node_blocked, waiting)
    result = {'evicted': sorted(evicted), 'spared': [s for p in by_node.values() for s in p['spared']],
              'blocked': blocked, 'terminating': [t for p in by_node.values() for t in p['terminating']],
              'left': {}}
    return result, left


def read_gpu_claims(api):
    """namespace/name of every ResourceClaim allocated GPUs of the NVIDIA DRA driver; none where the API server serves
    no resource.k8s.io/v1 (before Kubernetes 1.34)."""
    try:
        claims = api.list_items(RESOURCE_API + '/resourceclaims')
    except APIError as error:
        if error.status == 404:
            return frozenset()
        raise
    return frozenset(claim_key(claim) for claim in claims if holds_gpus(claim))


def run(module, api, clock=time.monotonic, sleep=time.sleep):
    """Evict the GPU workloads of the nodes and wait until they are gone, within the timeout; at the timeout the
    module fails naming each pod held back and its budgets."""
    params = module.params
    result = evict_until_gone(api, params['nodes'], eviction_plan, params['timeout'], params['poll_interval'],
                              module.check_mode, clock, sleep, params['skip_label'], dra_claims=True)
    left = result.pop('left')
    result['changed'] = bool(result['evicted'])
    if left:
        raise TaskError('GPU workloads of %s not gone within %d s: %s' % (
            ', '.join(params['nodes']), params['timeout'], '; '.join(left[node] for node in sorted(left))), **result)
    return result
