# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which precompiled driver images exist, asked of their registry as the GPU nodes would pull them (through the
cluster's mirror rules, with the driver's pull secrets): the kernel mode plan of driver_daemonsets runs a precompiled
DaemonSet only for a kernel whose image exists."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ..registry.client import RegistryClient, docker_config_from_secret, urllib_transport
from ..registry.mirrors import list_mirror_sets, mirror_rules
from .names import os_tag, precompiled_image
from .plan import prepared_kernels


def precompiled_available(spec, gpu_nodes_facts, client, prepare_versions=()):
    """(set of the precompiled driver images that exist, {image: client.image_exists(image)}) for the kernels
    and OS tags of the GPU nodes, and the kernels of prepare_versions on those OS tags (plan.prepared_kernels),
    with the image names plan gives them.

    spec: the driver spec of plan.desired_driver_daemonsets (repository, image, branch). The set is
    that function's precompiled_available argument (mode kernel); the results say where each image was found
    or why not, for the module's output.
    """
    images = set()
    for facts in gpu_nodes_facts:
        kernel, tag = facts['kernel']['effective'], os_tag(facts)
        if facts['gpu_present'] and kernel and tag:
            images.add(precompiled_image(spec['repository'], spec.get('image') or 'driver', spec['branch'],
                                         kernel, tag))
    for kernel, tag, _os_id, _version_id in prepared_kernels(prepare_versions, gpu_nodes_facts):
        images.add(precompiled_image(spec['repository'], spec.get('image') or 'driver', spec['branch'], kernel, tag))
    checks = dict((image, client.image_exists(image)) for image in sorted(images))
    return set(image for image, check in checks.items() if check['exists']), checks


def checked_precompiled(api, spec, facts_list, check, prepare_versions):
    """(images that exist, checks) asked of the registries through the cluster's mirror rules and pull secrets."""
    names = check['pull_secrets'] if check['pull_secrets'] is not None else spec.get('image_pull_secrets') or []
    configs = [docker_config_from_secret(api.read_secret(spec['namespace'], name)) for name in names]
    client = RegistryClient(urllib_transport(check['ca_file'], check['validate_certs'], check['timeout']), configs,
                            mirror_rules(**list_mirror_sets(api)))
    return precompiled_available(spec, facts_list, client, prepare_versions)
