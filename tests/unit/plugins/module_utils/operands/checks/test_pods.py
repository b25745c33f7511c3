# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from ansible_collections.accelerators.gpu.plugins.module_utils.operands.checks.pods import pod_problems
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.operands.operand_objects import (
    TOOLKIT_IMAGE, container_status, crashing_pod, image_pull_pod, pod)


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


HEADERS_FAILURE = ("Updating the package cache... W: Failed to fetch http://archive.ubuntu.com/ubuntu/dists/jammy/"
                   "InRelease  Temporary failure resolving 'archive.ubuntu.com'; Installing Linux kernel headers... "
                   "E: Unable to locate package linux-headers-5.15.0-100-generic")


def driver_pod(message):
    waiting = {'waiting': {'reason': 'CrashLoopBackOff', 'message': message}}
    return pod('nvidia-driver-daemonset-x', 'gpu-3', ready=False, statuses=[container_status('nvidia-driver-ctr',
                                                                                             waiting)])


def test_a_driver_that_cannot_install_the_kernel_headers_points_to_the_repo_config():
    problem, = pod_problems(driver_pod(HEADERS_FAILURE))
    assert problem['text'].endswith(
        'E: Unable to locate package linux-headers-5.15.0-100-generic); the driver container could not install the '
        'kernel headers linux-headers-5.15.0-100-generic: the node reaches no package repository that has them. '
        'Point it at a mirror with driver_repo_config (driver.repo_config: a ConfigMap of repository files, mounted '
        'where the OS reads them)')


def test_an_untrusted_mirror_points_to_the_cert_config_too():
    untrusted = HEADERS_FAILURE.replace(
        "Temporary failure resolving 'archive.ubuntu.com'",
        'Certificate verification failed: The certificate is NOT trusted. The certificate issuer is unknown.')
    problem, = pod_problems(driver_pod(untrusted))
    assert problem['text'].endswith(
        "and trust the mirror's CA with driver_cert_config (driver.cert_config: a ConfigMap of CA certificates), as "
        "the mirror's certificate was not trusted")


def test_another_crash_gets_no_hint():
    problem, = pod_problems(driver_pod('NVRM: RmInitAdapter failed'))
    assert 'driver_repo_config' not in problem['text']
