# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The OpenShift Driver Toolkit (DTK) ImageStream openshift/driver-toolkit: read from the cluster
(read_dtk_imagestream), and pure functions resolving the DTK image of each RHCOS version from it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ..nodes.facts import RHCOS_VERSION_RE

DTK_NAMESPACE = 'openshift'
DTK_IMAGESTREAM = 'driver-toolkit'
STREAM = '%s/%s' % (DTK_NAMESPACE, DTK_IMAGESTREAM)
PLACEHOLDER_TAG = '0.0.1-snapshot-machine-os'
# The payload template's image, left in place when `oc adm release new` did not substitute it.
PLACEHOLDER_IMAGE_MARK = 'image-reference-placeholder'
BROKEN_STREAM_FIX = 'oc delete imagestream %s -n %s' % (DTK_IMAGESTREAM, DTK_NAMESPACE)
DTK_IMAGESTREAM_PATH = '/apis/image.openshift.io/v1/namespaces/%s/imagestreams/%s' % (DTK_NAMESPACE, DTK_IMAGESTREAM)
# Why the image stream could not be read (resolve_dtk_images' stream_absence).
NOT_OPENSHIFT = 'not-openshift'
STREAM_MISSING = 'missing'
_ABSENCE_CAUSES = {
    None: 'the cluster is not OpenShift or its Driver Toolkit image stream is absent',
    NOT_OPENSHIFT: 'the API server does not serve image.openshift.io/v1, so this is not OpenShift and there is '
                   'no Driver Toolkit image stream',
    STREAM_MISSING: 'the cluster serves image.openshift.io/v1 but the stream does not exist; the cluster-version '
                    'operator creates it from the release payload (check `oc get clusterversion` and the '
                    'openshift namespace)',
}


def _history(imagestream):
    history = {}
    for status_tag in (imagestream.get('status') or {}).get('tags') or []:
        history[status_tag.get('tag')] = [
            {'image': item.get('dockerImageReference'), 'created': item.get('created'), 'digest': item.get('image')}
            for item in status_tag.get('items') or []
        ]
    return history


def dtk_tags(imagestream):
    """Read a driver-toolkit ImageStream dict.

    Returns {tags: {rhcos: {image, history}}, streams: ['latest', 'latest-rhel-10', ...], broken: bool,
    placeholders: [tag], not_rhcos: [tag], problems: [message], notes: [message]}.
    Tags named latest* and tags without from are skipped, as the GPU Operator and KMM do.
    """
    history = _history(imagestream)
    parsed = {'tags': {}, 'streams': [], 'broken': False, 'placeholders': [], 'not_rhcos': [],
              'problems': [], 'notes': []}
    for tag in (imagestream.get('spec') or {}).get('tags') or []:
        name = tag.get('name')
        source = tag.get('from') or {}
        if not name:
            parsed['broken'] = True
            continue
        if name == 'latest' or name.startswith('latest-'):
            parsed['streams'].append(name)
            continue
        if not source.get('name'):
            continue
        image = source['name']
        if source.get('kind', 'DockerImage') != 'DockerImage':
            # from names another tag, not a pullable image: what it resolved to is in status.
            image = (history.get(name) or [{}])[0].get('image')
            if not image:
                continue
        if name == PLACEHOLDER_TAG or PLACEHOLDER_IMAGE_MARK in image:
            parsed['placeholders'].append(name)
            continue
        if not RHCOS_VERSION_RE.fullmatch(name):
            parsed['not_rhcos'].append(name)
        parsed['tags'][name] = {'image': image, 'history': history.get(name, [])}
    _explain(parsed)
    return parsed


def _explain(parsed):
    if parsed['broken']:
        parsed['problems'].append(
            'image stream %s is broken: a tag has an empty name (BZ#2014071, seen after upgrades). Delete the '
            'image stream so the cluster-version operator recreates it: %s' % (STREAM, BROKEN_STREAM_FIX))
    if parsed['placeholders']:
        parsed['problems'].append(
            'image stream %s has unresolved placeholder tag(s) %s: the release payload is bad (its driver-toolkit '
            'tags were never filled in); move to a fixed release or pass DTK image overrides'
            % (STREAM, ', '.join(parsed['placeholders'])))
    if parsed['not_rhcos']:
        parsed['notes'].append('image stream %s has tag(s) that are not RHCOS versions: %s'
                               % (STREAM, ', '.join(parsed['not_rhcos'])))
    if len(parsed['streams']) > 1:
        parsed['notes'].append(
            'image stream %s carries several RHCOS streams (%s): nodes may run different RHCOS streams at once, '
            'each gets the DTK of its own version' % (STREAM, ', '.join(parsed['streams'])))


def _unresolved(status, message):
    return {'image': None, 'source': None, 'status': status, 'message': message, 'history': []}


def _resolve(version, parsed):
    if version in parsed['tags']:
        tag = parsed['tags'][version]
        return {'image': tag['image'], 'source': 'imagestream', 'status': 'resolved',
                'message': 'DTK image for RHCOS %s from image stream %s' % (version, STREAM),
                'history': tag['history']}
    if parsed['broken']:
        return _unresolved('broken', (
            'RHCOS %s has no tag in image stream %s, which is broken (a tag with an empty name, BZ#2014071): '
            'delete it so the cluster-version operator recreates it (%s), or pass an override for %s'
            % (version, STREAM, BROKEN_STREAM_FIX, version)))
    if parsed['placeholders']:
        return _unresolved('placeholder', (
            'RHCOS %s has no tag in image stream %s, which still holds the placeholder %s: the release payload '
            'is bad; pass an override for %s' % (version, STREAM, ', '.join(parsed['placeholders']), version)))
    return _unresolved('missing', (
        'RHCOS %s has no tag in image stream %s (tags: %s); another version\'s DTK would build a driver that does '
        'not load, so none is guessed. Pass an override for %s (`oc adm release info <release> '
        '--image-for=driver-toolkit` names it) or wait for the cluster-version operator to add the tag'
        % (version, STREAM, ', '.join(sorted(parsed['tags'])) or 'none', version)))


def resolve_dtk_images(imagestream, versions, overrides=None, stream_absence=None):
    """DTK image per RHCOS version, from overrides first, then the image stream (None: stream absent).

    stream_absence says why an absent stream is absent: NOT_OPENSHIFT, STREAM_MISSING, or None (unknown).

    Returns {versions: {rhcos: {image, source: 'override'|'imagestream'|None,
    status: 'resolved'|'missing'|'broken'|'placeholder', message, history}}, problems: [...], notes: [...]}.
    """
    overrides = overrides or {}
    result = {'versions': {}, 'problems': [], 'notes': []}
    cause = _ABSENCE_CAUSES[stream_absence]
    if imagestream is None:
        parsed = None
        result['problems'].append('image stream %s not found: %s' % (STREAM, cause))
    else:
        parsed = dtk_tags(imagestream)
        result['problems'].extend(parsed['problems'])
        result['notes'].extend(parsed['notes'])
    for version in sorted(set(versions)):
        if overrides.get(version):
            result['versions'][version] = {
                'image': overrides[version], 'source': 'override', 'status': 'resolved',
                'message': 'DTK image for RHCOS %s given as an override' % version, 'history': []}
        elif parsed is None:
            result['versions'][version] = _unresolved('missing', (
                'no DTK image for RHCOS %s: image stream %s not found (%s); pass an override for %s'
                % (version, STREAM, cause, version)))
        else:
            result['versions'][version] = _resolve(version, parsed)
    return result


def read_dtk_imagestream(api):
    """(the ImageStream openshift/driver-toolkit, None), or (None, why it is absent); api: a k8s.api.ClusterAPI.

    Why: NOT_OPENSHIFT when the API server does not serve image.openshift.io, STREAM_MISSING when it does but
    the stream does not exist.
    """
    stream, served = api.read_optional(DTK_IMAGESTREAM_PATH)
    return stream, None if stream else STREAM_MISSING if served else NOT_OPENSHIFT
