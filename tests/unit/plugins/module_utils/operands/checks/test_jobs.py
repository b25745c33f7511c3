# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from ansible_collections.accelerators.gpu.plugins.module_utils.operands.checks.jobs import job_state
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.operands.operand_objects import (
    event, image_pull_pod, job, job_pod)


def test_succeeded_job():
    done = job('v1', 'gpu-1', conditions=[('Complete', '', '')], succeeded=1)
    assert job_state(done, [])['result'] == 'succeeded'


def test_failed_job_names_node_and_the_pod_failure_message():
    failed = job('v1', 'gpu-1', conditions=[('Failed', 'BackoffLimitExceeded', 'Job has reached the limit')])
    state = job_state(failed, [job_pod(failed, 'gpu-1', 'Failed', 'validation failed on node gpu-1: ECC errors')])
    assert state['result'] == 'failed'
    assert state['message'] == ('failed on node gpu-1: container cuda exited with code 1: '
                                'validation failed on node gpu-1: ECC errors')
    problem, = state['problems']
    assert problem['fatal'] and problem['node'] == 'gpu-1'
    assert problem['text'].startswith('Job gpu/v1 failed on node gpu-1: ')


def test_failed_job_without_pods_uses_its_condition_and_the_pinned_node():
    failed = job('v1', 'gpu-7', conditions=[('Failed', 'DeadlineExceeded', 'Job was active longer than allowed')])
    assert job_state(failed, [])['message'] == (
        'failed on node gpu-7: DeadlineExceeded: Job was active longer than allowed')


def test_running_job_reports_its_pods_problems():
    running = job('v1', 'gpu-1')
    pulling = image_pull_pod('v1-abc', 'gpu-1', 'nvcr.io/nvidia/k8s/cuda-sample:nope')
    pulling['metadata']['ownerReferences'] = [{'uid': 'job-v1', 'kind': 'Job'}]
    state = job_state(running, [pulling])
    assert state['result'] == 'running'
    assert [p['kind'] for p in state['problems']] == ['image']


def test_job_without_pod_reports_its_warning_event():
    running = job('v1', 'gpu-1')
    events = [event('job-v1', 'FailedCreate', 'forbidden: exceeded quota', '2026-01-01T00:00:00Z', kind='Job')]
    problem, = job_state(running, [], events)['problems']
    assert problem['kind'] == 'not-created' and problem['node'] == 'gpu-1'
    assert 'exceeded quota' in problem['text']
