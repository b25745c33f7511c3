# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Jobs that reset a node's failing GPUs and reboot a node, and what a reset's output says: pure functions.

They are planned per node from the remediation's record (its GPU UUIDs), as the evictions of a drain are, so they
are built here rather than rendered from a role's template; the role writes them with accelerators.gpu.k8s.

The reset is NVSentinel's janitor's (gpu-reset/gpu_reset.sh) in a few lines: nvidia-smi from the driver's root
(chroot), persistence mode off on the GPUs to reset (persistence mode holds the device: the reset would be refused
"In use by another client"), each GPU reset by UUID, one at a time (Ampere and later reset one GPU at a time), and
checked with nvidia-smi -q, as NVIDIA advises; persistence mode back on, whatever happened. nvidia-smi refuses a
reset while any process holds the GPU, monitoring clients included: the operands holding it are stopped first
(plan.operands_to_stop), and a refusal is a failure, never retried blindly (reset_outcome).

The reboot is what `oc debug node/<node> -- chroot /host systemctl reboot` does: a privileged pod on the node
(hostPID, hostNetwork, the host's root at /host), bound to it by name, so that the cordon and the quarantine taint do
not keep it off.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import re

DRIVER_ROOT = '/run/nvidia/driver'
COMPONENT = 'gpu-remediation'
STEP_LABEL = 'accelerators.gpu/remediation'
NODE_ANNOTATION = 'accelerators.gpu/node'
# What nvidia-smi answers when something holds the GPU ("In use by another client", "being used by some other
# process (e.g. CUDA application, graphics application like X server, monitoring application ...)").
_IN_USE_RE = re.compile(r'in use|being used by', re.IGNORECASE)
_UUID_RE = re.compile(r'^(GPU|MIG)-[0-9A-Za-z-]+$')


class JobError(ValueError):
    pass


def _quote(uuids):
    for uuid in uuids:
        if not _UUID_RE.match(uuid or ''):
            raise JobError('%r is not a GPU UUID such as GPU-5c8b7c1c-9c2f-6a41-1b2e-0f4b2a8e9d11' % (uuid,))
    return ' '.join(uuids)


def driver_root_mount(driver_root=DRIVER_ROOT):
    """Where the driver's root is mounted in the reset container: at its own path, or at /host for a driver
    installed on the host (driver root /)."""
    return '/host' if driver_root.rstrip('/') == '' else driver_root


def reset_command(gpu_uuids, driver_root=DRIVER_ROOT):
    """The reset container's command (a list): persistence mode off on the GPUs, each reset by UUID and checked,
    persistence mode back on on exit. It stops at the first GPU nvidia-smi does not reset, with its output last (the
    Job's termination message). Each nvidia-smi call is written out with its GPU, no shell function or variable:
    the Job says what it runs, and a reader of its command (the simulator among them) sees each call."""
    if not gpu_uuids:
        raise JobError('no GPU to reset: the remediation record names no GPU UUID')
    gpus = _quote(gpu_uuids).split()
    smi = 'chroot %s nvidia-smi' % driver_root_mount(driver_root)
    lines = ['set -u', 'restore() {']
    lines.extend('  %s -pm 1 -i %s >/dev/null || echo "persistence mode not back on %s"' % (smi, gpu, gpu)
                 for gpu in gpus)
    lines.extend(['}', 'trap restore EXIT'])
    lines.extend('%s -pm 0 -i %s >/dev/null || echo "persistence mode not off on %s"' % (smi, gpu, gpu)
                 for gpu in gpus)
    for gpu in gpus:
        lines.extend([
            'echo "resetting %s"' % gpu,
            '%s -r -i %s || { echo "reset of %s failed"; exit 1; }' % (smi, gpu, gpu),
            '%s -q -i %s >/dev/null || { echo "%s does not answer nvidia-smi -q after its reset"; exit 2; }' % (
                smi, gpu, gpu),
        ])
    lines.append('echo "reset: %s"' % ' '.join(gpus))
    return ['sh', '-c', '\n'.join(lines)]


def reset_outcome(succeeded, message):
    """What a reset Job's end means: ('succeeded', ''), ('refused', why): nvidia-smi would not reset a GPU in use,
    a failure the run never retries blindly, or ('failed', why): the reset failed otherwise, and a reboot follows."""
    if succeeded:
        return 'succeeded', ''
    text = (message or 'no output').strip()
    if _IN_USE_RE.search(text):
        return 'refused', 'the GPU is in use, the reset refused: %s' % text
    return 'failed', text


def job_name(step, node):
    """nvidia-gpu-<step>-<node> while it fits in 63 characters (it becomes a label value), else after its hash."""
    prefix = 'nvidia-gpu-%s-' % step
    return prefix + (node if len(prefix + node) <= 63 else hashlib.sha1(node.encode('utf-8')).hexdigest()[:10])


def _job(step, node, namespace, container, pod_spec, deadline, ttl):
    labels = {'app.kubernetes.io/component': COMPONENT, 'app.kubernetes.io/managed-by': 'accelerators.gpu',
              STEP_LABEL: step}
    spec = dict({'restartPolicy': 'Never', 'nodeName': node, 'tolerations': [{'operator': 'Exists'}],
                 'containers': [dict(container, terminationMessagePolicy='FallbackToLogsOnError')]}, **pod_spec)
    return {
        'apiVersion': 'batch/v1', 'kind': 'Job',
        'metadata': {'name': job_name(step, node), 'namespace': namespace, 'labels': labels,
                     'annotations': {NODE_ANNOTATION: node}},
        # One try: a second reset or reboot is the planner's decision, never the Job controller's.
        'spec': {'backoffLimit': 0, 'activeDeadlineSeconds': deadline, 'ttlSecondsAfterFinished': ttl,
                 'template': {'metadata': {'labels': labels}, 'spec': spec}},
    }


def reset_job(node, gpu_uuids, namespace, image, service_account, driver_root=DRIVER_ROOT, deadline=300,
              ttl=86400):
    """The Job resetting the GPUs of a node by UUID from the driver's root (reset_command): privileged, the driver's
    root and the host's /sys (nvidia-smi rescans the PCI device) mounted, no GPU given by the container runtime
    (NVIDIA_VISIBLE_DEVICES=void: it would hold one)."""
    mount = driver_root_mount(driver_root)
    container = {
        'name': 'gpu-reset', 'image': image, 'command': reset_command(gpu_uuids, driver_root),
        'env': [{'name': 'NVIDIA_VISIBLE_DEVICES', 'value': 'void'}],
        'securityContext': {'privileged': True},
        'volumeMounts': [{'name': 'driver-root', 'mountPath': mount, 'mountPropagation': 'HostToContainer'},
                         {'name': 'host-sys', 'mountPath': mount + '/sys'}],
    }
    volumes = [{'name': 'driver-root', 'hostPath': {'path': driver_root}},
               {'name': 'host-sys', 'hostPath': {'path': '/sys'}}]
    return _job('reset', node, namespace, container,
                {'serviceAccountName': service_account, 'volumes': volumes}, deadline, ttl)


def reboot_job(node, namespace, image, service_account, deadline=300, ttl=86400):
    """The Job rebooting a node as `oc debug node` would: privileged, root, the host's PID and network namespaces,
    the host's / at /host, `chroot /host systemctl reboot`."""
    container = {
        'name': 'reboot', 'image': image, 'command': ['chroot', '/host', 'systemctl', 'reboot'],
        'securityContext': {'privileged': True, 'runAsUser': 0},
        'volumeMounts': [{'name': 'host', 'mountPath': '/host'}],
    }
    return _job('reboot', node, namespace, container,
                {'serviceAccountName': service_account, 'hostPID': True, 'hostNetwork': True,
                 'volumes': [{'name': 'host', 'hostPath': {'path': '/'}}]}, deadline, ttl)
