# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver_upgrade module's reads and writes: plan a rollout, move a wave of nodes to their new driver,
complete (or fail) them after validation. The decisions are driver_upgrade's pure functions."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from .. import dra
from ..k8s.errors import APIError, TaskError
from ..operands.checks.jobs import job_state
from ..operands.checks.pods import pod_is_ready, pod_problems
from ..operands.validation import KEY_ANNOTATION, NODE_ANNOTATION, check_label_selector
from ..operands.waiter import Lost
from ..upgrade.gpu_workload_eviction import drain_plan, eviction_plan, evict_until_gone
from . import upgrade_plan
from .configurations import NEXT_OWNER_LABEL, OWNER_LABEL
from .daemonsets import MANAGED_DRIVERS_SELECTOR

MANAGED_SELECTOR = 'app.kubernetes.io/managed-by=accelerators.gpu'
DEVICE_PLUGIN = 'nvidia-device-plugin'
DRIVER_COMPONENT = 'nvidia-driver'


class Rollout(object):
    """One module run's view of the rollout, over a ClusterAPI."""

    def __init__(self, module, api, clock=time.monotonic, sleep=time.sleep):
        self.params = module.params
        self.check_mode = module.check_mode
        self.api = api
        self.clock, self.sleep = clock, sleep
        self.namespace = self.params['namespace']
        self.changed = False

    # -- reads ---------------------------------------------------------------------------------------------
    def read_states(self):
        """The driver and upgrade state of every GPU node that runs (or ran) a driver of this collection."""
        daemonsets = self.api.list_daemonsets(self.namespace, MANAGED_DRIVERS_SELECTOR)
        revisions = self.api.list_revisions(self.namespace, MANAGED_DRIVERS_SELECTOR)
        pods = self.api.list_pods(self.namespace, MANAGED_DRIVERS_SELECTOR)
        served = set(pod['spec'].get('nodeName') for pod in pods)
        nodes = [node for node in self.api.list_nodes(self.params['label_selector'])
                 if node['metadata']['name'] in served
                 or (node['metadata'].get('labels') or {}).get(upgrade_plan.STATE_LABEL) in upgrade_plan.IN_PROGRESS]
        slices = (self.api.list_items(dra.API + '/resourceslices', field_selector='spec.driver=' + dra.DRIVER)
                  if any(upgrade_plan.runs_dra_driver(node) for node in nodes) else [])
        return upgrade_plan.node_driver_states(nodes, daemonsets, revisions, pods, dra.published_devices(slices))

    def settled_states(self):
        """read_states(), once every driver DaemonSet's controller has processed its spec (a DaemonSet updated a
        moment ago has no newest revision yet), for at most poll_interval x 15."""
        deadline = self.clock() + self.params['poll_interval'] * 15
        while True:
            states = self.read_states()
            if not [s for s in states if not s['revision_known']] or self.clock() >= deadline:
                return states
            self.sleep(self.params['poll_interval'])

    # -- writes --------------------------------------------------------------------------------------------
    def patch(self, name, body):
        self.api.patch_node(name, body)
        self.changed = True

    def set_state(self, entry, state, annotations=None):
        if entry['state'] != state or annotations:
            self.patch(entry['name'], upgrade_plan.state_patch(entry['name'], state, annotations))
            entry['state'] = state

    def fail_node(self, entry, reason):
        self.set_state(entry, upgrade_plan.UPGRADE_FAILED, {upgrade_plan.FAILURE_ANNOTATION: reason[:1000]})
        return {'node': entry['name'], 'state': upgrade_plan.UPGRADE_FAILED, 'reason': reason}

    # -- plan ----------------------------------------------------------------------------------------------
    def plan(self):
        states = self.settled_states()
        for entry in states:
            if entry['name'] in self.params['assume_outdated']:
                entry['outdated'] = True
        budgets = dict((entry['name'], entry.get('upgrade_policy')) for entry in self.params['configurations'])
        try:
            plan = upgrade_plan.configuration_plan(states, budgets, self.params['max_parallel'],
                                                   self.params['max_unavailable'])
        except upgrade_plan.BudgetError as error:
            raise TaskError(str(error))
        plan['steps'] = upgrade_plan.steps(self.params, '')
        if not self.check_mode:
            # The GPU Operator's label for a node waiting its turn; a node whose driver is current again is done.
            for entry in states:
                if entry['name'] in plan['waiting'] and entry['state'] in ('', upgrade_plan.UPGRADE_DONE):
                    self.set_state(entry, upgrade_plan.UPGRADE_REQUIRED)
                elif not entry['outdated'] and entry['state'] == upgrade_plan.UPGRADE_REQUIRED:
                    self.set_state(entry, upgrade_plan.UPGRADE_DONE)
                elif entry['remediation'] and entry['state'] == upgrade_plan.UPGRADE_REQUIRED:
                    # Not waiting for this rollout but for its remediation, which waits for a node labelled so (the
                    # remediation's other_owner): the label goes, and comes back once the remediation ended.
                    self.set_state(entry, None)
        plan['nodes'] = states
        return plan

    # -- upgrade -------------------------------------------------------------------------------------------
    def upgrade(self, names):
        """Take each node to validation-required: cordon, evict its GPU workloads (and drain), delete its outdated
        driver pod, wait for the new one and the node's operands and GPUs. A node that cannot get there is
        upgrade-failed, named with its state and cause; the others go on."""
        by_name = dict((s['name'], s) for s in self.read_states())
        unknown = [name for name in names if name not in by_name]
        if unknown:
            raise TaskError('no driver pod of this collection runs on node(s) %s' % ', '.join(unknown))
        # A node under remediation since the plan stays as it is (the plan leaves it out; this closes the gap).
        wave = [by_name[name] for name in names if not by_name[name]['remediation']]
        remediation = [name for name in names if by_name[name]['remediation']]
        failed = []
        moving = [entry for entry in wave if entry['state'] not in upgrade_plan.DRIVER_REPLACED]
        started = self.clock()
        if moving:
            for entry in moving:
                if entry['state'] in ('', upgrade_plan.UPGRADE_REQUIRED, upgrade_plan.UPGRADE_DONE):
                    # Recorded once, before the first step: a node cordoned before the upgrade stays cordoned.
                    self.set_state(entry, upgrade_plan.CORDON_REQUIRED, {
                        upgrade_plan.INITIAL_STATE_ANNOTATION: 'true' if entry['unschedulable'] else None,
                        upgrade_plan.FAILURE_ANNOTATION: None})
                elif entry['state'] == upgrade_plan.UPGRADE_FAILED:
                    self.set_state(entry, upgrade_plan.CORDON_REQUIRED, {upgrade_plan.FAILURE_ANNOTATION: None})
                if self.params['cordon'] and not entry['unschedulable']:
                    self.patch(entry['name'], {'spec': {'unschedulable': True}})
                    entry['unschedulable'] = True
            # Pods holding claims of the DRA driver's GPUs too, on the nodes in DRA mode.
            moving, failed = self._evict(moving, upgrade_plan.POD_DELETION_REQUIRED, eviction_plan, self.params['eviction'],
                                         'GPU workloads', dra_claims=True)
            drain = self.params['drain']
            if drain['enable']:
                moving, more = self._evict(moving, upgrade_plan.DRAIN_REQUIRED, drain_plan(drain['pod_selector']), drain,
                                           'pods (drain)')
                failed.extend(more)
            for entry in moving:
                self.set_state(entry, upgrade_plan.POD_RESTART_REQUIRED)
                if entry['move_to']:
                    # Its new configuration's DaemonSet takes it; the old one's controller deletes its driver pod.
                    self.patch(entry['name'], {'metadata': {'labels': {
                        OWNER_LABEL: entry['move_to'], NEXT_OWNER_LABEL: None}}})
                elif entry['outdated'] and entry['pod']:
                    self._delete_driver_pod(entry)
            failed.extend(self._wait_for_drivers(moving))
        ready = [entry for entry in wave if entry['state'] in upgrade_plan.DRIVER_REPLACED]
        return {
            'remediation': remediation,
            'ready': [entry['name'] for entry in ready],
            'validation_keys': dict((entry['name'], entry['pod_uid']) for entry in ready),
            'dra_nodes': [entry['name'] for entry in ready if entry['dra']],
            'failures': failed,
            'seconds': round(self.clock() - started, 1),
        }

    def _evict(self, wave, state, select, options, what, dra_claims=False):
        for entry in wave:
            self.set_state(entry, state)
        outcome = evict_until_gone(self.api, [entry['name'] for entry in wave], select, options['timeout'],
                                   self.params['poll_interval'], self.check_mode, self.clock, self.sleep,
                                   skip_label=self.params['eviction']['skip_label'], dra_claims=dra_claims)
        if outcome['evicted']:
            self.changed = True
        if not outcome['left']:
            return wave, []
        failed = [self.fail_node(entry, '%s not gone within %d s: %s' % (
            what, options['timeout'], outcome['left'][entry['name']])) for entry in wave if entry['name'] in outcome['left']]
        return [entry for entry in wave if entry['name'] not in outcome['left']], failed

    def _delete_driver_pod(self, entry):
        try:
            self.api.delete_pod(self.namespace, entry['pod'], entry['pod_uid'])
        except APIError as error:
            if error.status not in (404, 409):  # gone already, or replaced since it was read
                raise
        self.changed = True

    def _wait_for_drivers(self, wave):
        """Wait until each node of the wave runs a ready driver pod of the newest revision, its operands are ready
        and it advertises GPUs again; a driver pod that crash-loops or cannot pull fails its node at once (after
        grace seconds)."""
        deadline = self.clock() + self.params['wait_timeout']
        waiting = dict((entry['name'], entry) for entry in wave)
        failed, first_seen = [], {}
        lost = Lost(self.clock)
        while waiting:
            seen, reads = lost.attempt(self.api, lambda: (self.read_states(), self.api.list_pods(
                self.namespace, MANAGED_SELECTOR)), deadline)
            if not seen:
                # The API server out of reach: the nodes' state is unknown, not failed; wait on, to the deadline.
                if self.clock() >= deadline:
                    raise TaskError('the driver of node(s) %s not seen back within %d s%s; they stay %s, which a next '
                                    'run resumes from' % (', '.join(sorted(waiting)), self.params['wait_timeout'],
                                                          lost.words(), upgrade_plan.POD_RESTART_REQUIRED))
                self.sleep(self.params['poll_interval'])
                continue
            states = dict((s['name'], s) for s in reads[0])
            operand_pods = reads[1]
            now = self.clock()
            for name, entry in list(waiting.items()):
                state = states.get(name) or {}
                pods = [p for p in operand_pods if p['spec'].get('nodeName') == name
                        and not p['metadata'].get('deletionTimestamp')]
                why = _not_back(state, pods)
                if not why:
                    entry.update(pod=state['pod'], pod_uid=state['pod_uid'])
                    self.set_state(entry, upgrade_plan.VALIDATION_REQUIRED)
                    del waiting[name]
                    continue
                problems = [p for pod in pods for p in pod_problems(pod) if p['fatal']]
                key = tuple(sorted(p['text'] for p in problems))
                if problems:
                    first_seen.setdefault((name, key), now)
                    if now - first_seen[(name, key)] >= self.params['grace']:
                        failed.append(self.fail_node(entry, '; '.join(p['text'] for p in problems)))
                        del waiting[name]
                elif now >= deadline:
                    failed.append(self.fail_node(entry, 'not back within %d s: %s%s' % (
                        self.params['wait_timeout'], why, lost.words())))
                    del waiting[name]
            if waiting:
                self.sleep(self.params['poll_interval'])
        return failed

    # -- complete ------------------------------------------------------------------------------------------
    def complete(self, names):
        """Nodes whose new driver passed every check in validation_checks (a succeeded Job for its driver pod) are
        uncordoned, unless unschedulable before the upgrade, and upgrade-done; the others upgrade-failed."""
        by_name = dict((s['name'], s) for s in self.read_states())
        jobs = [job for check in self.params['validation_checks']
                for job in self.api.list_jobs(self.namespace, check_label_selector(check))]
        completed, failed = [], []
        for name in names:
            entry = by_name.get(name)
            if entry is None:
                raise TaskError('no driver pod of this collection runs on node %s' % name)
            if entry['state'] == upgrade_plan.UPGRADE_DONE or entry['remediation'] or (
                    entry['state'] not in upgrade_plan.IN_PROGRESS and not entry['outdated']):
                continue
            why = _not_validated(entry, jobs, self.params['validation_checks'])
            if why:
                failed.append(self.fail_node(entry, why))
                continue
            self.set_state(entry, upgrade_plan.UNCORDON_REQUIRED)
            if entry['unschedulable'] and not entry['initially_unschedulable'] and self.params['cordon']:
                self.patch(name, {'spec': {'unschedulable': None}})
            self.set_state(entry, upgrade_plan.UPGRADE_DONE, {upgrade_plan.INITIAL_STATE_ANNOTATION: None, upgrade_plan.FAILURE_ANNOTATION: None})
            completed.append(name)
        return {'completed': completed, 'failures': failed}


def _operand(pod):
    """Whether the pod is one of the operands that must be back on a node before its GPUs count as served again: a
    pod of a DaemonSet of the stack but the driver's. The pods of Jobs (validations, the remediation's reset and
    reboot) are not, whatever their labels: one that completed is never ready, and would hold the rollout."""
    labels = pod['metadata'].get('labels') or {}
    return labels.get('app.kubernetes.io/component') != DRIVER_COMPONENT and any(
        owner.get('kind') == 'DaemonSet' for owner in pod['metadata'].get('ownerReferences') or [])


def _not_back(state, pods):
    """Why a node's driver and operands are not back yet, or '' when they are."""
    if not state.get('pod'):
        return 'no driver pod yet'
    if state['outdated'] or not state['revision_known']:
        return 'driver pod %s is not of the newest revision yet' % state['pod']
    if not state['driver_ready']:
        return 'driver pod %s is not ready' % state['pod']
    unready = sorted(p['metadata']['name'] for p in pods if _operand(p) and not pod_is_ready(p))
    if unready:
        return 'operand pod(s) not ready: %s' % ', '.join(unready)
    plugin = [p for p in pods if (p['metadata'].get('labels') or {}).get('app.kubernetes.io/component') == DEVICE_PLUGIN]
    if plugin and not state['gpus']:
        return 'no allocatable GPU yet'
    return ''


def _not_validated(entry, jobs, checks):
    """Why the node's driver pod has not passed every check, or ''."""
    reasons = []
    for check in checks:
        mine = [job for job in jobs
                if (job['metadata'].get('labels') or {}).get('accelerators.gpu/validation') == check
                and (job['metadata'].get('annotations') or {}).get(NODE_ANNOTATION) == entry['name']]
        results = [job_state(job, ()) for job in mine
                   if (job['metadata'].get('annotations') or {}).get(KEY_ANNOTATION) == entry['pod_uid']]
        if any(result['result'] == 'succeeded' for result in results):
            continue
        failed = [result for result in results if result['result'] == 'failed']
        reasons.append('validation %s %s' % (check, failed[0]['message'] if failed
                                             else 'did not pass for driver pod %s' % entry['pod']))
    return '; '.join(reasons)


def run(module, api):
    rollout = Rollout(module, api)
    action = module.params['action']
    if action == 'plan':
        result = rollout.plan()
    elif action == 'upgrade':
        result = rollout.upgrade(module.params['nodes'])
    else:
        result = rollout.complete(module.params['nodes'])
    result['changed'] = rollout.changed
    return result
