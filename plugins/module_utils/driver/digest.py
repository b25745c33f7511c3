# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver configuration digest the GPU Operator sets on a driver pod (internal/config/driver_config_digest.go):
env DRIVER_CONFIG_DIGEST on the k8s-driver-manager, nvidia-driver-ctr and openshift-driver-toolkit-ctr containers, a
hash of the pod's install settings. A driver pod that starts where a driver of the same digest is loaded since the
node booted is not a reinstall: the driver manager leaves the loaded driver and its GPU workloads alone, the driver
container installs only its user-space part, the DTK side-car builds nothing (NVIDIA/k8s-driver-manager and
gpu-driver-container compare it with /run/nvidia/nvidia-driver.state).

As the operator's ClusterPolicy path does, the digest is read from the rendered pod spec, so every setting the
template renders into a container counts without naming it here: of each container its image, command, args,
env with a value (not valueFrom: NODE_NAME and the like are the same install on every node), envFrom sources and
volume mounts; of each volume its name and its ConfigMap, Secret or host path. Labels, annotations, tolerations,
node selection, resources, probes and pull policy do not change what is installed, and are left out. Empty values
are left out too, so that a setting rendered empty does not change the digest.

The encoding is the collection's own (sha256 of sorted JSON): the operator's (FNV-32a of Go's struct dump) cannot be
reproduced outside Go, and only equality between two pods of this collection matters.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json

DIGEST_ENV = 'DRIVER_CONFIG_DIGEST'
# The containers the operator sets the digest on: those that decide whether to unload, install or build.
DIGEST_CONTAINERS = ('k8s-driver-manager', 'nvidia-driver-ctr', 'openshift-driver-toolkit-ctr')


def _without_empty(mapping):
    return dict((key, value) for key, value in mapping.items() if value not in (None, '', [], {}, False))


def _env_source(source):
    for kind in ('configMapRef', 'secretRef'):
        if source.get(kind):
            return [kind, source[kind].get('name'), source.get('prefix', '')]
    return [sorted(source)]


def _container_settings(container):
    env = sorted([entry['name'], entry.get('value', '')] for entry in container.get('env') or []
                 if 'valueFrom' not in entry and entry['name'] != DIGEST_ENV)
    mounts = sorted([mount['name'], mount['mountPath'], mount.get('subPath', ''), bool(mount.get('readOnly'))]
                    for mount in container.get('volumeMounts') or [])
    return _without_empty({
        'image': container.get('image'), 'command': container.get('command'), 'args': container.get('args'),
        'env': env, 'env_from': sorted(_env_source(source) for source in container.get('envFrom') or []),
        'volume_mounts': mounts})


def _volume_settings(volume):
    return _without_empty({
        'config_map': (volume.get('configMap') or {}).get('name'),
        'secret': (volume.get('secret') or {}).get('secretName'),
        'host_path': (volume.get('hostPath') or {}).get('path')})


def install_settings(pod_spec):
    """What of a driver pod spec decides the driver installed on a node: a JSON-able dict."""
    containers = (pod_spec.get('initContainers') or []) + (pod_spec.get('containers') or [])
    return {
        'containers': dict((container['name'], _container_settings(container)) for container in containers),
        'volumes': dict((volume['name'], _volume_settings(volume)) for volume in pod_spec.get('volumes') or []),
    }


def config_digest(pod_spec, config_data=None):
    """The hex sha256 of the pod spec's install settings, and of the content of the ConfigMaps it mounts
    (config_data: their digest, config_data_digest()), as sorted, compact JSON: the same on every Python."""
    settings = install_settings(pod_spec)
    if config_data:
        settings['config_data'] = config_data
    text = json.dumps(settings, sort_keys=True, separators=(',', ':'))
    return hashlib.sha256(text.encode('utf-8')).hexdigest()


def config_data_digest(config_maps):
    """The hex sha256 of the data of ConfigMaps ({name: data}), None without any: module parameters, repository files
    and certificates are install settings too, although the pod spec names only their ConfigMaps."""
    if not config_maps:
        return None
    text = json.dumps(config_maps, sort_keys=True, separators=(',', ':'))
    return hashlib.sha256(text.encode('utf-8')).hexdigest()


def set_config_digest(pod_spec, config_data=None):
    """Set DRIVER_CONFIG_DIGEST on the pod spec's digest containers (DIGEST_CONTAINERS), in place, replacing a
    value it has; returns the digest. config_data: config_data_digest() of the ConfigMaps it mounts."""
    digest = config_digest(pod_spec, config_data)
    for container in (pod_spec.get('initContainers') or []) + (pod_spec.get('containers') or []):
        if container['name'] in DIGEST_CONTAINERS:
            env = [entry for entry in container.get('env') or [] if entry['name'] != DIGEST_ENV]
            container['env'] = env + [{'name': DIGEST_ENV, 'value': digest}]
    return digest
