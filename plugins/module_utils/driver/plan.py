# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure planning of NVIDIA driver DaemonSets: which must exist, and what to create, update, keep or delete.

Names, labels and selectors are those of the GPU Operator (controllers/object_controls.go), so its tooling
and habits keep working. Inputs are node facts (node_facts.node_facts), DTK images
(dtk.resolve_dtk_images()['versions']) and DaemonSet dicts as the API returns them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re
from fractions import Fraction

from ..k8s.applied_fields import applied_fields, dropped_fields
from .gpudirect import GPUDirectError, apply_gpudirect
from ..nodes.facts import (
    DEPLOY_LABEL_PREFIX, KERNEL_LABEL, OPERANDS_SWITCH, OS_RELEASE_PREFIX, OSTREE_LABEL, is_valid_label_value,
    sanitize_label_value)
from ..cluster.proxy import trusted_ca_volume

MODES = ('rhcos', 'kernel', 'single')
DRIVER_DAEMONSET = 'nvidia-driver-daemonset'
DRIVER_CONTAINER = 'nvidia-driver-ctr'
DTK_CONTAINER = 'openshift-driver-toolkit-ctr'
DRIVER_DEPLOY_LABEL = DEPLOY_LABEL_PREFIX + 'driver'
PRE_INSTALLED = 'pre-installed'
MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by'
MANAGED_BY = 'accelerators.gpu'
# On a DaemonSet of prepare_versions (an upgrade's target, no node runs it yet): the build or kernel. A run without
# prepare_versions (a deploy or reconcile while the upgrade goes on) keeps it rather than deleting it as stale.
PREPARED_ANNOTATION = 'accelerators.gpu/prepared-for-upgrade'
COMPONENT_LABEL = 'app.kubernetes.io/component'
DTK_LABEL = 'openshift.driver-toolkit'
DTK_RHCOS_LABEL = 'openshift.driver-toolkit.rhcos'
PRECOMPILED_LABEL = 'nvidia.com/precompiled'
OS_ID_LABEL = OS_RELEASE_PREFIX + 'ID'
OS_VERSION_LABEL = OS_RELEASE_PREFIX + 'VERSION_ID'
SHARED_VOLUME = 'shared-nvidia-driver-toolkit'
SHARED_DIR = '/mnt/shared-nvidia-driver-toolkit'
DTK_SIDECAR_SCRIPT = (
    'until [ -f %s/dir_prepared ]; do sleep 10; done; exec %s/ocp_dtk_entrypoint dtk-build-driver'
    % (SHARED_DIR, SHARED_DIR))
MANAGER_CONTAINER = 'k8s-driver-manager'
# The ConfigMap (applied by the driver role) whose script the startup probe runs, as the GPU Operator's.
STARTUP_PROBE_CONFIGMAP = 'nvidia-driver-startup-probe'
STARTUP_PROBE_SCRIPT = '/usr/local/bin/startup-probe.sh'
# 60 s + 120 x 10 s: about 21 minutes, enough for a driver build.
DEFAULT_STARTUP_PROBE = {
    'exec': {'command': ['sh', STARTUP_PROBE_SCRIPT]},
    'initialDelaySeconds': 60,
    'periodSeconds': 10,
    'failureThreshold': 120,
    'successThreshold': 1,
    'timeoutSeconds': 60,
}
DEFAULT_TOLERATIONS = [{'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}]
PRIVILEGED = {'privileged': True, 'seLinuxOptions': {'level': 's0'}}
HOST_VOLUMES = (
    # (volume name, host path, hostPath type, mount path in the containers, mount options)
    ('run-nvidia', '/run/nvidia', 'DirectoryOrCreate', '/run/nvidia', {'mountPropagation': 'Bidirectional'}),
    ('var-log', '/var/log', None, '/var/log', {}),
    ('dev-log', '/dev/log', None, '/dev/log', {}),
    ('host-os-release', '/etc/os-release', None, '/host-etc/os-release', {'readOnly': True}),
    # NVSwitch systems (HGX): the fabric manager and topology daemon the driver container starts.
    ('run-nvidia-fabricmanager', '/run/nvidia-fabricmanager', 'DirectoryOrCreate', '/run/nvidia-fabricmanager', {}),
    ('run-nvidia-topologyd', '/run/nvidia-topologyd', 'DirectoryOrCreate', '/run/nvidia-topologyd', {}),
    ('mlnx-ofed-usr-src', '/run/mellanox/drivers/usr/src', 'DirectoryOrCreate', '/run/mellanox/drivers/usr/src',
     {'mountPropagation': 'HostToContainer'}),
    ('run-mellanox-drivers', '/run/mellanox/drivers', 'DirectoryOrCreate', '/run/mellanox/drivers',
     {'mountPropagation': 'HostToContainer'}),
    # Grace Hopper: memory blocks onlined by the driver.
    ('sysfs-memory-online', '/sys/devices/system/memory/auto_online_blocks', None,
     '/sys/devices/system/memory/auto_online_blocks', {}),
    # GSP firmware: the kernel's firmware search path points into the driver's root.
    ('firmware-search-path', '/sys/module/firmware_class/parameters/path', None,
     '/sys/module/firmware_class/parameters/path', {}),
    ('nv-firmware', '/run/nvidia/driver/lib/firmware', 'DirectoryOrCreate', '/lib/firmware', {}),
    # Only k8s-driver-manager mounts these two.
    ('host-root', '/', None, '/host', {'readOnly': True, 'mountPropagation': 'HostToContainer'}),
    ('host-sys', '/sys', 'Directory', '/sys', {}),
)
DRIVER_MOUNTS = ('run-nvidia', 'run-nvidia-fabricmanager', 'run-nvidia-topologyd', 'var-log', 'dev-log',
                 'host-os-release', 'mlnx-ofed-usr-src', 'run-mellanox-drivers', 'sysfs-memory-online',
                 'firmware-search-path', 'nv-firmware')
DTK_MOUNTS = ('var-log', 'mlnx-ofed-usr-src', 'host-os-release')
MANAGER_MOUNTS = ('run-nvidia', 'host-root', 'host-sys', 'run-mellanox-drivers')

_DNS_SUBDOMAIN_RE = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')
_IMAGE_TAG_RE = re.compile(r'^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$')
_RHCOS_BUILD_RE = re.compile(r'^(\d+)\.(\d+)\.\d+-\d+$')
_KERNEL_ARCH_RE = re.compile(r'x86_64(?:_64k)?|aarch64(?:_64k)?')
_QUANTITY_RE = re.compile(r'^([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]([+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$')
_QUANTITY_SUFFIX = {
    None: 1, 'n': Fraction(1, 10 ** 9), 'u': Fraction(1, 10 ** 6), 'm': Fraction(1, 1000),
    'k': 10 ** 3, 'M': 10 ** 6, 'G': 10 ** 9, 'T': 10 ** 12, 'P': 10 ** 15, 'E': 10 ** 18,
    'Ki': 2 ** 10, 'Mi': 2 ** 20, 'Gi': 2 ** 30, 'Ti': 2 ** 40, 'Pi': 2 ** 50, 'Ei': 2 ** 60,
}


class PlanError(ValueError):
    """A plan that cannot be applied; obj names the object, field the offending field."""

    def __init__(self, message, obj=None, field=None):
        super(PlanError, self).__init__(message)
        self.obj = obj
        self.field = field


def _check_name(name):
    # The name is also the value of label app=<name>, so the label limit (63) applies, not 253.
    if len(name) > 63 or not _DNS_SUBDOMAIN_RE.match(name):
        raise PlanError(
            'DaemonSet name %s (%d characters) is not usable: it is also the value of label app, so it must be '
            'at most 63 characters of lower-case alphanumerics, "-" and "." (no empty parts)' % (name, len(name)),
            obj=name, field='metadata.name')
    return name


def _check_label_values(labels, obj, field):
    for key, value in labels.items():
        if not isinstance(value, str) or not is_valid_label_value(value):
            raise PlanError(
                '%s of %s: %s=%r is not a valid label value (a string of at most 63 characters, alphanumeric at '
                'both ends, "-_." inside)' % (field, obj, key, value), obj=obj, field='%s.%s' % (field, key))


def driver_daemonset_name(rhcos):
    """'nvidia-driver-daemonset-<rhcos>', the GPU Operator's name for a DTK build DaemonSet."""
    return _check_name('%s-%s' % (DRIVER_DAEMONSET, rhcos))


def sanitize_kernel_for_name(kernel):
    """The GPU Operator's getSanitizedKernelVersion (arch dropped, '_' to '.', lower case), with empty parts
    removed: the GPU Operator leaves '..' for '+rt' kernels, which no DaemonSet name accepts."""
    sanitized = _KERNEL_ARCH_RE.sub('', kernel).replace('_', '.').lower()
    return re.sub(r'\.{2,}', '.', sanitized).strip('.-')


def precompiled_daemonset_name(kernel, os_tag_value):
    """'nvidia-driver-daemonset-<sanitised kernel>-<osTag>', the GPU Operator's precompiled DaemonSet name."""
    return _check_name('%s-%s-%s' % (DRIVER_DAEMONSET, sanitize_kernel_for_name(kernel), os_tag_value))


def os_tag(facts):
    """'<ID><VERSION_ID>' from NFD os-release labels: ubuntu22.04, rhcos4.18 (OCP <= 4.18), rhel9.6 (OCP >= 4.19)."""
    if facts['os']['id'] and facts['os']['version_id']:
        return '%s%s' % (facts['os']['id'], facts['os']['version_id'])
    return None


def rhcos_os_tag(rhcos, field='prepare_versions'):
    """The os tag of the nodes an RHCOS build boots, from the build string alone: 4xx.yy.z builds (OpenShift <= 4.18)
    are os-release ID rhcos with the OpenShift minor (418.94... gives rhcos4.18), layered builds ID rhel with the
    RHEL minor (9.6.20260303-1 gives rhel9.6). field: where the build came from, for the error."""
    match = _RHCOS_BUILD_RE.match(rhcos)
    if not match:
        raise PlanError('%s: %s is not an RHCOS build such as 418.94.202509100653-0 or 9.6.20260303-1'
                        % (field, rhcos), obj=rhcos, field=field)
    first, second = match.groups()
    if int(first) >= 40:
        return 'rhcos%s.%s' % (first[0], first[1:])
    return 'rhel%s.%s' % (first, second)


def precompiled_image(repository, image, branch, kernel, os_tag_value):
    """'<repository>/<image>:<branch>-<kernel>-<osTag>'.

    e.g. nvcr.io/nvidia/driver:535-5.15.0-100-generic-ubuntu22.04
    """
    tag = '%s-%s-%s' % (branch, kernel, os_tag_value)
    if not _IMAGE_TAG_RE.match(tag):
        raise PlanError('precompiled image tag %s is not a valid image tag (at most 128 characters of '
                        'alphanumerics, "_", "." and "-")' % tag, obj='%s/%s' % (repository, image), field='tag')
    return '%s/%s:%s' % (repository, image, tag)


def _require(spec, keys, mode):
    missing = [key for key in keys if not spec.get(key)]
    if missing:
        raise PlanError('mode %s needs %s in the driver spec' % (mode, ', '.join(missing)),
                        obj='driver spec', field=missing[0])


def _build_image(spec, os_tag_value):
    """Driver image for DTK and self-compiling builds: image_ref, or <repository>/<image>:<version>-<osTag>."""
    if spec.get('image_ref'):
        return spec['image_ref']
    if not os_tag_value:
        return None
    return '%s/%s:%s-%s' % (spec['repository'], spec.get('image') or 'driver', spec['version'], os_tag_value)


def _env(defaults, extra):
    env = [dict(item) for item in defaults]
    for item in copy.deepcopy(extra or []):
        names = [existing['name'] for existing in env]
        if item['name'] in names:
            env[names.index(item['name'])] = item
        else:
            env.append(item)
    return env


def _mounts(with_shared, names):
    by_name = dict((volume[0], volume) for volume in HOST_VOLUMES)
    mounts = [dict({'name': name, 'mountPath': by_name[name][3]}, **by_name[name][4]) for name in names]
    if with_shared:
        mounts.append({'name': SHARED_VOLUME, 'mountPath': SHARED_DIR})
    return mounts


def _manager_container(spec):
    """k8s-driver-manager, the GPU Operator's init container: before a new driver container starts on a node, it
    stops the operands that hold the driver, evicts the GPU workloads (or drains, with its settings: spec's env) and
    unloads the old modules."""
    manager = spec['manager']
    return {
        'name': MANAGER_CONTAINER,
        'image': manager['image'],
        'imagePullPolicy': spec.get('image_pull_policy') or 'IfNotPresent',
        'command': ['driver-manager'],
        'args': ['uninstall_driver'],
        'env': _env([{'name': 'NODE_NAME', 'valueFrom': {'fieldRef': {'fieldPath': 'spec.nodeName'}}},
                     # The driver containers use runc, never the NVIDIA runtime.
                     {'name': 'NVIDIA_VISIBLE_DEVICES', 'value': 'void'},
                     {'name': 'OPERATOR_NAMESPACE', 'valueFrom': {'fieldRef': {'fieldPath': 'metadata.namespace'}}}],
                    manager.get('env')),
        'securityContext': {'privileged': True},
        'volumeMounts': _mounts(False, MANAGER_MOUNTS),
    }


def _driver_container(spec, image, dtk):
    container = {
        'name': DRIVER_CONTAINER,
        'image': image,
        'imagePullPolicy': spec.get('image_pull_policy') or 'IfNotPresent',
        'command': ['ocp_dtk_entrypoint'] if dtk else ['nvidia-driver'],
        'args': ['nv-ctr-run-with-dtk'] if dtk else ['init'],
        'env': _env([{'name': 'NODE_NAME', 'valueFrom': {'fieldRef': {'fieldPath': 'spec.nodeName'}}},
                     {'name': 'NODE_IP', 'valueFrom': {'fieldRef': {'fieldPath': 'status.hostIP'}}}],
                    spec.get('env')),
        'securityContext': copy.deepcopy(PRIVILEGED),
        'volumeMounts': _mounts(dtk, DRIVER_MOUNTS) + [
            {'name': 'driver-startup-probe-script', 'mountPath': STARTUP_PROBE_SCRIPT, 'subPath': 'startup-probe.sh'}],
        'startupProbe': copy.deepcopy(spec.get('startup_probe') or DEFAULT_STARTUP_PROBE),
        'lifecycle': {'preStop': {'exec': {'command': [
            '/bin/sh', '-c', 'rm -f /run/nvidia/validations/.driver-ctr-ready']}}},
    }
    for key, field in (('resources', 'resources'), ('liveness_probe', 'livenessProbe'),
                       ('readiness_probe', 'readinessProbe')):
        if spec.get(key):
            container[field] = copy.deepcopy(spec[key])
    if spec.get('trusted_ca_config_map'):
        container['volumeMounts'].append(trusted_ca_volume(spec['trusted_ca_config_map'])[1])
    return container


def _dtk_container(spec, image, rhcos):
    return {
        'name': DTK_CONTAINER,
        'image': image,
        'imagePullPolicy': spec.get('image_pull_policy') or 'IfNotPresent',
        'command': ['bash', '-xc'],
        'args': [DTK_SIDECAR_SCRIPT],
        'env': [{'name': 'RHCOS_VERSION', 'value': rhcos}, {'name': 'NVIDIA_VISIBLE_DEVICES', 'value': 'void'}],
        'securityContext': copy.deepcopy(PRIVILEGED),
        'volumeMounts': _mounts(True, DTK_MOUNTS),
    }


def _daemonset(spec, name, mode_labels, node_selector, containers, kernels=None, os_tag_value=None):
    """A driver DaemonSet; kernels restricts it to nodes whose kernel label is in the list; os_tag_value: the osTag
    of its driver image, which GPUDirect Storage's and GDRCopy's images take too."""
    labels = dict(spec.get('labels') or {})
    labels.update({'app': name, COMPONENT_LABEL: 'nvidia-driver', MANAGED_BY_LABEL: MANAGED_BY})
    labels.update(mode_labels)
    selector = dict(spec.get('node_selector') or {})
    selector.update(node_selector)
    _check_label_values(labels, name, 'metadata.labels')
    _check_label_values(selector, name, 'spec.template.spec.nodeSelector')
    # One driver pod per node, even while a relabelled node moves from one DaemonSet to another.
    affinity = {'podAntiAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': [{
        'labelSelector': {'matchExpressions': [
            {'key': COMPONENT_LABEL, 'operator': 'In', 'values': ['nvidia-driver']}]},
        'topologyKey': 'kubernetes.io/hostname'}]}}
    if kernels:
        affinity['nodeAffinity'] = {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': [
            {'matchExpressions': [{'key': KERNEL_LABEL, 'operator': 'In', 'values': list(kernels)}]}]}}
    volumes = [{'name': vol, 'hostPath': dict({'path': path}, **({'type': kind} if kind else {}))}
               for vol, path, kind, _mount, _options in HOST_VOLUMES]
    volumes.append({'name': 'driver-startup-probe-script',
                    'configMap': {'name': STARTUP_PROBE_CONFIGMAP, 'defaultMode': 0o755}})
    if any(c['name'] == DTK_CONTAINER for c in containers):
        volumes.append({'name': SHARED_VOLUME, 'emptyDir': {}})
    if spec.get('trusted_ca_config_map'):
        volumes.append(trusted_ca_volume(spec['trusted_ca_config_map'])[0])
    pod_spec = {
        'nodeSelector': selector,
        'tolerations': copy.deepcopy(DEFAULT_TOLERATIONS if spec.get('tolerations') is None else spec['tolerations']),
        'affinity': affinity,
        'priorityClassName': spec.get('priority_class_name') or 'system-node-critical',
        'serviceAccountName': spec.get('service_account_name') or 'nvidia-driver',
        'hostPID': True,
        'containers': containers,
        'volumes': volumes,
    }
    if spec.get('manager'):
        pod_spec['initContainers'] = [_manager_container(spec)]
    if spec.get('image_pull_secrets'):
        pod_spec['imagePullSecrets'] = [{'name': secret} for secret in spec['image_pull_secrets']]
    annotations = dict(spec.get('annotations') or {})
    metadata = {'name': name, 'namespace': spec['namespace'], 'labels': labels}
    if annotations:
        metadata['annotations'] = annotations
    template_annotations = dict(annotations, **{'kubectl.kubernetes.io/default-container': DRIVER_CONTAINER})
    daemonset = {
        'apiVersion': 'apps/v1',
        'kind': 'DaemonSet',
        'metadata': metadata,
        'spec': {
            'selector': {'matchLabels': {'app': name}},
            # A new driver pod may only start after its node was prepared, so pods are replaced one by one.
            'updateStrategy': {'type': 'OnDelete'},
            'template': {
                'metadata': {'labels': dict(labels), 'annotations': template_annotations},
                'spec': pod_spec,
            },
        },
    }
    try:
        return apply_gpudirect(daemonset, spec, os_tag_value, DRIVER_CONTAINER, DTK_CONTAINER, MANAGER_CONTAINER,
                               labels[PRECOMPILED_LABEL] == 'true')
    except GPUDirectError as error:
        raise PlanError(str(error), obj=name, field=error.field)


def _names(members):
    return [facts['name'] for facts in members]


def _block(plan, key, members, reason):
    plan['blocked'].append({'key': key, 'nodes': _names(members), 'reason': reason})
    for facts in members:
        plan['assignments'][facts['name']] = {'daemonset': None, 'build': 'blocked', 'reason': reason}


def _note_mismatches(plan, members, kind):
    """Report nodes whose NFD label (what the selector sees) differs from what they run."""
    for facts in members:
        if kind == 'rhcos':
            label, effective, key = facts['rhcos_label'], facts['rhcos_version'], OSTREE_LABEL
        else:
            label, effective, key = facts['kernel']['full'], facts['kernel']['effective'], KERNEL_LABEL
        if label == effective:
            continue
        if label is None:
            consequence = 'no driver DaemonSet selects it until NFD labels it'
        elif kind == 'rhcos':
            consequence = ('DaemonSet %s-%s selects it, so its driver pod would build against the DTK of %s and '
                           'not load' % (DRIVER_DAEMONSET, label, label))
        else:
            consequence = 'the DaemonSet for kernel %s selects it, so its driver pod would not load' % label
        message = ('node %s: label %s=%s but the node runs %s: %s; wait for NFD to relabel it (sleepInterval) or '
                   'restart nfd-worker on it' % (facts['name'], key, label, effective, consequence))
        plan['mismatched'].append({'node': facts['name'], 'label': label, 'effective': effective,
                                   'message': message})
        plan['warnings'].append(message)


def _dtk_daemonset(spec, rhcos, image, dtk_image, kernels=None):
    return _daemonset(
        spec, driver_daemonset_name(rhcos), {DTK_LABEL: 'true', DTK_RHCOS_LABEL: rhcos, PRECOMPILED_LABEL: 'false'},
        {OSTREE_LABEL: rhcos, DRIVER_DEPLOY_LABEL: 'true'},
        [_driver_container(spec, image, True), _dtk_container(spec, dtk_image, rhcos)], kernels,
        rhcos_os_tag(rhcos, field=OSTREE_LABEL))


def _dtk_message(dtk_images, rhcos):
    entry = dtk_images.get(rhcos) or {}
    if entry.get('status') == 'resolved':
        return None
    return entry.get('message') or 'RHCOS %s was not looked up in the DTK image stream' % rhcos


def _add_dtk_build(spec, plan, rhcos, members, dtk_images, kernels=None, why=''):
    """Add the DTK build DaemonSet of one RHCOS version, or block its nodes; True when added."""
    unresolved = _dtk_message(dtk_images, rhcos)
    if unresolved:
        _block(plan, rhcos, members, why + unresolved)
        return False
    entry = dtk_images[rhcos]
    # The tag from the build, not from the nodes' os-release labels: a node just booted into the build keeps the
    # labels of the one it left until NFD relabels it, and the tag must not change with the order of the nodes.
    image = _build_image(spec, rhcos_os_tag(rhcos, field=OSTREE_LABEL))
    daemonset = _dtk_daemonset(spec, rhcos, image, entry['image'], kernels)
    name = daemonset['metadata']['name']
    plan['desired'].append(daemonset)
    for facts in members:
        plan['assignments'][facts['name']] = {'daemonset': name, 'build': 'dtk', 'image': image,
                                              'dtk_image': entry['image']}
    _note_mismatches(plan, members, 'rhcos')
    return True


def _groups(members, key):
    groups = {}
    for facts in members:
        groups.setdefault(key(facts), []).append(facts)
    return sorted(groups.items(), key=lambda item: str(item[0]))


def _plan_rhcos(spec, nodes, dtk_images, precompiled_available, plan, prepare_versions=()):
    _require(spec, () if spec.get('image_ref') else ('repository', 'version'), 'rhcos')
    groups = _groups(nodes, lambda facts: facts['rhcos_version'])
    for rhcos, members in groups:
        if rhcos is None:
            _block(plan, 'unknown', members, 'no RHCOS version (osImage has none, no OSTREE_VERSION label): '
                                             'not RHCOS nodes; use mode kernel or single for them')
        else:
            _add_dtk_build(spec, plan, rhcos, members, dtk_images)
    for rhcos in sorted(set(prepare_versions) - set(version for version, _members in groups)):
        _prepare_dtk_build(spec, plan, rhcos, dtk_images)


def _prepare_dtk_build(spec, plan, rhcos, dtk_images):
    """The DTK build DaemonSet of a version no GPU node runs yet (an upgrade's target): its node selector, the
    version's OSTREE_VERSION label, selects no node until nodes boot the version and NFD labels them."""
    os_tag_value = rhcos_os_tag(rhcos)
    unresolved = _dtk_message(dtk_images, rhcos)
    if unresolved:
        raise PlanError('prepare_versions: RHCOS %s has no DTK image, so its driver DaemonSet cannot be prepared: %s'
                        % (rhcos, unresolved), obj=driver_daemonset_name(rhcos), field='dtk_images')
    _add_prepared(plan, _dtk_daemonset(spec, rhcos, _build_image(spec, os_tag_value), dtk_images[rhcos]['image']),
                  rhcos)


def _add_prepared(plan, daemonset, version):
    daemonset['metadata'].setdefault('annotations', {})[PREPARED_ANNOTATION] = version
    plan['desired'].append(daemonset)
    plan['prepared'].append(daemonset['metadata']['name'])


def _image_exists(image, available):
    if available is None:
        return True
    if isinstance(available, dict):
        return bool(available.get(image))
    return image in available


def prepared_kernels(prepare_versions, nodes_facts):
    """[(kernel as NFD labels it, osTag, os-release ID, VERSION_ID)] of the kernels of an upgrade (mode kernel's
    prepare_versions) for each OS the GPU nodes run, as no GPU node runs them yet: their precompiled DaemonSets."""
    systems = sorted(set((os_tag(facts), facts['os']['id'], facts['os']['version_id']) for facts in nodes_facts
                         if facts['gpu_present'] and os_tag(facts)))
    running = set((facts['kernel']['effective'], os_tag(facts)) for facts in nodes_facts if facts['gpu_present'])
    kernels = sorted(set(sanitize_label_value(kernel) for kernel in prepare_versions))
    return [(kernel, tag, os_id, version_id) for kernel in kernels
            for tag, os_id, version_id in systems if (kernel, tag) not in running]


def _precompiled_daemonset(spec, kernel, tag, os_id, version_id, image):
    return _daemonset(spec, precompiled_daemonset_name(kernel, tag), {PRECOMPILED_LABEL: 'true'},
                      {KERNEL_LABEL: kernel, OS_ID_LABEL: os_id, OS_VERSION_LABEL: version_id,
                       DRIVER_DEPLOY_LABEL: 'true'},
                      [_driver_container(spec, image, False)], os_tag_value=tag)


def _plan_kernel(spec, nodes, dtk_images, precompiled_available, plan, prepare_versions=()):
    _require(spec, ('repository', 'branch'), 'kernel')
    missing = {}
    for kernel, tag, os_id, version_id in prepared_kernels(prepare_versions, nodes):
        # No DTK fallback for a kernel no node runs yet: its image must exist before any node boots it.
        image = precompiled_image(spec['repository'], spec.get('image') or 'driver', spec['branch'], kernel, tag)
        if not _image_exists(image, precompiled_available):
            raise PlanError('prepare_versions: kernel %s has no precompiled driver image %s, so its driver DaemonSet '
                            'cannot be prepared: publish the image first' % (kernel, image),
                            obj=precompiled_daemonset_name(kernel, tag), field='prepare_versions')
        _add_prepared(plan, _precompiled_daemonset(spec, kernel, tag, os_id, version_id, image), kernel)
    for (kernel, tag), members in _groups(nodes, lambda facts: (facts['kernel']['effective'], os_tag(facts))):
        if not kernel or not tag:
            _block(plan, kernel or 'unknown', members, 'no NFD kernel-version or os-release ID/VERSION_ID labels')
            continue
        image = precompiled_image(spec['repository'], spec.get('image') or 'driver', spec['branch'], kernel, tag)
        if not _image_exists(image, precompiled_available):
            for facts in members:
                missing[facts['name']] = image
            continue
        name = precompiled_daemonset_name(kernel, tag)
        plan['desired'].append(_precompiled_daemonset(spec, kernel, tag, members[0]['os']['id'],
                                                      members[0]['os']['version_id'], image))
        for facts in members:
            plan['assignments'][facts['name']] = {'daemonset': name, 'build': 'precompiled', 'image': image}
        _note_mismatches(plan, members, 'kernel')
    # Beyond the GPU Operator (pods left in ImagePullBackOff): RHCOS nodes without a precompiled image
    # are built with the DTK of their version, like SRO used to.
    orphans = [facts for facts in nodes if facts['name'] in missing]
    for rhcos, members in _groups(orphans, lambda facts: facts['rhcos_version']):
        images = ', '.join(sorted(set(missing[facts['name']] for facts in members)))
        why = 'precompiled image %s does not exist; ' % images
        if rhcos is None:
            for kernel, group in _groups(members, lambda facts: facts['kernel']['effective']):
                _block(plan, kernel, group, why + 'the nodes are not RHCOS, so no DTK build can replace it: '
                                                  'publish the image, or use mode single')
        elif _add_dtk_build(spec, plan, rhcos, members, dtk_images,
                            sorted(set(facts['kernel']['effective'] for facts in members)),
                            why + 'the DTK fallback is not possible either: '):
            plan['warnings'].append(why + 'node(s) %s fall back to a DTK build (DaemonSet %s)'
                                    % (', '.join(_names(members)), driver_daemonset_name(rhcos)))


def _plan_single(spec, nodes, dtk_images, precompiled_available, plan, prepare_versions=()):
    _require(spec, () if spec.get('image_ref') else ('repository', 'version'), 'single')
    if not nodes:
        return
    tags = _groups(nodes, os_tag)
    if not spec.get('image_ref') and (len(tags) != 1 or tags[0][0] is None):
        runs = '; '.join('%s: %s' % (tag or 'an unknown OS', ', '.join(_names(members))) for tag, members in tags)
        _block(plan, DRIVER_DAEMONSET, nodes,
               'one DaemonSet needs one driver image, but the nodes run %s: give image_ref or use mode kernel' % runs)
        return
    image = _build_image(spec, tags[0][0])
    plan['desired'].append(_daemonset(spec, DRIVER_DAEMONSET, {PRECOMPILED_LABEL: 'false'},
                                      {DRIVER_DEPLOY_LABEL: 'true'}, [_driver_container(spec, image, False)],
                                      os_tag_value=tags[0][0] if len(tags) == 1 else None))
    for facts in nodes:
        plan['assignments'][facts['name']] = {'daemonset': DRIVER_DAEMONSET, 'build': 'compile', 'image': image}


def desired_driver_daemonsets(spec, gpu_nodes_facts, dtk_images, mode, precompiled_available=None,
                              prepare_versions=()):
    """Driver DaemonSets that must exist for the GPU nodes.

    spec: namespace, repository, image (name, default 'driver'), version (DTK/single builds), branch
    (precompiled), image_ref (full driver image, beats repository/image/version), image_pull_policy, env,
    resources, tolerations, image_pull_secrets (names), labels, annotations, startup_probe, liveness_probe,
    readiness_probe, service_account_name, priority_class_name, node_selector (extra); GPUDirect (gpudirect.py):
    rdma, use_host_mofed, gds_image, gdrcopy_image.
    dtk_images: {rhcos: {status, image, message}} (resolve_dtk_images()['versions']).
    precompiled_available: set of, or {ref: bool} for, precompiled images that exist; None assumes all exist.
    prepare_versions (mode rhcos): RHCOS builds to plan a DaemonSet for even when no GPU node runs them yet (an
    upgrade's target), listed in `prepared`; one without a resolved DTK image is a PlanError. With mode kernel,
    kernels: a precompiled DaemonSet for each OS the GPU nodes run (prepared_kernels()); one without a precompiled
    image is a PlanError (there is no DTK fallback for a kernel no node runs).
    A node whose nvidia.com/gpu.deploy.driver has a value other than 'true' ('pre-installed': host driver),
    or whose operands are switched off, gets no driver DaemonSet.

    Returns {desired: [DaemonSet], blocked: [{key, nodes, reason}], assignments: {node: {daemonset,
    build: 'dtk'|'precompiled'|'compile'|'host'|'none'|'blocked', ...}}, mismatched: [{node, label,
    effective, message}], warnings: [message], prepared: [DaemonSet names of prepare_versions no node runs]}.
    """
    if mode not in MODES:
        raise PlanError('mode %s is not one of %s' % (mode, ', '.join(MODES)), obj='driver spec', field='mode')
    if prepare_versions and mode == 'single':
        raise PlanError('prepare_versions needs mode rhcos or kernel, not %s' % mode, obj='driver spec',
                        field='prepare_versions')
    _require(spec, ('namespace',), mode)
    plan = {'desired': [], 'blocked': [], 'assignments': {}, 'mismatched': [], 'warnings': [], 'prepared': []}
    eligible = []
    for facts in sorted(gpu_nodes_facts, key=lambda facts: facts['name']):
        if not facts['gpu_present']:
            continue
        value = facts['deploy_labels'].get('driver')
        if facts['deploy_labels'].get(OPERANDS_SWITCH) == 'false':
            plan['assignments'][facts['name']] = {
                'daemonset': None, 'build': 'none', 'reason': '%s%s=false' % (DEPLOY_LABEL_PREFIX, OPERANDS_SWITCH)}
        elif value not in (None, 'true'):
            plan['assignments'][facts['name']] = {
                'daemonset': None, 'build': 'host' if value == PRE_INSTALLED else 'none',
                'reason': '%s=%s' % (DRIVER_DEPLOY_LABEL, value)}
        else:
            eligible.append(facts)
    planner = {'rhcos': _plan_rhcos, 'kernel': _plan_kernel, 'single': _plan_single}[mode]
    planner(spec, eligible, dtk_images or {}, precompiled_available, plan, prepare_versions)
    names = [daemonset['metadata']['name'] for daemonset in plan['desired']]
    for name in set(names):
        if names.count(name) > 1:
            nodes = sorted(node for node, entry in plan['assignments'].items() if entry['daemonset'] == name)
            raise PlanError('two node groups map to DaemonSet name %s (the GPU Operator\'s naming drops the '
                            'kernel\'s architecture): nodes %s' % (name, ', '.join(nodes)),
                            obj=name, field='metadata.name')
    return plan


def _quantity(value):
    match = _QUANTITY_RE.match(str(value).strip())
    if not match:
        return str(value)
    number = Fraction(match.group(1))
    if match.group(2):
        number *= Fraction(10) ** int(match.group(2))
    return number * _QUANTITY_SUFFIX[match.group(3)]


def is_subset(desired, existing, quantities=False):
    """True when everything desired sets is in existing; extra keys in existing (server defaults) are fine.

    Lists must have the same length and match item by item (the API keeps their order); empty or zero desired
    values match absent ones; resource quantities compare by value (1 == '1000m').
    """
    if isinstance(desired, dict):
        if existing is None:
            return not desired
        return isinstance(existing, dict) and all(
            is_subset(value, existing.get(key), quantities or key in ('limits', 'requests'))
            for key, value in desired.items())
    if isinstance(desired, list):
        existing = [] if existing is None else existing
        return (isinstance(existing, list) and len(existing) == len(desired)
                and all(is_subset(d, e, quantities) for d, e in zip(desired, existing)))
    if existing is None:
        # The API omits zero values (false, 0, ''), so an absent field matches them.
        return desired in (None, False, '') or desired == 0
    if quantities:
        return _quantity(desired) == _quantity(existing)
    return desired == existing


def _pod_spec(daemonset):
    return ((daemonset.get('spec') or {}).get('template') or {}).get('spec') or {}


def _selector_terms(pod_spec):
    required = ((pod_spec.get('affinity') or {}).get('nodeAffinity') or {}).get(
        'requiredDuringSchedulingIgnoredDuringExecution') or {}
    return required.get('nodeSelectorTerms') or []


def _expression_matches(expression, labels):
    value = labels.get(expression['key'])
    operator = expression['operator']
    if operator == 'In':
        return value in expression.get('values', [])
    if operator == 'NotIn':
        return value not in expression.get('values', [])
    if operator == 'Exists':
        return value is not None
    if operator == 'DoesNotExist':
        return value is None
    return False


def _runs_correct_driver(node_selector, terms, facts):
    """True when a DaemonSet with this selection schedules on the node and builds for what the node runs."""
    labels = facts['labels']
    if any(labels.get(key) != value for key, value in node_selector.items()):
        return False
    if terms and not any(all(_expression_matches(expr, labels) for expr in term.get('matchExpressions', []))
                         for term in terms):
        return False
    if OSTREE_LABEL in node_selector and node_selector[OSTREE_LABEL] != facts['rhcos_version']:
        return False
    return KERNEL_LABEL not in node_selector or node_selector[KERNEL_LABEL] == facts['kernel']['effective']


def _nodes_with_version(node_selector, gpu_facts):
    """GPU nodes that have the DaemonSet's RHCOS version or kernel, by NFD label or by what they run."""
    if OSTREE_LABEL in node_selector:
        version = node_selector[OSTREE_LABEL]
        return [f['name'] for f in gpu_facts if version in (f['rhcos_label'], f['rhcos_os_image'])]
    if KERNEL_LABEL in node_selector:
        version = node_selector[KERNEL_LABEL]
        return [f['name'] for f in gpu_facts if version in (f['kernel']['full'], f['kernel']['effective'])]
    return []


def _why_keep_stale(daemonset, gpu_facts):
    status = daemonset.get('status') or {}
    counts = dict((key, status.get(key))
                  for key in ('desiredNumberScheduled', 'currentNumberScheduled', 'numberMisscheduled'))
    if any(value is None for value in counts.values()):
        return 'not desired, but its status does not report scheduled pods yet'
    if any(counts.values()):
        return 'not desired, but it still has pods (%s)' % ', '.join(
            '%s=%d' % item for item in sorted(counts.items()))
    holders = _nodes_with_version(_pod_spec(daemonset).get('nodeSelector') or {}, gpu_facts)
    if holders:
        return 'not desired, but GPU node(s) %s still have its version (by NFD label or osImage)' % ', '.join(
            sorted(holders))
    prepared = ((daemonset.get('metadata') or {}).get('annotations') or {}).get(PREPARED_ANNOTATION)
    if prepared:
        return ('prepared for an upgrade to %s (annotation %s) that no GPU node runs yet; the upgrade playbook uses '
                'it; delete it by hand if that upgrade was given up' % (prepared, PREPARED_ANNOTATION))
    return None


def is_managed_driver(daemonset):
    labels = (daemonset.get('metadata') or {}).get('labels') or {}
    return labels.get(MANAGED_BY_LABEL) == MANAGED_BY and labels.get(COMPONENT_LABEL) == 'nvidia-driver'


def serves(daemonset, facts):
    """True when the driver DaemonSet schedules on the node (facts: node_facts) with a driver for what it runs."""
    pod_spec = _pod_spec(daemonset)
    return _runs_correct_driver(pod_spec.get('nodeSelector') or {}, _selector_terms(pod_spec), facts)


def plan_driver_changes(desired, existing, nodes_facts):
    """Compare desired driver DaemonSets with the existing ones.

    Only driver DaemonSets this collection labelled (app.kubernetes.io/managed-by=accelerators.gpu and
    app.kubernetes.io/component=nvidia-driver) are touched. One that is not desired is deleted only when it
    has no scheduled, current or misscheduled pods and no GPU node has its version; otherwise it is kept
    (with the reason), so a DaemonSet still serving a node, such as the one of a blocked version, stays.
    A DaemonSet is unchanged when it holds everything declared and nothing this collection applied before and no
    longer declares (a label taken out of driver.labels is still there until the next apply removes it).

    Returns {create: [DaemonSet], update: [(existing, desired)], unchanged: [name], delete: [name],
    keep: [{name, reason, node_selector, node_selector_terms}]}.
    """
    gpu_facts = [facts for facts in nodes_facts if facts['gpu_present']]
    plan = {'create': [], 'update': [], 'unchanged': [], 'delete': [], 'keep': []}
    existing_by_name = dict((daemonset['metadata']['name'], daemonset) for daemonset in existing)
    managed = dict((name, daemonset) for name, daemonset in existing_by_name.items() if is_managed_driver(daemonset))

    def keep(daemonset, reason):
        pod_spec = _pod_spec(daemonset)
        plan['keep'].append({'name': daemonset['metadata']['name'], 'reason': reason,
                             'node_selector': dict(pod_spec.get('nodeSelector') or {}),
                             'node_selector_terms': _selector_terms(pod_spec)})

    desired_names = set()
    for daemonset in desired:
        name = daemonset['metadata']['name']
        desired_names.add(name)
        if name in existing_by_name and name not in managed:
            keep(existing_by_name[name],
                 'a DaemonSet of this name exists that this collection does not manage (no labels %s=%s, %s=%s; '
                 'the GPU Operator\'s?): it is not changed; delete it to let this collection manage it'
                 % (MANAGED_BY_LABEL, MANAGED_BY, COMPONENT_LABEL, 'nvidia-driver'))
        elif name not in managed:
            plan['create'].append(daemonset)
        elif all(is_subset(daemonset.get(part), managed[name].get(part)) for part in ('metadata', 'spec')) and not \
                dropped_fields(applied_fields(managed[name], MANAGED_BY), daemonset):
            plan['unchanged'].append(name)
        else:
            plan['update'].append((managed[name], daemonset))
    for name in sorted(set(managed) - desired_names):
        reason = _why_keep_stale(managed[name], gpu_facts)
        if reason:
            keep(managed[name], reason)
        else:
            plan['delete'].append(name)
    return plan


def nodes_left_without_driver(plan, blocked, facts):
    """Blocked nodes that no kept DaemonSet serves with a driver built for what they run."""
    by_name = dict((node['name'], node) for node in facts)
    left = []
    for entry in blocked:
        for name in entry['nodes']:
            node = by_name.get(name)
            served = node is not None and any(
                _runs_correct_driver(kept['node_selector'], kept['node_selector_terms'], node)
                for kept in plan['keep'])
            if not served and name not in left:
                left.append(name)
    return sorted(left)
