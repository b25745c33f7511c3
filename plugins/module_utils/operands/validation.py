# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which nodes a validation check must run on, and which of its Jobs go, from the Jobs a previous run kept.

A node passed a check for its current state when a Job of that check succeeded there for the same key, the uids
of the operand pods the check was run against (operand_status's ready_pods). A replaced pod (new revision, a pod
deleted and re-created, a node re-created) gives the node another key, and the check runs again there."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .checks.jobs import job_succeeded

NODE_ANNOTATION = 'accelerators.gpu/node'
# The labels of a check's Jobs (roles/common/templates/validation_jobs.yml.j2).
CHECK_LABEL = 'accelerators.gpu/validation'
COMPONENT_SELECTOR = 'app.kubernetes.io/component=gpu-validation'
KEY_ANNOTATION = 'accelerators.gpu/validated-pods'


def check_label_selector(check):
    """The label selector of the Jobs of a check."""
    return '%s,%s=%s' % (COMPONENT_SELECTOR, CHECK_LABEL, check)


def validation_plan(jobs, nodes, keys):
    """jobs: the check's Jobs (k8s_info resources); nodes: the nodes to check; keys: {node: key}.

    Returns {'validate': the nodes without a succeeded Job for their key (a node without a key always),
    'kept': the nodes whose Job stands, 'stale': the other Jobs (a node's failed, running, outdated or
    terminating Job, and those of nodes no longer checked) as name/namespace definitions to delete}."""
    current = set()
    stale = []
    for job in jobs:
        meta = job.get('metadata') or {}
        annotations = meta.get('annotations') or {}
        node = annotations.get(NODE_ANNOTATION)
        key = keys.get(node)
        # A Job being deleted is stale too: its deletion is awaited before the node's new Job takes its name.
        if (node in nodes and key and annotations.get(KEY_ANNOTATION) == key and job_succeeded(job)
                and not meta.get('deletionTimestamp')):
            current.add(node)
        else:
            stale.append({'apiVersion': 'batch/v1', 'kind': 'Job',
                          'metadata': {'name': meta.get('name'), 'namespace': meta.get('namespace')}})
    return {'validate': [node for node in nodes if node not in current],
            'kept': [node for node in nodes if node in current],
            'stale': sorted(stale, key=lambda job: job['metadata']['name'])}
