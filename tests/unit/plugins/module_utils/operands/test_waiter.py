# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.operands.checks.deployments import deployment_state
from ansible_collections.accelerators.gpu.plugins.module_utils.operands.checks.pods import (
    driver_opted_out_problems, waits_in_init)
from ansible_collections.accelerators.gpu.plugins.module_utils.operands.diagnosis import (
    FAILED_FAST, READY, TIMED_OUT, outcome_message, unreachable_line)
from ansible_collections.accelerators.gpu.plugins.module_utils.operands.waiter import (
    Observation, observe_allocatable, observe_daemonsets, observe_deployments, observe_jobs, observe_service, wait)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.operands.operand_objects import (
    FakeReads, controller, crashing_pod, daemonset, driver_labelled, endpoint, image_pull_pod, in_init, job, job_pod,
    node, pod, problem, revision)


def test_a_pod_waiting_in_init_on_a_node_opted_out_of_the_driver_is_a_problem_after_the_grace():
    nodes = [driver_labelled('out', 'false'), driver_labelled('host', 'pre-installed'),
             driver_labelled('on', 'true')]
    pods = [in_init('a', 'out'), in_init('b', 'host'), in_init('c', 'on'),
            pod('d', 'out', ready=False, phase='Running')]
    assert [waits_in_init(p) for p in pods] == [True, True, True, False]
    problems = driver_opted_out_problems(pods, nodes)
    assert [(p['kind'], p['fatal'], p['node'], p['pod']) for p in problems] == [('driver-opted-out', False, 'out', 'a')]
    assert problems[0]['text'] == (
        'node out: pod gpu/a waits in Init for a driver, but the node is opted out of the driver '
        '(nvidia.com/gpu.deploy.driver=false), so no driver pod runs there, and has no pre-installed one '
        '(nvidia.com/gpu.deploy.driver=pre-installed): install a driver on the host and label the node '
        'nvidia.com/gpu.deploy.driver=pre-installed, or remove the label so that the next deploy runs the driver there')
    # Not fatal: a host driver on a node labelled false is found by the init container within the grace period.
    waited = run_wait([Observation(False, problems)], timeout=300, grace=20)
    assert (waited['outcome'], waited['elapsed'], waited['decisive']) == (FAILED_FAST, 20, problems)


def test_observe_daemonsets_reads_the_opted_out_nodes_only_while_a_pod_waits_in_init():
    class Reads(FakeReads):
        def nodes(self, names, selector, labels_only=False):
            self.calls.append(('nodes', tuple(names), selector, labels_only))
            return super(Reads, self).nodes(names, selector, labels_only)

    nodes = [driver_labelled('n2', 'false')]
    waiting = Reads(daemonsets=[daemonset(ready=1, available=1)], pods=[pod('a', 'n1'), in_init('b', 'n2')],
                    nodes=nodes)
    observation = observe_daemonsets(waiting, ['toolkit'], '')
    assert [(p['kind'], p['node']) for p in observation.problems] == [('driver-opted-out', 'n2')]
    assert ('nodes', (), 'nvidia.com/gpu.deploy.driver=false', True) in waiting.calls
    running = Reads(daemonsets=[daemonset(ready=1, available=1)], pods=[pod('a', 'n1'), pod('b', 'n2', ready=False)],
                    nodes=nodes)
    assert observe_daemonsets(running, ['toolkit'], '').problems == []
    assert not [call for call in running.calls if call[0] == 'nodes']


def test_observe_daemonsets_ready_nodes_and_no_event_reads_when_all_pods_exist():
    reads = FakeReads(daemonsets=[daemonset(ready=1, available=1)],
                      pods=[pod('a', 'n1'), image_pull_pod('b', 'n2')])
    observation = observe_daemonsets(reads, ['toolkit'], '')
    assert not observation.ready
    assert observation.report['ready_nodes'] == ['n1']
    assert observation.report['ready_pods'] == {'n1': 'uid-a'}
    assert [p['kind'] for p in observation.problems] == ['image']
    assert [p['metadata']['name'] for p in observation.unready_pods] == ['b']
    assert ('events',) not in reads.calls
    assert ('pods', 'app=toolkit') in reads.calls


def test_observe_daemonsets_reads_revisions_only_for_on_delete():
    reads = FakeReads(daemonsets=[daemonset(strategy='OnDelete')],
                      pods=[pod('a', 'n1', revision='h'), pod('b', 'n2', revision='h')], revisions=[revision(1, 'h')])
    assert observe_daemonsets(reads, [], 'app.kubernetes.io/component=nvidia-driver').ready
    assert ('revisions', 'app=toolkit') in reads.calls
    rolling = FakeReads(daemonsets=[daemonset()], pods=[pod('a', 'n1'), pod('b', 'n2')])
    assert observe_daemonsets(rolling, ['toolkit'], '').ready
    assert not [c for c in rolling.calls if c[0] == 'revisions']


def test_observe_daemonsets_missing_name_or_empty_selector_is_fatal():
    missing = observe_daemonsets(FakeReads(missing=['nope']), ['nope'], '')
    assert not missing.ready
    assert [(p['kind'], p['fatal'], p['text']) for p in missing.problems] == [
        ('missing', True, 'DaemonSet gpu/nope does not exist')]
    nothing = observe_daemonsets(FakeReads(), [], 'app=x')
    assert [p['text'] for p in nothing.problems] == ['no DaemonSet in namespace gpu matches app=x']


def test_observe_jobs_finds_pods_by_controller_uid_in_chunks():
    jobs = [job('v%d' % i, 'gpu-%d' % i, conditions=[('Complete', '', '')], succeeded=1) for i in range(60)]
    reads = FakeReads(jobs=jobs)
    observation = observe_jobs(reads, [], 'app.kubernetes.io/component=gpu-validation')
    assert observation.ready
    selectors = [c[1] for c in reads.calls if c[0] == 'pods']
    assert len(selectors) == 2
    assert selectors[0].startswith('batch.kubernetes.io/controller-uid in (job-v0,job-v1,')
    assert [s['node'] for s in observation.report['jobs']][:2] == ['gpu-0', 'gpu-1']


def test_observe_jobs_one_failure_is_fatal_and_named():
    ok = job('ok', 'gpu-1', conditions=[('Complete', '', '')], succeeded=1)
    bad = job('bad', 'gpu-2', conditions=[('Failed', 'BackoffLimitExceeded', '')])
    reads = FakeReads(jobs=[ok, bad], pods=[job_pod(bad, 'gpu-2', 'Failed', 'ECC errors')])
    observation = observe_jobs(reads, [], 'x=y')
    assert not observation.ready
    problem, = observation.problems
    assert problem['fatal'] and 'gpu-2' in problem['text'] and 'ECC errors' in problem['text']


def test_observe_allocatable():
    reads = FakeReads(nodes=[node('a', {'nvidia.com/gpu': '4'}), node('b', {})])
    observation = observe_allocatable(reads, ['a', 'b'], '', 'nvidia.com/gpu')
    assert not observation.ready
    assert observation.report == {'allocatable': {'a': 4, 'b': 0}, 'node_resources': {'a': 'nvidia.com/gpu'}, 'missing': ['b']}


def test_observe_service_names_the_nodes_without_an_endpoint_and_the_newest_service_warning():
    service_event = {'type': 'Warning', 'involvedObject': {'kind': 'Service', 'name': 'exporter'},
                     'reason': 'FailedToUpdateEndpointSlices', 'message': 'newest',
                     'lastTimestamp': '2026-01-02T00:00:00Z'}
    older = dict(service_event, message='older', lastTimestamp='2026-01-01T00:00:00Z')
    other = dict(service_event, involvedObject={'kind': 'Service', 'name': 'other'},
                 lastTimestamp='2026-01-03T00:00:00Z')
    reads = FakeReads(slices=[{'endpoints': [endpoint('a')]}], events=[older, service_event, other])
    observation = observe_service(reads, 'exporter', ['a', 'b'])
    assert not observation.ready
    assert observation.report == {'unserved_nodes': ['b'], 'service_warning': 'FailedToUpdateEndpointSlices: newest'}
    message = outcome_message('endpoints', TIMED_OUT, observation, [], [], 10, 10)
    assert message.splitlines()[1:] == ['nodes without a ready endpoint: b',
                                        'last warning of the Service FailedToUpdateEndpointSlices: newest']
    served = FakeReads(slices=[{'endpoints': [endpoint('a'), endpoint('b')]}])
    assert observe_service(served, 'exporter', ['a', 'b']).ready
    # Events are read only for a node without an endpoint.
    assert served.calls == [('endpointslices', 'exporter')]


class FakeClock:
    def __init__(self):
        self.now = 100.0
        self.slept = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


class LostAPI(Exception):
    """Stands for an APIError with a fault: the API server out of reach."""


def run_wait(observations, timeout=60, interval=2, grace=10):
    """Runs wait() over these observations (the last repeats; an exception is raised by that look) on a fake
    clock; returns what it returned, by name."""
    clock = FakeClock()
    sequence = iter(observations)
    last = []

    def observe():
        try:
            last[:] = [next(sequence)]
        except StopIteration:
            pass
        if isinstance(last[0], Exception):
            raise last[0]
        return last[0]
    outcome, observation, decisive, elapsed, unreachable = wait(
        observe, timeout, interval, grace, clock=clock, sleep=clock.sleep,
        lost=lambda error: str(error) if isinstance(error, LostAPI) else None)
    return {'outcome': outcome, 'observation': observation, 'decisive': decisive, 'elapsed': elapsed,
            'slept': clock.slept, 'unreachable': unreachable}


def test_a_wait_counts_a_lost_api_server_as_unknown_and_goes_on():
    lost = LostAPI('GET /api/v1/pods: cannot reach the API server')
    waited = run_wait([Observation(False), lost, lost, lost, Observation(True)])
    assert (waited['outcome'], waited['elapsed']) == (READY, 8)
    assert waited['unreachable'] == {'seconds': 6, 'error': 'GET /api/v1/pods: cannot reach the API server'}
    assert run_wait([Observation(True)])['unreachable'] is None


def test_a_wait_that_times_out_without_the_api_server_says_for_how_long():
    lost = LostAPI('GET /api/v1/pods: HTTP 503: unavailable')
    waited = run_wait([Observation(False), Observation(False), lost], timeout=10)
    assert (waited['outcome'], waited['unreachable']['seconds']) == (TIMED_OUT, 6)
    assert unreachable_line(waited['unreachable']) == (
        'the API server was unreachable for 6 s of the wait (last: GET /api/v1/pods: HTTP 503: unavailable)')
    never = run_wait([lost], timeout=4)
    assert never['outcome'] == TIMED_OUT and not never['observation'].ready and never['unreachable']['seconds'] == 4


def test_a_wait_ends_at_an_error_that_is_not_a_lost_api_server():
    with pytest.raises(ValueError):
        run_wait([Observation(False), ValueError('a bug')])


def test_wait_returns_ready_without_sleeping_when_already_ready():
    waited = run_wait([Observation(True)])
    assert (waited['outcome'], waited['decisive'], waited['elapsed'], waited['slept']) == (READY, [], 0, [])


def test_wait_fails_at_the_first_fatal_problem():
    waited = run_wait([Observation(False), Observation(False, [problem('image')])])
    assert waited['outcome'] == FAILED_FAST
    assert [p['kind'] for p in waited['decisive']] == ['image']
    assert waited['elapsed'] == 2


def test_wait_fails_a_stuck_problem_only_after_the_grace_period():
    waited = run_wait([Observation(False, [problem('unschedulable')])], grace=10)
    assert waited['outcome'] == FAILED_FAST
    assert waited['elapsed'] == 10
    assert waited['decisive'][0]['kind'] == 'unschedulable'


def test_a_stuck_problem_that_clears_restarts_its_grace_period():
    stuck = Observation(False, [problem('unschedulable')])
    waited = run_wait([stuck, stuck, Observation(False), stuck], grace=5)
    assert waited['outcome'] == FAILED_FAST
    assert waited['elapsed'] == 12  # seen at 0, 2; gone at 4; seen again from 6 until 6 + 6 > 5


def test_wait_times_out_and_never_sleeps_past_the_timeout():
    waited = run_wait([Observation(False, report={'x': 1})], timeout=5)
    assert waited['outcome'] == TIMED_OUT
    assert waited['elapsed'] == 5
    assert waited['slept'] == [2, 2, 1]
    assert waited['observation'].report == {'x': 1}


def test_a_crash_loop_on_a_node_its_daemonset_no_longer_selects_is_not_a_problem_but_the_pod_is_waited_for():
    """The old RHCOS build's driver pod on a node back on the new build: it crash-loops until NFD relabels the node,
    then its DaemonSet's controller deletes it."""
    ds = daemonset(desired=1, ready=1, available=1, strategy='OnDelete')
    ds['spec']['template'] = {'spec': {'nodeSelector': {'rhcos': '9.4'}}}
    nodes = [{'metadata': {'name': 'moved', 'labels': {'rhcos': '9.6'}}},
             {'metadata': {'name': 'stays', 'labels': {'rhcos': '9.4'}}}]
    leaving = crashing_pod('old', 'moved')
    leaving['metadata']['labels'] = {'controller-revision-hash': 'h'}
    serving = pod('a', 'stays', revision='h')
    observation = observe_daemonsets(FakeReads(daemonsets=[ds], pods=[serving, leaving], nodes=nodes,
                                               revisions=[revision(1, 'h')]), ['toolkit'], '')
    assert observation.problems == []
    assert not observation.ready  # until the controller deletes it
    # On a node it still selects, the same crash loop ends the wait.
    nodes[0]['metadata']['labels']['rhcos'] = '9.4'
    observation = observe_daemonsets(FakeReads(daemonsets=[ds], pods=[serving, leaving], nodes=nodes,
                                               revisions=[revision(1, 'h')]), ['toolkit'], '')
    assert [(p['kind'], p['node'], p['fatal']) for p in observation.problems] == [('crash', 'moved', True)]

    # Nodes are read only for a DaemonSet whose pods have a fatal problem.
    class Unread(FakeReads):
        def nodes(self, names, selector, labels_only=False):
            raise AssertionError('nodes read')

    observe_daemonsets(Unread(daemonsets=[ds], pods=[serving, pod('b', 'moved', ready=False, revision='h')],
                              revisions=[revision(1, 'h')]), ['toolkit'], '')


def test_a_deployment_is_ready_with_its_spec_observed_and_every_replica_updated_and_available():
    assert deployment_state(controller())['ready']
    for stale in (controller(generation=2), controller(updated=0), controller(available=0)):
        assert not deployment_state(stale)['ready']
    # Not ready: the problems of its pods (read by its selector) say why; ready: its pods are not read.
    reads = FakeReads(daemonsets=[controller(available=0)], pods=[image_pull_pod('controller-x', 'cp-1')])
    observation = observe_deployments(reads, ['controller'], '')
    assert not observation.ready and ('pods', 'app=controller') in reads.calls
    assert 'nvcr.io/nvidia/k8s/missing:1' in observation.problems[0]['text']
    assert observation.report['deployments'][0]['available'] == 0
    ready = FakeReads(daemonsets=[controller()])
    assert observe_deployments(ready, ['controller'], '').ready and ('pods', 'app=controller') not in ready.calls
    missing = observe_deployments(FakeReads(missing=['nope']), ['nope'], '')
    assert not missing.ready and missing.problems[0]['text'] == 'Deployment gpu/nope does not exist'
