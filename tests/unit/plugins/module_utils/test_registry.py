# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import base64
import json

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.driver_names import PlanError
from ansible_collections.accelerators.gpu.plugins.module_utils.mirrors import mirror_rules
from ansible_collections.accelerators.gpu.plugins.module_utils.node_facts import node_facts
from ansible_collections.accelerators.gpu.plugins.module_utils.registry import (
    CONNECTION, FOUND, MANIFEST_TYPES, NOT_FOUND, TLS, UNAUTHORIZED, RegistryClient, TransportError,
    credentials_for, docker_config_from_secret, parse_challenge, precompiled_available)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver_template import desired_driver_daemonsets

from nodes import KERNEL_416, KERNEL_418, RHCOS_418, rhcos_node, ubuntu_node

SECRET = 's3cret-pa55'
DIGEST = 'sha256:' + 'a' * 64


def auth(user, password=SECRET):
    return {'auth': base64.b64encode(('%s:%s' % (user, password)).encode()).decode()}


def manifest_url(host, repository, reference):
    return 'https://%s/v2/%s/manifests/%s' % (host, repository, reference)


class FakeRegistries:
    """A transport answering from {url: handler(method, headers) -> (status, headers, body) or raising}."""

    def __init__(self, routes):
        self.routes = routes
        self.calls = []

    def __call__(self, method, url, headers):
        self.calls.append((method, url, dict(headers)))
        handler = self.routes.get(url)
        if handler is None:
            raise TransportError(CONNECTION, 'cannot connect: [Errno 111] Connection refused')
        return handler(method, headers)


def answer(status, headers=None, body=b''):
    return lambda method, headers_sent: (status, dict(headers or {}), body)


def basic_protected(user, status_ok=200):
    """A manifest behind Basic auth accepting user:SECRET."""
    expected = 'Basic ' + auth(user)['auth']

    def handler(method, headers):
        if headers.get('Authorization') != expected:
            return 401, {'www-authenticate': 'Basic realm="test"'}, b''
        return status_ok, {'docker-content-digest': DIGEST}, b''
    return handler


NOT_FOUND_BODY = json.dumps({'errors': [{'code': 'MANIFEST_UNKNOWN', 'message': 'manifest unknown'}]}).encode()


@pytest.mark.parametrize('header, expected', [
    ('Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:a/b:pull"',
     ('bearer', {'realm': 'https://auth.example.com/token', 'service': 'registry.example.com',
                 'scope': 'repository:a/b:pull'})),
    # A comma inside a quoted value, spaces around separators, a bare token value, an escaped quote.
    ('bearer realm="https://a/t", scope="repository:x:pull,push" , error=insufficient_scope, note="say \\"hi\\""',
     ('bearer', {'realm': 'https://a/t', 'scope': 'repository:x:pull,push', 'error': 'insufficient_scope',
                 'note': 'say "hi"'})),
    ('Basic realm="Registry Realm"', ('basic', {'realm': 'Registry Realm'})),
    ('Basic', ('basic', {})),
    ('', (None, {})),
    (None, (None, {})),
])
def test_parse_challenge(header, expected):
    assert parse_challenge(header) == expected


def test_credentials_by_host_path_wildcard_and_docker_hub_aliases():
    configs = [
        {'auths': {
            'quay.io': auth('quay-any'),
            'quay.io/nvidia': auth('quay-nvidia'),
            '*.example.com': auth('wild'),
            'registry.example.com': auth('exact'),
            'https://index.docker.io/v1/': {'username': 'hub', 'password': SECRET},
            'https://nvcr.io/v2/': auth('ngc'),
        }},
        {'auths': {'quay.io': auth('second-document')}},
    ]
    assert credentials_for(configs, 'quay.io/nvidia/driver:1') == ('quay-nvidia', SECRET)
    # Whole path components: 'quay.io/nvidia' is no prefix of 'quay.io/nvidia2'.
    assert credentials_for(configs, 'quay.io/nvidia2/driver:1') == ('quay-any', SECRET)
    assert credentials_for(configs, 'mirror.example.com:5000/nvidia/driver:1') == ('wild', SECRET)
    assert credentials_for(configs, 'registry.example.com/nvidia/driver:1') == ('exact', SECRET)
    assert credentials_for(configs, 'ubuntu:22.04') == ('hub', SECRET)
    assert credentials_for(configs, 'docker.io/nvidia/cuda:12') == ('hub', SECRET)
    assert credentials_for(configs, 'nvcr.io/nvidia/driver:535') == ('ngc', SECRET)
    assert credentials_for(configs, 'example.com/a/b:1') is None
    assert credentials_for(configs, 'ghcr.io/a/b:1') is None
    assert credentials_for([], 'quay.io/a:1') is None


def test_a_password_may_hold_colons():
    assert credentials_for([{'auths': {'r.io': auth('u', 'a:b:c')}}], 'r.io/x:1') == ('u', 'a:b:c')


def test_docker_config_from_secret_shapes():
    document = {'auths': {'r.io': auth('u')}}
    encoded = base64.b64encode(json.dumps(document).encode()).decode()
    assert docker_config_from_secret({'type': 'kubernetes.io/dockerconfigjson',
                                      'data': {'.dockerconfigjson': encoded}}) == document
    assert docker_config_from_secret({'stringData': {'.dockerconfigjson': json.dumps(document)}}) == document
    legacy = base64.b64encode(json.dumps(document['auths']).encode()).decode()
    assert docker_config_from_secret({'type': 'kubernetes.io/dockercfg', 'data': {'.dockercfg': legacy}}) == document
    assert docker_config_from_secret({'type': 'Opaque', 'data': {'token': 'eA=='}}) == {}


def test_candidates_in_order_until_one_answers_and_why_the_others_did_not():
    mirrors = ['mirror-a.example.com/nvidia', 'mirror-b.example.com/nv', 'mirror-c.example.com/nv']
    rules = mirror_rules(itms=[{'metadata': {'name': 'disconnected'}, 'spec': {'imageTagMirrors': [
        {'source': 'nvcr.io/nvidia', 'mirrors': mirrors}]}}])
    transport = FakeRegistries({
        manifest_url('mirror-a.example.com', 'nvidia/driver', '535'): answer(404, body=NOT_FOUND_BODY),
        # mirror-b.example.com: connection refused
        manifest_url('mirror-c.example.com', 'nv/driver', '535'): answer(200, {'docker-content-digest': DIGEST}),
        manifest_url('nvcr.io', 'nvidia/driver', '535'): answer(200),
    })
    result = RegistryClient(transport, rules=rules).image_exists('nvcr.io/nvidia/driver:535')
    assert (result['exists'], result['found'], result['digest']) == (True, 'mirror-c.example.com/nv/driver:535', DIGEST)
    assert [(a['reference'], a['status'], a['reason']) for a in result['attempts']] == [
        ('mirror-a.example.com/nvidia/driver:535', 404, NOT_FOUND),
        ('mirror-b.example.com/nv/driver:535', None, CONNECTION),
        ('mirror-c.example.com/nv/driver:535', 200, FOUND)]
    assert result['attempts'][0]['message'] == 'MANIFEST_UNKNOWN: manifest unknown'
    assert 'Connection refused' in result['attempts'][1]['message']
    # The source comes after the mirrors and is not asked once a mirror has the image.
    assert [url for _method, url, _headers in transport.calls if 'nvcr.io' in url] == []
    accept = transport.calls[0][2]['Accept']
    assert all(media_type in accept for media_type in MANIFEST_TYPES)
    assert transport.calls[0][0] == 'HEAD'


def test_missing_everywhere_and_a_blocked_source():
    transport = FakeRegistries({manifest_url('nvcr.io', 'nvidia/driver', '535'): answer(404)})
    result = RegistryClient(transport).image_exists('nvcr.io/nvidia/driver:535')
    assert (result['exists'], result['found']) == (False, None)
    assert [a['reason'] for a in result['attempts']] == [NOT_FOUND]

    blocked = mirror_rules(idms=[{'metadata': {'name': 'digests-only'}, 'spec': {'imageDigestMirrors': [
        {'source': 'nvcr.io', 'mirrors': ['mirror.example.com'], 'mirrorSourcePolicy': 'NeverContactSource'}]}}])
    result = RegistryClient(transport, rules=blocked).image_exists('nvcr.io/nvidia/driver:535')
    assert result['exists'] is False
    assert 'no pull candidate' in result['attempts'][0]['message']
    assert len(transport.calls) == 1


def test_basic_challenge_with_and_without_credentials_never_shows_the_password():
    url = manifest_url('registry.example.com', 'nvidia/driver', '535')
    transport = FakeRegistries({url: basic_protected('puller')})
    secret = {'auths': {'registry.example.com': auth('puller')}}
    found = RegistryClient(transport, [secret]).image_exists('registry.example.com/nvidia/driver:535')
    assert found['exists'] is True and found['digest'] == DIGEST
    assert SECRET not in repr(found) and auth('puller')['auth'] not in repr(found)

    refused = RegistryClient(transport).image_exists('registry.example.com/nvidia/driver:535')
    [attempt] = refused['attempts']
    assert (attempt['status'], attempt['reason']) == (401, UNAUTHORIZED)
    assert attempt['message'] == ('no credentials for registry.example.com in the pull secrets '
                                  '(the registry asks for Basic auth)')

    wrong = RegistryClient(transport, [{'auths': {'registry.example.com': auth('puller', 'wrong')}}])
    [attempt] = wrong.image_exists('registry.example.com/nvidia/driver:535')['attempts']
    assert (attempt['status'], attempt['reason']) == (401, UNAUTHORIZED)
    assert attempt['message'] == 'the credentials for registry.example.com were refused'
    assert 'wrong' not in repr(attempt)


def test_bearer_token_flow_is_scoped_and_the_token_is_reused():
    realm = 'https://auth.example.com/token'
    issued = []

    def token_service(method, headers):
        issued.append(headers.get('Authorization'))
        return 200, {}, json.dumps({'token': 'tok-123'}).encode()

    def manifest(method, headers):
        if headers.get('Authorization') != 'Bearer tok-123':
            return 401, {'www-authenticate': 'Bearer realm="%s",service="registry.example.com",'
                                             'scope="repository:nvidia/driver:pull"' % realm}, b''
        return 200, {'docker-content-digest': DIGEST}, b''

    token_url = realm + '?scope=repository%3Anvidia%2Fdriver%3Apull&service=registry.example.com'
    transport = FakeRegistries({
        token_url: token_service,
        manifest_url('registry.example.com', 'nvidia/driver', '535'): manifest,
        manifest_url('registry.example.com', 'nvidia/driver', '550'): manifest,
    })
    client = RegistryClient(transport, [{'auths': {'registry.example.com': auth('robot')}}])
    assert client.image_exists('registry.example.com/nvidia/driver:535')['exists'] is True
    assert client.image_exists('registry.example.com/nvidia/driver:550')['exists'] is True
    # The pull secret's credentials go to the token service; one token serves the repository.
    assert issued == ['Basic ' + auth('robot')['auth']]
    assert [method for method, _url, _headers in transport.calls] == ['HEAD', 'GET', 'HEAD', 'HEAD']

    anonymous = FakeRegistries({token_url: answer(401), manifest_url('registry.example.com', 'nvidia/driver', '535'):
                                manifest})
    [attempt] = RegistryClient(anonymous).image_exists('registry.example.com/nvidia/driver:535')['attempts']
    assert attempt['reason'] == UNAUTHORIZED
    assert attempt['message'] == ('token service %s answered HTTP 401 (no credentials for registry.example.com in '
                                  'the pull secrets)' % realm)


def test_credentials_never_go_to_a_plain_http_token_service():
    url = manifest_url('r.io', 'a', '1')
    transport = FakeRegistries({url: answer(401, {'www-authenticate': 'Bearer realm="http://auth.r.io/token"'})})
    [attempt] = RegistryClient(transport, [{'auths': {'r.io': auth('u')}}]).image_exists('r.io/a:1')['attempts']
    assert (attempt['reason'], attempt['message']) == (UNAUTHORIZED, 'token service http://auth.r.io/token of r.io is '
                                                                     'not HTTPS')
    assert len(transport.calls) == 1


def test_docker_hub_short_names_and_digests_and_head_not_allowed():
    transport = FakeRegistries({
        manifest_url('registry-1.docker.io', 'library/ubuntu', DIGEST): lambda method, headers: (
            (405, {}, b'') if method == 'HEAD' else (200, {'docker-content-digest': DIGEST}, b'{}')),
    })
    result = RegistryClient(transport).image_exists('ubuntu@' + DIGEST)
    assert result['exists'] is True and result['attempts'][0]['registry'] == 'docker.io'
    assert [method for method, _url, _headers in transport.calls] == ['HEAD', 'GET']


def test_tls_failure_is_named():
    def untrusted(method, headers):
        raise TransportError(TLS, 'TLS: certificate verify failed: unable to get local issuer certificate')
    result = RegistryClient(FakeRegistries({manifest_url('r.io', 'a', '1'): untrusted})).image_exists('r.io/a:1')
    [attempt] = result['attempts']
    assert attempt['reason'] == TLS
    assert attempt['message'] == 'r.io: TLS: certificate verify failed: unable to get local issuer certificate'


def test_precompiled_available_feeds_the_kernel_mode_plan():
    """Kernels with a published image get precompiled DaemonSets; the others fall back to a DTK build."""
    nodes = [node_facts(node) for node in (
        rhcos_node('gpu-416', ocp='4.16'),
        rhcos_node('gpu-418', rhcos=RHCOS_418, kernel=KERNEL_418, ocp='4.18'),
        rhcos_node('cpu', gpu=False, kernel='5.14.0-1.el9.x86_64'),
        ubuntu_node('ubuntu'))]
    published = 'registry.example.com/nvidia/driver:535-%s-rhcos4.16' % KERNEL_416
    transport = FakeRegistries({
        manifest_url('registry.example.com', 'nvidia/driver', '535-%s-rhcos4.16' % KERNEL_416): answer(200),
        manifest_url('registry.example.com', 'nvidia/driver', '535-%s-rhcos4.18' % KERNEL_418): answer(404),
        manifest_url('registry.example.com', 'nvidia/driver', '535-5.15.0-100-generic-ubuntu22.04'): answer(404),
    })
    spec = {'namespace': 'nvidia-gpu-operator', 'repository': 'registry.example.com/nvidia', 'branch': '535',
            'version': '535.230.02'}
    available, checks = precompiled_available(spec, nodes, RegistryClient(transport))
    assert available == {published}
    # The CPU node's kernel is not asked about.
    assert sorted(checks) == sorted([published, 'registry.example.com/nvidia/driver:535-%s-rhcos4.18' % KERNEL_418,
                                     'registry.example.com/nvidia/driver:535-5.15.0-100-generic-ubuntu22.04'])

    dtk = {RHCOS_418: {'status': 'resolved', 'image': 'quay.io/openshift/dtk@' + DIGEST}}
    plan = desired_driver_daemonsets(spec, nodes, dtk, 'kernel', available)
    builds = dict((node, entry['build']) for node, entry in plan['assignments'].items())
    assert builds == {'gpu-416': 'precompiled', 'gpu-418': 'dtk', 'ubuntu': 'blocked'}


def test_precompiled_available_asks_about_the_kernels_to_prepare_on_the_nodes_os():
    nodes = [node_facts(ubuntu_node('ubuntu'))]
    target = 'registry.example.com/nvidia/driver:535-5.15.0-105-generic-ubuntu22.04'
    transport = FakeRegistries({
        manifest_url('registry.example.com', 'nvidia/driver', '535-5.15.0-100-generic-ubuntu22.04'): answer(200),
        manifest_url('registry.example.com', 'nvidia/driver', '535-5.15.0-105-generic-ubuntu22.04'): answer(404),
    })
    spec = {'namespace': 'gpu', 'repository': 'registry.example.com/nvidia', 'branch': '535'}
    available, checks = precompiled_available(spec, nodes, RegistryClient(transport),
                                              prepare_versions=['5.15.0-105-generic'])
    assert target in checks and target not in available
    with pytest.raises(PlanError) as error:
        desired_driver_daemonsets(spec, nodes, {}, 'kernel', available, prepare_versions=['5.15.0-105-generic'])
    assert target in str(error.value)
