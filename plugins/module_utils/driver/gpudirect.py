# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure rendering of GPUDirect RDMA, GPUDirect Storage and GDRCopy into a driver DaemonSet, as the GPU Operator's
driver state does it (assets/state-driver/0500_daemonset.yaml; controllers/object_controls.go:
transformDriverContainer, transformDriverManagerInitContainer, transformPeerMemoryContainer, transformGDSContainer,
transformGDRCopyContainer, transformOpenShiftDriverToolkitContainer).

- RDMA: the side container nvidia-peermem-ctr (the driver image, `nvidia-driver reload_nvidia_peermem`), which
  loads nvidia-peermem once the network driver is there (the NVIDIA Network Operator's driver container, whose
  readiness file is /run/mellanox/drivers/.driver-ready, or MOFED installed on the host with use_host_mofed), and
  GPU_DIRECT_RDMA_ENABLED (and USE_HOST_MOFED) in the driver and k8s-driver-manager containers; with host MOFED
  the driver builds nvidia-peermem against the host's /usr/src (volume mlnx-ofed-usr-src).
- GDS: nvidia-fs-ctr, GDRCopy: nvidia-gdrcopy-ctr, each its own image tagged <version>-<osTag> as the driver's,
  built against the driver's sources (with the Driver Toolkit through ocp_dtk_entrypoint on a DTK build). Neither
  works with precompiled driver images, which carry no sources: the GPU Operator refuses them, and so does this.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

PEERMEM_CONTAINER = 'nvidia-peermem-ctr'
GDS_CONTAINER = 'nvidia-fs-ctr'
GDRCOPY_CONTAINER = 'nvidia-gdrcopy-ctr'
RDMA_ENV = 'GPU_DIRECT_RDMA_ENABLED'
HOST_MOFED_ENV = 'USE_HOST_MOFED'
GDS_ENV = 'GDS_ENABLED'
GDRCOPY_ENV = 'GDRCOPY_ENABLED'
OFED_SOURCES_VOLUME = 'mlnx-ofed-usr-src'
# MOFED installed on the host keeps its kernel sources (ofa_kernel) in the host's /usr/src.
HOST_OFED_SOURCES = '/usr/src'
PRIVILEGED = {'privileged': True, 'seLinuxOptions': {'level': 's0'}}
# A side container waits for the driver's sources and its loaded module, then builds and loads its own.
WAIT_FOR_DRIVER = ('until [ -d /run/nvidia/driver/usr/src ] && lsmod | grep nvidia; do echo Waiting for '
                   'nvidia-driver to be installed...; sleep 10; done; exec %s install')
MOUNTS = [{'name': 'run-nvidia', 'mountPath': '/run/nvidia', 'mountPropagation': 'HostToContainer'},
          {'name': 'var-log', 'mountPath': '/var/log'},
          {'name': 'dev-log', 'mountPath': '/dev/log', 'readOnly': True}]
# name, setting, environment variable, installer, DTK entrypoint argument, module the startup probe looks for
MODULES = (
    (GDS_CONTAINER, 'gds_image', GDS_ENV, 'nvidia-gds-driver', 'nv-fs-ctr-run-with-dtk', 'nvidia_fs'),
    (GDRCOPY_CONTAINER, 'gdrcopy_image', GDRCOPY_ENV, 'nvidia-gdrcopy-driver', 'gdrcopy-ctr-run-with-dtk', 'gdrdrv'),
)


class GPUDirectError(ValueError):
    """A GPUDirect setting that cannot be rendered for a DaemonSet; field names the setting."""

    def __init__(self, message, field):
        super(GPUDirectError, self).__init__(message)
        self.field = field


def enabled(spec):
    """The GPUDirect features a driver spec asks for: rdma, gds, gdrcopy."""
    return [name for name, on in (('rdma', spec.get('rdma')), ('gds', spec.get('gds_image')),
                                  ('gdrcopy', spec.get('gdrcopy_image'))) if on]


def side_image(image, os_tag):
    """A GDS or GDRCopy image as the GPU Operator tags it (resolveDriverTag): <image>-<osTag>, a digest as it is."""
    return image if '@sha256:' in image else '%s-%s' % (image, os_tag)


def _set_env(container, name, value='true'):
    env = container.setdefault('env', [])
    for entry in env:
        if entry.get('name') == name:
            entry.pop('valueFrom', None)
            entry['value'] = value
            return
    env.append({'name': name, 'value': value})


def _probe(command, **timing):
    probe = {'exec': {'command': ['sh', '-c', command]}, 'initialDelaySeconds': 10, 'failureThreshold': 120,
             'successThreshold': 1, 'periodSeconds': 10, 'timeoutSeconds': 10}
    probe.update(timing)
    return probe


def peermem_container(driver, host_mofed):
    """nvidia-peermem-ctr beside a driver container: its image and pull policy, loading nvidia-peermem whenever
    the network driver (re)loads; its probe fails while mlx5_core is loaded without nvidia-peermem."""
    container = {
        'name': PEERMEM_CONTAINER,
        'image': driver['image'],
        'imagePullPolicy': driver['imagePullPolicy'],
        'command': ['nvidia-driver'],
        'args': ['reload_nvidia_peermem'],
        'securityContext': copy.deepcopy(PRIVILEGED),
        'volumeMounts': [{'name': 'run-nvidia', 'mountPath': '/run/nvidia', 'mountPropagation': 'Bidirectional'},
                         {'name': 'var-log', 'mountPath': '/var/log'},
                         {'name': 'dev-log', 'mountPath': '/dev/log', 'readOnly': True},
                         {'name': 'run-mellanox-drivers', 'mountPath': '/run/mellanox/drivers',
                          'mountPropagation': 'HostToContainer'}],
        'startupProbe': _probe('nvidia-driver probe_nvidia_peermem'),
        'livenessProbe': _probe('nvidia-driver probe_nvidia_peermem', initialDelaySeconds=30, periodSeconds=30,
                                failureThreshold=1),
    }
    if host_mofed:
        container['env'] = [{'name': HOST_MOFED_ENV, 'value': 'true'}]
    return container


def module_container(name, image, installer, dtk_argument, module, pull_policy, shared_mount):
    """nvidia-fs-ctr or nvidia-gdrcopy-ctr: builds and loads its module once the driver is loaded; on a DTK build
    through the Driver Toolkit side-car (shared_mount: the shared directory's mount), else by itself."""
    container = {
        'name': name,
        'image': image,
        'imagePullPolicy': pull_policy,
        'command': ['bash', '-xc'],
        'args': [WAIT_FOR_DRIVER % installer],
        'securityContext': copy.deepcopy(PRIVILEGED),
        'volumeMounts': copy.deepcopy(MOUNTS),
        'startupProbe': _probe('lsmod | grep %s' % module),
    }
    if shared_mount:
        container.update(command=['ocp_dtk_entrypoint'], args=[dtk_argument])
        container['volumeMounts'].append(copy.deepcopy(shared_mount))
    return container


def apply_gpudirect(daemonset, spec, os_tag, driver_container, dtk_container, manager_container, precompiled):
    """Add to a rendered driver DaemonSet what spec's rdma, use_host_mofed, gds_image and gdrcopy_image ask for.

    driver_container, dtk_container, manager_container: the names of those containers (the DTK side-car and the
    init container may be absent); os_tag: the osTag of the DaemonSet's driver image (the GDS and GDRCopy images
    get the same), None when unknown; precompiled: the DaemonSet runs a precompiled driver image. The side
    containers follow the driver container, in the GPU Operator's order. GPUDirectError when GDS or GDRCopy cannot
    be rendered. Returns the DaemonSet.
    """
    wanted = enabled(spec)
    if not wanted:
        return daemonset
    name = daemonset['metadata']['name']
    modules = [entry for entry in MODULES if spec.get(entry[1])]
    if modules and precompiled:
        raise GPUDirectError(
            'DaemonSet %s runs a precompiled driver image, which carries no driver sources to build %s against '
            '(the GPU Operator refuses them with precompiled drivers too): switch them off, or build the driver '
            '(mode rhcos or single)' % (name, ' and '.join(entry[0] for entry in modules)), field=modules[0][1])
    if modules and not os_tag and any('@sha256:' not in spec[entry[1]] for entry in modules):
        raise GPUDirectError(
            'DaemonSet %s: the %s image is tagged with the osTag of the driver image, which is unknown here (the '
            'nodes lack NFD os-release labels): give a digest reference' % (name, modules[0][0]), field=modules[0][1])
    pod_spec = daemonset['spec']['template']['spec']
    containers = dict((c['name'], c) for c in pod_spec['containers'] + (pod_spec.get('initContainers') or []))
    driver = containers[driver_container]
    host_mofed = bool(spec.get('rdma') and spec.get('use_host_mofed'))
    added = []
    if spec.get('rdma'):
        for target in (driver, containers.get(manager_container)):
            if target is not None:
                _set_env(target, RDMA_ENV)
                if host_mofed:
                    _set_env(target, HOST_MOFED_ENV)
        if host_mofed:
            for volume in pod_spec['volumes']:
                if volume['name'] == OFED_SOURCES_VOLUME:
                    volume['hostPath']['path'] = HOST_OFED_SOURCES
        added.append(peermem_container(driver, host_mofed))
    dtk = containers.get(dtk_container)
    shared = None
    if dtk is not None:
        shared = next(m for m in driver['volumeMounts'] if m['mountPath'] == '/mnt/shared-nvidia-driver-toolkit')
    for container, setting, env, installer, dtk_argument, module in modules:
        _set_env(driver, env)
        if dtk is not None:
            _set_env(dtk, env)
        added.append(module_container(container, side_image(spec[setting], os_tag), installer, dtk_argument,
                                      module, driver['imagePullPolicy'], shared))
    for container in added:
        if spec.get('resources'):
            container['resources'] = copy.deepcopy(spec['resources'])
    at = pod_spec['containers'].index(driver) + 1
    pod_spec['containers'][at:at] = added
    return daemonset
