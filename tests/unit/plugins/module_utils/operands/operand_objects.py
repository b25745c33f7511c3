# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Objects of the operands as the API returns them, and a stand-in of the reads of a wait, for the tests of the
readiness checks, the waiter and the diagnosis."""

from ansible_collections.accelerators.gpu.plugins.module_utils.operands.checks.problems import FATAL_KINDS

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


def in_init(name, node):
    """A pod whose init container waits (for a driver), as a kubelet shows it."""
    waiting = {'waiting': {'reason': 'PodInitializing', 'message': ''}}
    return pod(name, node, ready=False, statuses=[container_status('main', waiting)],
               init_statuses=[container_status('driver-validation', {'running': {}})],
               conditions=[{'type': 'Initialized', 'status': 'False'}, {'type': 'Ready', 'status': 'False'}])


def driver_labelled(name, value):
    return {'metadata': {'name': name, 'labels': {'nvidia.com/gpu.deploy.driver': value}}}


def endpoint(node, ready=True):
    return {'nodeName': node, 'conditions': {'ready': ready}}


def controller(generation=1, observed=1, updated=1, available=1):
    return {'metadata': {'name': 'controller', 'namespace': NS, 'generation': generation},
            'spec': {'replicas': 1, 'selector': {'matchLabels': {'app': 'controller'}}},
            'status': {'observedGeneration': observed, 'updatedReplicas': updated, 'availableReplicas': available}}


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


def problem(kind, key='k'):
    return {'kind': kind, 'fatal': kind in FATAL_KINDS, 'key': key, 'node': 'n', 'pod': 'p',
            'text': kind}
