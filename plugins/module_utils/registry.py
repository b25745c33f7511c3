# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether an image exists in an OCI distribution (v2) registry, asked as a node would pull it.

The image's pull candidates (mirrors.pull_candidates) are tried in order; the first whose manifest answers 200
is where the image exists. Each candidate gets a HEAD of its manifest with the Accept types of OCI and Docker
schema 2 manifests and indexes, and, when the registry asks for credentials (WWW-Authenticate), the Basic or
Bearer-token flow with the credentials of a dockerconfigjson pull secret for that registry. Results say which
candidate answered and why the others did not; they never hold credentials or tokens.

Standard library only (urllib), so the check runs in any controller or execution environment.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import json
import re
import socket
import ssl

from urllib.error import HTTPError, URLError
from urllib.parse import urlencode
from urllib.request import HTTPSHandler, Request, build_opener

from ansible_collections.accelerators.gpu.plugins.module_utils.driver_names import os_tag, precompiled_image
from ansible_collections.accelerators.gpu.plugins.module_utils.driver_plan import prepared_kernels
from ansible_collections.accelerators.gpu.plugins.module_utils.mirrors import parse_image_reference, pull_candidates

MANIFEST_TYPES = (
    'application/vnd.oci.image.index.v1+json',
    'application/vnd.oci.image.manifest.v1+json',
    'application/vnd.docker.distribution.manifest.list.v2+json',
    'application/vnd.docker.distribution.manifest.v2+json',
)
DOCKER_HUB = 'docker.io'
# Docker Hub's names for itself in pull secrets, and the host its API answers on.
_DOCKER_HUB_ALIASES = ('docker.io', 'index.docker.io', 'registry-1.docker.io', 'registry.hub.docker.com')
_DOCKER_HUB_API = 'registry-1.docker.io'
# auth-param = token "=" ( token / quoted-string ), RFC 7235; quoted strings may hold commas and \" escapes.
_AUTH_PARAM_RE = re.compile(r'\s*([^\s=,]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*(?:,|$)')

# Why a candidate did not answer 200.
FOUND = 'found'
NOT_FOUND = 'not found'
UNAUTHORIZED = 'unauthorized'
TLS = 'tls'
CONNECTION = 'connection'
ERROR = 'error'


class TransportError(Exception):
    """A request that got no HTTP answer; reason is TLS or CONNECTION."""

    def __init__(self, reason, message):
        super(TransportError, self).__init__(message)
        self.reason = reason


def parse_challenge(header):
    """(scheme in lower case, {param: value}) of a WWW-Authenticate header; (None, {}) when empty.

    'Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull"'
    gives ('bearer', {'realm': ..., 'service': ..., 'scope': ...}).
    """
    scheme, _space, rest = (header or '').strip().partition(' ')
    if not scheme:
        return None, {}
    params = {}
    position = 0
    rest = rest.strip()
    while position < len(rest):
        match = _AUTH_PARAM_RE.match(rest, position)
        if not match:
            break
        quoted, bare = match.group(2), match.group(3)
        value = re.sub(r'\\(.)', r'\1', quoted) if quoted is not None else bare
        params[match.group(1).lower()] = value
        position = match.end()
    return scheme.lower(), params


def registry_repository(reference):
    """(registry, repository) a reference names; short names are Docker Hub's, one-part ones in 'library/'."""
    ref = parse_image_reference(reference)
    host = ref['registry'] or DOCKER_HUB
    if host == DOCKER_HUB and '/' not in ref['repository']:
        return host, 'library/' + ref['repository']
    return host, ref['repository']


def _normalise_auth_key(key):
    """(host, path) of a pull secret's auths key: 'https://quay.io/v1/' -> ('quay.io', ''),
    'quay.io/org' -> ('quay.io', 'org'); Docker Hub's aliases -> docker.io."""
    key = re.sub(r'^[a-z]+://', '', key.strip()).rstrip('/')
    host, _slash, path = key.partition('/')
    if path in ('v1', 'v2'):
        path = ''
    host = host.lower()
    return (DOCKER_HUB if host in _DOCKER_HUB_ALIASES else host), path


def _host_matches(pattern, host):
    if pattern.startswith('*.'):
        return host.split(':')[0].endswith(pattern[1:])
    return pattern == host


def credentials_for(docker_configs, reference):
    """(username, password) for reference from dockerconfigjson documents ({'auths': {key: entry}}), or None.

    As the kubelet matches them: the key's host (exact, or a '*.domain' wildcard) must be the reference's
    registry, and its path, if any, a prefix of the repository; the longest such key wins, the first document
    on a tie. An entry gives 'auth' (base64 of user:password) or 'username' and 'password'.
    """
    host, repository = registry_repository(reference)
    best = None
    for document in docker_configs or ():
        auths = (document or {}).get('auths', document) or {}
        for key, entry in auths.items():
            key_host, key_path = _normalise_auth_key(key)
            if not _host_matches(key_host, host):
                continue
            if key_path and repository != key_path and not repository.startswith(key_path + '/'):
                continue
            rank = (len(key_path), not key_host.startswith('*.'))
            if best is None or rank > best[0]:
                best = (rank, entry or {})
    if best is None:
        return None
    entry = best[1]
    if entry.get('auth'):
        user, _colon, password = base64.b64decode(entry['auth']).decode('utf-8').partition(':')
        return user, password
    if entry.get('username'):
        return entry['username'], entry.get('password') or ''
    return None


def docker_config_from_secret(secret):
    """The dockerconfigjson document of a Secret dict (data base64-encoded, or stringData), {} if it has none.

    Reads kubernetes.io/dockerconfigjson (.dockerconfigjson) and the legacy kubernetes.io/dockercfg (.dockercfg,
    the auths map itself).
    """
    for field, wrap in (('.dockerconfigjson', False), ('.dockercfg', True)):
        if (secret.get('stringData') or {}).get(field):
            text = secret['stringData'][field]
        elif (secret.get('data') or {}).get(field):
            text = base64.b64decode(secret['data'][field]).decode('utf-8')
        else:
            continue
        document = json.loads(text)
        return {'auths': document} if wrap else document
    return {}


def urllib_transport(ca_file=None, verify=True, timeout=10):
    """A transport(method, url, headers) -> (status, headers as a lower-case dict, body bytes) over HTTPS.

    ca_file: PEM bundle of the CAs to trust (the system's when None); verify=False trusts any certificate.
    Authorization headers are not sent on to a redirect's target.
    """
    if not verify:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context(cafile=ca_file)
    opener = build_opener(HTTPSHandler(context=context))

    def transport(method, url, headers):
        request = Request(url, method=method)
        for name, value in headers.items():
            if name.lower() == 'authorization':
                request.add_unredirected_header(name, value)
            else:
                request.add_header(name, value)
        try:
            response = opener.open(request, timeout=timeout)
        except HTTPError as error:
            response = error
        except URLError as error:
            reason = error.reason
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise TransportError(TLS, 'TLS: certificate verify failed: %s' % reason.verify_message)
            if isinstance(reason, ssl.SSLError):
                raise TransportError(TLS, 'TLS: %s' % reason)
            raise TransportError(CONNECTION, 'cannot connect: %s' % reason)
        except (socket.timeout, OSError) as error:
            raise TransportError(CONNECTION, 'cannot connect: %s' % error)
        try:
            return response.getcode(), dict((k.lower(), v) for k, v in response.headers.items()), response.read()
        finally:
            response.close()

    return transport


def _registry_errors(body):
    """'CODE: message' of a registry's JSON error body, or '' for any other body."""
    try:
        errors = json.loads(body.decode('utf-8')).get('errors') or []
    except (ValueError, AttributeError, UnicodeDecodeError):
        return ''
    return '; '.join('%s: %s' % (error.get('code'), error.get('message')) for error in errors if isinstance(error, dict))


class RegistryClient:
    """Manifest existence checks with a transport, pull-secret credentials and mirror rules.

    transport: as urllib_transport() returns (tests give a fake). docker_configs: dockerconfigjson documents.
    Bearer tokens are kept per registry and repository for the client's lifetime.
    """

    def __init__(self, transport, docker_configs=(), rules=()):
        self.transport = transport
        self.docker_configs = list(docker_configs or ())
        self.rules = list(rules or ())
        self._authorization = {}

    def image_exists(self, image):
        """{image, exists, found (the candidate that answered 200, or None), digest, attempts: [{reference,
        registry, status (HTTP status or None), reason (found|not found|unauthorized|tls|connection|error),
        message}]} for image, trying its pull candidates in order and stopping at the first found."""
        candidates = pull_candidates(image, self.rules)
        result = {'image': image, 'exists': False, 'found': None, 'digest': None, 'attempts': []}
        if not candidates:
            result['attempts'].append({'reference': image, 'registry': registry_repository(image)[0], 'status': None,
                                       'reason': ERROR, 'message': 'no pull candidate: the mirror rules block the '
                                                                   'source and no mirror applies to this reference'})
        for candidate in candidates:
            attempt = self.check_manifest(candidate)
            result['attempts'].append(attempt)
            if attempt['reason'] == FOUND:
                result.update(exists=True, found=candidate, digest=attempt.pop('digest'))
                break
            attempt.pop('digest')
        return result

    def check_manifest(self, reference):
        """One attempt: HEAD of reference's manifest (GET if HEAD is not allowed), authenticating on a 401."""
        ref = parse_image_reference(reference)
        host, repository = registry_repository(reference)
        url = 'https://%s/v2/%s/manifests/%s' % (_DOCKER_HUB_API if host == DOCKER_HUB else host, repository,
                                                 ref['digest'] or ref['tag'] or 'latest')
        attempt = {'reference': reference, 'registry': host, 'status': None, 'digest': None}
        key = (host, repository)
        try:
            status, headers, body = self._manifest(url, self._authorization.get(key))
            if status == 401:
                authorization, why = self._authorize(host, repository, headers.get('www-authenticate'))
                if authorization is None:
                    return dict(attempt, status=401, reason=UNAUTHORIZED, message=why)
                self._authorization[key] = authorization
                status, headers, body = self._manifest(url, authorization)
        except TransportError as error:
            return dict(attempt, reason=error.reason, message='%s: %s' % (host, error))
        attempt['status'] = status
        if status == 200:
            return dict(attempt, reason=FOUND, message='manifest found', digest=headers.get('docker-content-digest'))
        detail = _registry_errors(body)
        if status == 404:
            return dict(attempt, reason=NOT_FOUND, message=detail or 'manifest unknown')
        if status in (401, 403):
            why = 'the credentials for %s were refused' % host if credentials_for(self.docker_configs, reference) \
                else 'no credentials for %s in the pull secrets' % host
            return dict(attempt, reason=UNAUTHORIZED, message='%s%s' % (why, ' (%s)' % detail if detail else ''))
        return dict(attempt, reason=ERROR, message='HTTP %s%s' % (status, ': ' + detail if detail else ''))

    def _manifest(self, url, authorization):
        headers = {'Accept': ', '.join(MANIFEST_TYPES)}
        if authorization:
            headers['Authorization'] = authorization
        status, answer, body = self.transport('HEAD', url, headers)
        if status == 405:
            status, answer, body = self.transport('GET', url, headers)
        return status, answer, body

    def _authorize(self, host, repository, challenge):
        """(Authorization header value, None), or (None, why not) for a 401's WWW-Authenticate challenge."""
        scheme, params = parse_challenge(challenge)
        credentials = credentials_for(self.docker_configs, '%s/%s' % (host, repository))
        basic = None
        if credentials:
            basic = 'Basic ' + base64.b64encode(('%s:%s' % credentials).encode('utf-8')).decode('ascii')
        if scheme == 'basic':
            if basic is None:
                return None, 'no credentials for %s in the pull secrets (the registry asks for Basic auth)' % host
            return basic, None
        if scheme != 'bearer' or not params.get('realm'):
            return None, 'unsupported authentication challenge %r from %s' % (scheme or '', host)
        if not params['realm'].startswith('https://'):
            # The pull secret's credentials go to the realm: never in clear text.
            return None, 'token service %s of %s is not HTTPS' % (params['realm'], host)
        query = {'scope': 'repository:%s:pull' % repository}
        if params.get('service'):
            query['service'] = params['service']
        realm = params['realm']
        headers = {'Authorization': basic} if basic else {}
        try:
            status, _headers, body = self.transport('GET', '%s%s%s' % (realm, '&' if '?' in realm else '?',
                                                                       urlencode(query)), headers)
        except TransportError as error:
            return None, 'token service %s: %s' % (realm, error)
        if status != 200:
            return None, 'token service %s answered HTTP %s%s' % (
                realm, status, '' if basic else ' (no credentials for %s in the pull secrets)' % host)
        try:
            answer = json.loads(body.decode('utf-8'))
            token = answer.get('token') or answer.get('access_token')
        except (ValueError, AttributeError, UnicodeDecodeError):
            token = None
        if not token:
            return None, 'token service %s gave no token' % realm
        return 'Bearer ' + token, None


def precompiled_available(spec, gpu_nodes_facts, client, prepare_versions=()):
    """(set of the precompiled driver images that exist, {image: client.image_exists(image)}) for the kernels
    and OS tags of the GPU nodes, and the kernels of prepare_versions on those OS tags (driver_plan.prepared_kernels),
    with the image names driver_plan gives them.

    spec: the driver spec of driver_plan.desired_driver_daemonsets (repository, image, branch). The set is
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
