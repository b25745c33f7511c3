# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Names, labels and image references of the NVIDIA driver DaemonSets, those of the GPU Operator
(controllers/object_controls.go), so that its tooling and habits keep working; and the error of a plan that cannot
be applied."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import re

from ..nodes.facts import is_valid_label_value

DRIVER_DAEMONSET = 'nvidia-driver-daemonset'
DRIVER_CONTAINER = 'nvidia-driver-ctr'
# The DaemonSets of a named driver configuration: upstream's nvidia-<driverType>-driver-<NVIDIADriver>-<osTag>, the
# pool (RHCOS build, kernel) in the place of upstream's hash.
CONFIGURATION_DAEMONSET = 'nvidia-gpu-driver'
MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by'
MANAGED_BY = 'accelerators.gpu'
COMPONENT_LABEL = 'app.kubernetes.io/component'
# On a DaemonSet of prepare_versions (an upgrade's target, no node runs it yet): the build or kernel. A run without
# prepare_versions (a deploy or reconcile while the upgrade goes on) keeps it rather than deleting it as stale.
PREPARED_ANNOTATION = 'accelerators.gpu/prepared-for-upgrade'
_DNS_SUBDOMAIN_RE = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')
_IMAGE_TAG_RE = re.compile(r'^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$')
_RHCOS_BUILD_RE = re.compile(r'^(\d+)\.(\d+)\.\d+-\d+$')
_KERNEL_ARCH_RE = re.compile(r'x86_64(?:_64k)?|aarch64(?:_64k)?')


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


def check_label_values(labels, obj, field):
    for key, value in labels.items():
        if not isinstance(value, str) or not is_valid_label_value(value):
            raise PlanError(
                '%s of %s: %s=%r is not a valid label value (a string of at most 63 characters, alphanumeric at '
                'both ends, "-_." inside)' % (field, obj, key, value), obj=obj, field='%s.%s' % (field, key))


def configuration_daemonset_name(configuration, pool):
    """'nvidia-gpu-driver-<configuration>-<pool>'; when longer than a label value allows, cut and ended with a hash
    of the whole name, as upstream's getDriverAppName cuts its names, so that two pools never share one."""
    name = '-'.join(part for part in (CONFIGURATION_DAEMONSET, configuration, pool) if part)
    if len(name) > 63:
        digest = hashlib.sha256(name.encode('utf-8')).hexdigest()[:8]
        name = '%s-%s' % (name[:54].rstrip('-.'), digest)
    return _check_name(name)


def driver_daemonset_name(rhcos, configuration=None):
    """'nvidia-driver-daemonset-<rhcos>', the GPU Operator's name for a DTK build DaemonSet, or a named
    configuration's (configuration_daemonset_name)."""
    if configuration:
        return configuration_daemonset_name(configuration, rhcos)
    return _check_name('%s-%s' % (DRIVER_DAEMONSET, rhcos))


def single_daemonset_name(os_tag_value, configuration=None):
    """'nvidia-driver-daemonset', the one DaemonSet of mode single, or a named configuration's, per OS tag."""
    if configuration:
        return configuration_daemonset_name(configuration, os_tag_value)
    return DRIVER_DAEMONSET


def sanitize_kernel_for_name(kernel):
    """The GPU Operator's getSanitizedKernelVersion (arch dropped, '_' to '.', lower case), with empty parts
    removed: the GPU Operator leaves '..' for '+rt' kernels, which no DaemonSet name accepts."""
    sanitized = _KERNEL_ARCH_RE.sub('', kernel).replace('_', '.').lower()
    return re.sub(r'\.{2,}', '.', sanitized).strip('.-')


def precompiled_daemonset_name(kernel, os_tag_value, configuration=None):
    """'nvidia-driver-daemonset-<sanitised kernel>-<osTag>', the GPU Operator's precompiled DaemonSet name, or a named
    configuration's (configuration_daemonset_name)."""
    pool = '%s-%s' % (sanitize_kernel_for_name(kernel), os_tag_value)
    if configuration:
        return configuration_daemonset_name(configuration, pool)
    return _check_name('%s-%s' % (DRIVER_DAEMONSET, pool))


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


def build_image(spec, os_tag_value):
    """Driver image for DTK and self-compiling builds: image_ref, or <repository>/<image>:<version>-<osTag>."""
    if spec.get('image_ref'):
        return spec['image_ref']
    if not os_tag_value:
        return None
    return '%s/%s:%s-%s' % (spec['repository'], spec.get('image') or 'driver', spec['version'], os_tag_value)
