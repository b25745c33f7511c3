# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pure decisions of the gpu_remediation module's run (module_utils/remediation/run.py): whether a node's GPUs
and its validation let it return, and whether the operands holding its GPUs are stopped or back."""

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.remediation import run, state

PLUGIN_KEY = 'nvidia.com/gpu.deploy.device-plugin'


def node_status(capacity, allocatable):
    return {'status': {'capacity': {'nvidia.com/gpu': capacity}, 'allocatable': {'nvidia.com/gpu': allocatable}}}


@pytest.mark.parametrize('capacity, allocatable, words', [
    ('8', '8', ''),
    ('8', '7', 'allocatable nvidia.com/gpu 7 of capacity 8'),
    ('0', '0', 'allocatable nvidia.com/gpu 0 of capacity 0'),
])
def test_the_gpus_are_back_only_when_allocatable_equals_a_capacity(capacity, allocatable, words):
    assert run.gpus_back(node_status(capacity, allocatable)) == words


def test_mig_devices_of_the_mixed_strategy_count_as_gpus():
    node = {'status': {'capacity': {'nvidia.com/mig-1g.10gb': '7', 'nvidia.com/gpu': '0'},
                       'allocatable': {'nvidia.com/mig-1g.10gb': '6', 'nvidia.com/gpu': '0'}}}
    assert run.gpus_back(node) == 'allocatable GPU devices (nvidia.com/gpu and MIG) 6 of capacity 7'
    node['status']['allocatable']['nvidia.com/mig-1g.10gb'] = '7'
    assert run.gpus_back(node) == ''


def dra_slice(node, uuids):
    return {'spec': {'nodeName': node, 'driver': 'gpu.nvidia.com', 'devices': [
        {'name': 'gpu-%d' % index, 'attributes': {'type': {'string': 'gpu'}, 'uuid': {'string': uuid}}}
        for index, uuid in enumerate(uuids)]}}


def test_a_node_in_dra_mode_is_back_when_its_slices_publish_every_gpu_gfd_counts():
    node = {'metadata': {'name': 'gpu-0', 'labels': {'nvidia.com/gpu.deploy.dra-driver': 'true',
                                                     'nvidia.com/gpu.count': '2'}},
            'status': {'capacity': {}, 'allocatable': {}}}
    assert run.in_dra_mode(node)
    assert run.gpus_back(node, [dra_slice('gpu-0', ['GPU-a', 'GPU-b'])]) == ''
    assert run.gpus_back(node, [dra_slice('gpu-0', ['GPU-a']), dra_slice('gpu-1', ['GPU-c', 'GPU-d'])]) == (
        'the DRA driver publishes 1 of the 2 GPUs GPU feature discovery counts')
    assert run.gpus_back(node, []) == 'the DRA driver publishes 0 of the 2 GPUs GPU feature discovery counts'
    assert not run.in_dra_mode(node_status('2', '2'))


def test_each_attempt_is_validated_anew():
    record = {'since': 10, 'attempts': [{'action': 'reset', 'started': 20}]}
    assert run.validation_key(record) == 'reset-20'
    later = state.start_attempt(record, 'reboot', 30, boot_id='b1')
    assert run.validation_key(later) == 'reboot-30'
    assert run.validation_key({'since': 10}) == 'released-10'


def test_a_failed_validation_fails_the_attempt_before_it():
    record = {'attempts': [{'action': 'reset', 'started': 20, 'finished': 25, 'result': 'succeeded'}]}
    failed = run.validation_failed(record, 'CUDA validation failed', 40)
    assert failed['attempts'][-1]['result'] == state.ATTEMPT_FAILED
    assert failed['attempts'][-1]['message'] == failed['failure'] == 'CUDA validation failed'
    assert record['attempts'][-1]['result'] == 'succeeded'


def job(node, key, condition):
    return {'metadata': {'name': 'j-' + node, 'namespace': 'ns', 'annotations': {
        'accelerators.gpu/node': node, 'accelerators.gpu/validated-pods': key}},
        'status': {'conditions': [{'type': condition, 'status': 'True', 'reason': 'BackoffLimitExceeded',
                                   'message': 'pod failed'}]}}


def test_only_a_succeeded_job_of_this_attempt_validates_the_node():
    assert run.validation_words('gpu-1', 'reset-20', [job('gpu-1', 'reset-20', 'Complete')]) == ''
    # An earlier attempt's Job, or another node's, does not count.
    assert 'did not pass' in run.validation_words('gpu-1', 'reset-20', [
        job('gpu-1', 'reset-10', 'Complete'), job('gpu-2', 'reset-20', 'Complete')])
    assert run.validation_words('gpu-1', 'reset-20', [job('gpu-1', 'reset-20', 'Failed')]).startswith(
        'CUDA validation failed on node')


def daemonset(name, selector):
    return {'metadata': {'name': name}, 'spec': {'template': {'spec': {'nodeSelector': selector}}}}


def pod(name, owner, ready=True):
    return {'metadata': {'name': name, 'ownerReferences': [{'kind': 'DaemonSet', 'name': owner}]},
            'status': {'phase': 'Running', 'conditions': [{'type': 'Ready', 'status': 'True' if ready else 'False'}]}}


DAEMONSETS = [daemonset('nvidia-device-plugin', {PLUGIN_KEY: 'true'}),
              daemonset('nvidia-driver', {'nvidia.com/gpu.deploy.driver': 'true'})]


def test_operands_are_stopped_when_no_pod_of_a_paused_gpu_client_is_left():
    paused = {PLUGIN_KEY: 'paused-for-gpu-reset', 'nvidia.com/gpu.deploy.driver': 'true'}
    running = [pod('plugin-1', 'nvidia-device-plugin'), pod('driver-1', 'nvidia-driver')]
    assert run.operands_not_settled(DAEMONSETS, paused, running) == \
        'nvidia-device-plugin still runs (plugin-1)'
    # The driver is no GPU client of the reset: its pod stays.
    assert run.operands_not_settled(DAEMONSETS, paused, running[1:]) == ''


def test_operands_are_back_when_each_gpu_client_selecting_the_node_has_a_ready_pod():
    labels = {PLUGIN_KEY: 'true'}
    assert run.operands_not_settled(DAEMONSETS, labels, []) == 'nvidia-device-plugin not ready yet'
    assert run.operands_not_settled(DAEMONSETS, labels, [pod('p', 'nvidia-device-plugin', ready=False)]) == \
        'nvidia-device-plugin not ready yet'
    assert run.operands_not_settled(DAEMONSETS, labels, [pod('p', 'nvidia-device-plugin')]) == ''


def test_on_a_dra_node_only_the_dra_daemonsets_of_a_gpu_client_count():
    gfd = 'nvidia.com/gpu.deploy.gpu-feature-discovery'
    dra = 'nvidia.com/gpu.deploy.dra-driver'

    def by_affinity(name, operator):
        spec = daemonset(name, {gfd: 'true'})
        terms = [{'matchExpressions': [{'key': dra, 'operator': operator, 'values': ['true']}]}]
        spec['spec']['template']['spec']['affinity'] = {
            'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': terms}}}
        return spec
    daemonsets = [by_affinity('gpu-feature-discovery', 'NotIn'), by_affinity('gpu-feature-discovery-dra', 'In')]
    labels = {gfd: 'true', dra: 'true'}
    assert run.operands_not_settled(daemonsets, labels, [pod('g', 'gpu-feature-discovery-dra')]) == ''
    assert run.operands_not_settled(daemonsets, dict(labels, **{dra: 'false'}), [
        pod('g', 'gpu-feature-discovery-dra')]) == (
        'gpu-feature-discovery not ready yet; gpu-feature-discovery-dra still runs (g)')


def test_the_validation_plan_of_the_nodes_to_validate_leaves_the_jobs_of_the_others():
    earlier = job('gpu-2', 'reset-5', 'Complete')
    outdated = job('gpu-1', 'reset-10', 'Complete')
    plan = run.node_validation_plan([earlier, outdated], {'gpu-1': 'reset-20'})
    assert plan['validate'] == ['gpu-1'] and plan['kept'] == []
    assert [stale['metadata']['name'] for stale in plan['stale']] == ['j-gpu-1']
    assert run.node_validation_plan([job('gpu-1', 'reset-20', 'Complete')], {'gpu-1': 'reset-20'})['kept'] == [
        'gpu-1']
