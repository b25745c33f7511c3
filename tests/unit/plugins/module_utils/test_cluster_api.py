# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import json

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import api_exception

from ansible_collections.accelerators.gpu.plugins.module_utils.cluster_api import APIError, ClusterAPI
from ansible_collections.accelerators.gpu.plugins.module_utils.dtk import NOT_OPENSHIFT, STREAM_MISSING
from ansible_collections.kubernetes.core.plugins.module_utils.k8s import client as k8s_client

NOT_FOUND_OBJECT = {'kind': 'Status', 'status': 'Failure', 'reason': 'NotFound', 'code': 404,
                    'message': 'imagestreams.image.openshift.io "driver-toolkit" not found',
                    'details': {'name': 'driver-toolkit', 'group': 'image.openshift.io', 'kind': 'imagestreams'}}


class Response:
    """Stands for urllib3's response: data decoded, tell() the bytes as received (here: not compressed)."""

    def __init__(self, body):
        self.data = json.dumps(body).encode()

    def tell(self):
        return len(self.data)


class DynamicClient:
    """Stands for kubernetes.core's dynamic client: answers by (method, path), records every request."""

    def __init__(self, answers):
        self.answers = answers
        self.requests = []
        self.configuration = kubernetes.client.Configuration()

    def request(self, method, path, body=None, serialize=True, **params):
        assert serialize is False, 'responses must stay plain JSON'
        self.requests.append((method, path, body, params))
        answer = self.answers[(method, path)]
        if callable(answer):
            answer = answer(params)
        if isinstance(answer, tuple):
            status, text = answer
            error = ApiException(status=status, reason='error')
            error.body = text.encode()
            raise api_exception(error)
        return Response(answer)


class Module:
    def __init__(self, check_mode=False):
        self.check_mode = check_mode
        self.warnings = []

    def warn(self, message):
        self.warnings.append(message)


def make_api(monkeypatch, client, check_mode=False):
    """A ClusterAPI whose kubernetes.core client is the given stand-in."""
    # ClusterAPI imports kubernetes.core's get_api_client when it is created.
    monkeypatch.setattr(k8s_client, 'get_api_client', lambda module: type('K8SClient', (), {'client': client}))
    return ClusterAPI(Module(check_mode))


def test_lists_page_by_page(monkeypatch):
    pages = {None: {'items': [{'n': 1}, {'n': 2}], 'metadata': {'continue': 'a'}},
             'a': {'items': [{'n': 3}], 'metadata': {'continue': ''}}}
    client = DynamicClient({('GET', '/api/v1/nodes'): lambda params: pages[params['_continue']]})
    api = make_api(monkeypatch, client)
    assert [node['n'] for node in api.list_nodes('gpu=true', page_size=2)] == [1, 2, 3]
    assert [request[3] for request in client.requests] == [
        {'label_selector': 'gpu=true', 'limit': 2, '_continue': None},
        {'label_selector': 'gpu=true', 'limit': 2, '_continue': 'a'}]


def test_dtk_stream_absence_is_told_apart(monkeypatch):
    path = '/apis/image.openshift.io/v1/namespaces/openshift/imagestreams/driver-toolkit'

    def read(answer):
        return make_api(monkeypatch, DynamicClient({('GET', path): answer})).read_dtk_imagestream()
    assert read((404, json.dumps(NOT_FOUND_OBJECT))) == (None, STREAM_MISSING)
    assert read((404, '404 page not found\n')) == (None, NOT_OPENSHIFT)
    assert read({'kind': 'ImageStream'}) == ({'kind': 'ImageStream'}, None)
    with pytest.raises(APIError) as error:
        read((403, json.dumps({'message': 'imagestreams is forbidden'})))
    assert str(error.value) == 'GET %s: HTTP 403: imagestreams is forbidden' % path


def test_absent_mirror_set_apis_give_empty_lists(monkeypatch):
    api = make_api(monkeypatch, DynamicClient({
        ('GET', '/apis/config.openshift.io/v1/imagedigestmirrorsets'): {'items': [{'kind': 'IDMS'}], 'metadata': {}},
        ('GET', '/apis/config.openshift.io/v1/imagetagmirrorsets'): (404, '404 page not found'),
        ('GET', '/apis/operator.openshift.io/v1alpha1/imagecontentsourcepolicies'): (404, '404 page not found')}))
    assert api.list_mirror_sets() == {'idms': [{'kind': 'IDMS'}], 'itms': [], 'icsp': []}


def test_writes_are_dry_runs_in_check_mode(monkeypatch):
    daemonset = {'metadata': {'name': 'ds', 'namespace': 'gpu'}}
    ds_path = '/apis/apps/v1/namespaces/gpu/daemonsets/ds'
    answers = {('PATCH', ds_path): daemonset, ('DELETE', ds_path): {}, ('PATCH', '/api/v1/nodes/w1'): {}}
    client = DynamicClient(answers)
    api = make_api(monkeypatch, client, check_mode=True)
    api.apply_daemonset(daemonset)
    api.delete_daemonset('gpu', 'ds', 'uid-1', '42')
    api.patch_node_labels('w1', {'a': None}, '7')
    apply, delete, patch = client.requests
    assert apply[3] == {'dry_run': 'All', 'content_type': 'application/apply-patch+yaml',
                        'field_manager': 'accelerators.gpu', 'force_conflicts': True}
    # A DELETE with a body takes its options from the body only.
    assert delete[2]['dryRun'] == ['All']
    assert delete[2]['preconditions'] == {'uid': 'uid-1', 'resourceVersion': '42'}
    assert patch[2] == {'metadata': {'labels': {'a': None}, 'resourceVersion': '7'}}
    assert patch[3] == {'dry_run': 'All', 'content_type': 'application/merge-patch+json'}

    client = DynamicClient(answers)
    make_api(monkeypatch, client).delete_daemonset('gpu', 'ds', 'uid-1', '42')
    assert 'dryRun' not in client.requests[0][2] and 'dry_run' not in client.requests[0][3]


def test_requests_are_counted_by_verb_from_creation_on(monkeypatch):
    class RestClient:
        def __getattr__(self, verb):
            return lambda *args, **kwargs: 'sent'

    api = make_api(monkeypatch, DynamicClient({}))
    client = kubernetes.client.ApiClient()
    client.rest_client = RestClient()
    for verb in ('GET', 'GET', 'PATCH', 'DELETE'):
        client.request(verb, 'https://127.0.0.1/api')
    assert api.request_counts() == {'GET': 2, 'PATCH': 1, 'DELETE': 1}
    assert make_api(monkeypatch, DynamicClient({})).request_counts() == {}
