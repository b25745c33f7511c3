# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.operands import wait as operand_wait
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.errors import APIError, TaskError
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.views import NODE_FULL, NODE_METADATA
from ansible_collections.accelerators.gpu.plugins.module_utils.operands.wait import (
    WAIT_ARGUMENT_SPEC, job_summary, wait_params)
from ansible_collections.accelerators.gpu.plugins.module_utils.operands.validation import validation_plan
from ansible_collections.accelerators.gpu.plugins.module_utils.operands.waiter import Observation
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.fakes import Deadlines


def test_a_job_summary_keeps_what_a_validation_plan_reads():
    job = {'apiVersion': 'batch/v1', 'kind': 'Job',
           'metadata': {'name': 'v', 'namespace': 'gpu', 'uid': 'u', 'managedFields': [{}],
                        'annotations': {'accelerators.gpu/node': 'a', 'accelerators.gpu/validated-pods': 'p1'}},
           'spec': {'template': {'spec': {'containers': [{'name': 'c'}]}}},
           'status': {'succeeded': 1, 'conditions': [{'type': 'Complete', 'status': 'True'}]}}
    summary = job_summary(job)
    assert summary == {'metadata': {'name': 'v', 'namespace': 'gpu', 'annotations': job['metadata']['annotations']},
                       'status': {'conditions': [{'type': 'Complete', 'status': 'True'}]}}
    assert validation_plan([summary], ['a'], {'a': 'p1'}) == validation_plan([job], ['a'], {'a': 'p1'})


def test_wait_params_are_the_defaults_and_what_is_given():
    params = wait_params('daemonsets', namespace='gpu', names=['d'], timeout=9)
    assert set(params) == set(WAIT_ARGUMENT_SPEC) | {'wait_for'}
    assert (params['wait_for'], params['timeout'], params['grace'], params['label_selectors']) == ('daemonsets', 9, 20, [])


class Reads:
    """Stands for operand_wait.OperandReads, of which the plan reads only the check's Jobs."""

    def __init__(self, jobs):
        self.jobs_read = jobs
        self.selectors = []

    def jobs(self, names, selector):
        self.selectors.append(selector)
        return self.jobs_read, []


def test_a_validation_check_is_planned_on_the_ready_nodes_from_its_jobs(monkeypatch):
    passed = {'metadata': {'name': 'driver-a', 'namespace': 'gpu',
                           'annotations': {'accelerators.gpu/node': 'a', 'accelerators.gpu/validated-pods': 'pod-a'}},
              'status': {'conditions': [{'type': 'Complete', 'status': 'True'}]}}
    outdated = {'metadata': {'name': 'driver-b', 'namespace': 'gpu',
                             'annotations': {'accelerators.gpu/node': 'b', 'accelerators.gpu/validated-pods': 'old'}},
                'status': {'conditions': [{'type': 'Complete', 'status': 'True'}]}}
    reads = Reads([passed, outdated])
    monkeypatch.setattr(operand_wait, 'OperandReads', lambda api, namespace: reads)
    monkeypatch.setattr(operand_wait, '_observer', lambda params, reads: ('DaemonSet gpu/d', None))
    monkeypatch.setattr(operand_wait, '_wait', lambda params, reads, subject, observe, **kwargs: {
        'ready': True, 'ready_nodes': ['a', 'b'], 'ready_pods': {'a': 'pod-a', 'b': 'pod-b'}})
    result = operand_wait.wait_for_operands(
        wait_params('daemonsets', namespace='gpu', names=['d'], validation_check='driver'), api=None)
    assert reads.selectors == ['app.kubernetes.io/component=gpu-validation,accelerators.gpu/validation=driver']
    assert result['validation'] == {
        'validate': ['b'], 'kept': ['a'],
        'stale': [{'apiVersion': 'batch/v1', 'kind': 'Job', 'metadata': {'name': 'driver-b', 'namespace': 'gpu'}}]}


class NodeReads(Deadlines):
    """Stands for OperandReads in a label wait: each look at the nodes returns the next of a sequence."""

    namespace = 'gpu'

    def __init__(self, *looks):
        self.looks = list(looks)

    def nodes(self, names, selector, labels_only=False):
        return self.looks.pop(0) if len(self.looks) > 1 else self.looks[0]

    def warning_events(self):
        return []


def labelled(name, **labels):
    return {'metadata': {'name': name, 'labels': dict(('nvidia.com/' + key.replace('_', '.'), value)
                                                      for key, value in labels.items())}}


def daemonset_ready(monkeypatch, reads):
    monkeypatch.setattr(operand_wait, 'OperandReads', lambda api, namespace: reads)
    monkeypatch.setattr(operand_wait, '_observer', lambda params, reads: (
        'DaemonSet gpu/gfd', lambda: Observation(
            True, (), {'ready_nodes': ['a', 'b'], 'ready_pods': {'a': 'p1', 'b': 'p2'}})))


def test_a_label_wait_waits_until_every_ready_node_carries_the_labels(monkeypatch):
    reads = NodeReads([labelled('a', gpu_count='8'), labelled('b')],
                      [labelled('a', gpu_count='8'), labelled('b', gpu_count='4')])
    daemonset_ready(monkeypatch, reads)
    result = operand_wait.wait_for_operands(wait_params(
        'daemonsets', namespace='gpu', names=['gfd'], node_labels=['nvidia.com/gpu.count'], poll_interval=0.01,
        timeout=5), api=None)
    assert result['ready'] and result['label_problems'] == {}
    assert result['msg'].splitlines()[-1].startswith('labels nvidia.com/gpu.count on the 2 ready nodes ready after')


def test_a_label_wait_that_times_out_names_each_node_and_what_it_lacks(monkeypatch):
    reads = NodeReads([labelled('a', gpu_count='8', mig_strategy='none'), labelled('b', gpu_count='x')])
    daemonset_ready(monkeypatch, reads)
    with pytest.raises(operand_wait.TaskError) as raised:
        operand_wait.wait_for_operands(wait_params(
            'daemonsets', namespace='gpu', names=['gfd'], node_labels=['nvidia.com/gpu.count', 'nvidia.com/mig.strategy'],
            node_label_values={'nvidia.com/mig.strategy': 'single'}, poll_interval=0.01, timeout=0.05), api=None)
    message, result = str(raised.value), raised.value.result
    assert result['label_problems'] == {
        'a': ['nvidia.com/mig.strategy=none, expected single'],
        'b': ['nvidia.com/gpu.count=x is not a number', 'nvidia.com/mig.strategy missing']}
    assert 'node a: nvidia.com/mig.strategy=none, expected single' in message
    assert 'node b: nvidia.com/gpu.count=x is not a number; nvidia.com/mig.strategy missing' in message
    assert result['outcome'] == 'timed out'


def test_node_labels_go_with_daemonsets_only():
    try:
        operand_wait.wait_for_operands(wait_params('jobs', namespace='gpu', names=['j'], node_labels=['x']), api=None)
    except operand_wait.TaskError as error:
        assert 'node_labels' in str(error)
    else:
        raise AssertionError('accepted')


def test_node_reads_ask_for_metadata_only_when_labels_are_all_a_wait_reads():
    class API:
        def __init__(self):
            self.views = []

        def list_nodes(self, label_selector=None, view=None):
            self.views.append((label_selector, view))
            return iter([{'metadata': {'name': 'gpu-0'}}, {'metadata': {'name': 'gpu-1'}}])

    api = API()
    reads = operand_wait.OperandReads(api, 'gpu')
    assert reads.nodes(['gpu-1'], '', labels_only=True) == [{'metadata': {'name': 'gpu-1'}}]
    assert len(reads.nodes([], 'gpu=true')) == 2
    assert api.views == [(None, NODE_METADATA), ('gpu=true', NODE_FULL)]


def test_a_wait_without_the_api_server_times_out_saying_for_how_long_it_was_unreachable():
    class Unreachable(NodeReads):
        def warning_events(self):
            raise AssertionError('no diagnosis read from an API server out of reach')

    def observe():
        raise APIError('GET', '/apis/apps/v1/namespaces/gpu/daemonsets', None,
                       'cannot reach the API server https://api:6443: refused (tried 3 times in 0.1 s)', fault='refused')
    with pytest.raises(TaskError) as raised:
        operand_wait._wait(wait_params('daemonsets', namespace='gpu', names=['d'], timeout=0.2, poll_interval=0.05),
                           Unreachable(), 'DaemonSets d in namespace gpu', observe)
    lines = str(raised.value).splitlines()
    assert lines[0] == 'DaemonSets d in namespace gpu not ready after 0.2s:'
    assert lines[-1].startswith('the API server was unreachable for 0 s of the wait (last: GET '
                                '/apis/apps/v1/namespaces/gpu/daemonsets: cannot reach the API server')
    assert raised.value.result['outcome'] == 'timed out'


def test_an_error_that_is_an_answer_ends_a_wait_at_once():
    def observe():
        raise APIError('GET', '/apis/apps/v1/namespaces/gpu/daemonsets', 403, 'forbidden')
    with pytest.raises(APIError, match='HTTP 403'):
        operand_wait._wait(wait_params('daemonsets', namespace='gpu', names=['d'], timeout=5, poll_interval=0.05),
                           NodeReads([]), 'DaemonSets d in namespace gpu', observe)
