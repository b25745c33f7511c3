# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where each GPU node stands in a driver upgrade, and which nodes the next wave takes: pure functions.

The state is the GPU Operator's (k8s-operator-libs pkg/upgrade): the node label nvidia.com/gpu-driver-upgrade-state
with its values, the skip label and the annotation recording that a node was unschedulable before the upgrade.
Nothing is kept anywhere else, so a run that was interrupted resumes from what the nodes say.

A node under GPU remediation (remediation.state.under_remediation) is another owner's: the rollout leaves it alone,
as the GPU Operator leaves a node labelled to be skipped, whatever its upgrade state.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re

from ..nodes.facts import DEPLOY_LABEL_PREFIX, DRA_DRIVER, DRIVER_UPGRADE_STATE_LABEL
from ..operands.checks.allocatable import allocatable_count
from ..operands.checks.daemonsets import REVISION_HASH_LABEL, newest_revision_hash, outdated_revision_hashes
from ..operands.checks.objects import owned_by, pod_node
from ..operands.checks.pods import pod_is_ready
from ..remediation.state import under_remediation
from .configurations import IMPLICIT_DEFAULT, NEXT_OWNER_LABEL, OWNER_LABEL

STATE_LABEL = DRIVER_UPGRADE_STATE_LABEL
SKIP_LABEL = 'nvidia.com/gpu-driver-upgrade.skip'
INITIAL_STATE_ANNOTATION = 'nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable'
# Ours: why a node is upgrade-failed, so that status and a re-run can say it.
FAILURE_ANNOTATION = 'accelerators.gpu/driver-upgrade-failure'

UPGRADE_REQUIRED = 'upgrade-required'
CORDON_REQUIRED = 'cordon-required'
WAIT_FOR_JOBS_REQUIRED = 'wait-for-jobs-required'
POD_DELETION_REQUIRED = 'pod-deletion-required'
DRAIN_REQUIRED = 'drain-required'
POD_RESTART_REQUIRED = 'pod-restart-required'
VALIDATION_REQUIRED = 'validation-required'
UNCORDON_REQUIRED = 'uncordon-required'
UPGRADE_DONE = 'upgrade-done'
UPGRADE_FAILED = 'upgrade-failed'
# The states of a node taken by a rollout and not yet done, in the order a node passes them.
IN_PROGRESS = (CORDON_REQUIRED, WAIT_FOR_JOBS_REQUIRED, POD_DELETION_REQUIRED, DRAIN_REQUIRED, POD_RESTART_REQUIRED,
               VALIDATION_REQUIRED, UNCORDON_REQUIRED, UPGRADE_FAILED)
# Past these the node's new driver pod runs: what is left is validation and uncordon.
DRIVER_REPLACED = (VALIDATION_REQUIRED, UNCORDON_REQUIRED)

GPU_RESOURCES, MIG_RESOURCES = 'nvidia.com/gpu*', 'nvidia.com/mig-*'
_PERCENT_RE = re.compile(r'^(\d+)%$')


class BudgetError(ValueError):
    pass


def resolve_budget(max_unavailable, total):
    """How many of total GPU nodes may be without a working driver at once: a count, or a percentage of total
    rounded up as the GPU Operator scales it; at least one while there is a node, so that a rollout can move."""
    text = str(max_unavailable).strip()
    match = _PERCENT_RE.match(text)
    if match:
        value = int(math.ceil(int(match.group(1)) * total / 100.0))
    elif text.isdigit():
        value = int(text)
    else:
        raise BudgetError('max_unavailable %r is neither a count nor a percentage such as 25%%' % max_unavailable)
    return max(1, min(value, total)) if total else 0


def _gpus(node):
    return allocatable_count(node, GPU_RESOURCES) + allocatable_count(node, MIG_RESOURCES)


def _node_ready(node):
    for condition in (node.get('status') or {}).get('conditions') or []:
        if condition.get('type') == 'Ready':
            return condition.get('status') == 'True'
    return False


DRA_DEPLOY_LABEL = DEPLOY_LABEL_PREFIX + DRA_DRIVER


def runs_dra_driver(node):
    """Whether a node's GPUs come through the DRA driver (its ResourceSlices), not nvidia.com/gpu."""
    return ((node.get('metadata') or {}).get('labels') or {}).get(DRA_DEPLOY_LABEL) == 'true'


def node_driver_states(nodes, daemonsets, revisions, pods, dra_devices=None):
    """Per node, what its driver and upgrade state are: a list of dicts, sorted by node name.

    nodes: GPU nodes with a driver of this collection (Node objects); daemonsets: the managed driver DaemonSets;
    revisions: their ControllerRevisions; pods: their pods. A pod is outdated when its controller-revision-hash is not
    its DaemonSet's newest and its revision runs differently (outdated_revision_hashes); a DaemonSet whose controller
    has not yet processed its spec makes its pods 'unknown'.
    dra_devices: {node: devices its ResourceSlices publish}, the GPUs of a node in DRA mode (runs_dra_driver), which
    advertises no nvidia.com/gpu.
    """
    newest = {}
    for daemonset in daemonsets:
        meta, status = daemonset.get('metadata') or {}, daemonset.get('status') or {}
        observed = int(status.get('observedGeneration') or 0) >= int(meta.get('generation') or 0)
        own = [r for r in revisions if owned_by(r, daemonset)]
        revision = newest_revision_hash(own) if observed else None
        newest[meta.get('uid')] = (meta.get('name'), revision, outdated_revision_hashes(
            daemonset, own, [pod for pod in pods if owned_by(pod, daemonset)], revision) if revision else set())
    pods_by_node = {}
    for pod in pods:
        if pod_node(pod) and not (pod.get('metadata') or {}).get('deletionTimestamp'):
            pods_by_node.setdefault(pod_node(pod), []).append(pod)
    states = []
    for node in nodes:
        meta = node.get('metadata') or {}
        labels, annotations = meta.get('labels') or {}, meta.get('annotations') or {}
        entry = {
            'name': meta.get('name'),
            'state': labels.get(STATE_LABEL, ''),
            'skip': labels.get(SKIP_LABEL) == 'true',
            # Why the node is another owner's now, in words, or ''.
            'remediation': under_remediation(labels),
            'unschedulable': bool((node.get('spec') or {}).get('unschedulable')),
            'initially_unschedulable': annotations.get(INITIAL_STATE_ANNOTATION) == 'true',
            'failure': annotations.get(FAILURE_ANNOTATION, ''),
            'ready': _node_ready(node),
            'dra': runs_dra_driver(node),
            'gpus': (dra_devices or {}).get(meta.get('name'), 0) if runs_dra_driver(node) else _gpus(node),
            'pod': None, 'pod_uid': None, 'daemonset': None, 'driver_ready': False, 'outdated': False,
            'revision_known': True,
            # The driver configuration whose budget the node's rollout counts in, and the one it moves to.
            'configuration': labels.get(NEXT_OWNER_LABEL) or labels.get(OWNER_LABEL) or IMPLICIT_DEFAULT,
            'move_to': labels.get(NEXT_OWNER_LABEL) if labels.get(NEXT_OWNER_LABEL) not in (
                None, labels.get(OWNER_LABEL)) else None,
        }
        for pod in sorted(pods_by_node.get(entry['name'], []), key=lambda p: p['metadata']['name']):
            owner = [ref.get('uid') for ref in pod['metadata'].get('ownerReferences') or [] if ref.get('uid') in newest]
            if not owner:
                continue
            daemonset, revision, outdated_hashes = newest[owner[0]]
            entry.update(pod=pod['metadata']['name'], pod_uid=pod['metadata'].get('uid'), daemonset=daemonset,
                         driver_ready=pod_is_ready(pod), revision_known=revision is not None,
                         outdated=(pod['metadata'].get('labels') or {}).get(REVISION_HASH_LABEL) in outdated_hashes)
        # A node that moves to another configuration needs the rollout as a driver change does.
        entry['outdated'] = entry['outdated'] or entry['move_to'] is not None
        entry['available'] = entry['driver_ready'] and entry['gpus'] > 0
        states.append(entry)
    return sorted(states, key=lambda entry: entry['name'])


def _unavailable(entry):
    """Whether the node's GPUs serve no workload now: no working driver (a ready driver pod and allocatable GPUs), or
    under GPU remediation (cordoned and tainted), as the GPU Operator counts a cordoned node unavailable."""
    return not entry['available'] or bool(entry['remediation'])


def rollout_plan(states, max_parallel, max_unavailable):
    """The rollout as it stands, and its next wave.

    Nodes in progress (a state between cordon-required and uncordon-required, or upgrade-failed) are taken again
    first: a re-run resumes them. Then outdated nodes in name order, as many as the budget allows: at most
    max_parallel nodes in a wave (0: no limit), and at most max_unavailable GPU nodes without a working driver (a
    ready driver pod and allocatable GPUs) at once, counting those already so. Skipped nodes (skip label) keep their
    driver. Nodes under GPU remediation are left alone whatever their upgrade state ('remediation': outdated or in
    progress, they wait for their remediation to end); they count among the unavailable, not among those in
    progress. Returns a dict of node name lists and the wave; 'stuck' says why no node can start when some should.
    """
    total = len(states)
    budget = resolve_budget(max_unavailable, total)
    remediation = [s['name'] for s in states if s['remediation'] and (s['outdated'] or s['state'] in IN_PROGRESS)]
    in_progress = [s['name'] for s in states if s['state'] in IN_PROGRESS and not s['remediation']]
    skipped = [s['name'] for s in states if s['skip'] and s['outdated'] and s['name'] not in in_progress + remediation]
    waiting = [s['name'] for s in states
               if s['outdated'] and not s['skip'] and s['name'] not in in_progress + remediation]
    unavailable_elsewhere = [s['name'] for s in states if _unavailable(s) and s['name'] not in in_progress]
    room = budget - len(unavailable_elsewhere) - len(in_progress)
    parallel = max_parallel - len(in_progress) if max_parallel else len(waiting)
    starting = []
    for entry in states:
        if entry['name'] not in waiting or len(starting) >= parallel:
            continue
        # A node already without a working driver is counted among the unavailable: taking it costs nothing more.
        if not entry['available']:
            starting.append(entry['name'])
        elif room > 0:
            starting.append(entry['name'])
            room -= 1
    plan = {
        'total': total,
        'budget': budget,
        'outdated': [s['name'] for s in states if s['outdated']],
        'waiting': waiting,
        'in_progress': in_progress,
        'upgrade_failed': [s['name'] for s in states if s['state'] == UPGRADE_FAILED],
        'skipped_nodes': skipped,
        'remediation': remediation,
        'unavailable': [s['name'] for s in states if not s['available']],
        'unknown': [s['name'] for s in states if not s['revision_known']],
        'wave': in_progress + starting,
        'done': [s['name'] for s in states if not s['outdated'] and s['name'] not in in_progress + remediation],
        'stuck': '',
    }
    if waiting and not plan['wave']:
        plan['stuck'] = (
            'no node can start: %d GPU node(s) may be without a working driver at once (max_unavailable %s of %d) '
            'and %s already %s: %s' % (
                budget, max_unavailable, total, len(unavailable_elsewhere),
                'is' if len(unavailable_elsewhere) == 1 else 'are',
                ', '.join('%s (%s)' % (s['name'], s['remediation']) if s['remediation'] else s['name']
                          for s in states if s['name'] in unavailable_elsewhere)) if unavailable_elsewhere
            else 'max_parallel %s leaves no room' % max_parallel)
    return plan


def waves(states, max_parallel, max_unavailable):
    """The waves a whole rollout would take from here if every node came back at once (for check mode's plan):
    a list of node name lists."""
    budget = resolve_budget(max_unavailable, len(states))
    plan = rollout_plan(states, max_parallel, max_unavailable)
    down = len([s for s in states if _unavailable(s) and s['name'] not in plan['in_progress']])
    size = max(0, budget - down)
    if max_parallel:
        size = min(size, max_parallel)
    result = [plan['wave']] if plan['wave'] else []
    rest = [name for name in plan['waiting'] if name not in plan['wave']]
    while rest and size:
        result.append(rest[:size])
        rest = rest[size:]
    return result


def configuration_plan(states, budgets, max_parallel, max_unavailable):
    """rollout_plan() and waves() per driver configuration, each within its own budget (budgets: {configuration:
    {max_parallel, max_unavailable}}, the module's for a configuration not named there), merged: the lists and the
    waves joined, total and budget summed, stuck naming each configuration that cannot move. 'budgets' gives each
    configuration's {total, budget}."""
    groups = {}
    for entry in states:
        groups.setdefault(entry['configuration'], []).append(entry)
    merged = {'total': 0, 'budget': 0, 'wave': [], 'waves': [], 'budgets': {}, 'stuck': ''}
    stuck = []
    for name, members in sorted(groups.items()):
        policy = dict((key, value) for key, value in ((budgets or {}).get(name) or {}).items() if value is not None)
        parallel = policy.get('max_parallel', max_parallel)
        unavailable = policy.get('max_unavailable', max_unavailable)
        plan = rollout_plan(members, parallel, unavailable)
        for key, value in plan.items():
            if isinstance(value, list):
                merged[key] = sorted(merged.get(key, []) + value)
        merged['total'] += plan['total']
        merged['budget'] += plan['budget']
        merged['budgets'][name] = {'total': plan['total'], 'budget': plan['budget']}
        for index, wave in enumerate(waves(members, parallel, unavailable)):
            if index == len(merged['waves']):
                merged['waves'].append([])
            merged['waves'][index] = sorted(merged['waves'][index] + wave)
        if plan['stuck']:
            stuck.append('driver configuration %s: %s' % (name, plan['stuck']) if len(groups) > 1 else plan['stuck'])
    merged['stuck'] = '; '.join(stuck)
    return merged


def state_patch(name, state, annotations=None):
    """A merge patch of a node: its upgrade-state label (None removes it) and annotations (None removes one)."""
    metadata = {'labels': {STATE_LABEL: state}}
    if annotations:
        metadata['annotations'] = annotations
    return {'metadata': metadata}


def steps(options, state):
    """The steps a node at this state still needs before its new driver runs, in order."""
    if state in DRIVER_REPLACED:
        return []
    planned = []
    if options.get('cordon', True):
        planned.append(CORDON_REQUIRED)
    planned.append(POD_DELETION_REQUIRED)
    if (options.get('drain') or {}).get('enable'):
        planned.append(DRAIN_REQUIRED)
    planned.append(POD_RESTART_REQUIRED)
    return planned
