# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pods: whether a pod is ready, what its containers are doing, and the problems it shows (an image that cannot be
pulled, a crash loop, a container that cannot be created, a failed pod, a pod the scheduler cannot place, a pod waiting
for a driver on a node opted out of the driver)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ...nodes.facts import DEPLOY_LABEL_PREFIX
from .objects import metadata_of, pod_node, status_of
from .problems import CONFIG, CRASH, DRIVER_OPTED_OUT, FAILED, IMAGE, UNSCHEDULABLE, new_problem

# Waiting reasons that retrying will not cure: the wait fails at once, naming the cause.
IMAGE_REASONS = ('ImagePullBackOff', 'ErrImagePull', 'InvalidImageName', 'ErrImageNeverPull')
CRASH_REASONS = ('CrashLoopBackOff', 'RunContainerError')
CONFIG_REASONS = ('CreateContainerConfigError', 'CreateContainerError')
_PULLED_IMAGE_RE = re.compile(r'image "([^"]+)"')
# apt in the Ubuntu driver container (nvidia-driver _install_prerequisites) when no repository it reaches has the
# kernel headers, and when the TLS certificate of the one it reaches is not trusted.
_HEADERS_RE = re.compile(r'Unable to locate package (linux-headers-\S+)')
_UNTRUSTED_RE = re.compile(r'Certificate verification failed')
DRIVER_DEPLOY_LABEL = DEPLOY_LABEL_PREFIX + 'driver'
# The nodes an admin opted out of the driver: no driver pod runs there, and (not labelled pre-installed) no driver is
# known on the host.
DRIVER_OPTED_OUT_SELECTOR = DRIVER_DEPLOY_LABEL + '=false'


def pod_is_ready(pod):
    """Every container Ready (the pod's Ready condition) and the pod not being deleted."""
    if metadata_of(pod).get('deletionTimestamp'):
        return False
    return any(c.get('type') == 'Ready' and c.get('status') == 'True' for c in status_of(pod).get('conditions') or [])


def _images_by_container(pod):
    spec = pod.get('spec') or {}
    containers = (spec.get('initContainers') or []) + (spec.get('containers') or [])
    return dict((c['name'], c.get('image')) for c in containers)


def container_states(pod):
    """What each container not running and ready is doing: name, image, state, reason, message, restarts and,
    for one that ran before, how it last ended."""
    images = _images_by_container(pod)
    status = status_of(pod)
    found = []
    for init, statuses in ((True, status.get('initContainerStatuses')), (False, status.get('containerStatuses'))):
        for container in statuses or []:
            state = container.get('state') or {}
            if ('running' in state and container.get('ready')) or (state.get('terminated') or {}).get('exitCode') == 0:
                continue
            entry = {'container': container.get('name'), 'init': init, 'image': images.get(container.get('name')),
                     'restarts': container.get('restartCount') or 0}
            for name in ('waiting', 'terminated', 'running'):
                if name in state:
                    details = state[name] or {}
                    entry.update(state=name, reason=details.get('reason') or '', message=details.get('message') or '')
                    if name == 'terminated':
                        entry['exit_code'] = details.get('exitCode')
                    break
            last = (container.get('lastState') or {}).get('terminated')
            if last:
                entry['last_termination'] = {'reason': last.get('reason') or '', 'exit_code': last.get('exitCode'),
                                             'message': last.get('message') or ''}
            found.append(entry)
    return found


def scheduling_message(pod):
    """The scheduler's reason a pod is not placed (PodScheduled False), or None."""
    for condition in status_of(pod).get('conditions') or []:
        if condition.get('type') == 'PodScheduled' and condition.get('status') == 'False':
            return '%s: %s' % (condition.get('reason') or 'Unschedulable', condition.get('message') or '')
    return None


def _pulled_image(entry):
    """The image a pull failure names in its message (kubelet: 'Back-off pulling image "x"'), else the spec's."""
    match = _PULLED_IMAGE_RE.search(entry.get('message') or '')
    return match.group(1) if match else entry.get('image')


def _where(pod):
    node = pod_node(pod)
    return '%spod %s/%s' % ('node %s: ' % node if node else '', metadata_of(pod).get('namespace'), metadata_of(pod).get('name'))


def _last_exit(entry):
    last = entry.get('last_termination')
    if not last:
        return ''
    return '; last exit %s %s%s' % (last.get('exit_code'), last.get('reason'),
                                    ': ' + last['message'] if last.get('message') else '')


def driver_build_hint(message):
    """What to set when a driver container's message says it could not install the kernel headers, or ''."""
    headers = _HEADERS_RE.search(message or '')
    if not headers:
        return ''
    hint = ('; the driver container could not install the kernel headers %s: the node reaches no package repository '
            'that has them. Point it at a mirror with driver_repo_config (driver.repo_config: a ConfigMap of '
            'repository files, mounted where the OS reads them)' % headers.group(1))
    if _UNTRUSTED_RE.search(message):
        hint += (', and trust the mirror\'s CA with driver_cert_config (driver.cert_config: a ConfigMap of CA '
                 'certificates), as the mirror\'s certificate was not trusted')
    return hint


def pod_problems(pod):
    """Problems a pod shows: image pull failures, crash loops, container config errors, a failed pod, or a
    scheduler that cannot place it. Each names the node, the pod, the container and the cause."""
    problems = []
    seen = set()
    where = _where(pod)
    for entry in container_states(pod):
        reason = entry.get('reason') or ''
        if reason in IMAGE_REASONS:
            image = _pulled_image(entry)
            if ('image', image) in seen:
                continue
            seen.add(('image', image))
            problems.append(new_problem(IMAGE, pod, '%s cannot pull image %s (%s: %s)' % (
                where, image, reason, entry.get('message')), key=(IMAGE, metadata_of(pod).get('uid'), image)))
        elif reason in CRASH_REASONS:
            problems.append(new_problem(CRASH, pod, '%s container %s is crash-looping after %s restarts (%s: %s%s)%s' % (
                where, entry['container'], entry['restarts'], reason, entry.get('message'), _last_exit(entry),
                driver_build_hint('%s %s' % (entry.get('message'), _last_exit(entry)))),
                key=(CRASH, metadata_of(pod).get('uid'), entry['container'])))
        elif reason in CONFIG_REASONS:
            problems.append(new_problem(CONFIG, pod, '%s container %s cannot be created (%s: %s)' % (
                where, entry['container'], reason, entry.get('message')),
                key=(CONFIG, metadata_of(pod).get('uid'), entry['container'])))
    if status_of(pod).get('phase') == 'Failed':
        problems.append(new_problem(FAILED, pod, '%s failed: %s' % (where, failure_message(pod))))
    unschedulable = scheduling_message(pod)
    if unschedulable and not pod.get('spec', {}).get('nodeName'):
        problems.append(new_problem(UNSCHEDULABLE, pod, '%s is Pending: %s' % (where, unschedulable)))
    return problems


def waits_in_init(pod):
    """True while a pod's init containers have not all completed (its Initialized condition is False), as an operand
    pod's stay while its driver-validation init container waits for a driver."""
    return any(c.get('type') == 'Initialized' and c.get('status') == 'False'
               for c in status_of(pod).get('conditions') or [])


def driver_opted_out_problems(pods, nodes):
    """Problems of the pods waiting in Init on a node opted out of the driver (nvidia.com/gpu.deploy.driver=false;
    nodes: Node dicts, those with another value are ignored): no driver pod comes there, and none is known on the host
    (that is nvidia.com/gpu.deploy.driver=pre-installed), so waiting does not help. A host driver on such a node is
    found by the init container within seconds: the problem ends the wait only once it has lasted the grace period."""
    opted_out = set(metadata_of(node).get('name') for node in nodes
                    if (metadata_of(node).get('labels') or {}).get(DRIVER_DEPLOY_LABEL) == 'false')
    return [new_problem(DRIVER_OPTED_OUT, pod, (
        '%s waits in Init for a driver, but the node is opted out of the driver (%s=false), so no driver pod runs '
        'there, and has no pre-installed one (%s=pre-installed): install a driver on the host and label the node '
        '%s=pre-installed, or remove the label so that the next deploy runs the driver there') % (
            _where(pod), DRIVER_DEPLOY_LABEL, DRIVER_DEPLOY_LABEL, DRIVER_DEPLOY_LABEL))
        for pod in pods if pod_node(pod) in opted_out and waits_in_init(pod)]


def failure_message(pod):
    """Why a pod failed: a failing container's termination message (or exit code), else the pod's message."""
    for entry in container_states(pod):
        if entry.get('state') == 'terminated' and entry.get('exit_code') not in (0, None):
            message = entry.get('message') or entry.get('reason') or ''
            return 'container %s exited with code %s%s' % (
                entry['container'], entry['exit_code'], ': ' + message if message else '')
    status = status_of(pod)
    return status.get('message') or status.get('reason') or 'no message'
