# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The dtk_image_lookup module's work: DTK image per RHCOS version, as each node will pull it.

run() takes the module and a k8s.api.ClusterAPI (or any object with the same methods).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ..k8s.errors import TaskError
from ..registry.mirrors import list_mirror_sets, mirror_rules, pull_candidates
from .dtk import read_dtk_imagestream, resolve_dtk_images

# The release payload's component whose image is the Driver Toolkit of the release's RHCOS build.
DTK_COMPONENT = 'driver-toolkit'


def pull_references(image, rules):
    """{image, candidates, pull_from}: the references a node tries for image, in order, and the first."""
    candidates = pull_candidates(image, rules)
    return {'image': image, 'candidates': candidates, 'pull_from': candidates[0] if candidates else None}


def _blocked_message(what, image):
    return ('%s %s cannot be pulled: its source is NeverContactSource and no mirror rule fits a %s reference; '
            'add a matching ImageDigestMirrorSet/ImageTagMirrorSet mirror'
            % (what, image, 'digest' if '@' in image else 'tag'))


def parse_release_info(text, release):
    """(DTK image, RHCOS build or None) of a release from `oc adm release info --output=json`: the image of tag
    driver-toolkit of its image references, and the Version of its displayVersions' machine-os."""
    try:
        info = json.loads(text)
    except ValueError:
        info = None
    if not isinstance(info, dict):
        raise TaskError('`oc adm release info %s --output=json` did not print a JSON object: %s'
                        % (release, text.strip()[:200] or 'no output'))
    tags = ((info.get('references') or {}).get('spec') or {}).get('tags') or []
    images = [(tag.get('from') or {}).get('name') for tag in tags if tag.get('name') == DTK_COMPONENT]
    if not images or not images[0]:
        raise TaskError('release %s has no %s image among its %d image references: a release before OpenShift 4.6, '
                        'or not an OpenShift release' % (release, DTK_COMPONENT, len(tags)))
    machine_os = (info.get('displayVersions') or {}).get('machine-os') or {}
    return images[0], machine_os.get('Version') or None


def release_info_command(params, oc, release):
    """The `oc adm release info` command reading a release's image references and component versions."""
    command = [oc, 'adm', 'release', 'info', release, '--output=json']
    if params['idms_file']:
        command.append('--idms-file=%s' % params['idms_file'])
    if params['registry_config']:
        command.append('--registry-config=%s' % params['registry_config'])
    return command


def release_dtk_image(module, release):
    """(DTK image, RHCOS build) of a release (version or release image) from `oc adm release info`."""
    params = module.params
    oc = params['oc_path'] or module.get_bin_path('oc')
    if not oc:
        raise TaskError(
            'release %s was given, and finding its DTK image and RHCOS build needs the oc client (`oc adm release '
            'info %s --output=json`), which is not in PATH: install oc or set oc_path' % (release, release))
    command = release_info_command(params, oc, release)
    rc, out, err = module.run_command(command)
    if rc != 0:
        raise TaskError('`%s` failed (rc=%d): %s' % (' '.join(command), rc, (err or out).strip() or 'no output'))
    return parse_release_info(out, release)


def dtk_images_as_pulled(api, versions, overrides=None, apply_mirrors=True):
    """{images, unresolved, problems, notes, mirror_rules}: the DTK image of each RHCOS version from the
    openshift/driver-toolkit image stream (or overrides), with the references a node pulls through the cluster's
    mirror rules; an image no rule lets a node pull is a problem, as is a stream entry that cannot be used."""
    imagestream, absence = read_dtk_imagestream(api)
    resolved = resolve_dtk_images(imagestream, versions, overrides, absence)
    rules = mirror_rules(**list_mirror_sets(api)) if apply_mirrors else []
    problems = list(resolved['problems'])
    images = {}
    for version, entry in resolved['versions'].items():
        entry = dict(entry, candidates=[], pull_from=None)
        if entry['image']:
            entry.update(pull_references(entry['image'], rules))
            if not entry['candidates']:
                problems.append(_blocked_message('DTK image of RHCOS %s' % version, entry['image']))
        images[version] = entry
    unresolved = sorted(version for version, entry in images.items() if entry['status'] != 'resolved')
    return {'images': images, 'unresolved': unresolved, 'problems': problems, 'notes': resolved['notes'],
            'mirror_rules': rules}


def run(module, api):
    params = module.params
    result = dict(dtk_images_as_pulled(api, params['versions'], params['overrides'], params['apply_mirrors']),
                  changed=False)
    images, unresolved, problems, rules = (result[key] for key in ('images', 'unresolved', 'problems', 'mirror_rules'))
    if params['release']:
        image, rhcos = release_dtk_image(module, params['release'])
        result['release'] = dict(pull_references(image, rules), release=params['release'], rhcos=rhcos)
        if not result['release']['candidates']:
            problems.append(_blocked_message('DTK image of release %s' % params['release'],
                                             result['release']['image']))
    if unresolved and params['fail_on_unresolved']:
        raise TaskError('no usable DTK image for RHCOS %s: %s' % (
            ', '.join(unresolved), ' '.join(images[version]['message'] for version in unresolved)), **result)
    for message in problems + [images[version]['message'] for version in unresolved]:
        module.warn(message)
    return result
