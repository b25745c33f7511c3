# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-node status of the GPU stack, and the stack_status module's work: reading what it shows. Its table's
columns and lines are table's (status/table.py).

run() takes the module and a k8s.api.ClusterAPI (or any object with the same methods); the rest is pure.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ..dra import (
    API as RESOURCE_API, DRIVER as DRA_DRIVER, allocation_results, asks_for_gpus, claim_names, exclusive_gpus,
    published_devices)
from ..driver.changes import is_managed_driver, serves
from ..driver.configurations import NEXT_OWNER_LABEL, OWNER_LABEL
from ..driver.kernel_modules import daemonset_kernel_modules
from ..driver.upgrade_plan import FAILURE_ANNOTATION, STATE_LABEL
from ..health.read import read_health
from ..health.records import health_parts
from ..k8s.errors import APIError, TaskError
from ..k8s.views import NODE_FULL, POD_CELLS, POD_FULL, POD_READINESS
from ..nodes.facts import DRA_DRIVER as DRA_OPERAND, node_facts
from ..nodes.gfd_labels import driver_version, gpu_summary
from ..operands.checks.deployments import deployment_state
from ..operands.checks.objects import selector_string
from .table import fault_lines, selected_columns, table, under_way

COMPONENT = 'app.kubernetes.io/component'
DRIVER = 'nvidia-driver'
# The label by which the collection's driver DaemonSets select their pods: the DaemonSet's name (driver.plan).
DRIVER_APP_LABEL = 'app'
# Table columns of the operands, by the app.kubernetes.io/component of their pods.
DCGM_EXPORTER = 'nvidia-dcgm-exporter'
OPERANDS = (('driver', DRIVER), ('toolkit', 'nvidia-container-toolkit'),
            ('device_plugin', 'nvidia-device-plugin'), ('dcgm_exporter', DCGM_EXPORTER))
# GPU feature discovery may be switched off (gpu_feature_discovery_enabled), the MIG manager runs on MIG-capable
# nodes only, the MPS control daemon on nodes sharing their GPUs through MPS only: a node without their pods can be
# ready.
MPS_CONTROL_DAEMON = 'mps_control_daemon'
OPTIONAL_OPERANDS = (('gpu_feature_discovery', 'gpu-feature-discovery'), ('mig_manager', 'nvidia-mig-manager'),
                     (MPS_CONTROL_DAEMON, 'nvidia-mps-control-daemon'))
# How GPU feature discovery labels a node's sharing (from the device plugin's configuration of the node).
SHARING_LABEL = 'nvidia.com/gpu.sharing-strategy'
REPLICAS_LABEL = 'nvidia.com/gpu.replicas'
# The MIG manager's labels: the layout a node asks for and how applying it went.
MIG_CONFIG_LABEL = 'nvidia.com/mig.config'
MIG_STATE_LABEL = 'nvidia.com/mig.config.state'
# The DRA stack: the NVIDIA DRA driver's kubelet plugin on the nodes labelled for it instead of the device plugin; its
# ResourceSlices (one pool per node, named after it) and the claims the scheduler allocated from them.
DRA_PLUGIN = 'nvidia-dra-driver-kubelet-plugin'
# The DRA driver's ComputeDomain controller (dra_driver_compute_domains_enabled).
DRA_CONTROLLER = 'nvidia-dra-driver-controller'
CHECK_LABEL = 'accelerators.gpu/validation'
NODE_ANNOTATION = 'accelerators.gpu/node'
# What the status reads in the stack's namespace.
MANAGED_SELECTOR = 'app.kubernetes.io/managed-by=accelerators.gpu'
VALIDATION_SELECTOR = COMPONENT + '=gpu-validation'
DRIVER_DAEMONSETS_SELECTOR = MANAGED_SELECTOR + ',' + COMPONENT + '=' + DRIVER


def pod_readiness(pod):
    """'ready', or why not: the first waiting or terminated reason of its containers, else its phase. A pod read in
    ClusterAPI's POD_READINESS view has no container statuses: its Ready condition says it, else its reason (the
    Table's Status, as kubectl get pods shows it)."""
    status = pod.get('status') or {}
    containers = (status.get('initContainerStatuses') or []) + (status.get('containerStatuses') or [])
    main = status.get('containerStatuses') or []
    if main:
        ready = status.get('phase') == 'Running' and all(c.get('ready') for c in main)
    else:
        ready = any(condition.get('type') == 'Ready' and condition.get('status') == 'True'
                    for condition in status.get('conditions') or [])
    if ready:
        return 'ready'
    for container in containers:
        state = container.get('state') or {}
        reason = (state.get('waiting') or state.get('terminated') or {}).get('reason')
        if reason and reason != 'Completed':
            return reason
    return status.get('phase') or status.get('reason') or 'Unknown'


def _job_result(job):
    status = job.get('status') or {}
    if status.get('succeeded'):
        return 'ok'
    if status.get('failed'):
        return 'failed'
    return 'running'


def last_validations(jobs):
    """{node: {check: {result, time}}} of the kept validation Jobs, the newest per node and check."""
    found = {}
    for job in jobs:
        meta = job.get('metadata') or {}
        node = (meta.get('annotations') or {}).get(NODE_ANNOTATION)
        check = (meta.get('labels') or {}).get(CHECK_LABEL)
        if not node or not check:
            continue
        status = job.get('status') or {}
        when = status.get('completionTime') or status.get('startTime') or meta.get('creationTimestamp') or ''
        known = found.setdefault(node, {}).get(check)
        if known is None or when >= known['time']:
            found[node][check] = {'result': _job_result(job), 'time': when}
    return found


def in_dra_stack(fact):
    """Whether a GPU node (its nfd_labels facts) is labelled for the DRA kubelet plugin (nvidia.com/gpu.deploy.dra-driver)."""
    return (fact.get('deploy_labels') or {}).get(DRA_OPERAND) == 'true'


def dra_devices(slices, claims):
    """({node: devices its gpu.nvidia.com ResourceSlices publish}, {node: devices of them allocated to claims}); a
    device allocated with admin access only (the node agents' claims of all of them) counts as free: it is."""
    published, allocated = published_devices(slices), {}
    for claim in claims:
        for result in exclusive_gpus(claim):
            allocated[result.get('pool')] = allocated.get(result.get('pool'), 0) + 1
    return published, allocated


def pending_claims(claims, pods):
    """The claims asking for NVIDIA GPUs (dra.CLASSES) that the scheduler has not allocated, each with the pod using
    it and why the scheduler could not place that pod (its PodScheduled condition), for people: [{claim, pod,
    reason}]. pods: the pods of the claims' namespaces."""
    found = []
    for claim in claims:
        if allocation_results(claim) or not asks_for_gpus(claim):
            continue
        metadata = claim.get('metadata') or {}
        namespace = metadata.get('namespace')
        users = [pod for pod in pods if (pod.get('metadata') or {}).get('namespace') == namespace
                 and metadata.get('name') in claim_names(pod)]
        pod = users[0] if users else None
        conditions = ((pod or {}).get('status') or {}).get('conditions') or []
        reason = next((condition.get('message') or condition.get('reason') for condition in conditions
                       if condition.get('type') == 'PodScheduled' and condition.get('status') == 'False'), None)
        found.append({'claim': '%s/%s' % (namespace, metadata.get('name')),
                      'pod': '%s/%s' % (namespace, pod['metadata']['name']) if pod else None,
                      'reason': reason or ('not scheduled yet' if pod else 'no pod uses it')})
    return found


def node_rows(facts, nodes, pods, jobs, daemonsets=None, resource='nvidia.com/gpu', dra=None):
    """One row a GPU node: facts are nfd_labels' nodes, nodes the Node objects, pods the stack's pods, jobs its
    validation Jobs, daemonsets the stack's driver DaemonSets (all as dicts). An operand's field is 'ready', why it
    is not, or '-'.
    product, memory (MiB) and mig_capable come from GPU feature discovery's labels, else from NFD's PCI device
    labels (gpu_info says which: 'gfd', 'pci' or None).
    driver_configuration: the driver configuration owning the node (its nvidia.com/gpu-operator.driver.owner label),
    '<owner> -> <next>' while it waits to move, None when unlabelled.
    kernel_module_type, kernel_modules: the KERNEL_MODULE_TYPE of the node's driver DaemonSet (auto when unset) and the
    modules that gives (open, proprietary; None when auto and its image's tag names no version), None without one.
    without_driver_daemonset: the node is to get the stack's driver (nvidia.com/gpu.deploy.driver=true) and no driver
    DaemonSet is for the RHCOS build or kernel it runs, as after an upgrade started outside rhcos_upgrade.
    A node labelled nvidia.com/gpu.deploy.dra-driver=true is in DRA mode (stack 'dra'): its GPUs are the devices its
    ResourceSlices publish (dra: dra_devices()), dra_devices and dra_allocated; None on a device-plugin node."""
    published, allocated = dra or ({}, {})
    drivers = [daemonset for daemonset in daemonsets or [] if is_managed_driver(daemonset)]
    daemonsets_by_name = dict((daemonset['metadata']['name'], daemonset) for daemonset in drivers)
    objects = dict((node['metadata']['name'], node) for node in nodes)
    pods_by_node = {}
    for pod in pods:
        node = (pod.get('spec') or {}).get('nodeName')
        component = ((pod.get('metadata') or {}).get('labels') or {}).get(COMPONENT)
        if node and component:
            pods_by_node.setdefault(node, {})[component] = pod
    validations = last_validations(jobs)
    rows = []
    for fact in facts:
        if not fact.get('gpu_present'):
            continue
        name = fact['name']
        status = (objects.get(name) or {}).get('status') or {}
        on_node = pods_by_node.get(name, {})
        driver_label = (fact.get('deploy_labels') or {}).get('driver')
        metadata = (objects.get(name) or {}).get('metadata') or {}
        row = {
            'node': name,
            'gpus': fact.get('gpu_count') or int((status.get('capacity') or {}).get(resource, 0) or 0) or None,
            'os': fact.get('rhcos_version') or (fact.get('kernel') or {}).get('running'),
            # Under the mixed MIG strategy a node's GPUs are its nvidia.com/mig-<profile> devices too.
            'allocatable': sum(int(value or 0) for key, value in (status.get('allocatable') or {}).items()
                               if key == resource or key.startswith('nvidia.com/mig-')),
            'validation': dict((check, entry['result']) for check, entry in sorted(validations.get(name, {}).items())),
            'validated_at': max([entry['time'] for entry in validations.get(name, {}).values()] or [None]),
            # The GPU Operator's upgrade state, and why a node is upgrade-failed.
            'driver_upgrade': (metadata.get('labels') or {}).get(STATE_LABEL) or '-',
            'driver_upgrade_failure': (metadata.get('annotations') or {}).get(FAILURE_ANNOTATION),
        }
        labels = metadata.get('labels') or {}
        # The driver configuration that owns the node, and the one it moves to while a rollout has not moved it yet.
        row['driver_configuration'] = ' -> '.join(owner for owner in (
            labels.get(OWNER_LABEL), labels.get(NEXT_OWNER_LABEL) if labels.get(NEXT_OWNER_LABEL) != labels.get(
                OWNER_LABEL) else None) if owner) or None
        row.update(mig_config=labels.get(MIG_CONFIG_LABEL), mig_config_state=labels.get(MIG_STATE_LABEL))
        row.update(sharing_info(labels))
        in_dra = in_dra_stack(fact)
        row.update(stack='dra' if in_dra else 'device-plugin',
                   dra_driver=pod_readiness(on_node[DRA_PLUGIN]) if DRA_PLUGIN in on_node else '-',
                   dra_devices=published.get(name, 0) if in_dra else None,
                   dra_allocated=allocated.get(name, 0) if in_dra else None)
        summary = gpu_summary(labels)
        row.update(product=summary['product'], memory=summary['memory'], mig_capable=summary['mig_capable'],
                   gpu_info=summary['source'], driver_version=driver_version(labels))
        for column, component in OPERANDS + OPTIONAL_OPERANDS:
            row[column] = pod_readiness(on_node[component]) if component in on_node else '-'
        driver_pod = on_node.get(DRIVER)
        row['driver_daemonset'] = (((driver_pod.get('metadata') or {}).get('labels') or {}).get(DRIVER_APP_LABEL)
                                   if driver_pod
                                   else driver_label if driver_label not in (None, 'true') else '-')
        # The kernel modules of the node's driver DaemonSet: what its pods build (an outdated pod may still run others).
        serving = daemonsets_by_name.get(row['driver_daemonset'])
        row['kernel_module_type'], row['kernel_modules'] = (daemonset_kernel_modules(serving) if serving
                                                            else (None, None))
        if row['driver'] == '-' and driver_label == 'pre-installed':
            row['driver'] = 'host'
        # nfd_labels returns no label maps by default; the Node objects have them.
        with_labels = dict(fact, labels=metadata.get('labels') or {})
        row['without_driver_daemonset'] = (daemonsets is not None and driver_label == 'true'
                                           and not any(serves(daemonset, with_labels) for daemonset in drivers))
        row['ready'] = not not_ready_reasons(row)
        rows.append(row)
    return rows


def sharing_info(labels):
    """The sharing of a node's GPUs as GPU feature discovery labels it: {'sharing': none, time-slicing, mps or None
    without GFD's labels, 'sharing_replicas': pods per GPU or None}."""
    strategy = labels.get(SHARING_LABEL)
    replicas = labels.get(REPLICAS_LABEL) or ''
    return {'sharing': strategy, 'sharing_replicas': int(replicas) if replicas.isdigit() else None}


def not_ready_reasons(row):
    """Why the stack is not ready on a row's node, [] when it is: every operand ready (the driver may be the host's;
    GPU feature discovery and the MIG manager only where they have a pod), no driver upgrade under way or failed, a
    driver DaemonSet for the node, GPUs allocatable and every check of the last validation ok."""
    dra = row.get('stack') == 'dra'
    # In DRA mode the kubelet plugin stands where the device plugin does.
    required = [column for column, _component in OPERANDS if not (dra and column == 'device_plugin')]
    reasons = ['%s %s' % (column.replace('_', ' '), 'no pod' if row[column] == '-' else row[column])
               for column in required + (['dra_driver'] if dra else []) if row[column] not in ('ready', 'host')]
    reasons.extend('%s %s' % (column.replace('_', ' '), row[column])
                   for column, _component in OPTIONAL_OPERANDS if row[column] not in ('ready', '-'))
    if row.get('sharing') == 'mps' and row[MPS_CONTROL_DAEMON] == '-':
        reasons.append('mps control daemon no pod')
    if under_way(row, 'driver_upgrade'):
        failure = row.get('driver_upgrade_failure')
        reasons.append('driver upgrade: %s%s' % (row['driver_upgrade'], ' (%s)' % failure if failure else ''))
    if row['without_driver_daemonset']:
        reasons.append('no driver DaemonSet for %s' % row['os'])
    if dra and not row['dra_devices']:
        reasons.append('no GPUs published (ResourceSlice of %s)' % DRA_DRIVER)
    if not dra and row['allocatable'] <= 0:
        reasons.append('no allocatable GPUs')
    if not row['validation']:
        reasons.append('not validated')
    reasons.extend('validation %s %s' % item for item in row['validation'].items() if item[1] != 'ok')
    return reasons


def table_lines(rows, claims=(), columns=None):
    """The rows as aligned text lines under a header, for people, in the columns of columns (table's
    selected_columns(), else its default view), then a line for each node that needs something done: a failed
    driver upgrade with its cause, no driver DaemonSet for what the node runs; then a line for each GPU claim the
    scheduler could not allocate (pending_claims()), with its reason; then the GPU faults that ask for an action
    (table's fault_lines())."""
    lines = table(rows, [not_ready_reasons(row) for row in rows], columns)
    for row in rows:
        if row.get('driver_upgrade_failure'):
            lines.append('%s: driver upgrade-failed: %s' % (row['node'], row['driver_upgrade_failure']))
        if row.get('without_driver_daemonset'):
            lines.append('%s: no driver DaemonSet is for %s, which it runs (an upgrade outside '
                         'accelerators.gpu.rhcos_upgrade?): run accelerators.gpu.reconcile' % (row['node'], row['os']))
    for claim in claims:
        lines.append('claim %s%s pending: %s' % (claim['claim'], ' of pod %s' % claim['pod'] if claim['pod'] else '',
                                                 claim['reason']))
    return lines + fault_lines(rows)


def verdict(rows, controller=None):
    """The line under the table: whether the stack is ready on every GPU node (and the ComputeDomain controller, a
    deployment_state, available where there is one), else the nodes where it is not, or the controller."""
    if rows and all(row['ready'] for row in rows) and (controller is None or controller['ready']):
        return 'GPU stack ready on every GPU node'
    if rows and all(row['ready'] for row in rows):
        return 'GPU stack NOT ready: %s' % controller_line(controller)
    return 'GPU stack NOT ready on %s' % (', '.join(row['node'] for row in rows if not row['ready'])
                                          or 'any node: no GPU node found')


def controller_line(controller):
    """The ComputeDomain controller's Deployment (a deployment_state), in words."""
    return 'ComputeDomain controller %s/%s %s: %d of %d replicas available' % (
        controller['namespace'], controller['name'], 'available' if controller['ready'] else 'NOT available',
        controller['available'], controller['replicas'])


def status_node(node):
    """What node_rows() and the health records read of a Node (name, labels, the upgrade-failure annotation,
    capacity, allocatable; schedulability, taints and GPU conditions): a reader of thousands of full Nodes keeps only
    this of each."""
    metadata = node.get('metadata') or {}
    status = node.get('status') or {}
    annotations = metadata.get('annotations') or {}
    parts = health_parts(node)
    return {'metadata': {'name': metadata.get('name'), 'labels': metadata.get('labels') or {},
                         'annotations': dict((key, annotations[key]) for key in (FAILURE_ANNOTATION,)
                                             if key in annotations)},
            'spec': parts['spec'],
            'status': dict(parts['status'], capacity=status.get('capacity') or {},
                           allocatable=status.get('allocatable') or {})}


def read_gpu_nodes(api, label_selector=None):
    """(facts of the GPU nodes sorted by name, their status_node() parts, warnings about any node). Full Nodes,
    read once: the allocatable column is in no smaller view."""
    facts, nodes, warnings = [], [], []
    for node in api.list_nodes(label_selector, view=NODE_FULL):
        fact = node_facts(node)
        warnings.extend(fact['warnings'])
        if fact['gpu_present']:
            # node_rows() reads the labels of the Node.
            del fact['labels']
            facts.append(fact)
            nodes.append(status_node(node))
    facts.sort(key=lambda fact: fact['name'])
    return facts, nodes, warnings


def operand_pod_reads(daemonsets):
    """The reads of the operand pods, as (label selector, list_pods view, the labels node_rows() reads that every pod
    of the selector carries): the pods of each operand component, and of each driver DaemonSet (its selector; its
    name is the app label) as Table cells, which carry no labels, and then the driver pods of no DaemonSet read (left
    by one deleted with its dependents orphaned, or being deleted), in the view with their labels: few or none."""
    reads = [(MANAGED_SELECTOR + ',' + COMPONENT + '=' + component, POD_CELLS, {COMPONENT: component})
             for _column, component in OPERANDS + OPTIONAL_OPERANDS + (('dra_driver', DRA_PLUGIN),)
             if component != DRIVER]
    names = []
    for daemonset in sorted(daemonsets, key=lambda daemonset: daemonset['metadata']['name']):
        names.append(daemonset['metadata']['name'])
        selector = selector_string((daemonset.get('spec') or {}).get('selector'))
        reads.append((','.join(term for term in (DRIVER_DAEMONSETS_SELECTOR, selector) if term), POD_CELLS,
                      {COMPONENT: DRIVER, DRIVER_APP_LABEL: names[-1]}))
    orphans = '%s notin (%s)' % (DRIVER_APP_LABEL, ','.join(names)) if names else ''
    reads.append((','.join(term for term in (DRIVER_DAEMONSETS_SELECTOR, orphans) if term), POD_READINESS, {}))
    return reads


def labelled_pods(reads):
    """The pods of every read, each (reads: (labels, pods) pairs) with the labels of its selector added, in the order
    of their names, the order of a single list of them: where a node has two pods of a component (an old driver
    pod leaving), node_rows() shows the last, as it did when the status read every pod at once."""
    pods = []
    for labels, read in reads:
        for pod in read:
            if labels:
                metadata = pod.setdefault('metadata', {})
                metadata['labels'] = dict(metadata.get('labels') or {}, **labels)
            pods.append(pod)
    return sorted(pods, key=lambda pod: (pod.get('metadata') or {}).get('name') or '')


def read_operand_pods(api, namespace, daemonsets):
    """The stack's operand pods, read per component and per driver DaemonSet (operand_pod_reads), labelled as
    node_rows() reads them."""
    return labelled_pods((labels, api.list_pods(namespace, selector, view=view))
                         for selector, view, labels in operand_pod_reads(daemonsets))


def read_dra(api):
    """(the gpu.nvidia.com ResourceSlices, every ResourceClaim, the pods of the claims not allocated), or None where
    the API server serves no resource.k8s.io/v1 (before Kubernetes 1.34)."""
    try:
        slices = api.list_items(RESOURCE_API + '/resourceslices', field_selector='spec.driver=' + DRA_DRIVER)
    except APIError as error:
        if error.status == 404:
            return None
        raise
    claims = api.list_items(RESOURCE_API + '/resourceclaims')
    waiting = sorted(set((claim.get('metadata') or {}).get('namespace') for claim in claims
                         if not allocation_results(claim) and asks_for_gpus(claim)))
    pods = [pod for namespace in waiting for pod in api.list_pods(namespace, view=POD_FULL)]
    return slices, claims, pods


def run(module, api):
    params = module.params
    try:
        selected_columns(params['columns'])
    except ValueError as error:
        raise TaskError('columns: %s' % error)
    facts, nodes, warnings = read_gpu_nodes(api, params['label_selector'])
    daemonsets = api.list_daemonsets(params['namespace'], DRIVER_DAEMONSETS_SELECTOR)
    pods = read_operand_pods(api, params['namespace'], daemonsets)
    # DRA is read only where a node runs its stack: a status token without the resource.k8s.io reads keeps working
    # on the clusters that have none.
    dra = read_dra(api) if any(in_dra_stack(fact) for fact in facts) else None
    rows = node_rows(facts, nodes, pods, api.list_jobs(params['namespace'], VALIDATION_SELECTOR), daemonsets,
                     dra=dra_devices(dra[0], dra[1]) if dra else None)
    claims = pending_claims(dra[1], dra[2]) if dra else []
    exporters = [pod for pod in pods if (pod['metadata'].get('labels') or {}).get(COMPONENT) == DCGM_EXPORTER]
    health = read_health(api, params, nodes, exporters, dra[0] if dra else [], every_exporter=False)[0]
    records = dict((record['node'], record) for record in health)
    for row in rows:
        row.update(health=records[row['node']]['action'], gpu_faults=records[row['node']]['faults'])
    # The ComputeDomain controller, where a node runs the DRA stack and the deploy made it.
    found = api.read_optional('/apis/apps/v1/namespaces/%s/deployments/%s' % (params['namespace'], DRA_CONTROLLER))[
        0] if dra else None
    controller = deployment_state(found) if found else None
    for warning in warnings:
        module.warn(warning)
    lines = table_lines(rows, claims, params['columns']) + ([controller_line(controller)] if controller else [])
    return {'changed': False, 'nodes': rows, 'dra_controller': controller,
            'ready': bool(rows) and all(row['ready'] for row in rows) and (controller is None or controller['ready']),
            'pending_claims': claims, 'gpu_health': health, 'lines': lines + [verdict(rows, controller)]}
