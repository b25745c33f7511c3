# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""OpenShift image mirror rules: the cluster's mirror sets (list_mirror_sets), and pure functions applying their
rules as a node would.

Rules come from ImageDigestMirrorSet / ImageTagMirrorSet (config.openshift.io/v1) and the deprecated
ImageContentSourcePolicy (operator.openshift.io/v1alpha1). The machine-config operator writes one
registries.conf entry per source (digest and tag mirrors together, blocked if any set says
NeverContactSource); the node uses the single most specific matching entry and only those of its mirrors
that fit the reference (digest or tag).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ..k8s.errors import APIError

# ImageDigestMirrorSet, ImageTagMirrorSet, ImageContentSourcePolicy, by their mirror_rules() argument
MIRROR_SET_PATHS = (
    ('idms', '/apis/config.openshift.io/v1/imagedigestmirrorsets'),
    ('itms', '/apis/config.openshift.io/v1/imagetagmirrorsets'),
    ('icsp', '/apis/operator.openshift.io/v1alpha1/imagecontentsourcepolicies'),
)
_RULE_FIELDS = (
    ('ImageDigestMirrorSet', 'imageDigestMirrors', 'digest'),
    ('ImageTagMirrorSet', 'imageTagMirrors', 'tag'),
    ('ImageContentSourcePolicy', 'repositoryDigestMirrors', 'digest'),
)


def parse_image_reference(ref):
    """Split 'host:5000/ns/repo:tag@sha256:...' into {registry, repository, tag, digest} (None when absent).

    A first component without '.' or ':' that is not 'localhost' is not a registry (docker.io short names).
    """
    name, _at, digest = ref.partition('@')
    tag = None
    if name.rfind(':') > name.rfind('/'):
        name, _colon, tag = name.rpartition(':')
    first, slash, rest = name.partition('/')
    if slash and ('.' in first or ':' in first or first == 'localhost'):
        registry, repository = first, rest
    else:
        registry, repository = None, name
    return {'registry': registry, 'repository': repository, 'tag': tag, 'digest': digest or None}


def mirror_rules(idms=(), itms=(), icsp=()):
    """Normalise mirror set objects (lists of dicts) into [{source, mirrors, pull: 'digest'|'tag',
    never_contact_source, origin: 'Kind/name'}], in the order given."""
    rules = []
    for (kind, field, pull), objects in zip(_RULE_FIELDS, (idms, itms, icsp)):
        for obj in objects or ():
            origin = '%s/%s' % (kind, (obj.get('metadata') or {}).get('name'))
            for entry in (obj.get('spec') or {}).get(field) or []:
                if not entry.get('source'):
                    continue
                rules.append({
                    'source': entry['source'],
                    'mirrors': list(entry.get('mirrors') or []),
                    'pull': pull,
                    'never_contact_source': entry.get('mirrorSourcePolicy') == 'NeverContactSource',
                    'origin': origin,
                })
    return rules


def _matched_prefix(name, registry, source):
    """The part of name that source matches (None if it does not); wildcards '*.host' match subdomain hosts."""
    if source.startswith('*.'):
        host = (registry or '').split(':')[0]
        return registry if host.endswith(source[1:]) else None
    # Whole path components only: 'quay.io/a' matches 'quay.io/a/b' but not 'quay.io/ab'.
    if name == source or name.startswith(source + '/'):
        return source
    return None


def pull_candidates(image_ref, rules):
    """References a node tries for image_ref, in order: applicable mirrors, then the source unless blocked.

    A reference without tag or digest is pulled as ':latest'. An empty list means the source is blocked
    (NeverContactSource) and no mirror applies to this kind of reference.
    """
    ref = parse_image_reference(image_ref)
    name = '%s/%s' % (ref['registry'], ref['repository']) if ref['registry'] else ref['repository']
    suffix = ''
    if ref['tag'] or not ref['digest']:
        suffix = ':' + (ref['tag'] or 'latest')
    if ref['digest']:
        suffix += '@' + ref['digest']

    best = None
    for rule in rules:
        prefix = _matched_prefix(name, ref['registry'], rule['source'])
        if prefix is None:
            continue
        # Longer sources are more specific; on equal length an exact source beats a wildcard.
        rank = (len(rule['source']), not rule['source'].startswith('*.'))
        if best is None or rank > best[0]:
            best = (rank, rule['source'], prefix)
    if best is None:
        return [name + suffix]

    _specificity, source, prefix = best
    entry = [rule for rule in rules if rule['source'] == source]
    pull = 'digest' if ref['digest'] else 'tag'
    candidates = []
    for rule in entry:
        if rule['pull'] != pull:
            continue
        for mirror in rule['mirrors']:
            candidate = mirror + name[len(prefix):] + suffix
            if candidate not in candidates:
                candidates.append(candidate)
    if not any(rule['never_contact_source'] for rule in entry):
        candidates.append(name + suffix)
    return candidates


def list_mirror_sets(api):
    """{'idms': [...], 'itms': [...], 'icsp': [...]}: the cluster's mirror set objects, [] for an absent API (api: a
    k8s.api.ClusterAPI)."""
    found = {}
    for argument, path in MIRROR_SET_PATHS:
        try:
            found[argument] = api.list_items(path)
        except APIError as error:
            if error.status != 404:
                raise
            found[argument] = []
    return found
