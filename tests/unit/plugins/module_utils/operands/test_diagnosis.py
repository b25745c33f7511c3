# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from ansible_collections.accelerators.gpu.plugins.module_utils.operands.diagnosis import (
    FAILED_FAST, TIMED_OUT, diagnose, outcome_message, summarize)
from ansible_collections.accelerators.gpu.plugins.module_utils.operands.waiter import (
    observe_allocatable, observe_daemonsets, observe_jobs)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.operands.operand_objects import (
    NS, FakeReads, container_status, daemonset, event, image_pull_pod, job, job_pod, node, pod, problem)


def test_failed_job_is_named_once_in_the_message():
    ok = job('ok', 'gpu-1', conditions=[('Complete', '', '')], succeeded=1)
    bad = job('bad', 'gpu-2', conditions=[('Failed', 'BackoffLimitExceeded', '')])
    running = job('slow', 'gpu-3')
    observation = observe_jobs(FakeReads(jobs=[ok, bad, running], pods=[job_pod(bad, 'gpu-2', 'Failed', 'ECC errors')]),
                               [], 'x=y')
    decisive = [p for p in observation.problems if p['fatal']]
    message = outcome_message('Jobs x=y in namespace gpu', FAILED_FAST, observation, decisive, [], 1.0, 300)
    lines = message.splitlines()[1:]
    assert [line for line in lines if 'ECC errors' in line] == [
        'Job %s/bad failed on node gpu-2: container cuda exited with code 1: ECC errors' % NS]
    assert lines[1:] == ['Job %s/slow running on node gpu-3' % NS]


def test_failure_message_names_the_decisive_cause_first_then_the_rest():
    pulling, waiting = image_pull_pod('t-1', 'gpu-1'), pod('t-2', 'gpu-2', ready=False, statuses=[
        container_status('main', {'waiting': {'reason': 'PodInitializing', 'message': 'waiting for nvidia-driver'}})])
    observation = observe_daemonsets(FakeReads(daemonsets=[daemonset(ready=0, available=0)],
                                               pods=[pulling, waiting]), ['toolkit'], '')
    events = [event('uid-t-2', 'FailedMount', 'hostPath missing', '2026-01-01T00:00:00Z')]
    diagnosis = diagnose(observation, events)
    assert [d['node'] for d in diagnosis] == ['gpu-1', 'gpu-2']
    decisive = [p for p in observation.problems if p['fatal']]
    message = outcome_message('DaemonSets toolkit in namespace gpu', FAILED_FAST, observation, decisive, diagnosis,
                              3.2, 300)
    lines = message.splitlines()
    assert lines[0] == ('DaemonSets toolkit in namespace gpu not ready: failing after 3.2s, before the 300s timeout, '
                        'as the cause is visible:')
    assert lines[1].startswith('node gpu-1: pod gpu/t-1 cannot pull image nvcr.io/nvidia/k8s/missing:1')
    assert lines[2] == 'DaemonSet gpu/toolkit: 2 of 2 pods updated, 0 available'
    assert lines[3] == ('node gpu-2: pod gpu/t-2 Pending; container main waiting PodInitializing: '
                        'waiting for nvidia-driver; last warning FailedMount: hostPath missing')
    assert len(lines) == 4


def test_timeout_message_is_never_bare():
    observation = observe_allocatable(FakeReads(nodes=[node('a', {})]), ['a'], '', 'nvidia.com/gpu')
    message = outcome_message('allocatable nvidia.com/gpu on nodes a', TIMED_OUT, observation, [], [], 60, 60)
    assert message == 'allocatable nvidia.com/gpu on nodes a not ready after 60s:\nnodes without it: a'


def test_message_lists_at_most_ten_problems():
    problems = [dict(problem('image', key=i), text='problem %02d' % i) for i in range(15)]
    lines = summarize(problems)
    assert len(lines) == 11
    assert lines[-1] == '... and 5 more problems (see the problems returned)'
