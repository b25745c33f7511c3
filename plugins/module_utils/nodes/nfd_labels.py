# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nfd_labels module's work: node facts from NFD labels, waiting for NFD, GPU node labels.

run() takes the module and a k8s.api.ClusterAPI (or any object with the same methods).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ..k8s.errors import APIError, TaskError
from ..k8s.views import NODE_INFO
from ..operands.waiter import Lost
from .facts import NFD_PREFIX, OPERANDS, group_nodes, mode_switch, node_facts, plan_gpu_node_labels

# A label patch that meets a node changed since it was read is re-planned this many times.
LABEL_PATCH_ATTEMPTS = 3


# The Node Table (k8s.views.NODE_INFO) carries neither spec.taints nor status.allocatable: the nodes without NFD
# labels, whose taints decide whether waiting for NFD waits for them and whose allocatable GPUs tell a GPU node NFD
# missed, are read again in full. One GET each while they are at most one in FULL_READ_RATIO of the selected nodes;
# more, and one list of the full selected nodes. A GET costs what about three more Nodes in a full list cost
# (5000 realistic Nodes, 100 a page, gzip: 12 ms and 1.0 ms CPU a GET, 3.7 ms and 0.35 ms CPU a listed Node).
FULL_READ_RATIO = 3


def listed_facts(node):
    """node_facts() as this module returns them: a node with NFD labels has its taints left unread (the Node Table
    has none; nfd-worker ran there whatever they are), so its 'tainted' is None, however the node was read."""
    facts = node_facts(node)
    if facts['nfd_labelled']:
        facts['tainted'] = None
    return facts


def read_one_by_one(to_read, selected):
    """Whether to_read nodes of selected ones are read in full with a GET each (True) or one list (False)."""
    return to_read * FULL_READ_RATIO <= selected


def _read_if_present(api, name):
    """The full node, or None when it is gone."""
    try:
        return api.read_node(name)
    except APIError as error:
        if error.status != 404:
            raise
        return None


def read_nodes(api, label_selector=None, page_size=None):
    """(facts of each node, sorted by name; {node name: resourceVersion}).

    The nodes come from the Node Table; those without NFD labels are read again in full (FULL_READ_RATIO). A node
    deleted between the two reads is left out. A server that answers the Table request with full Nodes (it warns)
    has those read twice: the same result.
    """
    facts, versions = {}, {}

    def record(node):
        name = node['metadata']['name']
        facts[name] = listed_facts(node)
        versions[name] = node['metadata'].get('resourceVersion')

    for node in api.list_nodes(label_selector, page_size, view=NODE_INFO):
        record(node)
    unread = set(name for name, item in facts.items() if not item['nfd_labelled'])
    if read_one_by_one(len(unread), len(facts)):
        full_nodes = (_read_if_present(api, name) for name in sorted(unread))
    else:
        # No label selector picks nodes without NFD labels: the list has every selected node, only those are kept.
        full_nodes = (node for node in api.list_nodes(label_selector, page_size) if node['metadata']['name'] in unread)
    for node in full_nodes:
        if node is not None:
            record(node)
            unread.discard(node['metadata']['name'])
    for name in unread:
        del facts[name], versions[name]
    return [facts[name] for name in sorted(facts)], versions


def missing_nfd(facts_list, min_gpu_nodes=0):
    """What waiting for NFD still waits for, or None when it is over.

    min_gpu_nodes > 0: at least that many GPU nodes; otherwise every node NFD labels (and at least one): those
    Ready and without a NoSchedule or NoExecute taint, where nfd-worker runs. A node that is not Ready, or a control
    plane node, is not waited for. A node NFD labelled counts whatever its taints (nfd-worker ran there; read_nodes
    leaves them unread).
    """
    expected = [facts for facts in facts_list if facts['ready'] and (facts['nfd_labelled'] or not facts['tainted'])]
    unlabelled = [facts['name'] for facts in expected if not facts['nfd_labelled']]
    without = 'Ready untainted nodes without %s labels: %s' % (NFD_PREFIX, ', '.join(unlabelled) or 'none')
    if min_gpu_nodes:
        gpu_nodes = [facts['name'] for facts in facts_list if facts['gpu_present']]
        if len(gpu_nodes) >= min_gpu_nodes:
            return None
        return '%d GPU node(s) found (%s), at least %d wanted; %s' % (
            len(gpu_nodes), ', '.join(gpu_nodes) or 'none', min_gpu_nodes, without)
    if not expected:
        return 'no Ready untainted node matches the label selector yet'
    if not unlabelled:
        return None
    return '%d of %d Ready untainted node(s) have no NFD labels; %s' % (len(unlabelled), len(expected), without)


def wait_for_nfd(api, params, clock=time.monotonic, sleep=time.sleep):
    """Poll the nodes until missing_nfd() is None; returns (facts, versions, seconds waited)."""
    started = clock()
    lost = Lost(clock)
    while True:
        deadline = started + params['wait_timeout'] if params['wait'] else float('inf')
        seen, read = lost.attempt(api, lambda: read_nodes(api, params['label_selector'], params['page_size']),
                                  deadline)
        waited = clock() - started
        if not seen:
            # The API server out of reach: the labels are unknown, not missing; wait on, to the timeout.
            if not params['wait'] or waited >= params['wait_timeout']:
                raise lost.error
            sleep(min(params['wait_sleep'], max(0.0, params['wait_timeout'] - waited)))
            continue
        facts, versions = read
        missing = missing_nfd(facts, params['min_gpu_nodes'])
        if missing is None or not params['wait']:
            return facts, versions, waited
        if waited >= params['wait_timeout']:
            raise TaskError('timed out after %ds waiting for NFD labels: %s%s' % (
                params['wait_timeout'], missing, lost.words()),
                waited_seconds=round(waited, 1), **summary(facts, params['return_labels']))
        # The last look is at the timeout, not a sleep before it.
        sleep(min(params['wait_sleep'], params['wait_timeout'] - waited))


def _label_diff(name, labels, changes):
    before = dict((key, labels[key]) for key in sorted(changes) if key in labels)
    after = dict((key, value) for key, value in sorted(changes.items()) if value is not None)
    return {'before_header': 'node %s labels' % name, 'after_header': 'node %s labels' % name,
            'before': before, 'after': after}


def _apply_labels(api, facts, resource_version, operands, present, dra_selector=None):
    """Patch one node's GPU labels; returns (changes made, facts after). Re-plans when the node changed."""
    for _attempt in range(LABEL_PATCH_ATTEMPTS):
        changes = plan_gpu_node_labels(facts, operands, present, dra_selector)
        if not changes:
            return changes, facts
        try:
            node = api.patch_node_labels(facts['name'], changes, resource_version)
            return changes, listed_facts(node)
        except APIError as error:
            if error.status != 409:
                raise
        node = api.read_node(facts['name'])
        facts, resource_version = listed_facts(node), node['metadata'].get('resourceVersion')
    raise TaskError('node %s changed under every one of %d label patches (HTTP 409 Conflict); run again'
                    % (facts['name'], LABEL_PATCH_ATTEMPTS))


def summary(facts_list, return_labels=True):
    """The module's view of the nodes: facts, GPU nodes, groupings, nodes without NFD, warnings per node.

    Without return_labels the facts leave out each node's label map, most of the result on a large cluster.
    """
    groups = group_nodes(facts_list)
    return {
        'nodes': facts_list if return_labels else [
            dict((key, value) for key, value in facts.items() if key != 'labels') for facts in facts_list],
        'gpu_nodes': [facts['name'] for facts in facts_list if facts['gpu_present']],
        'groups': groups,
        'rhcos_versions': sorted(groups['by_rhcos']),
        'without_nfd': [facts['name'] for facts in facts_list if not facts['nfd_labelled']],
        'node_warnings': dict((facts['name'], facts['warnings']) for facts in facts_list if facts['warnings']),
    }


def run(module, api):
    params = module.params
    facts_list, versions, waited = wait_for_nfd(api, params)
    label_changes, diffs = {}, []
    if params['manage_labels']:
        present = params['labels_state'] == 'present'
        for index, facts in enumerate(facts_list):
            changes, facts_list[index] = _apply_labels(
                api, facts, versions[facts['name']], params['operands'], present, params['dra_node_selector'])
            if changes:
                label_changes[facts['name']] = changes
                diffs.append(_label_diff(facts['name'], facts['labels'], changes))
    result = summary(facts_list, params['return_labels'])
    operands = OPERANDS if params['operands'] is None else params['operands']
    result['mode_switches'] = dict(
        (facts['name'], target) for facts, target in
        ((facts, mode_switch(facts, operands, params['dra_node_selector'])) for facts in facts_list) if target)
    for facts in facts_list:
        for warning in facts['warnings']:
            module.warn(warning)
    result.update(changed=bool(label_changes), label_changes=label_changes, waited_seconds=round(waited, 1))
    if module._diff:
        result['diff'] = diffs
    return result
