# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The reset and reboot Jobs of a remediation and what a reset's output says (module_utils/remediation/jobs.py).
The reset script runs here under sh against a chroot that plays nvidia-smi, recording each call."""

import os
import subprocess
import textwrap

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.remediation import jobs

GPUS = ['GPU-5c8b7c1c-9c2f-6a41-1b2e-0f4b2a8e9d11', 'GPU-0a1b2c3d-0000-1111-2222-333344445555']
# nvidia-smi's words when a process holds the GPU.
IN_USE = 'The following GPUs could not be reset:\n  GPU 00000000:3B:00.0: In use by another client'


def run_script(tmp_path, command, refuse=''):
    """Run the reset command with a chroot that logs its arguments and, as nvidia-smi, refuses to reset `refuse`."""
    log = tmp_path / 'calls'
    chroot = tmp_path / 'chroot'
    chroot.write_text(textwrap.dedent('''\
        #!/bin/sh
        echo "$*" >> %s
        case "$*" in
          *" -r -i %s") echo "GPU 00000000:3B:00.0: In use by another client"; exit 255;;
        esac
        exit 0
        ''' % (log, refuse or 'none')))
    chroot.chmod(0o755)
    result = subprocess.run(command, capture_output=True, text=True, check=False,
                            env=dict(os.environ, PATH='%s:%s' % (tmp_path, os.environ['PATH'])))
    return result, log.read_text().splitlines()


def test_the_reset_turns_persistence_off_resets_and_checks_each_gpu_then_turns_it_back_on(tmp_path):
    result, calls = run_script(tmp_path, jobs.reset_command(GPUS))
    root = '/run/nvidia/driver nvidia-smi'
    assert result.returncode == 0, result.stdout + result.stderr
    assert calls == ['%s -pm 0 -i %s' % (root, GPUS[0]), '%s -pm 0 -i %s' % (root, GPUS[1]),
                     '%s -r -i %s' % (root, GPUS[0]), '%s -q -i %s' % (root, GPUS[0]),
                     '%s -r -i %s' % (root, GPUS[1]), '%s -q -i %s' % (root, GPUS[1]),
                     '%s -pm 1 -i %s' % (root, GPUS[0]), '%s -pm 1 -i %s' % (root, GPUS[1])]


def test_a_refused_reset_stops_the_script_and_persistence_mode_still_comes_back(tmp_path):
    result, calls = run_script(tmp_path, jobs.reset_command(GPUS, driver_root='/'), refuse=GPUS[0])
    assert result.returncode == 1
    assert 'In use by another client' in result.stdout and result.stdout.rstrip().endswith(
        'reset of %s failed' % GPUS[0])
    assert all(call.startswith('/host nvidia-smi') for call in calls)
    assert not [call for call in calls if GPUS[1] in call and ' -r ' in call]
    assert calls[-2:] == ['/host nvidia-smi -pm 1 -i %s' % GPUS[0], '/host nvidia-smi -pm 1 -i %s' % GPUS[1]]


@pytest.mark.parametrize('uuids', [[], ['GPU-1; reboot'], ['$(id)']])
def test_the_reset_takes_gpu_uuids_only(uuids):
    with pytest.raises(jobs.JobError):
        jobs.reset_command(uuids)


@pytest.mark.parametrize('succeeded, message, outcome', [
    (True, 'reset: GPU-1', 'succeeded'),
    (False, IN_USE, 'refused'),
    (False, "Unable to reset this GPU because it's being used by some other process", 'refused'),
    (False, 'GPU-1 does not answer nvidia-smi -q after its reset', 'failed'),
    (False, '', 'failed'),
])
def test_a_reset_refused_for_a_gpu_in_use_is_told_from_a_failed_one(succeeded, message, outcome):
    result, why = jobs.reset_outcome(succeeded, message)
    assert result == outcome and (why == '') is succeeded
    if outcome == 'refused':
        assert 'in use' in why and message.strip() in why


def test_the_job_name_fits_in_a_label_value():
    assert jobs.job_name('reset', 'gpu-1') == 'nvidia-gpu-reset-gpu-1'
    long_name = 'ip-10-0-1-23.' + 'x' * 60
    name = jobs.job_name('reboot', long_name)
    assert len(name) <= 63 and name.startswith('nvidia-gpu-reboot-') and name != jobs.job_name('reboot', 'other')


def _pod(job):
    return job['spec']['template']['spec']


def test_the_reset_job_runs_once_privileged_on_the_node_with_the_driver_root_and_no_gpu_of_its_own():
    job = jobs.reset_job('gpu-1', GPUS[:1], 'nvidia-gpu', 'validator:v1', 'nvidia-operator-validator')
    pod = _pod(job)
    container = pod['containers'][0]
    assert job['metadata']['name'] == 'nvidia-gpu-reset-gpu-1' and job['metadata']['namespace'] == 'nvidia-gpu'
    assert job['metadata']['labels'][jobs.STEP_LABEL] == 'reset' and job['spec']['backoffLimit'] == 0
    assert (pod['nodeName'], pod['restartPolicy'], pod['tolerations']) == ('gpu-1', 'Never', [{'operator': 'Exists'}])
    assert container['command'] == jobs.reset_command(GPUS[:1])
    assert container['securityContext'] == {'privileged': True}
    assert {'name': 'NVIDIA_VISIBLE_DEVICES', 'value': 'void'} in container['env']
    mounts = dict((mount['name'], mount['mountPath']) for mount in container['volumeMounts'])
    paths = dict((volume['name'], volume['hostPath']['path']) for volume in pod['volumes'])
    assert mounts == {'driver-root': '/run/nvidia/driver', 'host-sys': '/run/nvidia/driver/sys'}
    assert paths == {'driver-root': '/run/nvidia/driver', 'host-sys': '/sys'}
    assert container['terminationMessagePolicy'] == 'FallbackToLogsOnError'


def test_the_reset_job_of_a_driver_on_the_host_chroots_into_the_host():
    pod = _pod(jobs.reset_job('gpu-1', GPUS[:1], 'ns', 'image', 'sa', driver_root='/'))
    assert [mount['mountPath'] for mount in pod['containers'][0]['volumeMounts']] == ['/host', '/host/sys']
    assert pod['volumes'][0]['hostPath']['path'] == '/'


def test_the_reboot_job_does_what_oc_debug_node_does():
    job = jobs.reboot_job('gpu-1', 'nvidia-gpu', 'tools:v1', 'nvidia-operator-validator', deadline=120)
    pod = _pod(job)
    container = pod['containers'][0]
    assert container['command'] == ['chroot', '/host', 'systemctl', 'reboot']
    assert container['securityContext'] == {'privileged': True, 'runAsUser': 0}
    assert (pod['hostPID'], pod['hostNetwork'], pod['nodeName']) == (True, True, 'gpu-1')
    assert pod['volumes'] == [{'name': 'host', 'hostPath': {'path': '/'}}]
    assert container['volumeMounts'] == [{'name': 'host', 'mountPath': '/host'}]
    assert job['spec']['backoffLimit'] == 0 and job['spec']['activeDeadlineSeconds'] == 120
