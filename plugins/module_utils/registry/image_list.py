# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The images a configuration needs, as the three files a disconnected site mirrors with: a plain list, an oc-mirror
v2 ImageSetConfiguration and a skopeo sync source file. Pure functions of image references."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from .client import registry_repository
from .mirrors import parse_image_reference

IMAGE_SET_API_VERSION = 'mirror.openshift.io/v2alpha1'
# OpenShift's build of the NFD operand, one tag per OpenShift minor; RHEL 9 based (-rhel9) from OpenShift 4.15.
NFD_OPENSHIFT_REPOSITORY = 'registry.redhat.io/openshift4/ose-node-feature-discovery'
NFD_OPENSHIFT_RHEL9_FROM = (4, 15)
_MAJOR_MINOR = re.compile(r'^v?(\d+)\.(\d+)(?:[.-]|$)')


def image_list(images):
    """Sorted, unique references, as given (empty entries dropped)."""
    return sorted(set(image for image in images if image))


def nfd_image(openshift_version, openshift, openshift_image='', kubernetes_image=''):
    """The NFD operand image a cluster needs: on OpenShift openshift_image when set, else the build of the cluster's
    OpenShift minor (NFD_OPENSHIFT_REPOSITORY[-rhel9]:v<major>.<minor>, as the NFD operator of that release runs it),
    None when openshift_version says no minor; elsewhere kubernetes_image (upstream NFD)."""
    if not openshift:
        return kubernetes_image
    if openshift_image:
        return openshift_image
    match = _MAJOR_MINOR.match(openshift_version or '')
    if not match:
        return None
    release = (int(match.group(1)), int(match.group(2)))
    return '%s%s:v%d.%d' % ((NFD_OPENSHIFT_REPOSITORY, '-rhel9' if release >= NFD_OPENSHIFT_RHEL9_FROM else '')
                            + release)


def pod_template_images(workloads):
    """Images of the containers and init containers of workloads' pod templates (DaemonSets, Deployments, Jobs as
    dicts), sorted, each once."""
    return image_list(container.get('image')
                      for workload in workloads
                      for pod_spec in [((workload.get('spec') or {}).get('template') or {}).get('spec') or {}]
                      for container in (pod_spec.get('initContainers') or []) + (pod_spec.get('containers') or []))


def pinned_reference(image):
    """The reference a mirror copies, registry spelt out: registry/repository@digest when there is a digest (a tag
    beside it is only a label), else registry/repository:tag, 'latest' when neither is given."""
    ref = parse_image_reference(image)
    separator, version = ('@', ref['digest']) if ref['digest'] else (':', ref['tag'] or 'latest')
    return '%s/%s%s%s' % (registry_repository(image) + (separator, version))


def image_set_configuration(images, operators=()):
    """An oc-mirror v2 ImageSetConfiguration mirroring the images (mirror.additionalImages) and, by catalog, the OLM
    packages in operators: [{catalog, package, channel (optional)}]."""
    mirror = {'additionalImages': [{'name': ref} for ref in image_list(pinned_reference(image) for image in image_list(images))]}
    catalogs = {}
    for operator in operators:
        packages = catalogs.setdefault(operator['catalog'], {})
        channels = packages.setdefault(operator['package'], [])
        if operator.get('channel') and operator['channel'] not in channels:
            channels.append(operator['channel'])
    if catalogs:
        mirror['operators'] = [
            {'catalog': catalog,
             'packages': [dict({'name': package}, **({'channels': [{'name': c} for c in channels]} if channels else {}))
                          for package, channels in sorted(packages.items())]}
            for catalog, packages in sorted(catalogs.items())]
    return {'apiVersion': IMAGE_SET_API_VERSION, 'kind': 'ImageSetConfiguration', 'mirror': mirror}


def skopeo_sync(images):
    """A skopeo sync YAML source: {registry: {images: {repository: [tags and digests]}}}. A digest is copied by
    digest (its tag is only a label); Docker Hub's short names are spelt in full."""
    registries = {}
    for image in image_list(images):
        registry, repository = registry_repository(image)
        ref = parse_image_reference(image)
        registries.setdefault(registry, {}).setdefault(repository, set()).add(ref['digest'] or ref['tag'] or 'latest')
    return {registry: {'images': {repository: sorted(wanted) for repository, wanted in sorted(repositories.items())}}
            for registry, repositories in sorted(registries.items())}
