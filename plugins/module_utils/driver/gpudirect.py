# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPUDirect RDMA, GPUDirect Storage and GDRCopy in a driver DaemonSet, as the GPU Operator's driver state decides
them (controllers/object_controls.go: transformPeerMemoryContainer, transformGDSContainer, transformGDRCopyContainer,
resolveDriverTag); the driver role's template (roles/driver/templates/daemonset.yml.j2) lays the containers out.

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

# (side container, setting of the driver spec): GDS, then GDRCopy, in the GPU Operator's order.
MODULES = (('nvidia-fs-ctr', 'gds_image'), ('nvidia-gdrcopy-ctr', 'gdrcopy_image'))


class GPUDirectError(ValueError):
    """A GPUDirect setting that cannot be rendered for a DaemonSet; field names the setting."""

    def __init__(self, message, field):
        super(GPUDirectError, self).__init__(message)
        self.field = field


def side_image(image, os_tag):
    """A GDS or GDRCopy image as the GPU Operator tags it (resolveDriverTag): <image>-<osTag>, a digest as it is."""
    return image if '@sha256:' in image else '%s-%s' % (image, os_tag)


def side_images(spec, name, os_tag, precompiled):
    """{gds_image, gdrcopy_image}: the images of DaemonSet name's GDS and GDRCopy containers, None for those spec
    does not ask for. os_tag: the osTag of the DaemonSet's driver image, None when unknown; precompiled: it runs a
    precompiled driver image. GPUDirectError when one cannot be rendered."""
    modules = [(container, setting) for container, setting in MODULES if spec.get(setting)]
    if modules and precompiled:
        raise GPUDirectError(
            'DaemonSet %s runs a precompiled driver image, which carries no driver sources to build %s against '
            '(the GPU Operator refuses them with precompiled drivers too): switch them off, or build the driver '
            '(mode rhcos or single)' % (name, ' and '.join(container for container, _setting in modules)),
            field=modules[0][1])
    if modules and not os_tag and any('@sha256:' not in spec[setting] for _container, setting in modules):
        raise GPUDirectError(
            'DaemonSet %s: the %s image is tagged with the osTag of the driver image, which is unknown here (the '
            'nodes lack NFD os-release labels): give a digest reference' % (name, modules[0][0]), field=modules[0][1])
    images = dict((setting, None) for _container, setting in MODULES)
    images.update((setting, side_image(spec[setting], os_tag)) for _container, setting in modules)
    return images
