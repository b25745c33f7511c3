# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The only place where this collection's modules talk to the Kubernetes API server.

The connection (module arguments, K8S_AUTH_* variables, kubeconfig, in-cluster config) is kubernetes.core's:
the client comes from its get_api_client(). Reads go to fixed paths rather than through API discovery: every
path is known, and a discovery miss (an OpenShift API on plain Kubernetes) would make the client re-discover
every API group. Only the objects of apply_object() and delete_object(), of any kind a manifest names, are
found through the client's (cached) discovery. Responses are decoded to plain dicts: the dynamic client's ResourceInstance
wrapping costs seconds and hundreds of MiB on a list of thousands of nodes.

Reads ask for no more than their callers use: every request accepts a gzip-compressed answer (the API server
compresses those over 128 KB), and a list of nodes comes in the smallest view that carries what its caller reads
(list_nodes: NODE_METADATA, their metadata in the protobuf encoding, which costs the API server and this process a
fraction of the CPU of JSON, read as it arrives (kube_protobuf); NODE_LABELS, that without annotations; NODE_INFO,
the Node Table with each row's metadata for a small fleet, else that metadata and the Table's cells, each in one
request, which the API server answers from its cache where pages after the first come from etcd; or NODE_FULL), a list of
pods as a Table when its caller reads their labels, node and readiness only (list_pods: POD_READINESS), as the
Table's cells alone when it reads no labels (POD_CELLS). The requests sent, by verb, and the bytes of the answers, as
received and as decoded, are counted here and reported in every module result (run_module).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import contextlib
import gc
import inspect
import json
import time

from ansible.module_utils.basic import env_fallback
from ..driver.dtk import (
    DTK_IMAGESTREAM, DTK_NAMESPACE, NOT_OPENSHIFT, STREAM_MISSING)
from . import protobuf, retry
from ..runner import worker as module_worker
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import CoreException

FIELD_MANAGER = 'accelerators.gpu'
DEFAULT_PAGE_SIZE = 500
# Full Nodes of a busy cluster are 10-40 KB of JSON each, several times that once decoded: pages of 100 keep the
# memory of a module reading thousands flat.
FULL_NODE_PAGE_SIZE = 100
# Pod Table cells are about 250 bytes of JSON a row: pages of 10,000 are one gzip-compressed answer per operand on
# fleets of up to 10,000 nodes. The API server serves a first page from its watch cache, but the request for a next
# page (continue) from etcd, decoding every pod of the namespace after the page's last (measured: 500-row pages of
# one operand each made the API server's CPU time four times that of one list of every pod).
POD_CELLS_PAGE_SIZE = 10000
# Node Table cells (no objects) are about 200 bytes of JSON a node: one request, answered from the watch cache.
ONE_PAGE = 100000
# Nodes that NODE_INFO reads in one request, the Node Table with each row's metadata; more are read in two (_node_info).
SMALL_FLEET = 100
# Bytes of a protobuf answer read at a time, decompressed.
_STREAM_CHUNK = 1 << 18
NODES = '/api/v1/nodes'
PODS = '/api/v1/pods'
DAEMONSETS = '/apis/apps/v1/namespaces/%s/daemonsets'
DTK_IMAGESTREAM_PATH = '/apis/image.openshift.io/v1/namespaces/%s/imagestreams/%s' % (DTK_NAMESPACE, DTK_IMAGESTREAM)
# ImageDigestMirrorSet, ImageTagMirrorSet, ImageContentSourcePolicy, by their mirrors.mirror_rules() argument
MIRROR_SET_PATHS = (
    ('idms', '/apis/config.openshift.io/v1/imagedigestmirrorsets'),
    ('itms', '/apis/config.openshift.io/v1/imagetagmirrorsets'),
    ('icsp', '/apis/operator.openshift.io/v1alpha1/imagecontentsourcepolicies'),
)

# Every HTTP request this process sends through the kubernetes client, by verb.
_REQUEST_COUNTS = collections.Counter()
# Bytes of the answers to ClusterAPI's requests: 'wire' as received (compressed or not), 'json' once decompressed
# (JSON, or protobuf for node metadata).
_RESPONSE_BYTES = collections.Counter()

# What list_nodes() asks the API server to send of each node.
NODE_FULL = 'full'          # the whole Node
NODE_METADATA = 'metadata'  # metadata only: name, uid, resourceVersion, labels, annotations (no spec, no status)
NODE_LABELS = 'labels'      # NODE_METADATA without annotations (left out of a protobuf answer unread)
NODE_INFO = 'info'          # NODE_LABELS, status.nodeInfo's osImage, kernelVersion and containerRuntimeVersion, Ready
NODE_CELLS = 'node cells'   # name, status.nodeInfo's osImage, kernelVersion and containerRuntimeVersion, Ready
NODE_ROWS = 'node rows'     # NODE_CELLS and the metadata of NODE_LABELS, one Table in JSON (includeObject=Metadata)
# What list_pods() asks for: the whole Pod, or its metadata, node and readiness (pod_from_table_row), or its name, node
# and readiness without labels: the Table's cells only, about a tenth of the bytes of the metadata with managedFields.
POD_FULL = NODE_FULL
POD_READINESS = 'readiness'
POD_CELLS = 'cells'
_TABLE_ACCEPT = 'application/json;as=Table;g=meta.k8s.io;v=v1, application/json'
# The Node Table's columns (the API server's node printer) that NODE_INFO reads, and the status.nodeInfo fields
# they show; the printer shows an empty field as '<unknown>', an empty Pod column as '<none>'.
_NODE_INFO_COLUMNS = (('OS-Image', 'osImage'), ('Kernel-Version', 'kernelVersion'),
                      ('Container-Runtime', 'containerRuntimeVersion'))
_UNKNOWN_CELL = '<unknown>'
# The metadata fields of NODE_LABELS (protobuf.object_meta with LABELS).
_NODE_LABELS_METADATA = ('name', 'namespace', 'uid', 'resourceVersion', 'labels')
_NONE_CELL = '<none>'


@contextlib.contextmanager
def cyclic_gc_paused():
    """Cyclic garbage collection paused within, then back as it was: decoding a list of thousands of objects, and
    building a result of thousands of entries, allocates millions of dicts, lists and strings that hold no reference
    cycles (reference counting frees them), and the collector's full passes over that growing heap took 0.3-0.6 s of a
    module run at 5000 nodes while freeing next to nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class APIError(Exception):
    """A request that failed. status: the HTTP status (None when the server was not reached); details: the
    details of the API server's Status answer ({} when it gave none, as for a path it does not serve); fault: the
    api_retry kind of a fault that retries did not outlast (the API server lost or overloaded), None for an answer."""

    def __init__(self, method, path, status, message, details=None, fault=None):
        super(APIError, self).__init__('%s %s: %s%s' % (
            method, path, 'HTTP %s: ' % status if status else '', message))
        self.method, self.path, self.message = method, path, message
        self.status = status
        self.details = details or {}
        self.fault = fault


class TaskError(Exception):
    """The module must fail with this message; result holds what it found or did until then."""

    def __init__(self, message, **result):
        super(TaskError, self).__init__(message)
        self.result = result


def _count_requests(rest_client):
    """Count requests by verb at the kubernetes client's RESTClientObject.request, every request's last stop in every
    client version (ApiClient.request before client 34, ApiClient.call_api after, both send through it with the
    headers by keyword), and accept a gzip-compressed answer to each (urllib3 decodes it).

    Wrapped at the class, once per process, so that the discovery requests kubernetes.core makes while it
    builds the client count too; ClusterAPI reports the difference since it was created. A client whose request
    takes no headers keyword is left as it is: counting is a report, never a reason for a module to fail.
    """
    send = getattr(rest_client, 'request', None)
    if send is None or getattr(send, 'counts_requests', False) or not _takes_keyword(send, 'headers'):
        return

    def request(self, method, url, *args, **kwargs):
        _REQUEST_COUNTS[method.upper()] += 1
        kwargs['headers'] = dict(kwargs.get('headers') or {})
        kwargs['headers'].setdefault('Accept-Encoding', 'gzip')
        return send(self, method, url, *args, **kwargs)

    request.counts_requests = True
    rest_client.request = request


def _takes_keyword(function, name):
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters or any(p.kind == p.VAR_KEYWORD for p in parameters.values())


def apply_body(obj, client_version=None):
    """The body of a server-side apply of obj as the installed kubernetes client (client_version, by default its
    __version__) sends it: the object, which clients from 25 on encode as JSON, else JSON bytes, which client 24
    sends as they are (it encodes no body of content type application/apply-patch+yaml, and refuses a dict)."""
    if client_version is None:
        from kubernetes import __version__ as client_version
    try:
        major = int(str(client_version).split('.', 1)[0])
    except ValueError:
        return obj
    return obj if major >= 25 else json.dumps(obj).encode('utf-8')


def _parse_status(body):
    """(message, details) of a failed request's body: a Status object, or text such as '404 page not found'."""
    if isinstance(body, bytes):
        body = body.decode('utf-8', 'replace')
    try:
        status = json.loads(body)
    except (TypeError, ValueError):
        return str(body).strip(), {}
    if not isinstance(status, dict):
        return str(status), {}
    return status.get('message') or str(status), status.get('details') or {}


def _row_metadata(row, cells, namespace):
    """The metadata of a Table row: its object's (includeObject=Metadata), else (includeObject=None: the API server
    sends "object": null) its Name cell and the namespace the list was read in, if any."""
    if row.get('object'):
        return row['object'].get('metadata') or {}
    metadata = {'name': cells.get('Name')}
    if namespace:
        metadata['namespace'] = namespace
    return metadata


def node_from_table_row(row, columns, namespace=None):
    """A Node dict of one row of a Node Table read with includeObject=Metadata: the row's metadata, the
    status.nodeInfo fields of its cells and a Ready condition, status 'True' or, for NotReady, 'False' (the Table
    does not tell False from Unknown). columns: the Table's column names, in order; namespace: the request's,
    which names the object of a row read without one (_row_metadata), None for cluster-scoped Nodes."""
    cells = dict(zip(columns, row.get('cells') or []))
    node = {'metadata': _row_metadata(row, cells, namespace), 'status': {}}
    info = dict((field, cells[column]) for column, field in _NODE_INFO_COLUMNS
                if cells.get(column) not in (None, _UNKNOWN_CELL))
    if info:
        node['status']['nodeInfo'] = info
    # The Status cell: Ready, NotReady or Unknown (no Ready condition), then ',SchedulingDisabled' when cordoned.
    ready = str(cells.get('Status') or '').split(',', 1)[0]
    if ready in ('Ready', 'NotReady'):
        node['status']['conditions'] = [{'type': 'Ready', 'status': 'True' if ready == 'Ready' else 'False'}]
    return node


def node_info_from_table_row(row, columns, namespace=None):
    """node_from_table_row with the metadata a protobuf read of NODE_LABELS gives: no annotations, no managedFields."""
    node = node_from_table_row(row, columns, namespace)
    node['metadata'] = dict((key, value) for key, value in node['metadata'].items() if key in _NODE_LABELS_METADATA)
    return node


def pod_from_table_row(row, columns, namespace=None):
    """A Pod dict of one row of a Pod Table: the row's metadata (includeObject=Metadata), else (includeObject=None)
    the Name cell and the namespace of the request, without labels; spec.nodeName from the Node cell, and in status
    what the Table tells of readiness: a Ready condition, 'True' when every container counted in the Ready cell
    ('1/1') is ready, and as status.reason the Status cell, the reason kubectl get pods shows (Running,
    ContainerCreating, CrashLoopBackOff, Init:0/1, Terminating...). The Table has no phase and no container statuses.
    columns: the Table's column names, in order."""
    cells = dict(zip(columns, row.get('cells') or []))
    pod = {'metadata': _row_metadata(row, cells, namespace), 'spec': {}, 'status': {}}
    if cells.get('Node') not in (None, _NONE_CELL):
        pod['spec']['nodeName'] = cells['Node']
    ready, _slash, total = str(cells.get('Ready') or '').partition('/')
    pod['status']['conditions'] = [{'type': 'Ready', 'status': 'True' if total not in ('', '0') and ready == total
                                    else 'False'}]
    if cells.get('Status'):
        pod['status']['reason'] = cells['Status']
    return pod


# For each smaller view: the Accept header (the plain list is the fallback a server that does not serve the view
# answers with), the kind of a list in the view, the includeObject parameter and what makes an item of a Table row.
_METADATA_ACCEPT = ', '.join(encoding + ';as=PartialObjectMetadataList;g=meta.k8s.io;v=v1'
                             for encoding in (protobuf.MEDIA_TYPE, 'application/json')) + ', application/json'
_METADATA_VIEW = (_METADATA_ACCEPT, 'PartialObjectMetadataList', None, None)
_VIEWS = {
    NODE_METADATA: _METADATA_VIEW,
    NODE_LABELS: _METADATA_VIEW,
    NODE_CELLS: (_TABLE_ACCEPT, 'Table', 'None', node_from_table_row),
    NODE_ROWS: (_TABLE_ACCEPT, 'Table', 'Metadata', node_info_from_table_row),
    POD_READINESS: (_TABLE_ACCEPT, 'Table', 'Metadata', pod_from_table_row),
    POD_CELLS: (_TABLE_ACCEPT, 'Table', 'None', pod_from_table_row),
}
# The string maps of ObjectMeta a protobuf answer is read for, by view.
_PROTOBUF_MAPS = {NODE_LABELS: protobuf.LABELS}


def _view_items(page, view, namespace=None):
    """(the items of a page of a list as dicts, whether the page is in the view asked for). A server that does
    not serve the view answers with the full list. namespace: the one the list was read in, if any."""
    kind = _VIEWS[view][1] if view in _VIEWS else None
    if kind is None or page.get('kind') != kind:
        return page.get('items') or [], kind is None
    if kind == 'Table':
        columns = [column.get('name') for column in page.get('columnDefinitions') or []]
        return [_VIEWS[view][3](row, columns, namespace) for row in page.get('rows') or []], True
    return page.get('items') or [], True


def describe(obj):
    """An object in words, for messages: kind namespace/name, or kind name."""
    metadata = obj.get('metadata') or {}
    return '%s %s%s' % (obj.get('kind'), '%s/' % metadata['namespace'] if metadata.get('namespace') else '',
                        metadata.get('name'))


class ClusterAPI:
    """Reads and writes of the objects this collection's modules handle.

    In check mode every write is a server-side dry run (dryRun=All): the API server validates and
    admits it, and stores nothing.
    """

    def __init__(self, module, clock=time.monotonic, sleep=time.sleep):
        # The client is imported here, not with this file: a module process that a module worker serves never
        # needs it (module_worker).
        from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client
        from kubernetes.client.rest import RESTClientObject
        from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError
        from urllib3.exceptions import HTTPError

        self._api_errors, self._transport_errors, self._kind_not_found = DynamicApiError, HTTPError, ResourceNotFoundError
        _count_requests(RESTClientObject)
        self._baseline = collections.Counter(_REQUEST_COUNTS)
        self._bytes_baseline = collections.Counter(_RESPONSE_BYTES)
        self._module = module
        self._warned_full_views = set()
        self.dry_run = module.check_mode
        # The faults met (retry.fault kinds), the requests retried and given up, the seconds they took.
        self.faults = collections.Counter()
        self.retried = self.given_up = self.last_tries = 0
        self.retry_seconds = 0.0
        self._deadline = None
        self._clock, self._sleep = clock, sleep
        # Seconds a request is tried for (api_retry_seconds).
        self.retry_budget = module.params['api_retry_seconds']
        if self.retry_budget < 0:
            raise TaskError('api_retry_seconds is %s: the seconds a request is tried for are 0 or more' % self.retry_budget)
        started = self._clock()
        tries = 0
        while True:
            tries += 1
            try:
                self._client = get_api_client(module).client
                break
            except CoreException as error:
                raise TaskError('cannot create the Kubernetes API client: %s' % error)
            except HTTPError as error:  # the client reads the API server's version as it is created
                fault = retry.transport_fault(error)
                wait = retry.next_try(self._clock(), tries, started + self.retry_budget) if fault else None
                if wait is None:
                    raise TaskError('cannot reach the API server: %s%s' % (
                        error, ' (tried %d times in %.1f s)' % (tries, self._clock() - started) if tries > 1 else ''))
                self.faults[fault] += 1
                self.retried = 1
                self._sleep(wait)
        if tries > 1:
            self.retry_seconds = self._clock() - started

    def request_counts(self):
        """Requests sent since this object was created, by HTTP verb."""
        return dict(_REQUEST_COUNTS - self._baseline)

    def response_bytes(self):
        """Bytes of the answers to this object's requests: {'wire': as received, 'json': decoded}."""
        counts = _RESPONSE_BYTES - self._bytes_baseline
        return {'wire': counts['wire'], 'json': counts['json']}

    @contextlib.contextmanager
    def deadline(self, seconds):
        """Within, a request is retried until seconds from now at most (a wait's timeout), not api_retry_seconds."""
        before = self._deadline
        self._deadline = self._clock() + seconds
        try:
            yield
        finally:
            self._deadline = before

    def fault_summary(self):
        """The line that says what faults the requests met and how they were retried, '' when they met none."""
        if not self.faults:
            return ''
        return retry.summary(self._client.configuration.host, self.faults, self.retried,
                                 self.retry_seconds, self.given_up)

    def _send(self, method, path, body, params):
        """One try: the response, or (APIError, the fault, Retry-After seconds)."""
        # Copies: the client adds to the header and query parameters it is given.
        params = dict(params)
        for name in ('header_params', 'query_params'):
            if name in params:
                params[name] = type(params[name])(params[name])
        try:
            return self._client.request(method, path, body=body, serialize=False, **params), None
        except self._api_errors as error:
            message, details = _parse_status(error.body)
            after = retry.retry_after((getattr(error, 'headers', None) or {}).get('Retry-After'))
            return None, (APIError(method.upper(), path, error.status, message, details),
                          retry.status_fault(error.status, details, message), after)
        except self._transport_errors as error:
            return None, (APIError(method.upper(), path, None, 'cannot reach the API server %s: %s'
                                   % (self._client.configuration.host, error)), retry.transport_fault(error), None)

    def _request(self, method, path, body=None, content_type=None, write=False, protobuf_maps=None, **params):
        """The answer to a request, decoded: JSON, or a protobuf PartialObjectMetadataList (kube_protobuf) with the
        string maps of its objects' metadata that protobuf_maps names (by default labels and annotations).

        A request that meets a fault is tried again as api_retry says, until its deadline; a DELETE whose object
        is gone after a retry is done. self.last_tries: the tries of this request."""
        if write and self.dry_run:
            params['dry_run'] = 'All'
        if content_type:
            params['content_type'] = content_type
        started = self._clock()
        deadline = min(started + self.retry_budget, self._deadline or float('inf'))
        self.last_tries = 0
        while True:
            response, failure = self._send(method, path, body, params)
            self.last_tries += 1
            if failure is None:
                try:
                    answer = self._decode(method, path, response, protobuf_maps)
                except self._transport_errors as error:  # the connection broke off in the answer
                    failure = (APIError(method.upper(), path, None, 'the answer of the API server %s broke off: %s'
                                        % (self._client.configuration.host, error)),
                               retry.transport_fault(error), None)
                else:
                    if self.last_tries > 1:
                        self.retry_seconds += self._clock() - started
                    return answer
            error, fault, after = failure
            if self.last_tries > 1 and method.upper() == 'DELETE' and error.status == 404:
                self.retry_seconds += self._clock() - started
                return {'kind': 'Status', 'status': 'Success', 'details': error.details}
            wait = retry.next_try(self._clock(), self.last_tries, deadline, after) \
                if retry.retryable(method, content_type, fault) else None
            if fault:
                self.faults[fault] += 1
            if wait is None:
                error.fault = fault
                if self.last_tries > 1:
                    self.retry_seconds += self._clock() - started
                    self.given_up += 1
                    error = APIError(error.method, path, error.status, '%s (tried %d times in %.1f s)' % (
                        error.message, self.last_tries, self._clock() - started), error.details, fault)
                raise error
            if self.last_tries == 1:
                self.retried += 1
            self._sleep(wait)

    @staticmethod
    def _decode(method, path, response, protobuf_maps):
        """A response's body, decoded: JSON, or a protobuf PartialObjectMetadataList as it arrives."""
        if (response.headers.get('Content-Type') or '').startswith(protobuf.MEDIA_TYPE):
            # Decoded as it arrives: the answer's bytes are never all held at once.
            decoded = collections.Counter()

            def chunks():
                # read(), not stream(): urllib3 counts the bytes of a chunked answer that read() reads (tell()).
                chunk = response.read(_STREAM_CHUNK, decode_content=True)
                while chunk:
                    decoded['bytes'] += len(chunk)
                    yield chunk
                    chunk = response.read(_STREAM_CHUNK, decode_content=True)
            try:
                return protobuf.read_metadata_list(chunks(), protobuf_maps)
            except protobuf.ProtobufError as error:
                raise APIError(method.upper(), path, response.status, 'cannot read the protobuf answer: %s' % error)
            finally:
                # tell(): the bytes urllib3 read from the connection, before it decompressed them.
                _RESPONSE_BYTES.update(wire=response.tell(), json=decoded['bytes'])
        data = response.data
        _RESPONSE_BYTES.update(wire=response.tell(), json=len(data))
        return json.loads(data)

    def read(self, path, **query):
        """The object (or list) at path; query: the request's parameters (label_selector, limit...)."""
        return self._request('GET', path, **query)

    def list_items(self, path, label_selector=None, field_selector=None):
        """Every item of the list at path, read page by page, as a list."""
        return list(self._list(path, label_selector, field_selector=field_selector))

    def object_path(self, obj):
        """The path of an object of a manifest (apiVersion, kind, metadata.name, metadata.namespace), found through
        the client's discovery; None when the API server does not serve its kind."""
        metadata = obj.get('metadata') or {}
        try:
            resource = self._client.resources.get(api_version=obj.get('apiVersion'), kind=obj.get('kind'))
        except self._kind_not_found:
            return None
        if resource.namespaced and not metadata.get('namespace'):
            raise TaskError('%s: a namespaced object needs metadata.namespace' % describe(obj))
        return resource.path(name=metadata.get('name'), namespace=metadata.get('namespace') if resource.namespaced
                             else None)

    def apply_object(self, path, obj):
        """Server-side apply as field manager accelerators.gpu, forced (the collection's values win over an edit by
        hand, and fields it no longer declares go); returns the object as stored, or as it would be in check mode.
        Strict field validation: a field the kind's schema lacks (misspelt, misplaced) fails the write (an error
        naming the field) instead of being dropped."""
        return self._request('PATCH', path, body=apply_body(obj), content_type='application/apply-patch+yaml',
                             write=True, field_manager=FIELD_MANAGER, force_conflicts=True,
                             query_params=[('fieldValidation', 'Strict')])

    def delete_object(self, path, preconditions=None):
        """Delete the object at path, its dependents in the background; with preconditions ({uid, resourceVersion})
        only if it still matches them, else APIError 409."""
        body = {'apiVersion': 'v1', 'kind': 'DeleteOptions', 'propagationPolicy': 'Background'}
        if preconditions:
            body['preconditions'] = preconditions
        if self.dry_run:
            # The API server reads a DELETE's options from its body when there is one, ignoring ?dryRun=All.
            body['dryRun'] = ['All']
        return self._request('DELETE', path, body=body, write=True)

    def _list(self, path, label_selector=None, page_size=DEFAULT_PAGE_SIZE, field_selector=None, view=NODE_FULL,
              namespace=None):
        """Every item of a list, page by page (limit and continue), so no single response holds all; in a smaller
        view than full objects (_VIEWS) if one is given, else full objects, saying so once. namespace: the one path
        lists in, which names the items of a Table read without their objects."""
        for items, _token in self._pages(path, label_selector, page_size, field_selector, view, namespace):
            yield from items

    def _pages(self, path, label_selector, page_size, field_selector=None, view=NODE_FULL, namespace=None):
        """The pages of a list as _list() reads them: (the page's items, the continue token, '' after the last)."""
        with cyclic_gc_paused():
            token = None
            params = {'field_selector': field_selector} if field_selector else {}
            maps = _PROTOBUF_MAPS.get(view)
            while True:
                if view in _VIEWS:
                    # New each time: the client adds to both.
                    params['header_params'] = {'Accept': _VIEWS[view][0]}
                    if _VIEWS[view][2]:
                        params['query_params'] = [('includeObject', _VIEWS[view][2])]
                page = self._request('GET', path, label_selector=label_selector or None, limit=page_size,
                                     _continue=token, protobuf_maps=maps, **params)
                items, in_view = _view_items(page, view, namespace)
                if not in_view and view not in self._warned_full_views:
                    self._warned_full_views.add(view)
                    self._module.warn('the API server answered GET %s with full objects (%s), not the %s view asked for '
                                      '(Accept: %s): reading full objects, more data, the same result'
                                      % (path, page.get('kind'), view, _VIEWS[view][0]))
                token = (page.get('metadata') or {}).get('continue') or ''
                yield items, token
                if not token:
                    return

    def list_nodes(self, label_selector=None, page_size=None, view=NODE_FULL):
        """Nodes, optionally label-selected, as a generator over paginated lists, in view: NODE_FULL (whole Node
        dicts), NODE_METADATA (metadata only: protobuf.object_meta), NODE_LABELS (that without annotations) or
        NODE_INFO (NODE_LABELS, and the status.nodeInfo fields osImage, kernelVersion, containerRuntimeVersion and
        the Ready condition of the Node Table's cells: see node_from_table_row). page_size: nodes per request, by
        default FULL_NODE_PAGE_SIZE for full Nodes, DEFAULT_PAGE_SIZE for metadata; NODE_INFO: see _node_info."""
        if view == NODE_INFO:
            return self._node_info(label_selector, page_size)
        return self._list(NODES, label_selector, page_size or (FULL_NODE_PAGE_SIZE if view == NODE_FULL
                                                               else DEFAULT_PAGE_SIZE), view=view)

    def _node_info(self, label_selector, page_size):
        """NODE_INFO. First the Node Table with each row's metadata (NODE_ROWS), page_size rows a request, by default
        a first page of SMALL_FLEET: a fleet that fits is read in that one request. A page_size given is the size of
        every page. Else, on a larger fleet, the rest is read in two requests, each answered from the API server's
        cache: the Node Table's cells, about 200 bytes a node, then the nodes' metadata without annotations
        (NODE_LABELS), each node with the status of its cells. Two reads cost less than the Table with each row's
        metadata: the API server encodes that in JSON only, and JSON costs it and this process twice the CPU of
        protobuf; pages after the first come from etcd. A node that the metadata lists and the cells do not (created
        in between) is read whole; one the cells list and the metadata do not (deleted in between) is left out, as
        one list would."""
        pages = self._pages(NODES, label_selector, page_size or SMALL_FLEET, view=NODE_ROWS)
        first, token = next(pages, ([], ''))
        yield from first
        if page_size or not token or NODE_ROWS in self._warned_full_views:
            # Explicit pages, one page, or a server that serves no Table and answered with full Nodes (and said so).
            for items, _token in pages:
                yield from items
            return
        pages.close()
        read = set(node['metadata']['name'] for node in first)
        del first
        statuses = dict((node['metadata']['name'], node['status'])
                        for node in self._list(NODES, label_selector, ONE_PAGE, view=NODE_CELLS))
        for node in self._list(NODES, label_selector, ONE_PAGE, view=NODE_LABELS):
            name = node['metadata']['name']
            if name in read:
                continue
            if 'status' in node:
                # A server that answered the metadata request with full Nodes.
                yield node
            elif name in statuses:
                node['status'] = statuses[name]
                yield node
            else:
                node = self.read_optional('%s/%s' % (NODES, name))[0]
                if node is not None:
                    yield node

    def read_node(self, name):
        return self._request('GET', '%s/%s' % (NODES, name))

    def patch_node_labels(self, name, labels, resource_version):
        """Set labels (a None value removes one) if the node is still at resource_version (else 409).

        Returns the node as stored (or as it would be, in check mode).
        """
        body = {'metadata': {'labels': labels, 'resourceVersion': resource_version}}
        return self._request('PATCH', '%s/%s' % (NODES, name), body=body,
                             content_type='application/merge-patch+json', write=True)

    def read_secret(self, namespace, name):
        return self._request('GET', '/api/v1/namespaces/%s/secrets/%s' % (namespace, name))

    def list_daemonsets(self, namespace, label_selector=None):
        return list(self._list(DAEMONSETS % namespace, label_selector))

    def list_daemonsets_named(self, name):
        """The DaemonSets of that name, in every namespace."""
        return list(self._list('/apis/apps/v1/daemonsets', field_selector='metadata.name=%s' % name))

    def apply_daemonset(self, daemonset):
        """apply_object() at the DaemonSet's fixed path (no discovery); returns it as stored."""
        metadata = daemonset['metadata']
        return self.apply_object('%s/%s' % (DAEMONSETS % metadata['namespace'], metadata['name']), daemonset)

    def delete_daemonset(self, namespace, name, uid, resource_version):
        """Delete a DaemonSet only if it is still the object read (uid) in the state read (resourceVersion).

        Raises APIError with status 409 when it changed since (for instance its status now counts a pod).
        """
        return self.delete_object('%s/%s' % (DAEMONSETS % namespace, name),
                                  {'uid': uid, 'resourceVersion': resource_version})

    def list_node_pods(self, node):
        """The pods bound to a node, in every namespace."""
        return list(self._list(PODS, field_selector='spec.nodeName=%s' % node))

    def evict_pod(self, eviction):
        """POST a policy/v1 Eviction; APIError 429 when a PodDisruptionBudget allows no disruption now."""
        metadata = eviction['metadata']
        path = '/api/v1/namespaces/%s/pods/%s/eviction' % (metadata['namespace'], metadata['name'])
        return self._request('POST', path, body=eviction, write=True)

    def list_pod_disruption_budgets(self, namespace):
        return list(self._list('/apis/policy/v1/namespaces/%s/poddisruptionbudgets' % namespace))

    def patch_node(self, name, body):
        """A JSON merge patch of a node (metadata labels and annotations, spec.unschedulable; None removes)."""
        return self._request('PATCH', '%s/%s' % (NODES, name), body=body,
                             content_type='application/merge-patch+json', write=True)

    def list_pods(self, namespace, label_selector=None, view=POD_FULL):
        """The pods of a namespace, in view: POD_FULL (whole Pod dicts), POD_READINESS (metadata, node and
        readiness, from a Table: see pod_from_table_row) or POD_CELLS (name, namespace, node and readiness, no
        labels: the caller knows them from its label_selector)."""
        return list(self._list('/api/v1/namespaces/%s/pods' % namespace, label_selector, view=view,
                               page_size=POD_CELLS_PAGE_SIZE if view == POD_CELLS else DEFAULT_PAGE_SIZE,
                               namespace=namespace))

    def delete_pod(self, namespace, name, uid):
        """Delete a pod only if it is still the pod read (uid), else APIError 409."""
        return self.delete_object('/api/v1/namespaces/%s/pods/%s' % (namespace, name), {'uid': uid})

    def list_revisions(self, namespace, label_selector=None):
        """ControllerRevisions: a DaemonSet's carry its pods' labels (and so its selector)."""
        return list(self._list('/apis/apps/v1/namespaces/%s/controllerrevisions' % namespace, label_selector))

    def list_jobs(self, namespace, label_selector=None):
        return list(self._list('/apis/batch/v1/namespaces/%s/jobs' % namespace, label_selector))

    def read_optional(self, path):
        """(the object at path or None, whether the API server serves its API): an absent object is no error."""
        try:
            return self._request('GET', path), True
        except APIError as error:
            if error.status != 404:
                raise
            # A missing object is named in the Status details; an unserved API path has no details.
            return None, bool(error.details.get('name'))

    def read_dtk_imagestream(self):
        """(the ImageStream openshift/driver-toolkit, None), or (None, why it is absent).

        Why: dtk.NOT_OPENSHIFT when the API server does not serve image.openshift.io, dtk.STREAM_MISSING
        when it does but the stream does not exist.
        """
        stream, served = self.read_optional(DTK_IMAGESTREAM_PATH)
        return stream, None if stream else STREAM_MISSING if served else NOT_OPENSHIFT

    def list_mirror_sets(self):
        """{'idms': [...], 'itms': [...], 'icsp': [...]}: the cluster's mirror set objects, [] for an absent API."""
        found = {}
        for argument, path in MIRROR_SET_PATHS:
            try:
                found[argument] = list(self._list(path))
            except APIError as error:
                if error.status != 404:
                    raise
                found[argument] = []
        return found


class GPUModule(AnsibleK8SModule):
    """kubernetes.core's module class, proxying also what dtk_image_lookup needs to run `oc`."""

    def get_bin_path(self, *args, **kwargs):
        return self._module.get_bin_path(*args, **kwargs)

    def run_command(self, *args, **kwargs):
        return self._module.run_command(*args, **kwargs)


def run_module(argument_spec, task, **module_options):
    """Run a module whose work is task(module, api) -> result; every result carries api_requests and
    api_response_bytes.

    argument_spec: the module's own options; kubernetes.core's connection options and api_retry_seconds (doc
    fragment accelerators.gpu.api_retry) are added.
    """
    module_worker.forward()
    spec = dict(AUTH_ARG_SPEC, api_retry_seconds=dict(
        type='float', default=retry.RETRY_SECONDS, fallback=(env_fallback, [retry.RETRY_SECONDS_ENV])))
    spec.update(argument_spec)
    module = GPUModule(argument_spec=spec, supports_check_mode=True, **module_options)
    api = None
    try:
        api = ClusterAPI(module)
        result = task(module, api)
    except TaskError as error:
        module.fail_json(msg=str(error), **dict(_api_report(module, api), **error.result))
    except APIError as error:
        module.fail_json(msg=str(error), status=error.status, **_api_report(module, api))
    with cyclic_gc_paused():  # exit_json copies the result to hide no_log values, then ends the process
        module.exit_json(**dict(_api_report(module, api), **result))


def _api_report(module, api):
    """What every result says of the module's requests: api_requests, api_response_bytes, and api_faults when
    they met faults, which a warning then says once (a run that met none warns of nothing)."""
    if api is None:
        return {'api_requests': {}, 'api_response_bytes': {}}
    report = {'api_requests': api.request_counts(), 'api_response_bytes': api.response_bytes()}
    if api.faults:
        report['api_faults'] = {'faults': dict(api.faults), 'retried': api.retried, 'given_up': api.given_up,
                                'seconds': round(api.retry_seconds, 1)}
        module.warn(api.fault_summary())
    return report
