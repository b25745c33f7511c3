# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.operands import waiter
from ansible_collections.accelerators.gpu.plugins.module_utils.operands.waiter import (
    FAILED_FAST, READY, TIMED_OUT, Observation, allocatable_state, daemonset_problems, daemonset_state, diagnose,
    job_state, observe_allocatable, observe_daemonsets, observe_jobs, observe_service, outcome_message, pinned_node,
    pod_problems, selector_string, served_nodes, wait, warning_events)

NS = 'gpu'
TOOLKIT_IMAGE = 'nvcr.io/nvidia/k8s/container-toolkit:v1.17.8-ubuntu20.04'


def daemonset(name='toolkit', uid='ds-1', generation=1, observed=1, desired=2, current=None, ready=None,
              updated=None, available=None, strategy='RollingUpdate'):
    current = desired if current is None else current
    return {
        'metadata': {'name': name, 'namespace': NS, 'uid': uid, 'generation': generation},
        'spec': {'selector': {'matchLabels': {'app': name}}, 'updateStrategy': {'type': strategy}},
        'status': {'observedGeneration': observed, 'desiredNumberScheduled': desired,
                   'currentNumberScheduled': current,
                   'numberReady': desired if ready is None else ready,
                   'updatedNumberScheduled': desired if updated is None else updated,
                   'numberAvailable': desired if available is None else available},
    }


def container_status(name, state, ready=False, restarts=0, last=None, image=TOOLKIT_IMAGE):
    status = {'name': name, 'image': image, 'ready': ready, 'restartCount': restarts, 'state': state}
    if last:
        status['lastState'] = {'terminated': last}
    return status


def pod(name, node, owner_uid='ds-1', ready=True, phase=None, statuses=None, init_statuses=None, conditions=None,
        revision=None, uid=None, image=TOOLKIT_IMAGE, message=None):
    labels = {'controller-revision-hash': revision} if revision else {}
    status = {'phase': phase or ('Running' if ready else 'Pending'),
              'conditions': conditions if conditions is not None else [
                  {'type': 'Ready', 'status': 'True' if ready else 'False'}],
              'containerStatuses': statuses if statuses is not None else [
                  container_status('main', {'running': {}}, ready=ready)]}
    if init_statuses:
        status['initContainerStatuses'] = init_statuses
    if message:
        status['message'] = message
    return {
        'metadata': {'name': name, 'namespace': NS, 'uid': uid or 'uid-' + name, 'labels': labels,
                     'ownerReferences': [{'uid': owner_uid, 'kind': 'DaemonSet'}]},
        'spec': {'nodeName': node, 'initContainers': [{'name': 'driver-validation', 'image': 'validator:1'}],
                 'containers': [{'name': 'main', 'image': image}]},
        'status': status,
    }


def revision(number, hash_, owner_uid='ds-1'):
    return {'metadata': {'name': 'rev-%s' % number, 'labels': {'controller-revision-hash': hash_},
                         'ownerReferences': [{'uid': owner_uid}]}, 'revision': number}


def event(uid, reason, message, when, kind='Pod', type_='Warning', count=1):
    return {'type': type_, 'reason': reason, 'message': message, 'count': count, 'lastTimestamp': when,
            'involvedObject': {'uid': uid, 'kind': kind}}


def image_pull_pod(name='toolkit-x', node='gpu-1', image='nvcr.io/nvidia/k8s/missing:1'):
    waiting = {'waiting': {'reason': 'ImagePullBackOff', 'message': 'Back-off pulling image "%s"' % image}}
    return pod(name, node, ready=False, statuses=[container_status('main', waiting, image=image)], image=image)


def crashing_pod(name='toolkit-c', node='gpu-2'):
    waiting = {'waiting': {'reason': 'CrashLoopBackOff', 'message': 'back-off 40s restarting failed container'}}
    last = {'reason': 'Error', 'exitCode': 2, 'message': 'containerd config not found'}
    return pod(name, node, ready=False, phase='Running',
               statuses=[container_status('main', waiting, restarts=3, last=last)])


def job(name, node, uid=None, conditions=(), succeeded=0):
    return {
        'metadata': {'name': name, 'namespace': NS, 'uid': uid or 'job-' + name},
        'spec': {'selector': {'matchLabels': {'batch.kubernetes.io/controller-uid': uid or 'job-' + name}},
                 'template': {'spec': {'affinity': {'nodeAffinity': {
                     'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': [{'matchFields': [
                         {'key': 'metadata.name', 'operator': 'In', 'values': [node]}]}]}}}}}},
        'status': {'succeeded': succeeded,
                   'conditions': [{'type': t, 'status': 'True', 'reason': r, 'message': m} for t, r, m in conditions]},
    }


def job_pod(job_obj, node, phase, message='', exit_code=1):
    name = job_obj['metadata']['name'] + '-abc'
    state = {'terminated': {'exitCode': exit_code, 'reason': 'Error' if exit_code else 'Completed',
                            'message': message}}
    found = pod(name, node, owner_uid=job_obj['metadata']['uid'], ready=False, phase=phase,
                statuses=[container_status('cuda', state)])
    found['metadata']['ownerReferences'][0]['kind'] = 'Job'
    return found


def node(name, allocatable):
    return {'metadata': {'name': name}, 'status': {'allocatable': allocatable}}


# -- selectors and pinning ------------------------------------------------------------------------------


def test_selector_string_joins_labels_and_expressions():
    selector = {'matchLabels': {'b': '2', 'a': '1'}, 'matchExpressions': [
        {'key': 'c', 'operator': 'In', 'values': ['x', 'y']}, {'key': 'd', 'operator': 'NotIn', 'values': ['z']},
        {'key': 'e', 'operator': 'Exists'}, {'key': 'f', 'operator': 'DoesNotExist'}]}
    assert selector_string(selector) == 'a=1,b=2,c in (x,y),d notin (z),e,!f'
    assert selector_string(None) == ''


def test_pinned_node_prefers_binding_then_affinity_then_hostname():
    affinity = {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': [
        {'matchFields': [{'key': 'metadata.name', 'operator': 'In', 'values': ['gpu-3']}]}]}}}
    assert pinned_node({'nodeName': 'gpu-1', 'affinity': affinity}) == 'gpu-1'
    assert pinned_node({'affinity': affinity}) == 'gpu-3'
    assert pinned_node({'nodeSelector': {'kubernetes.io/hostname': 'gpu-4'}}) == 'gpu-4'
    assert pinned_node({}) is None


# -- DaemonSet readiness (facts page §7) --------------------------------------------------------------------


def test_daemonset_whose_generation_is_not_observed_is_not_ready():
    state = daemonset_state(daemonset(generation=2, observed=1), [pod('a', 'n1'), pod('b', 'n2')])
    assert not state['ready']
    assert 'generation 2' in state['reason']


def test_freshly_created_daemonset_without_status_is_not_ready():
    fresh = daemonset()
    fresh['status'] = {}
    assert not daemonset_state(fresh, [])['ready']


def test_daemonset_selecting_no_node_is_ready():
    state = daemonset_state(daemonset(desired=0), [])
    assert state['ready']
    assert state['reason'] == 'no node selected'


def test_rolling_daemonset_ready_when_all_updated_and_available():
    state = daemonset_state(daemonset(), [pod('a', 'n1'), pod('b', 'n2'), pod('other', 'n3', owner_uid='x')])
    assert state['ready']
    assert [p['node'] for p in state['pods']] == ['n1', 'n2']


@pytest.mark.parametrize('counts, reason', [
    ({'updated': 1}, '1 of 2 pods updated, 2 available'),
    ({'available': 1}, '2 of 2 pods updated, 1 available'),
])
def test_rolling_daemonset_not_ready(counts, reason):
    state = daemonset_state(daemonset(**counts), [pod('a', 'n1'), pod('b', 'n2')])
    assert not state['ready']
    assert state['reason'] == reason


def test_on_delete_daemonset_ready_only_at_newest_revision():
    revisions = [revision(1, 'old'), revision(2, 'new'), revision(3, 'foreign', owner_uid='x')]
    ds = daemonset(strategy='OnDelete')
    current = [pod('a', 'n1', revision='new'), pod('b', 'n2', revision='new')]
    state = daemonset_state(ds, current, revisions)
    assert state['ready']
    assert state['revision'] == 'new'

    stale = daemonset_state(ds, [pod('a', 'n1', revision='new'), pod('b', 'n2', revision='old')], revisions)
    assert not stale['ready']
    assert '1 of 2 pods run an older revision than new' in stale['reason']
    assert stale['reason'].endswith(': b')


def test_on_delete_daemonset_needs_every_pod_ready_and_present():
    revisions = [revision(1, 'h')]
    ds = daemonset(strategy='OnDelete')
    unready = daemonset_state(ds, [pod('a', 'n1', revision='h'), pod('b', 'n2', revision='h', ready=False)],
                              revisions)
    assert not unready['ready']
    assert unready['reason'] == '1 of 2 pods ready'
    assert not daemonset_state(ds, [pod('a', 'n1', revision='h')], revisions)['ready']
    assert daemonset_state(ds, [pod('a', 'n1')], [])['reason'] == 'no ControllerRevision yet'


def test_terminating_pods_do_not_count():
    leaving = pod('b', 'n2', revision='h')
    leaving['metadata']['deletionTimestamp'] = '2026-01-01T00:00:00Z'
    state = daemonset_state(daemonset(strategy='OnDelete'), [pod('a', 'n1', revision='h'), leaving],
                            [revision(1, 'h')])
    assert not state['ready']
    assert [p['pod'] for p in state['pods']] == ['a']


# -- problems --------------------------------------------------------------------------------------------


def test_image_pull_failure_names_node_pod_and_image_from_the_message():
    problems = pod_problems(image_pull_pod())
    assert len(problems) == 1
    problem = problems[0]
    assert problem['kind'] == 'image' and problem['fatal']
    assert problem['node'] == 'gpu-1' and problem['pod'] == 'toolkit-x'
    assert problem['text'].startswith('node gpu-1: pod gpu/toolkit-x cannot pull image nvcr.io/nvidia/k8s/missing:1')


def test_image_pull_failure_reported_once_per_image_even_when_every_container_shows_it():
    # The simulator, like a kubelet that never started the pod, marks every container with the same message.
    image = 'example.test/missing:1'
    waiting = {'waiting': {'reason': 'ImagePullBackOff', 'message': 'Back-off pulling image "%s"' % image}}
    broken = pod('p', 'gpu-1', ready=False, statuses=[container_status('main', waiting)],
                 init_statuses=[container_status('driver-validation', waiting)])
    assert [p['text'] for p in pod_problems(broken)] == [
        'node gpu-1: pod gpu/p cannot pull image %s (ImagePullBackOff: Back-off pulling image "%s")' % (image, image)]


def test_err_image_pull_without_image_in_message_names_the_spec_image():
    waiting = {'waiting': {'reason': 'ErrImagePull', 'message': 'unauthorized'}}
    problem = pod_problems(pod('p', 'gpu-1', ready=False, statuses=[container_status('main', waiting)]))[0]
    assert 'cannot pull image %s (ErrImagePull: unauthorized)' % TOOLKIT_IMAGE in problem['text']


def test_crash_loop_names_container_message_and_last_exit():
    problem = pod_problems(crashing_pod())[0]
    assert problem['kind'] == 'crash' and problem['fatal']
    assert problem['text'] == (
        'node gpu-2: pod gpu/toolkit-c container main is crash-looping after 3 restarts '
        '(CrashLoopBackOff: back-off 40s restarting failed container; last exit 2 Error: containerd config not found)')


def test_container_config_error_is_fatal():
    waiting = {'waiting': {'reason': 'CreateContainerConfigError', 'message': 'configmap "x" not found'}}
    problem = pod_problems(pod('p', 'gpu-1', ready=False, statuses=[container_status('main', waiting)]))[0]
    assert problem['kind'] == 'config' and problem['fatal']
    assert 'configmap "x" not found' in problem['text']


def test_unschedulable_pod_is_stuck_not_fatal_and_carries_the_scheduler_message():
    pending = pod('p', None, ready=False, statuses=[], conditions=[
        {'type': 'PodScheduled', 'status': 'False', 'reason': 'Unschedulable',
         'message': '0/3 nodes are available: 3 Insufficient nvidia.com/gpu.'}])
    pending['spec']['nodeSelector'] = {'kubernetes.io/hostname': 'gpu-5'}
    problem = pod_problems(pending)[0]
    assert problem['kind'] == 'unschedulable' and not problem['fatal']
    assert problem['text'] == ('node gpu-5: pod gpu/p is Pending: Unschedulable: '
                               '0/3 nodes are available: 3 Insufficient nvidia.com/gpu.')


def test_waiting_for_a_predecessor_is_no_problem():
    waiting = {'waiting': {'reason': 'PodInitializing', 'message': 'waiting for nvidia-driver to be ready'}}
    assert pod_problems(pod('p', 'gpu-1', ready=False, statuses=[container_status('main', waiting)])) == []


def in_init(name, node):
    """A pod whose init container waits (for a driver), as a kubelet shows it."""
    waiting = {'waiting': {'reason': 'PodInitializing', 'message': ''}}
    return pod(name, node, ready=False, statuses=[container_status('main', waiting)],
               init_statuses=[container_status('driver-validation', {'running': {}})],
               conditions=[{'type': 'Initialized', 'status': 'False'}, {'type': 'Ready', 'status': 'False'}])


def driver_labelled(name, value):
    return {'metadata': {'name': name, 'labels': {'nvidia.com/gpu.deploy.driver': value}}}


def test_a_pod_waiting_in_init_on_a_node_opted_out_of_the_driver_is_a_problem_after_the_grace():
    nodes = [driver_labelled('out', 'false'), driver_labelled('host', 'pre-installed'),
             driver_labelled('on', 'true')]
    pods = [in_init('a', 'out'), in_init('b', 'host'), in_init('c', 'on'),
            pod('d', 'out', ready=False, phase='Running')]
    assert [waiter.waits_in_init(p) for p in pods] == [True, True, True, False]
    problems = waiter.driver_opted_out_problems(pods, nodes)
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


def test_daemonset_that_cannot_create_pods_says_why():
    ds = daemonset(current=0, ready=0, updated=0, available=0)
    events = [event('ds-1', 'FailedCreate', 'pods "x" is forbidden: violates PodSecurity "baseline:latest"',
                    '2026-01-01T00:00:02Z', kind='DaemonSet'),
              event('ds-1', 'FailedCreate', 'older', '2026-01-01T00:00:01Z', kind='DaemonSet')]
    state = daemonset_state(ds, [])
    problems = daemonset_problems(ds, [], state, events)
    assert [p['kind'] for p in problems] == ['not-created']
    assert not problems[0]['fatal']
    assert problems[0]['text'] == ('DaemonSet gpu/toolkit has created 0 of 2 pods (FailedCreate: pods "x" is '
                                   'forbidden: violates PodSecurity "baseline:latest")')


def test_pods_the_daemonset_status_does_not_count_yet_are_not_reported_as_not_created():
    # The controller created the pods (one cannot pull its image) and has not yet counted them in the status.
    ds = daemonset(current=0, ready=0, updated=0, available=0)
    pulling = container_status('main', {'waiting': {'reason': 'ImagePullBackOff', 'message': 'Back-off pulling'}})
    pods = [pod('p-0', 'gpu-0'), pod('p-1', 'gpu-1', ready=False, statuses=[pulling])]
    problems = daemonset_problems(ds, pods, daemonset_state(ds, pods))
    assert [(p['kind'], p['node']) for p in problems] == [('image', 'gpu-1')]
    # One pod of two seen: the other is not created.
    problems = daemonset_problems(ds, pods[1:], daemonset_state(ds, pods[1:]))
    assert [(p['kind'], p['node']) for p in problems] == [('image', 'gpu-1'), ('not-created', None)]
    assert problems[1]['text'] == 'DaemonSet gpu/toolkit has created 1 of 2 pods'


def test_ready_daemonset_has_no_problems():
    ds = daemonset()
    assert daemonset_problems(ds, [pod('a', 'n1')], daemonset_state(ds, [pod('a', 'n1'), pod('b', 'n2')])) == []


def test_warning_events_match_by_uid_newest_first_and_limited():
    events = [event('u1', 'BackOff', 'second', '2026-01-01T00:00:02Z', count=4),
              event('u1', 'Failed', 'first', '2026-01-01T00:00:01Z'),
              event('u1', 'Scheduled', 'normal', '2026-01-01T00:00:03Z', type_='Normal'),
              event('u2', 'Failed', 'other pod', '2026-01-01T00:00:04Z')]
    found = warning_events(events, {'metadata': {'uid': 'u1'}}, limit=1)
    assert found == [{'reason': 'BackOff', 'message': 'second', 'count': 4, 'last_seen': '2026-01-01T00:00:02Z'}]


# -- Jobs ------------------------------------------------------------------------------------------------


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


# -- allocatable -----------------------------------------------------------------------------------------


def test_allocatable_by_pattern_and_missing_nodes():
    nodes = [node('a', {'nvidia.com/gpu': '8', 'cpu': '32'}), node('b', {'nvidia.com/gpu': '0'}),
             node('c', {'nvidia.com/mig-1g.10gb': '7', 'nvidia.com/mig-2g.20gb': '2'})]
    assert allocatable_state(nodes, 'nvidia.com/gpu') == {
        'allocatable': {'a': 8, 'b': 0, 'c': 0}, 'node_resources': {'a': 'nvidia.com/gpu'}, 'missing': ['b', 'c']}
    assert allocatable_state(nodes, 'nvidia.com/mig-*')['allocatable']['c'] == 9
    assert allocatable_state(nodes, 'nvidia.com/gpu', expected=['a', 'gone'])['missing'] == ['gone']


def test_allocatable_any_of_several_patterns_names_the_resource_a_workload_requests():
    # Under the mixed strategy: a partitioned node passes with its MIG devices, a whole-GPU node with its GPUs; a node
    # advertising both (some GPUs partitioned) gives a MIG device first, the first by name.
    nodes = [node('whole', {'nvidia.com/gpu': '2', 'nvidia.com/mig-1g.10gb': '0'}),
             node('mig', {'nvidia.com/gpu': '0', 'nvidia.com/mig-2g.20gb': '3', 'nvidia.com/mig-1g.10gb': '7'}),
             node('both', {'nvidia.com/gpu': '1', 'nvidia.com/mig-3g.40gb': '2'}),
             node('none', {'nvidia.com/gpu': '0'})]
    assert allocatable_state(nodes, ['nvidia.com/mig-*', 'nvidia.com/gpu']) == {
        'allocatable': {'both': 2, 'mig': 10, 'none': 0, 'whole': 2},
        'node_resources': {'both': 'nvidia.com/mig-3g.40gb', 'mig': 'nvidia.com/mig-1g.10gb',
                           'whole': 'nvidia.com/gpu'},
        'missing': ['none']}
    # Whole GPUs only: the partitioned node lacks them.
    assert allocatable_state(nodes, ['nvidia.com/gpu'])['missing'] == ['mig', 'none']


# -- observing through a reads object ----------------------------------------------------------------------


class FakeReads:
    namespace = NS

    def __init__(self, daemonsets=(), jobs=(), pods=(), revisions=(), events=(), nodes=(), missing=(), slices=()):
        self._daemonsets, self._jobs, self._pods, self._slices = list(daemonsets), list(jobs), list(pods), list(slices)
        self._revisions, self._events, self._nodes, self._missing = list(revisions), list(events), nodes, missing
        self.calls = []

    def daemonsets(self, names, selector):
        self.calls.append(('daemonsets', tuple(names), selector))
        return self._daemonsets, list(self._missing)

    def jobs(self, names, selector):
        self.calls.append(('jobs', tuple(names), selector))
        return self._jobs, list(self._missing)

    def deployments(self, names, selector):
        self.calls.append(('deployments', tuple(names), selector))
        return self._daemonsets, list(self._missing)

    def pods(self, selector):
        self.calls.append(('pods', selector))
        return self._pods

    def revisions(self, selector):
        self.calls.append(('revisions', selector))
        return self._revisions

    def warning_events(self):
        self.calls.append(('events',))
        return self._events

    def nodes(self, names, selector, labels_only=False):
        return list(self._nodes)

    def endpoint_slices(self, service):
        self.calls.append(('endpointslices', service))
        return list(self._slices)


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


def test_observe_allocatable():
    reads = FakeReads(nodes=[node('a', {'nvidia.com/gpu': '4'}), node('b', {})])
    observation = observe_allocatable(reads, ['a', 'b'], '', 'nvidia.com/gpu')
    assert not observation.ready
    assert observation.report == {'allocatable': {'a': 4, 'b': 0}, 'node_resources': {'a': 'nvidia.com/gpu'}, 'missing': ['b']}


def endpoint(node, ready=True):
    return {'nodeName': node, 'conditions': {'ready': ready}}


def test_served_nodes_have_a_ready_endpoint_in_any_slice():
    slices = [{'endpoints': [endpoint('a'), endpoint('b', ready=False)]}, {'endpoints': None},
              {'endpoints': [endpoint('c'), {'conditions': {'ready': True}}, {'nodeName': 'd'}]}]
    assert served_nodes(slices) == ['a', 'c']


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


# -- the wait loop ---------------------------------------------------------------------------------------


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
    assert waiter.unreachable_line(waited['unreachable']) == (
        'the API server was unreachable for 6 s of the wait (last: GET /api/v1/pods: HTTP 503: unavailable)')
    never = run_wait([lost], timeout=4)
    assert never['outcome'] == TIMED_OUT and not never['observation'].ready and never['unreachable']['seconds'] == 4


def test_a_wait_ends_at_an_error_that_is_not_a_lost_api_server():
    with pytest.raises(ValueError):
        run_wait([Observation(False), ValueError('a bug')])


def problem(kind, key='k'):
    return {'kind': kind, 'fatal': kind in waiter.FATAL_KINDS, 'key': key, 'node': 'n', 'pod': 'p',
            'text': kind}


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


# -- what the module says --------------------------------------------------------------------------------


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
    lines = waiter.summarize(problems)
    assert len(lines) == 11
    assert lines[-1] == '... and 5 more problems (see the problems returned)'


def test_on_delete_daemonset_accepting_outdated_pods_leaves_them_to_the_rollout():
    revisions = [revision(1, 'old'), revision(2, 'new')]
    ds = daemonset(strategy='OnDelete')
    crashing = pod('c', 'n3', revision='old', ready=False)
    state = daemonset_state(ds, [pod('a', 'n1', revision='new'), pod('b', 'n2', revision='old'), crashing],
                            revisions, accept_outdated=True)
    assert state['ready'] and state['outdated'] == ['n2', 'n3']
    not_yet = daemonset_state(ds, [pod('a', 'n1', revision='new', ready=False), pod('b', 'n2', revision='old')],
                              revisions, accept_outdated=True)
    assert not not_yet['ready'] and not_yet['reason'] == '1 of 2 pods ready'


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


def controller(generation=1, observed=1, updated=1, available=1):
    return {'metadata': {'name': 'controller', 'namespace': NS, 'generation': generation},
            'spec': {'replicas': 1, 'selector': {'matchLabels': {'app': 'controller'}}},
            'status': {'observedGeneration': observed, 'updatedReplicas': updated, 'availableReplicas': available}}


def test_a_deployment_is_ready_with_its_spec_observed_and_every_replica_updated_and_available():
    assert waiter.deployment_state(controller())['ready']
    for stale in (controller(generation=2), controller(updated=0), controller(available=0)):
        assert not waiter.deployment_state(stale)['ready']
    # Not ready: the problems of its pods (read by its selector) say why; ready: its pods are not read.
    reads = FakeReads(daemonsets=[controller(available=0)], pods=[image_pull_pod('controller-x', 'cp-1')])
    observation = waiter.observe_deployments(reads, ['controller'], '')
    assert not observation.ready and ('pods', 'app=controller') in reads.calls
    assert 'nvcr.io/nvidia/k8s/missing:1' in observation.problems[0]['text']
    assert observation.report['deployments'][0]['available'] == 0
    ready = FakeReads(daemonsets=[controller()])
    assert waiter.observe_deployments(ready, ['controller'], '').ready and ('pods', 'app=controller') not in ready.calls
    missing = waiter.observe_deployments(FakeReads(missing=['nope']), ['nope'], '')
    assert not missing.ready and missing.problems[0]['text'] == 'Deployment gpu/nope does not exist'
