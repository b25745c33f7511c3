# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The client through which this collection's modules talk to the Kubernetes API server: one request, sent, retried
through faults as retry says, decoded and counted (Client). The typed calls the modules make are api.ClusterAPI's.

The connection (module arguments, K8S_AUTH_* variables, kubeconfig, in-cluster config) is kubernetes.core's:
the client comes from its get_api_client(). Only the objects of apply_object() and delete_object(), of any kind a
manifest names, are found through the client's (cached) discovery. Responses are decoded to plain dicts: the dynamic
client's ResourceInstance wrapping costs seconds and hundreds of MiB on a list of thousands of nodes. Every request
accepts a gzip-compressed answer (the API server compresses those over 128 KB). The requests sent, by verb, and the
bytes of the answers, as received and as decoded, are counted here and reported in every module result
(runner.module.run_module).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import contextlib
import gc
import inspect
import json
import time

from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import CoreException

from . import protobuf, retry
from .errors import APIError, TaskError
from .views import NODE_FULL, PROTOBUF_MAPS, VIEWS, view_items

FIELD_MANAGER = 'accelerators.gpu'
DEFAULT_PAGE_SIZE = 500
# Bytes of a protobuf answer read at a time, decompressed.
_STREAM_CHUNK = 1 << 18

# Every HTTP request this process sends through the kubernetes client, by verb.
_REQUEST_COUNTS = collections.Counter()
# Bytes of the answers to the Clients' requests: 'wire' as received (compressed or not), 'json' once decompressed
# (JSON, or protobuf for node metadata).
_RESPONSE_BYTES = collections.Counter()


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


def _count_requests(rest_client):
    """Count requests by verb at the kubernetes client's RESTClientObject.request, every request's last stop in every
    client version (ApiClient.request before client 34, ApiClient.call_api after, both send through it with the
    headers by keyword), and accept a gzip-compressed answer to each (urllib3 decodes it).

    Wrapped at the class, once per process, so that the discovery requests kubernetes.core makes while it
    builds the client count too; a Client reports the difference since it was created. A client whose request
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


def describe(obj):
    """An object in words, for messages: kind namespace/name, or kind name."""
    metadata = obj.get('metadata') or {}
    return '%s %s%s' % (obj.get('kind'), '%s/' % metadata['namespace'] if metadata.get('namespace') else '',
                        metadata.get('name'))


class Client:
    """Requests to the API server at any path: reads, lists page by page, server-side applies and deletes.

    In check mode every write is a server-side dry run (dryRun=All): the API server validates and
    admits it, and stores nothing.
    """

    def __init__(self, module, clock=time.monotonic, sleep=time.sleep):
        # The client is imported here, not with this file: a module process that a module worker serves never
        # needs it (runner.worker).
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
        """The answer to a request, decoded: JSON, or a protobuf PartialObjectMetadataList (protobuf) with the
        string maps of its objects' metadata that protobuf_maps names (by default labels and annotations).

        A request that meets a fault is tried again as retry says, until its deadline; a DELETE whose object
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
        if (response.headers.get('Content-Type') or '').startswith('text/plain'):
            # A pod's own page through the API server's proxy (a DCGM exporter's metrics).
            return data.decode('utf-8', 'replace')
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
        view than full objects (views.VIEWS) if one is given, else full objects, saying so once. namespace: the one path
        lists in, which names the items of a Table read without their objects."""
        for items, _token in self._pages(path, label_selector, page_size, field_selector, view, namespace):
            yield from items

    def _pages(self, path, label_selector, page_size, field_selector=None, view=NODE_FULL, namespace=None):
        """The pages of a list as _list() reads them: (the page's items, the continue token, '' after the last)."""
        with cyclic_gc_paused():
            token = None
            params = {'field_selector': field_selector} if field_selector else {}
            maps = PROTOBUF_MAPS.get(view)
            while True:
                if view in VIEWS:
                    # New each time: the client adds to both.
                    params['header_params'] = {'Accept': VIEWS[view][0]}
                    if VIEWS[view][2]:
                        params['query_params'] = [('includeObject', VIEWS[view][2])]
                page = self._request('GET', path, label_selector=label_selector or None, limit=page_size,
                                     _continue=token, protobuf_maps=maps, **params)
                items, in_view = view_items(page, view, namespace)
                if not in_view and view not in self._warned_full_views:
                    self._warned_full_views.add(view)
                    self._module.warn('the API server answered GET %s with full objects (%s), not the %s view asked for '
                                      '(Accept: %s): reading full objects, more data, the same result'
                                      % (path, page.get('kind'), view, VIEWS[view][0]))
                token = (page.get('metadata') or {}).get('continue') or ''
                yield items, token
                if not token:
                    return

    def read_once(self, path):
        """The answer at path, tried once: for a pod's page through the API server's proxy, whose failure is the pod's
        (not answering, not ready), so neither retried nor counted among the API server's faults."""
        response, failure = self._send('GET', path, None, {})
        if failure is not None:
            raise failure[0]
        return self._decode('GET', path, response, None)

    def read_optional(self, path):
        """(the object at path or None, whether the API server serves its API): an absent object is no error."""
        try:
            return self._request('GET', path), True
        except APIError as error:
            if error.status != 404:
                raise
            # A missing object is named in the Status details; an unserved API path has no details.
            return None, bool(error.details.get('name'))
