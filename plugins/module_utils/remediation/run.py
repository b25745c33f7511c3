# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_remediation module's reads and writes: plan a run, then take the wave's nodes through their states
(quarantine, drain, reset, reboot and reboot_wait, complete). The decisions are plan.py's and state.py's pure
functions; the Jobs are jobs.py's.

Each action acts on the nodes named to it that stand in its own state, one node after the other, and leaves each
where the nodes say it is: a run that stopped resumes from the state labels. From the quarantine to the reset or
reboot, and whenever held (rma, failed), a node is cordoned and tainted; when its GPUs are back (validation-required)
the taint comes off and the cordon stays (state.py says why); complete returns it or sends it on.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ..k8s.errors import APIError, TaskError
from ..operands.checks.jobs import job_state
from ..operands.checks.pods import pod_is_ready
from ..operands.validation import KEY_ANNOTATION, NODE_ANNOTATION, check_label_selector, validation_plan
from ..upgrade.gpu_workload_eviction import eviction_plan, evict_until_gone
from ..health.read import read_slices
from ..health.records import MIG_PREFIX, dra_gpus, gpu_counts, in_dra_mode
from ..nodes.facts import DEPLOY_LABEL_PREFIX
from ..nodes.selection import daemonset_schedules_on
from . import jobs, plan as planning, state

GPU_RESOURCE = 'nvidia.com/gpu'
SETTINGS = ('max_parallel', 'max_faulty_percent', 'max_attempts', 'attempt_window', 'opt_out_label', 'nodes')
# The states in which a node is cordoned and carries the quarantine taint.
QUARANTINED = (state.DRAIN_REQUIRED, state.RESET_REQUIRED, state.REBOOT_REQUIRED, state.RMA, state.FAILED)
JOBS = '/apis/batch/v1/namespaces/%s/jobs'


def validation_key(record):
    """The key of a node's validation Job for its last attempt (action and start), so that each attempt is validated
    anew and a resumed run finds the Job of this one; 'released' for a node an admin released without attempts."""
    attempts = record.get('attempts') or []
    if not attempts:
        return 'released-%s' % record.get('since', '')
    return '%s-%s' % (attempts[-1].get('action'), attempts[-1].get('started'))


def validation_failed(record, why, now):
    """The record with its last attempt marked failed by the validation that followed it."""
    attempts = [dict(attempt) for attempt in record.get('attempts') or []]
    if attempts:
        attempts[-1].update(result=state.ATTEMPT_FAILED, message=why)
    return dict(record, attempts=attempts, failure=why, updated=now)


def node_validation_plan(validation_jobs, keys):
    """The common role's validation plan (validation.validation_plan) of the nodes of keys ({node: key}) alone: the
    Jobs of the check's other nodes are theirs to keep, not stale (a node validated by an earlier run keeps its Job
    and its pod)."""
    mine = [job for job in validation_jobs
            if (job['metadata'].get('annotations') or {}).get(NODE_ANNOTATION) in keys]
    return validation_plan(mine, sorted(keys), keys)


def gpus_back(node, slices=()):
    """Why the node's GPUs are not all back, or '': allocatable equal to capacity (> 0), counting nvidia.com/gpu and
    the MIG devices of the mixed strategy; on a node in DRA mode, the GPUs its ResourceSlices (slices) publish equal
    to GPU feature discovery's count."""
    counts = gpu_counts(node, dra_gpus(slices))
    if counts['capacity'] and counts['allocatable'] == counts['capacity']:
        return ''
    if in_dra_mode(node):
        return 'the DRA driver publishes %d of the %d GPUs GPU feature discovery counts' % (
            counts['allocatable'], counts['capacity'])
    mig = any(key.startswith(MIG_PREFIX) for key in ((node.get('status') or {}).get('capacity') or {}))
    return 'allocatable %s %d of capacity %d' % (
        'GPU devices (nvidia.com/gpu and MIG)' if mig else GPU_RESOURCE, counts['allocatable'], counts['capacity'])


def validation_words(node_name, key, validation_jobs):
    """Why the node has no succeeded validation Job of its key, or ''."""
    mine = [job for job in validation_jobs
            if (job['metadata'].get('annotations') or {}).get(NODE_ANNOTATION) == node_name
            and (job['metadata'].get('annotations') or {}).get(KEY_ANNOTATION) == key]
    results = [job_state(job, ()) for job in mine]
    if any(result['result'] == 'succeeded' for result in results):
        return ''
    failed = [result['message'] for result in results if result['result'] == 'failed']
    return 'CUDA validation %s' % (failed[0] if failed else 'did not pass (no finished Job for attempt %s)' % key)


def daemonset_selects(daemonset, labels):
    """Whether a DaemonSet selects a node of these labels: its nodeSelector and required node affinity (the DRA
    nodes' GPU clients are DaemonSets of their own, by affinity on the DRA driver's deploy label). Not its taints: the
    quarantine taint is on the node while the clients are stopped by their labels."""
    return daemonset_schedules_on(((daemonset.get('spec') or {}).get('template') or {}).get('spec') or {},
                                  {'metadata': {'labels': labels}})


def gpu_client_daemonsets(daemonsets):
    """The DaemonSets kept on a node by a deploy label of the operands that hold its GPUs (plan.GPU_CLIENTS)."""
    keys = set(DEPLOY_LABEL_PREFIX + operand for operand in planning.GPU_CLIENTS)
    return [daemonset for daemonset in daemonsets
            if keys & set(((daemonset.get('spec') or {}).get('template') or {}).get('spec', {}).get('nodeSelector')
                          or {})]


def _owner(pod):
    for owner in (pod.get('metadata') or {}).get('ownerReferences') or []:
        if owner.get('kind') == 'DaemonSet':
            return owner.get('name')
    return None


def operands_not_settled(daemonsets, labels, pods):
    """Why the GPU clients' pods on a node (its pods) are not as its labels say: a pod of a DaemonSet that no longer
    selects the node still there, or one that selects it without a ready pod; '' when settled."""
    clients = gpu_client_daemonsets(daemonsets)
    by_owner = {}
    for pod in pods:
        by_owner.setdefault(_owner(pod), []).append(pod)
    words = []
    for daemonset in clients:
        name = daemonset['metadata']['name']
        mine = by_owner.get(name, [])
        if not daemonset_selects(daemonset, labels):
            if mine:
                words.append('%s still runs (%s)' % (name, ', '.join(p['metadata']['name'] for p in mine)))
        elif not [pod for pod in mine if pod_is_ready(pod) and not pod['metadata'].get('deletionTimestamp')]:
            words.append('%s not ready yet' % name)
    return '; '.join(words)


class Remediation(object):
    """One module run's view of the remediation of one cluster, over a ClusterAPI."""

    def __init__(self, module, api, clock=time.monotonic, sleep=time.sleep, wall=time.time):
        self.params = module.params
        self.check_mode = module.check_mode
        self.api = api
        self.clock, self.sleep, self.wall = clock, sleep, wall
        self.namespace = self.params['namespace']
        self.changed = False

    def settings(self):
        return dict([(key, self.params[key]) for key in SETTINGS], now=self.wall())

    # -- writes --------------------------------------------------------------------------------------------
    def move(self, node, target, record=None, labels=None):
        """Write the node's state (and record, and labels): a node entering a QUARANTINED state is cordoned and
        tainted if it is not; one entering validation-required loses the taint, its cordon staying."""
        body = state.state_patch(target, record)
        body['metadata']['labels'].update(labels or {})
        spec = node.get('spec') or {}
        taints = spec.get('taints') or []
        tainted = any(taint.get('key') == state.TAINT_KEY for taint in taints)
        # The taint's value says what the node is held for: its action, or rma once it goes for RMA.
        action = 'rma' if target == state.RMA else (record or state.read_record(node)).get('action', 'rma')
        if target in QUARANTINED and not (spec.get('unschedulable') and state.quarantine_taint(action) in taints):
            body.update(state.quarantine_patch(node, action))
        elif target == state.VALIDATION_REQUIRED and tainted:
            body.update(state.untaint_patch(node))
        self.changed = True
        return self.api.patch_node(node['metadata']['name'], body)

    # -- plan ----------------------------------------------------------------------------------------------
    def plan(self):
        """remediation_plan over the cluster's nodes and the health records given, with its printable lines; the
        nodes of the wave get their target state and record written (not in check mode, nor when the breaker
        trips)."""
        nodes = list(self.api.list_nodes(self.params['label_selector']))
        try:
            plan = planning.remediation_plan(self.params['cluster'], self.params['health'], nodes, self.settings())
        except planning.SettingsError as error:
            raise TaskError(str(error))
        plan['lines'] = planning.plan_lines(plan)
        if self.check_mode or plan['breaker']:
            return plan
        by_name = dict((node['metadata']['name'], node) for node in nodes)
        for entry in plan['nodes']:
            changed = entry['record'] is not None or entry['target_state'] != entry['state']
            if entry['node'] in plan['wave'] and changed:
                self.move(by_name[entry['node']], entry['target_state'], entry['record'])
        return plan

    # -- the steps -----------------------------------------------------------------------------------------
    def step(self, wanted, act, names):
        """act(node, record) on each node of names standing in one of the states wanted; then the report."""
        failures = []
        for name in names:
            node = self.api.read_node(name)
            if state.node_state(node) in wanted and not self.check_mode:
                failure = act(node, state.read_record(node))
                if failure:
                    failures.append(dict(node=name, state=state.node_state(self.api.read_node(name)), reason=failure))
        return self.report(names, failures)

    def report(self, names, failures=()):
        """Each node's state, record (GPU UUIDs, PCI bus IDs, XIDs, attempts), validation key and the validation
        plan of those to validate (and those in DRA mode), the nodes waiting for the site's reboot tasks, and the
        failures of this action."""
        nodes, keys, claimed, reboots = [], {}, [], []
        for name in names:
            node = self.api.read_node(name)
            record = state.read_record(node)
            current = state.node_state(node)
            if state.reboot_to_request(node):
                reboots.append(name)
            nodes.append({'cluster': self.params['cluster'], 'node': name, 'state': current,
                          'gpu_uuids': record.get('gpu_uuids') or [], 'pci_bus_ids': record.get('pci_bus_ids') or [],
                          'xids': record.get('xids') or [], 'action': record.get('action'),
                          'attempts': record.get('attempts') or [], 'reason': record.get('reason', '')})
            if current == state.VALIDATION_REQUIRED:
                keys[name] = validation_key(record)
                if in_dra_mode(node):
                    claimed.append(name)
        validation_jobs = self.api.list_jobs(
            self.namespace, check_label_selector(self.params['validation_check'])) if keys else []
        return {'nodes': nodes, 'states': dict((entry['node'], entry['state']) for entry in nodes),
                'validation_keys': keys, 'validation_plan': node_validation_plan(validation_jobs, keys),
                'validation_claim_nodes': claimed, 'reboot_nodes': reboots, 'failures': list(failures)}

    def quarantine(self, node, record):
        self.move(node, state.next_state(state.QUARANTINE_REQUIRED, record.get('action', 'rma')))

    def drain(self, node, record):
        """Evict the node's GPU workloads through the Eviction API, PodDisruptionBudgets held; one still there at the
        timeout leaves the node drain-required, which a later run resumes, and is a failure of this run."""
        name, eviction = node['metadata']['name'], self.params['eviction']
        outcome = evict_until_gone(self.api, [name], eviction_plan, eviction['timeout'], self.params['poll_interval'],
                                   False, self.clock, self.sleep, skip_label=eviction['skip_label'], dra_claims=True)
        if outcome['evicted']:
            self.changed = True
        if outcome['left']:
            return 'GPU workloads not gone within %d s: %s' % (eviction['timeout'], outcome['left'][name])
        self.move(node, state.next_state(state.DRAIN_REQUIRED, record.get('action', 'rma')))
        return ''

    def reset(self, node, record):
        """Stop the operands that hold the GPUs (their deploy labels), reset the record's GPUs with the reset Job,
        read its outcome, put the labels back; a reset that worked takes the taint off and waits for the operands
        (the device plugin among them) to be back; a refused one is failed, another failure escalates."""
        name = node['metadata']['name']
        for paused in planning.operands_to_stop(node['metadata'].get('labels') or {}) or [{}]:
            if paused:
                node = self.move(node, state.RESET_REQUIRED, labels=paused)
            self.wait_operands(name, 'the operands holding the GPUs to stop')
        attempt = state.open_attempt(record)
        if not (attempt and attempt.get('action') == 'reset'):
            record = state.start_attempt(record, 'reset', self.wall())
            node = self.move(node, state.RESET_REQUIRED, record)
            self.start_job(jobs.reset_job(name, record.get('gpu_uuids') or [], self.namespace,
                                          self.params['image'], self.params['service_account'],
                                          self.params['driver_root'], self.params['wait_timeout']))
        succeeded, message = self.wait_job(jobs.job_name('reset', name))
        result, why = jobs.reset_outcome(succeeded, message)
        record = state.finish_attempt(record, result, self.wall(), why)
        restore = planning.operands_to_restore(self.api.read_node(name)['metadata'].get('labels') or {})
        node = self.api.read_node(name)
        if result == state.SUCCEEDED:
            self.move(node, state.VALIDATION_REQUIRED, record, labels=restore)
            return self.wait_operands(name, 'the operands back after the reset', fail=False)
        target = state.FAILED if result == state.REFUSED else planning.after_failed_attempt(record, self.settings())
        self.move(node, target, record, labels=restore)
        return 'reset of %s %s: %s' % (', '.join(record.get('gpu_uuids') or []), result, why)

    def reboot(self, node, record):
        """Start the node's reboot: its attempt recorded with the boot ID before it, then the reboot Job created and
        the reboot marked asked of the node. With reboot_by=tasks the attempt alone: the role runs the site's reboot
        tasks for the nodes of reboot_nodes. reboot_wait waits for the node. A stopped run's open reboot is not started
        again, nor asked of the node again once asked."""
        attempt = state.open_reboot(record)
        if not attempt:
            before = ((node.get('status') or {}).get('nodeInfo') or {}).get('bootID')
            record = state.start_attempt(record, 'reboot', self.wall(), before)
            node = self.move(node, state.REBOOT_REQUIRED, record)
        if self.params['reboot_by'] == 'job' and not (attempt or {}).get('requested'):
            name = node['metadata']['name']
            self.start_job(jobs.reboot_job(name, self.namespace, self.params['image'],
                                           self.params['service_account'], self.params['wait_timeout']))
            self.move(node, state.REBOOT_REQUIRED, state.reboot_requested(record, self.wall(), 'job'))

    def reboot_wait(self, node, record):
        """Wait for a new boot ID and Ready of a node whose reboot was started; then the taint comes off and the
        operands are waited for, or, not back, the node goes to a reboot again or to RMA. A reboot not yet asked of
        the node was asked by the site's reboot tasks, which the role runs between reboot and this action. A node
        whose reboot has not started is left to reboot."""
        attempt = state.open_reboot(record)
        if not attempt:
            return ''
        name = node['metadata']['name']
        if attempt.get('requested') is None:
            record = state.reboot_requested(record, self.wall(), 'tasks')
            node = self.move(node, state.REBOOT_REQUIRED, record)
        why = self.wait_boot(name, attempt.get('boot_id'))
        record = state.finish_attempt(record, state.ATTEMPT_FAILED if why else state.SUCCEEDED, self.wall(), why)
        node = self.api.read_node(name)
        if why:
            self.move(node, planning.after_failed_attempt(record, self.settings()), record)
            return 'reboot: %s' % why
        self.move(node, state.VALIDATION_REQUIRED, record)
        return self.wait_operands(name, 'the operands back after the reboot', fail=False)

    def complete(self, node, record):
        """A node whose GPUs are all allocatable and whose CUDA validation of this attempt passed is untainted,
        uncordoned unless it was cordoned before, and done; another goes to a reboot or to RMA (after_failed_attempt)."""
        name = node['metadata']['name']
        if state.node_state(node) == state.VALIDATION_REQUIRED:
            validation_jobs = self.api.list_jobs(self.namespace, check_label_selector(self.params['validation_check']))
            slices = read_slices(self.api) if in_dra_mode(node) else []
            why = gpus_back(node, slices) or validation_words(name, validation_key(record), validation_jobs)
            if why:
                record = validation_failed(record, why, self.wall())
                self.move(node, planning.after_failed_attempt(record, self.settings()), record)
                return 'not validated: %s' % why
            node = self.move(node, state.UNCORDON_REQUIRED)
        body = state.release_patch(node, record)
        body['metadata'] = state.state_patch(state.DONE)['metadata']
        self.api.patch_node(name, body)
        self.changed = True
        return ''

    # -- Jobs and waits ------------------------------------------------------------------------------------
    def start_job(self, job):
        """Create the Job, an earlier one of its name (an earlier attempt's) deleted first."""
        path = '%s/%s' % (JOBS % self.namespace, job['metadata']['name'])
        if self.api.read_optional(path)[0] is not None:
            try:
                self.api.delete_object(path)
            except APIError as error:
                if error.status != 404:
                    raise
            self.wait('Job %s deleted' % job['metadata']['name'], lambda: '' if self.api.read_optional(path)[0] is None
                      else 'still there')
        self.api.apply_object(path, job)
        self.changed = True

    def wait_job(self, name):
        """(succeeded, message) of the Job once it finished; (False, why) at the timeout."""
        path = '%s/%s' % (JOBS % self.namespace, name)
        found = {}

        def finished():
            job = self.api.read_optional(path)[0]
            if job is None:
                return 'the Job is gone'
            pods = self.api.list_pods(self.namespace, 'job-name=%s' % name)
            found['state'] = job_state(job, pods)
            return '' if found['state']['result'] != 'running' else 'running'
        why = self.wait('Job %s finished' % name, finished, fail=False)
        if why:
            return False, 'Job %s: %s' % (name, why)
        return found['state']['result'] == 'succeeded', found['state']['message']

    def wait_boot(self, name, before):
        """'' once the node reports a boot ID other than before and is Ready, else why not at the timeout."""
        def booted():
            node = self.api.read_node(name)
            status = node.get('status') or {}
            if (status.get('nodeInfo') or {}).get('bootID') in (None, '', before):
                return 'no new boot ID (still %s)' % before
            ready = [c for c in status.get('conditions') or [] if c.get('type') == 'Ready']
            return '' if ready and ready[0].get('status') == 'True' else 'booted, not Ready yet'
        return self.wait('node %s back with a new boot ID' % name, booted, fail=False)

    def wait_operands(self, name, what, fail=True):
        """Wait until the GPU clients' pods on the node are as its deploy labels say (operands_not_settled)."""
        daemonsets = self.api.list_daemonsets(self.namespace)

        def settled():
            labels = self.api.read_node(name)['metadata'].get('labels') or {}
            pods = [pod for pod in self.api.list_node_pods(name)
                    if pod['metadata'].get('namespace') == self.namespace]
            return operands_not_settled(daemonsets, labels, pods)
        return self.wait('%s on node %s' % (what, name), settled, fail=fail)

    def wait(self, what, check, fail=True):
        """Poll check() (why not yet, '' when done) until '' or wait_timeout: then a TaskError, or (fail=False) the
        words of why."""
        deadline = self.clock() + self.params['wait_timeout']
        while True:
            why = check()
            if not why:
                return ''
            if self.clock() >= deadline:
                words = '%s: not within %d s: %s' % (what, self.params['wait_timeout'], why)
                if fail:
                    raise TaskError(words)
                return words
            self.sleep(self.params['poll_interval'])


STEPS = {
    'quarantine': ((state.QUARANTINE_REQUIRED,), Remediation.quarantine),
    'drain': ((state.DRAIN_REQUIRED,), Remediation.drain),
    'reset': ((state.RESET_REQUIRED,), Remediation.reset),
    'reboot': ((state.REBOOT_REQUIRED,), Remediation.reboot),
    'reboot_wait': ((state.REBOOT_REQUIRED,), Remediation.reboot_wait),
    'complete': ((state.VALIDATION_REQUIRED, state.UNCORDON_REQUIRED), Remediation.complete),
}


def run(module, api):
    remediation = Remediation(module, api)
    action = module.params['action']
    if action == 'plan':
        result = remediation.plan()
    else:
        wanted, act = STEPS[action]
        result = remediation.step(wanted, lambda node, record: act(remediation, node, record), module.params['nodes'])
    result['changed'] = remediation.changed
    return result
