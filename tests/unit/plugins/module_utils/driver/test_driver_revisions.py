# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a driver pod of an older DaemonSet revision runs differently from the current template (driver.revisions),
and how the rollout's states and the OnDelete readiness rule count such a pod."""

import copy

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.driver import upgrade_plan
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.revisions import (
    revision_template, runs_differently, would_run_differently)
from ansible_collections.accelerators.gpu.plugins.module_utils.operands.checks.daemonsets import daemonset_state

OWNER_LABEL = 'nvidia.com/gpu-operator.driver.owner'


def container(name, image, env=()):
    """A container as the API server returns it: its defaults filled in."""
    return {'name': name, 'image': image, 'imagePullPolicy': 'IfNotPresent', 'env': [dict(e) for e in env],
            'terminationMessagePath': '/dev/termination-log', 'terminationMessagePolicy': 'File',
            'volumeMounts': [{'name': 'run-nvidia', 'mountPath': '/run/nvidia', 'mountPropagation': 'Bidirectional'}]}


def served_template():
    """The driver pod template of main before #43, as the API server returns it."""
    return {
        'metadata': {'labels': {'app.kubernetes.io/component': 'nvidia-driver', 'app': 'nvidia-driver-daemonset'}},
        'spec': {
            'nodeSelector': {'nvidia.com/gpu.deploy.driver': 'true'},
            'initContainers': [container('k8s-driver-manager', 'k8s-driver-manager:v0.8.1',
                                         [{'name': 'ENABLE_GPU_POD_EVICTION', 'value': 'true'}])],
            'containers': [container('nvidia-driver-ctr', 'driver:570.172.08', [
                {'name': 'NODE_NAME', 'valueFrom': {'fieldRef': {'apiVersion': 'v1', 'fieldPath': 'spec.nodeName'}}},
                {'name': 'NVIDIA_VISIBLE_DEVICES', 'value': 'void'}])],
            'tolerations': [{'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}],
            'volumes': [{'name': 'run-nvidia', 'hostPath': {'path': '/run/nvidia', 'type': ''}}],
            'restartPolicy': 'Always', 'dnsPolicy': 'ClusterFirst', 'schedulerName': 'default-scheduler'}}


def digested(template, digest='d1'):
    """template with DRIVER_CONFIG_DIGEST and KERNEL_MODULE_TYPE=auto, as the collection renders it since #43, and the
    driver configurations' owner label in its nodeSelector."""
    template = copy.deepcopy(template)
    spec = template['spec']
    for entry in spec['initContainers'] + spec['containers']:
        entry['env'].append({'name': 'DRIVER_CONFIG_DIGEST', 'value': digest})
    spec['containers'][0]['env'].insert(1, {'name': 'KERNEL_MODULE_TYPE', 'value': 'auto'})
    spec['nodeSelector'][OWNER_LABEL] = 'default'
    return template


def changed(path, value):
    """served_template() as digested() has it, then with the value at path (a list of keys) set."""
    template = digested(served_template())
    target = template
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return template


def test_a_first_digest_a_default_env_value_and_node_selection_do_not_change_what_a_pod_does():
    old = served_template()
    new = digested(old)
    new['spec']['affinity'] = {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {
        'nodeSelectorTerms': [{'matchExpressions': [{'key': OWNER_LABEL, 'operator': 'In', 'values': ['default']}]}]}}}
    assert not runs_differently(old, new)
    assert not runs_differently(new, old)


def test_a_changed_digest_counts_it_covers_the_content_of_the_mounted_config_maps():
    # Same pod spec, other module parameters in the kernel-module ConfigMap: only the digest tells them apart.
    old = served_template()
    assert runs_differently(digested(old, 'd1'), digested(old, 'd2'))
    assert not runs_differently(digested(old, 'd1'), digested(old, 'd1'))


@pytest.mark.parametrize('path, value', [
    (['spec', 'containers', 0, 'image'], 'driver:595.91.07'),
    (['spec', 'initContainers', 0, 'image'], 'k8s-driver-manager:v0.12.0'),
    (['spec', 'containers', 0, 'env', 1], {'name': 'KERNEL_MODULE_TYPE', 'value': 'open'}),
    (['spec', 'containers', 0, 'env', 2], {'name': 'NVIDIA_VISIBLE_DEVICES', 'value': 'all'}),
    (['spec', 'containers', 0, 'volumeMounts', 0, 'readOnly'], True),
    (['spec', 'containers', 0, 'resources'], {'limits': {'memory': '2Gi'}}),
    (['spec', 'containers', 0, 'startupProbe'], {'exec': {'command': ['true']}, 'periodSeconds': 10}),
    (['spec', 'tolerations'], []),
    (['spec', 'volumes', 0, 'hostPath', 'path'], '/run/nvidia-other'),
    (['metadata', 'annotations'], {'kubectl.kubernetes.io/restartedAt': '2026-12-02T06:00:00Z'}),
    (['spec', 'priorityClassName'], 'system-node-critical'),
], ids=lambda value: str(value)[:40])
def test_anything_else_a_pod_does_differently_counts(path, value):
    old = served_template()
    assert runs_differently(old, changed(path, value))
    assert runs_differently(changed(path, value), old)


def test_an_env_entry_counts_when_it_is_not_the_containers_default_when_unset():
    old = served_template()
    # The default is the driver container's own: on the manager, or from a ConfigMap, the entry counts.
    on_manager = digested(old)
    on_manager['spec']['initContainers'][0]['env'].append({'name': 'KERNEL_MODULE_TYPE', 'value': 'auto'})
    from_config_map = changed(['spec', 'containers', 0, 'env', 1], {
        'name': 'KERNEL_MODULE_TYPE', 'valueFrom': {'configMapKeyRef': {'name': 'driver', 'key': 'type'}}})
    added = changed(['spec', 'containers', 0, 'env'], served_template()['spec']['containers'][0]['env'] + [
        {'name': 'NVIDIA_DRIVER_DEBUG', 'value': '1'}])
    removed = changed(['spec', 'containers', 0, 'env'], [])
    for new in (on_manager, from_config_map, added, removed):
        assert runs_differently(old, new), new['spec']


def test_a_revision_records_its_template_and_an_unknown_one_counts_as_different():
    template = served_template()
    revision = {'metadata': {'name': 'nvidia-driver-abc'}, 'revision': 1,
                'data': {'spec': {'template': dict(template, **{'$patch': 'replace'})}}}
    assert revision_template(revision) == template
    assert revision_template({'metadata': {'name': 'no-data'}, 'revision': 2}) is None
    assert runs_differently(None, template)


def test_a_rendered_template_over_a_served_one_changes_only_what_it_sets():
    """The planner's desired template has none of the server's defaults: they are no change; a new digest and
    KERNEL_MODULE_TYPE=auto are none either, a new image is."""
    served = served_template()
    rendered = digested(served)
    for entry in rendered['spec']['initContainers'] + rendered['spec']['containers']:
        for default in ('imagePullPolicy', 'terminationMessagePath', 'terminationMessagePolicy'):
            del entry[default]
    for default in ('restartPolicy', 'dnsPolicy', 'schedulerName'):
        del rendered['spec'][default]
    assert not would_run_differently(rendered, served)
    rendered['spec']['containers'][0]['image'] = 'driver:595.91.07'
    assert would_run_differently(rendered, served)


# -- where outdated pods are decided -----------------------------------------------------------------------------

def driver_daemonset(template):
    return {'metadata': {'name': 'nvidia-driver', 'uid': 'ds-uid', 'namespace': 'gpu', 'generation': 2},
            'spec': {'updateStrategy': {'type': 'OnDelete'}, 'template': template},
            'status': {'observedGeneration': 2, 'desiredNumberScheduled': 2}}


def revision(daemonset, hash_, number, template):
    return {'metadata': {'name': 'nvidia-driver-' + hash_, 'labels': {'controller-revision-hash': hash_},
                         'ownerReferences': [{'uid': daemonset['metadata']['uid']}]},
            'revision': number, 'data': {'spec': {'template': dict(template, **{'$patch': 'replace'})}}}


def pod(node, hash_):
    return {'metadata': {'name': 'nvidia-driver-' + node, 'uid': 'uid-' + node,
                         'labels': {'controller-revision-hash': hash_},
                         'ownerReferences': [{'kind': 'DaemonSet', 'uid': 'ds-uid'}]},
            'spec': {'nodeName': node},
            'status': {'phase': 'Running', 'conditions': [{'type': 'Ready', 'status': 'True'}]}}


def gpu_node(name):
    return {'metadata': {'name': name}, 'spec': {},
            'status': {'allocatable': {'nvidia.com/gpu': '2'}, 'conditions': [{'type': 'Ready', 'status': 'True'}]}}


def fleet(old_template, current_template, old_revision_kept=True):
    """A DaemonSet at current_template whose pod on n1 runs old_template and whose pod on n2 runs the newest."""
    daemonset = driver_daemonset(current_template)
    revisions = ([revision(daemonset, 'old', 1, old_template)] if old_revision_kept else []) + [
        revision(daemonset, 'new', 2, current_template)]
    return daemonset, revisions, [pod('n1', 'old'), pod('n2', 'new')]


@pytest.mark.parametrize('current, kept, outdated', [
    (digested(served_template()), True, []),
    (changed(['spec', 'containers', 0, 'image'], 'driver:595.91.07'), True, ['n1']),
    (digested(served_template()), False, ['n1']),
], ids=['digest and defaults only', 'new image', 'old revision gone'])
def test_the_rollout_and_the_on_delete_rule_count_only_a_pod_that_runs_differently(current, kept, outdated):
    daemonset, revisions, pods = fleet(served_template(), current, kept)
    states = upgrade_plan.node_driver_states([gpu_node('n1'), gpu_node('n2')], [daemonset], revisions, pods)
    assert [s['name'] for s in states if s['outdated']] == outdated
    assert upgrade_plan.rollout_plan(states, 1, 1)['wave'] == outdated[:1]
    accepting = daemonset_state(daemonset, pods, revisions, accept_outdated=True)
    assert (accepting['ready'], accepting['outdated']) == (True, outdated)
    assert daemonset_state(daemonset, pods, revisions)['ready'] is not bool(outdated)
