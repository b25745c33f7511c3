# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import gc
import json

import kubernetes
import pytest
import urllib3
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import api_exception

from ansible_collections.accelerators.gpu.plugins.module_utils.k8s import retry
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.api import ClusterAPI
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.client import _count_requests, apply_body
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.errors import APIError, TaskError
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.views import (
    NODE_INFO, NODE_METADATA, POD_CELLS, POD_READINESS, node_from_table_row, pod_from_table_row)
from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.facts import node_facts
from ansible_collections.accelerators.gpu.plugins.module_utils.status.stack_status import pod_readiness
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.fakes import (
    NODE_TABLE_COLUMNS, node_table_row)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.protobuf_encoding import metadata_list
from ansible_collections.kubernetes.core.plugins.module_utils.k8s import client as k8s_client

NOT_FOUND_OBJECT = {'kind': 'Status', 'status': 'Failure', 'reason': 'NotFound', 'code': 404,
                    'message': 'imagestreams.image.openshift.io "driver-toolkit" not found',
                    'details': {'name': 'driver-toolkit', 'group': 'image.openshift.io', 'kind': 'imagestreams'}}


class Response:
    """Stands for urllib3's response: data decoded, tell() the bytes as received (here: not compressed); a body of
    bytes is protobuf."""

    status = 200

    def __init__(self, body):
        if isinstance(body, bytes):
            self.data, self.headers = body, {'Content-Type': 'application/vnd.kubernetes.protobuf'}
        else:
            self.data, self.headers = json.dumps(body).encode(), {'Content-Type': 'application/json'}

    def tell(self):
        return len(self.data)

    def read(self, amount, decode_content):
        """The body in chunks of 7 bytes (whatever amount is), so that fields span chunks."""
        assert decode_content
        self.read_to = getattr(self, 'read_to', 0) + 7
        return self.data[self.read_to - 7:self.read_to]


class DynamicClient:
    """Stands for kubernetes.core's dynamic client: answers by (method, path), records every request."""

    def __init__(self, answers):
        self.answers = answers
        self.requests = []
        # The host set here: the default Configuration's differs between client versions ('' in client 37).
        self.configuration = kubernetes.client.Configuration(host='http://localhost')

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
    def __init__(self, check_mode=False, api_retry_seconds=retry.RETRY_SECONDS):
        self.check_mode = check_mode
        self.params = {'api_retry_seconds': api_retry_seconds}
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


def test_cyclic_gc_is_paused_while_a_list_is_read_and_back_as_it_was_after(monkeypatch):
    pages = {None: {'items': [{'n': 1}], 'metadata': {'continue': 'a'}}, 'a': {'items': [{'n': 2}], 'metadata': {}}}
    collector_at_requests = []

    def page(params):
        collector_at_requests.append(gc.isenabled())
        return pages[params['_continue']]

    api = make_api(monkeypatch, DynamicClient({('GET', '/api/v1/nodes'): page}))
    enabled = gc.isenabled()
    try:
        for collector_on in (True, False):
            (gc.enable if collector_on else gc.disable)()
            # Paused while each page is asked for and decoded, and while the caller uses its items.
            del collector_at_requests[:]
            seen = [(node['n'], gc.isenabled()) for node in api.list_nodes()]
            assert (seen, collector_at_requests) == ([(1, False), (2, False)], [False, False])
            assert gc.isenabled() is collector_on
        # A caller that stops early (an error, a node found) closes the list: the collector is back on.
        gc.enable()
        nodes = api.list_nodes()
        next(nodes)
        assert not gc.isenabled()
        nodes.close()
        assert gc.isenabled()
    finally:
        (gc.enable if enabled else gc.disable)()


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
    # Strict field validation: an unknown field fails the apply instead of being dropped.
    assert apply[3] == {'dry_run': 'All', 'content_type': 'application/apply-patch+yaml',
                        'field_manager': 'accelerators.gpu', 'force_conflicts': True,
                        'query_params': [('fieldValidation', 'Strict')]}
    # A DELETE with a body takes its options from the body only.
    assert delete[2]['dryRun'] == ['All']
    assert delete[2]['preconditions'] == {'uid': 'uid-1', 'resourceVersion': '42'}
    assert patch[2] == {'metadata': {'labels': {'a': None}, 'resourceVersion': '7'}}
    assert patch[3] == {'dry_run': 'All', 'content_type': 'application/merge-patch+json'}

    client = DynamicClient(answers)
    make_api(monkeypatch, client).delete_daemonset('gpu', 'ds', 'uid-1', '42')
    assert 'dryRun' not in client.requests[0][2] and 'dry_run' not in client.requests[0][3]


class PoolManager:
    """urllib3's pool manager as the kubernetes client's REST layer uses it, answering {} to every request."""

    def __init__(self):
        self.sent = []
        self.bodies = []

    def request(self, method, url, **kwargs):
        self.sent.append((method, kwargs.get('headers')))
        self.bodies.append(kwargs.get('body'))
        return urllib3.response.HTTPResponse(body=b'{}', status=200, headers={'Content-Type': 'application/json'},
                                             preload_content=False)


def rest_client():
    """The installed kubernetes client's own REST layer (its request() differs between client versions), sending
    to PoolManager."""
    client = kubernetes.client.ApiClient().rest_client
    client.pool_manager = PoolManager()
    return client


def test_requests_are_counted_by_verb_from_creation_on(monkeypatch):
    api = make_api(monkeypatch, DynamicClient({}))
    client = rest_client()
    for verb in ('GET', 'GET', 'PATCH', 'DELETE'):
        client.request(verb, 'https://127.0.0.1/api', headers={}, body={})
    assert api.request_counts() == {'GET': 2, 'PATCH': 1, 'DELETE': 1}
    assert make_api(monkeypatch, DynamicClient({})).request_counts() == {}


def test_a_client_request_without_headers_is_sent_uncounted():
    class RestClient:
        def request(self, method, url, options=None):
            return method

    _count_requests(RestClient)
    assert not getattr(RestClient.request, 'counts_requests', False)
    assert RestClient().request('GET', 'https://127.0.0.1/api') == 'GET'


TABLE_COLUMNS = [{'name': name} for name in NODE_TABLE_COLUMNS]
GPU_NODE = {
    'metadata': {'name': 'gpu-0', 'resourceVersion': '7', 'labels': {
        'feature.node.kubernetes.io/pci-10de.present': 'true',
        'feature.node.kubernetes.io/system-os_release.OSTREE_VERSION': '418.94.202509100653-0'}},
    'spec': {'taints': [{'key': 'nvidia.com/gpu', 'effect': 'NoSchedule'}]},
    'status': {'nodeInfo': {'osImage': 'Red Hat Enterprise Linux CoreOS 418.94.202509100653-0 (Plow)',
                            'kernelVersion': '5.14.0-570.39.1.el9_6.x86_64', 'containerRuntimeVersion': 'cri-o://1.31.1',
                            'kubeletVersion': 'v1.31.1'},
               'conditions': [{'type': 'MemoryPressure', 'status': 'False'}, {'type': 'Ready', 'status': 'True'}],
               'allocatable': {'nvidia.com/gpu': '8'}, 'images': [{'names': ['big'], 'sizeBytes': 1}]}}


TABLE_ACCEPT = 'application/json;as=Table;g=meta.k8s.io;v=v1, application/json'
METADATA_ACCEPT = ('application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, '
                   'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json')


def test_node_info_view_reads_a_larger_fleet_as_a_first_page_then_the_cells_then_the_metadata(monkeypatch):
    cordoned = {'metadata': {'name': 'cpu-1'}, 'spec': {'unschedulable': True},
                'status': {'nodeInfo': {'kernelVersion': '6.8.0'}, 'conditions': [{'type': 'Ready', 'status': 'Unknown'}]}}
    registering = {'metadata': {'name': 'new-2'}, 'status': {}}
    joined = {'metadata': {'name': 'joined-3', 'resourceVersion': '9'}, 'status': {'nodeInfo': {'kernelVersion': '6.9'}}}
    first_page = {'kind': 'Table', 'columnDefinitions': TABLE_COLUMNS, 'metadata': {'continue': 'a'},
                  'rows': [node_table_row(GPU_NODE)]}
    cells = []
    for node in (GPU_NODE, cordoned, registering, {'metadata': {'name': 'gone-4'}}):
        # The API server's answer to includeObject=None.
        cells.append(dict(node_table_row(node), object=None))

    def nodes(params):
        if params['header_params']['Accept'] == METADATA_ACCEPT:
            return metadata_list([GPU_NODE, cordoned, registering, joined])
        if params['query_params'] == [('includeObject', 'Metadata')]:
            return first_page
        return {'kind': 'Table', 'columnDefinitions': TABLE_COLUMNS, 'metadata': {}, 'rows': cells}
    client = DynamicClient({('GET', '/api/v1/nodes'): nodes, ('GET', '/api/v1/nodes/joined-3'): joined})
    api = make_api(monkeypatch, client)
    gpu, cpu, new, late = api.list_nodes('gpu=true', view=NODE_INFO)
    rows, table, metadata, one = [request[3] for request in client.requests]
    assert rows == {'header_params': {'Accept': TABLE_ACCEPT}, 'query_params': [('includeObject', 'Metadata')],
                    'label_selector': 'gpu=true', 'limit': 100, '_continue': None}
    assert table == {'header_params': {'Accept': TABLE_ACCEPT}, 'query_params': [('includeObject', 'None')],
                     'label_selector': 'gpu=true', 'limit': 100000, '_continue': None}
    assert metadata == {'header_params': {'Accept': METADATA_ACCEPT}, 'label_selector': 'gpu=true', 'limit': 100000,
                        '_continue': None}
    # The first page's node, read once.
    assert gpu == {'metadata': GPU_NODE['metadata'], 'status': {
        'nodeInfo': dict((key, GPU_NODE['status']['nodeInfo'][key])
                         for key in ('osImage', 'kernelVersion', 'containerRuntimeVersion')),
        'conditions': [{'type': 'Ready', 'status': 'True'}]}}
    # '<unknown>' is the printer's empty field; NotReady stands for False and Unknown alike.
    assert cpu['status'] == {'nodeInfo': {'kernelVersion': '6.8.0'}, 'conditions': [{'type': 'Ready', 'status': 'False'}]}
    assert new == {'metadata': {'name': 'new-2'}, 'status': {}}
    # Created after the cells were read: read whole. Deleted after (gone-4): left out.
    assert (late, one) == (joined, {})
    assert api._module.warnings == []


def test_node_info_view_reads_a_small_fleet_in_one_request_without_annotations(monkeypatch):
    metadata = dict(GPU_NODE['metadata'], annotations={'machineconfiguration.openshift.io/state': 'Done'},
                    managedFields=[{'manager': 'kubelet'}], creationTimestamp='2026-11-26T00:00:00Z')
    client = DynamicClient({('GET', '/api/v1/nodes'): {'kind': 'Table', 'columnDefinitions': TABLE_COLUMNS,
                                                       'metadata': {}, 'rows': [node_table_row(
                                                           {'metadata': metadata, 'status': GPU_NODE['status']})]}})
    api = make_api(monkeypatch, client)
    node, = api.list_nodes(view=NODE_INFO)
    assert [(request[3]['query_params'], request[3]['limit']) for request in client.requests] == [
        ([('includeObject', 'Metadata')], 100)]
    # As the protobuf metadata without annotations gives it.
    assert node['metadata'] == GPU_NODE['metadata']


def test_node_info_view_in_pages_of_a_page_size_given_reads_the_table_with_metadata(monkeypatch):
    pages = {None: {'kind': 'Table', 'columnDefinitions': TABLE_COLUMNS, 'metadata': {'continue': 'a'},
                    'rows': [node_table_row(GPU_NODE)]},
             'a': {'kind': 'Table', 'columnDefinitions': TABLE_COLUMNS, 'metadata': {},
                   'rows': [node_table_row({'metadata': {'name': 'new-2'}, 'status': {}})]}}
    client = DynamicClient({('GET', '/api/v1/nodes'): lambda params: pages[params['_continue']]})
    api = make_api(monkeypatch, client)
    assert [node['metadata']['name'] for node in api.list_nodes(page_size=1, view=NODE_INFO)] == ['gpu-0', 'new-2']
    assert [(request[3]['query_params'], request[3]['limit'], request[3]['_continue'])
            for request in client.requests] == [([('includeObject', 'Metadata')], 1, None),
                                                ([('includeObject', 'Metadata')], 1, 'a')]


def test_node_info_view_gives_the_driver_plan_the_facts_of_the_full_node():
    served = node_from_table_row(node_table_row(GPU_NODE), NODE_TABLE_COLUMNS)
    full, projected = node_facts(GPU_NODE), node_facts(served)
    # What the Table leaves out: spec.taints and status.allocatable (evidence only for nodes without NFD labels).
    assert full.pop('tainted') and not projected.pop('tainted')
    assert projected == full


# The columns of the API server's Pod Table (its pod printer), wide ones included.
POD_TABLE_COLUMNS = [{'name': name} for name in ('Name', 'Ready', 'Status', 'Restarts', 'Age', 'IP', 'Node',
                                                 'Nominated Node', 'Readiness Gates')]


def pod_table_row(name, ready, status, node):
    metadata = {'name': name, 'labels': {'app.kubernetes.io/component': 'nvidia-driver'}}
    return {'cells': [name, ready, status, 0, '1d', '<none>', node, '<none>', '<none>'],
            'object': {'kind': 'PartialObjectMetadata', 'metadata': metadata}}


def test_pod_readiness_view_reads_a_pod_table_with_its_metadata(monkeypatch):
    page = {'kind': 'Table', 'columnDefinitions': POD_TABLE_COLUMNS, 'metadata': {}, 'rows': [
        pod_table_row('ready', '2/2', 'Running', 'gpu-0'), pod_table_row('probing', '1/2', 'Running', 'gpu-1'),
        pod_table_row('crashing', '0/1', 'Init:CrashLoopBackOff', 'gpu-2'),
        pod_table_row('leaving', '1/1', 'Terminating', 'gpu-3'), pod_table_row('unscheduled', '0/1', 'Pending', '<none>')]}
    client = DynamicClient({('GET', '/api/v1/namespaces/gpu/pods'): page})
    api = make_api(monkeypatch, client)
    pods = api.list_pods('gpu', 'a=b', view=POD_READINESS)
    assert client.requests[0][3]['header_params'] == {
        'Accept': 'application/json;as=Table;g=meta.k8s.io;v=v1, application/json'}
    assert client.requests[0][3]['query_params'] == [('includeObject', 'Metadata')]
    assert pods[0] == {'metadata': page['rows'][0]['object']['metadata'], 'spec': {'nodeName': 'gpu-0'},
                       'status': {'conditions': [{'type': 'Ready', 'status': 'True'}], 'reason': 'Running'}}
    assert [(pod['spec'].get('nodeName'), pod_readiness(pod)) for pod in pods] == [
        ('gpu-0', 'ready'), ('gpu-1', 'Running'), ('gpu-2', 'Init:CrashLoopBackOff'), ('gpu-3', 'ready'),
        (None, 'Pending')]
    assert api._module.warnings == []


def test_pod_cells_view_reads_a_pod_table_without_objects(monkeypatch):
    rows = [pod_table_row('driver-x', '1/1', 'Running', 'gpu-0'), pod_table_row('driver-y', '0/1', 'Init:0/1', '<none>')]
    for row in rows:
        # The API server's answer to includeObject=None.
        row['object'] = None
    client = DynamicClient({('GET', '/api/v1/namespaces/gpu/pods'): {
        'kind': 'Table', 'columnDefinitions': POD_TABLE_COLUMNS, 'metadata': {}, 'rows': rows}})
    api = make_api(monkeypatch, client)
    pods = api.list_pods('gpu', 'a=b', view=POD_CELLS)
    assert client.requests[0][3]['header_params'] == {
        'Accept': 'application/json;as=Table;g=meta.k8s.io;v=v1, application/json'}
    assert client.requests[0][3]['query_params'] == [('includeObject', 'None')]
    assert (client.requests[0][3]['label_selector'], client.requests[0][3]['limit']) == ('a=b', 10000)
    assert pods == [
        {'metadata': {'name': 'driver-x', 'namespace': 'gpu'}, 'spec': {'nodeName': 'gpu-0'},
         'status': {'conditions': [{'type': 'Ready', 'status': 'True'}], 'reason': 'Running'}},
        {'metadata': {'name': 'driver-y', 'namespace': 'gpu'}, 'spec': {},
         'status': {'conditions': [{'type': 'Ready', 'status': 'False'}], 'reason': 'Init:0/1'}}]
    assert [pod_readiness(pod) for pod in pods] == ['ready', 'Init:0/1']
    assert api._module.warnings == []


def test_a_server_answering_pod_cells_with_full_pods_is_read_in_full_and_said_once(monkeypatch):
    full = {'metadata': {'name': 'driver-x', 'namespace': 'gpu', 'labels': {'app': 'driver'}},
            'spec': {'nodeName': 'gpu-0'}, 'status': {'phase': 'Running'}}
    client = DynamicClient({('GET', '/api/v1/namespaces/gpu/pods'): {'kind': 'PodList', 'items': [full],
                                                                     'metadata': {}}})
    api = make_api(monkeypatch, client)
    assert api.list_pods('gpu', 'a=b', view=POD_CELLS) == [full]
    assert api.list_pods('gpu', 'c=d', view=POD_CELLS) == [full]
    assert api._module.warnings == [
        'the API server answered GET /api/v1/namespaces/gpu/pods with full objects (PodList), not the cells view '
        'asked for (Accept: application/json;as=Table;g=meta.k8s.io;v=v1, application/json): reading full objects, '
        'more data, the same result']


def test_pod_readiness_of_full_pods_and_of_the_table_agree():
    running = {'status': {'phase': 'Running', 'conditions': [{'type': 'Ready', 'status': 'True'}],
                          'containerStatuses': [{'ready': True, 'state': {'running': {}}}]}}
    probing = {'status': {'phase': 'Running', 'conditions': [{'type': 'Ready', 'status': 'False'}],
                          'containerStatuses': [{'ready': False, 'state': {'running': {}}}]}}
    pulling = {'status': {'phase': 'Pending', 'containerStatuses': [
        {'ready': False, 'state': {'waiting': {'reason': 'ImagePullBackOff'}}}]}}
    cells = (('1/1', 'Running'), ('0/1', 'Running'), ('0/1', 'ImagePullBackOff'))
    for full, (ready, status) in zip((running, probing, pulling), cells):
        served = pod_from_table_row(pod_table_row('p', ready, status, 'gpu-0'), [c['name'] for c in POD_TABLE_COLUMNS])
        assert pod_readiness(served) == pod_readiness(full)


def test_metadata_view_in_json_of_a_node_without_labels(monkeypatch):
    page = {'kind': 'PartialObjectMetadataList', 'apiVersion': 'meta.k8s.io/v1', 'metadata': {}, 'items': [
        {'kind': 'PartialObjectMetadata', 'metadata': {'name': 'bare', 'resourceVersion': '3'}},
        {'kind': 'PartialObjectMetadata', 'metadata': {'name': 'gpu-0', 'labels': {'nvidia.com/gpu.present': 'true'}}}]}
    client = DynamicClient({('GET', '/api/v1/nodes'): page})
    api = make_api(monkeypatch, client)
    bare, gpu = api.list_nodes(view=NODE_METADATA)
    assert client.requests[0][3]['header_params'] == {'Accept': (
        'application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, '
        'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json')}
    assert 'query_params' not in client.requests[0][3]
    assert bare == {'kind': 'PartialObjectMetadata', 'metadata': {'name': 'bare', 'resourceVersion': '3'}}
    facts = node_facts(bare)
    assert facts['labels'] == {} and not facts['gpu_present'] and not facts['nfd_labelled'] and facts['warnings'] == []
    assert node_facts(gpu)['labels'] == {'nvidia.com/gpu.present': 'true'}
    assert api._module.warnings == []


def test_a_server_without_the_view_is_read_in_full_and_said_once(monkeypatch):
    pages = {None: {'kind': 'NodeList', 'items': [GPU_NODE], 'metadata': {'continue': 'a'}},
             'a': {'kind': 'NodeList', 'items': [{'metadata': {'name': 'cpu-1'}}], 'metadata': {}}}
    client = DynamicClient({('GET', '/api/v1/nodes'): lambda params: pages[params['_continue']]})
    api = make_api(monkeypatch, client)
    assert [node['metadata']['name'] for node in api.list_nodes(page_size=1, view=NODE_INFO)] == ['gpu-0', 'cpu-1']
    assert list(api.list_nodes(page_size=1, view=NODE_INFO))[0] == GPU_NODE
    assert api._module.warnings == [
        'the API server answered GET /api/v1/nodes with full objects (NodeList), not the node rows view asked for '
        '(Accept: application/json;as=Table;g=meta.k8s.io;v=v1, application/json): reading full objects, more data, '
        'the same result']


def test_response_bytes_are_counted_as_received_and_as_json(monkeypatch):
    class Compressed(Response):
        def tell(self):
            return 10

    client = DynamicClient({('GET', '/api/v1/nodes/a'): {'metadata': {'name': 'a'}}})
    client.request = lambda *args, **kwargs: Compressed({'metadata': {'name': 'a'}})
    api = make_api(monkeypatch, client)
    api.read_node('a')
    api.read_node('a')
    assert api.response_bytes() == {'wire': 20, 'json': 2 * len(json.dumps({'metadata': {'name': 'a'}}))}
    assert make_api(monkeypatch, client).response_bytes() == {'wire': 0, 'json': 0}


def test_every_request_accepts_gzip(monkeypatch):
    make_api(monkeypatch, DynamicClient({}))
    client = rest_client()
    client.request('GET', 'https://127.0.0.1/api', headers={'Accept': 'application/json'})
    client.request('PATCH', 'https://127.0.0.1/api/v1/nodes/a', headers={'Content-Type': 'application/merge-patch+json'},
                   body={})
    # The client may add headers of its own (Content-Type): the ones given are kept, gzip is added.
    sent = [(method, dict(headers)) for method, headers in client.pool_manager.sent]
    assert [method for method, _headers in sent] == ['GET', 'PATCH']
    assert sent[0][1]['Accept'] == 'application/json'
    assert sent[1][1]['Content-Type'] == 'application/merge-patch+json'
    assert [headers['Accept-Encoding'] for _method, headers in sent] == ['gzip', 'gzip']


class Clock:
    def __init__(self):
        self.now, self.slept = 0.0, []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def test_an_api_server_that_cannot_be_reached_as_the_client_is_created_is_a_task_error(monkeypatch):
    def unreachable(module):
        raise urllib3.exceptions.MaxRetryError(None, '/version', 'Connection refused')
    monkeypatch.setattr(k8s_client, 'get_api_client', unreachable)
    clock = Clock()
    with pytest.raises(TaskError, match=r'^cannot reach the API server: .*Connection refused.*\(tried 19 times in 119.5 s\)'):
        ClusterAPI(Module(False), clock=clock, sleep=clock.sleep)


@pytest.mark.parametrize('budget, tries, seconds', [(10, 5, 7.5), (0, 1, None)])
def test_api_retry_seconds_bounds_the_tries_of_an_api_server_that_cannot_be_reached(monkeypatch, budget, tries, seconds):
    def unreachable(module):
        raise urllib3.exceptions.MaxRetryError(None, '/version', 'Connection refused')
    monkeypatch.setattr(k8s_client, 'get_api_client', unreachable)
    clock = Clock()
    with pytest.raises(TaskError) as error:
        ClusterAPI(Module(False, api_retry_seconds=budget), clock=clock, sleep=clock.sleep)
    assert len(clock.slept) == tries - 1 and sum(clock.slept) <= budget
    assert str(error.value).endswith(' (tried %d times in %.1f s)' % (tries, seconds) if seconds else "(Caused by 'Connection refused')")


def test_a_negative_api_retry_seconds_is_refused_before_any_request(monkeypatch):
    monkeypatch.setattr(k8s_client, 'get_api_client', lambda module: pytest.fail('a request was sent'))
    with pytest.raises(TaskError, match=r'^api_retry_seconds is -1: the seconds a request is tried for are 0 or more$'):
        ClusterAPI(Module(False, api_retry_seconds=-1))


def test_a_client_created_after_refused_connections_says_so(monkeypatch):
    tries = []

    def restarting(module):
        tries.append(module)
        if len(tries) < 3:
            raise urllib3.exceptions.MaxRetryError(None, '/version', 'Connection refused')
        return type('K8SClient', (), {'client': DynamicClient({})})
    monkeypatch.setattr(k8s_client, 'get_api_client', restarting)
    clock = Clock()
    api = ClusterAPI(Module(False), clock=clock, sleep=clock.sleep)
    assert clock.slept == [0.5, 1.0] and dict(api.faults) == {'refused': 2}
    assert api.fault_summary() == 'the API server at http://localhost refused connections x2; retried 1 request(s), 1.5 s'


def failing(*faults, then=None):
    """An answer that fails with each fault in turn (a status, with a Retry-After; or a transport error), then
    gives then (a status and its text, or an object)."""
    faults = list(faults)

    def answer(params):
        if faults:
            fault = faults.pop(0)
            if isinstance(fault, Exception):
                raise fault
            status, headers, text = fault
            error = ApiException(status=status, reason='error')
            error.body, error.headers = text.encode(), headers
            raise api_exception(error)
        return then
    return answer


UNAVAILABLE = (503, {}, '{"kind": "Status", "message": "the server is currently unable to handle the request"}')
RESET_ERROR = urllib3.exceptions.ProtocolError('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))
REFUSED_ERROR = urllib3.exceptions.MaxRetryError(None, '/api', urllib3.exceptions.NewConnectionError(
    None, 'Failed to establish a new connection: [Errno 111] Connection refused'))


def retrying_api(monkeypatch, answers, api_retry_seconds=retry.RETRY_SECONDS):
    clock = Clock()
    monkeypatch.setattr(k8s_client, 'get_api_client', lambda module: type('K8SClient', (), {'client': DynamicClient(answers)}))
    return ClusterAPI(Module(False, api_retry_seconds), clock=clock, sleep=clock.sleep), clock


def test_a_read_is_retried_through_503s_and_resets_with_backoff_and_said_once(monkeypatch):
    api, clock = retrying_api(monkeypatch, {('GET', '/api/v1/nodes/a'): failing(
        UNAVAILABLE, RESET_ERROR, UNAVAILABLE, then={'metadata': {'name': 'a'}})})
    assert api.read_node('a') == {'metadata': {'name': 'a'}}
    assert clock.slept == [0.5, 1.0, 2.0]
    assert (dict(api.faults), api.retried, api.given_up, api.retry_seconds) == ({'503': 2, 'reset': 1}, 1, 0, 3.5)
    assert api.fault_summary() == ('the API server at http://localhost answered 503 x2 and reset connections x1; '
                                   'retried 1 request(s), 3.5 s')


def test_retry_after_is_honoured(monkeypatch):
    api, clock = retrying_api(monkeypatch, {('PATCH', '/api/v1/nodes/a'): failing(
        (429, {'Retry-After': '3'}, '{"kind": "Status", "reason": "TooManyRequests"}'), then={'kind': 'Node'})})
    assert api.patch_node('a', {'metadata': {'labels': {'x': 'y'}}}) == {'kind': 'Node'}
    assert clock.slept == [3.0]


def test_a_request_that_outlasts_its_retries_fails_saying_how_long_it_tried_and_marked_a_fault(monkeypatch):
    api, clock = retrying_api(monkeypatch, {('GET', '/api/v1/nodes/a'): failing(*[UNAVAILABLE] * 100)})
    with pytest.raises(APIError, match=r'GET /api/v1/nodes/a: HTTP 503: the server is currently unable to handle the '
                                       r'request \(tried 19 times in 119.5 s\)') as raised:
        api.read_node('a')
    assert (raised.value.status, raised.value.fault, api.given_up) == (503, '503', 1)
    with api.deadline(10):
        with pytest.raises(APIError, match=r'tried 5 times in 7.5 s'):
            api.read_node('a')


def test_api_retry_seconds_is_each_requests_budget_and_a_wait_cuts_it_shorter(monkeypatch):
    api, clock = retrying_api(monkeypatch, {('GET', '/api/v1/nodes/a'): failing(*[UNAVAILABLE] * 100)},
                              api_retry_seconds=3)
    with pytest.raises(APIError, match=r'HTTP 503: .* \(tried 3 times in 1.5 s\)$'):
        api.read_node('a')
    with api.deadline(1):
        with pytest.raises(APIError, match=r'\(tried 2 times in 0.5 s\)$'):
            api.read_node('a')
    with api.deadline(60):
        with pytest.raises(APIError, match=r'\(tried 3 times in 1.5 s\)$'):
            api.read_node('a')


def test_an_eviction_held_by_a_budget_is_answered_at_once_and_other_posts_retried_only_when_not_sent(monkeypatch):
    budget = (429, {}, json.dumps({'kind': 'Status', 'reason': 'TooManyRequests', 'details': {'causes': [
        {'reason': 'DisruptionBudget', 'message': 'The disruption budget serve needs 1 healthy pods'}]}}))
    path = '/api/v1/namespaces/ml/pods/train/eviction'
    eviction = {'metadata': {'name': 'train', 'namespace': 'ml'}}
    api, clock = retrying_api(monkeypatch, {('POST', path): failing(budget, then={})})
    with pytest.raises(APIError) as raised:
        api.evict_pod(eviction)
    assert raised.value.status == 429 and raised.value.fault is None and clock.slept == []
    api, clock = retrying_api(monkeypatch, {('POST', path): failing(UNAVAILABLE, then={})})
    with pytest.raises(APIError) as raised:
        api.evict_pod(eviction)
    assert raised.value.fault == '503' and clock.slept == []
    api, clock = retrying_api(monkeypatch, {('POST', path): failing(
        REFUSED_ERROR, (429, {'Retry-After': '1'}, '{"kind": "Status"}'), then={'kind': 'Eviction'})})
    assert api.evict_pod(eviction) == {'kind': 'Eviction'} and clock.slept == [0.5, 1.0]


def test_a_delete_whose_object_is_gone_after_a_retry_is_done(monkeypatch):
    path = '/api/v1/namespaces/gpu/pods/driver'
    api, _clock = retrying_api(monkeypatch, {('DELETE', path): failing(
        RESET_ERROR, then=(404, json.dumps(NOT_FOUND_OBJECT)))})
    assert api.delete_pod('gpu', 'driver', 'uid-1')['status'] == 'Success'
    api, _clock = retrying_api(monkeypatch, {('DELETE', path): (404, json.dumps(NOT_FOUND_OBJECT))})
    with pytest.raises(APIError) as raised:
        api.delete_pod('gpu', 'driver', 'uid-1')
    assert raised.value.status == 404


@pytest.mark.parametrize('version, sent', [('24.2.0', b'{"kind": "ConfigMap"}'), ('25.3.0', {'kind': 'ConfigMap'}),
                                           ('37.0.2', {'kind': 'ConfigMap'}), ('38.0.0a1', {'kind': 'ConfigMap'})])
def test_a_server_side_apply_body_is_what_the_client_version_sends_as_json(version, sent):
    assert apply_body({'kind': 'ConfigMap'}, version) == sent


def test_a_server_side_apply_body_goes_through_the_installed_clients_rest_layer_as_json():
    client = rest_client()
    client.request('PATCH', 'https://127.0.0.1/api/v1/namespaces/gpu/configmaps/a',
                   headers={'Content-Type': 'application/apply-patch+yaml'}, body=apply_body({'kind': 'ConfigMap'}))
    assert json.loads(client.pool_manager.bodies[0]) == {'kind': 'ConfigMap'}
