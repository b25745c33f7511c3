# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.registry.mirrors import (
    list_mirror_sets, mirror_rules, parse_image_reference, pull_candidates)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.k8s.test_client import DynamicClient, make_api

DIGEST = 'sha256:' + 'f' * 64


def idms(name, *entries):
    return {'apiVersion': 'config.openshift.io/v1', 'kind': 'ImageDigestMirrorSet', 'metadata': {'name': name},
            'spec': {'imageDigestMirrors': list(entries)}}


def itms(name, *entries):
    return {'apiVersion': 'config.openshift.io/v1', 'kind': 'ImageTagMirrorSet', 'metadata': {'name': name},
            'spec': {'imageTagMirrors': list(entries)}}


def icsp(name, *entries):
    return {'apiVersion': 'operator.openshift.io/v1alpha1', 'kind': 'ImageContentSourcePolicy',
            'metadata': {'name': name}, 'spec': {'repositoryDigestMirrors': list(entries)}}


def entry(source, mirrors, policy=None):
    result = {'source': source, 'mirrors': mirrors}
    if policy:
        result['mirrorSourcePolicy'] = policy
    return result


@pytest.mark.parametrize('ref, expected', [
    ('nvcr.io/nvidia/driver:550.90.07-rhcos4.16',
     {'registry': 'nvcr.io', 'repository': 'nvidia/driver', 'tag': '550.90.07-rhcos4.16', 'digest': None}),
    ('registry.local:5000/nvidia/driver:535',
     {'registry': 'registry.local:5000', 'repository': 'nvidia/driver', 'tag': '535', 'digest': None}),
    ('registry.local:5000/nvidia/driver',
     {'registry': 'registry.local:5000', 'repository': 'nvidia/driver', 'tag': None, 'digest': None}),
    ('quay.io/openshift-release-dev/ocp-v4.0-art-dev@' + DIGEST,
     {'registry': 'quay.io', 'repository': 'openshift-release-dev/ocp-v4.0-art-dev', 'tag': None, 'digest': DIGEST}),
    ('localhost/x:1@' + DIGEST, {'registry': 'localhost', 'repository': 'x', 'tag': '1', 'digest': DIGEST}),
    ('library/nginx:1.25', {'registry': None, 'repository': 'library/nginx', 'tag': '1.25', 'digest': None}),
    ('nginx', {'registry': None, 'repository': 'nginx', 'tag': None, 'digest': None}),
])
def test_parse_image_reference(ref, expected):
    assert parse_image_reference(ref) == expected


def test_mirror_rules_normalises_all_three_kinds():
    rules = mirror_rules(
        idms=[idms('dtk', entry('quay.io/openshift-release-dev', ['mirror.local/ocp'], 'NeverContactSource'))],
        itms=[itms('nvidia', entry('nvcr.io/nvidia', ['mirror.local/nvidia']))],
        icsp=[icsp('legacy', entry('registry.redhat.io', ['mirror.local/rh'])), {'metadata': {'name': 'empty'}}],
    )
    assert rules == [
        {'source': 'quay.io/openshift-release-dev', 'mirrors': ['mirror.local/ocp'], 'pull': 'digest',
         'never_contact_source': True, 'origin': 'ImageDigestMirrorSet/dtk'},
        {'source': 'nvcr.io/nvidia', 'mirrors': ['mirror.local/nvidia'], 'pull': 'tag',
         'never_contact_source': False, 'origin': 'ImageTagMirrorSet/nvidia'},
        {'source': 'registry.redhat.io', 'mirrors': ['mirror.local/rh'], 'pull': 'digest',
         'never_contact_source': False, 'origin': 'ImageContentSourcePolicy/legacy'},
    ]


def test_no_rule_returns_the_reference_itself_with_latest_for_untagged():
    assert pull_candidates('nvcr.io/nvidia/driver:535', []) == ['nvcr.io/nvidia/driver:535']
    assert pull_candidates('nvcr.io/nvidia/driver', []) == ['nvcr.io/nvidia/driver:latest']


def test_longest_match_wins_and_prefix_is_replaced():
    rules = mirror_rules(idms=[idms('m',
                                    entry('quay.io', ['mirror.local/quay']),
                                    entry('quay.io/openshift-release-dev', ['m1.local/ocp', 'm2.local/ocp']))])
    ref = 'quay.io/openshift-release-dev/ocp-v4.0-art-dev@' + DIGEST
    assert pull_candidates(ref, rules) == [
        'm1.local/ocp/ocp-v4.0-art-dev@' + DIGEST, 'm2.local/ocp/ocp-v4.0-art-dev@' + DIGEST, ref]
    assert pull_candidates('quay.io/other/x@' + DIGEST, rules) == [
        'mirror.local/quay/other/x@' + DIGEST, 'quay.io/other/x@' + DIGEST]


def test_match_is_on_path_component_boundaries():
    rules = mirror_rules(itms=[itms('m', entry('quay.io/a', ['mirror.local/a']))])
    assert pull_candidates('quay.io/a/b:1', rules) == ['mirror.local/a/b:1', 'quay.io/a/b:1']
    assert pull_candidates('quay.io/a:1', rules) == ['mirror.local/a:1', 'quay.io/a:1']
    assert pull_candidates('quay.io/ab:1', rules) == ['quay.io/ab:1']


def test_source_with_port_matches_only_that_port():
    rules = mirror_rules(itms=[itms('m', entry('registry.local', ['mirror.local']))])
    assert pull_candidates('registry.local:5000/x:1', rules) == ['registry.local:5000/x:1']
    assert pull_candidates('registry.local/x:1', rules) == ['mirror.local/x:1', 'registry.local/x:1']


def test_wildcard_matches_subdomains_and_is_less_specific_than_exact_host():
    rules = mirror_rules(itms=[itms('m',
                                    entry('*.example.com', ['wild.local/ex']),
                                    entry('reg.example.com', ['exact.local/reg']))])
    assert pull_candidates('a.b.example.com/ns/img:1', rules) == ['wild.local/ex/ns/img:1', 'a.b.example.com/ns/img:1']
    assert pull_candidates('reg.example.com/ns/img:1', rules) == [
        'exact.local/reg/ns/img:1', 'reg.example.com/ns/img:1']
    assert pull_candidates('example.com/ns/img:1', rules) == ['example.com/ns/img:1']
    assert pull_candidates('notexample.com/ns/img:1', rules) == ['notexample.com/ns/img:1']
    same_length = mirror_rules(itms=[itms('m', entry('*.b.example.com', ['wild.local'])),
                                     itms('n', entry('a.b.example.com', ['exact.local']))])
    assert pull_candidates('a.b.example.com/img:1', same_length) == ['exact.local/img:1', 'a.b.example.com/img:1']
    assert pull_candidates('c.b.example.com:8443/img:1', same_length) == [
        'wild.local/img:1', 'c.b.example.com:8443/img:1']


def test_digest_mirrors_only_for_digests_tag_mirrors_only_for_tags():
    rules = mirror_rules(
        idms=[idms('d', entry('nvcr.io/nvidia', ['digest.local/nvidia']))],
        itms=[itms('t', entry('nvcr.io/nvidia', ['tag.local/nvidia']))])
    assert pull_candidates('nvcr.io/nvidia/driver@' + DIGEST, rules) == [
        'digest.local/nvidia/driver@' + DIGEST, 'nvcr.io/nvidia/driver@' + DIGEST]
    assert pull_candidates('nvcr.io/nvidia/driver:535', rules) == [
        'tag.local/nvidia/driver:535', 'nvcr.io/nvidia/driver:535']
    # No tag counts as :latest, which tag mirrors serve.
    assert pull_candidates('nvcr.io/nvidia/driver', rules) == [
        'tag.local/nvidia/driver:latest', 'nvcr.io/nvidia/driver:latest']


def test_most_specific_entry_is_used_even_when_none_of_its_mirrors_fit():
    # The node picks the entry for quay.io/a/b (digest mirrors only) and does not fall back to quay.io/a.
    rules = mirror_rules(idms=[idms('d', entry('quay.io/a/b', ['digest.local/b']))],
                         itms=[itms('t', entry('quay.io/a', ['tag.local/a']))])
    assert pull_candidates('quay.io/a/b:1', rules) == ['quay.io/a/b:1']
    assert pull_candidates('quay.io/a/c:1', rules) == ['tag.local/a/c:1', 'quay.io/a/c:1']


def test_never_contact_source_drops_the_source_for_the_whole_entry():
    rules = mirror_rules(
        idms=[idms('d', entry('quay.io/ocp', ['m1.local/ocp'], 'NeverContactSource'))],
        itms=[itms('t', entry('quay.io/ocp', ['t1.local/ocp'], 'AllowContactingSource'))])
    assert pull_candidates('quay.io/ocp/dtk@' + DIGEST, rules) == ['m1.local/ocp/dtk@' + DIGEST]
    assert pull_candidates('quay.io/ocp/dtk:4.16', rules) == ['t1.local/ocp/dtk:4.16']
    blocked_digest_only = mirror_rules(idms=[idms('d', entry('quay.io/ocp', ['m1.local/ocp'], 'NeverContactSource'))])
    assert pull_candidates('quay.io/ocp/dtk:4.16', blocked_digest_only) == []


def test_icsp_is_digest_only_and_merges_with_idms_in_order():
    rules = mirror_rules(
        idms=[idms('d', entry('quay.io/ocp', ['m1.local/ocp', 'm2.local/ocp']))],
        icsp=[icsp('old', entry('quay.io/ocp', ['m2.local/ocp', 'm3.local/ocp']))])
    assert pull_candidates('quay.io/ocp/dtk@' + DIGEST, rules) == [
        'm1.local/ocp/dtk@' + DIGEST, 'm2.local/ocp/dtk@' + DIGEST, 'm3.local/ocp/dtk@' + DIGEST,
        'quay.io/ocp/dtk@' + DIGEST]
    assert pull_candidates('quay.io/ocp/dtk:4.16', rules) == ['quay.io/ocp/dtk:4.16']


def test_tag_and_digest_reference_uses_digest_mirrors():
    rules = mirror_rules(idms=[idms('d', entry('nvcr.io', ['digest.local']))],
                         itms=[itms('t', entry('nvcr.io', ['tag.local']))])
    assert pull_candidates('nvcr.io/nvidia/driver:535@' + DIGEST, rules) == [
        'digest.local/nvidia/driver:535@' + DIGEST, 'nvcr.io/nvidia/driver:535@' + DIGEST]


def test_absent_mirror_set_apis_give_empty_lists(monkeypatch):
    api = make_api(monkeypatch, DynamicClient({
        ('GET', '/apis/config.openshift.io/v1/imagedigestmirrorsets'): {'items': [{'kind': 'IDMS'}], 'metadata': {}},
        ('GET', '/apis/config.openshift.io/v1/imagetagmirrorsets'): (404, '404 page not found'),
        ('GET', '/apis/operator.openshift.io/v1alpha1/imagecontentsourcepolicies'): (404, '404 page not found')}))
    assert list_mirror_sets(api) == {'idms': [{'kind': 'IDMS'}], 'itms': [], 'icsp': []}
