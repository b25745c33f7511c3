# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The retry policy: which request and fault are retried, the waits between tries, and the line a module says."""

import collections
import http.client
import socket

import pytest
import urllib3

from ansible_collections.accelerators.gpu.plugins.module_utils.k8s import retry
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.retry import REFUSED, RESET, TIMEOUT

APPLY, MERGE, JSON_PATCH = 'application/apply-patch+yaml', 'application/merge-patch+json', 'application/json-patch+json'
BUDGET = {'causes': [{'reason': 'DisruptionBudget', 'message': 'The disruption budget serve needs 1 healthy pods'}]}


@pytest.mark.parametrize('method, content_type, fault, retried', [
    # Reads, server-side apply, merge patches and deletes: on every fault.
    ('GET', None, '503', True),
    ('GET', None, RESET, True),
    ('GET', None, TIMEOUT, True),
    ('PATCH', APPLY, '500', True),
    ('PATCH', MERGE, RESET, True),
    ('DELETE', None, '504', True),
    # A JSON patch (it may add to a list) and a POST: only when the API server certainly did nothing.
    ('PATCH', JSON_PATCH, '503', False),
    ('POST', None, '503', False),
    ('POST', None, '500', False),
    ('POST', None, RESET, False),
    ('POST', None, TIMEOUT, False),
    ('POST', None, REFUSED, True),
    ('POST', None, '429', True),
    # No fault, no retry: a 404, a 409, a TLS error.
    ('GET', None, None, False),
    ('DELETE', None, None, False),
])
def test_what_is_retried(method, content_type, fault, retried):
    assert retry.retryable(method, content_type, fault) is retried


@pytest.mark.parametrize('status, details, fault', [
    (429, None, '429'), (500, None, '500'), (502, None, '502'), (503, None, '503'), (504, None, '504'),
    (404, None, None), (409, None, None), (422, None, None), (403, None, None), (401, None, None),
    # A 429 from a PodDisruptionBudget is the eviction's answer, for the caller.
    (429, BUDGET, None), (429, {'retryAfterSeconds': 1}, '429')])
def test_the_answers_that_are_faults(status, details, fault):
    assert retry.status_fault(status, details) == fault


# The API server's answer to a server-side apply of a ServiceMonitor with a misspelt field under fieldValidation=Strict
# (kube-apiserver 1.34): a 500, which sent again is the same 500.
NOT_IN_SCHEMA = ('failed to create typed patch object (sm/m; monitoring.coreos.com/v1, Kind=ServiceMonitor): '
                 '.spec.endpoints[0].intervall: field not declared in schema')


@pytest.mark.parametrize('status, message, fault', [
    (500, NOT_IN_SCHEMA, None),
    (500, 'etcdserver: request timed out', '500'),
    (500, None, '500'),
    (503, NOT_IN_SCHEMA, '503'),
])
def test_a_500_refusing_an_object_that_does_not_fit_its_schema_is_the_answer(status, message, fault):
    assert retry.status_fault(status, None, message) == fault


def test_transport_errors_are_told_apart_through_what_they_wrap():
    refused = urllib3.exceptions.MaxRetryError(None, '/api', urllib3.exceptions.NewConnectionError(
        None, 'Failed to establish a new connection: [Errno 111] Connection refused'))
    reset = urllib3.exceptions.ProtocolError('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))
    closed = urllib3.exceptions.MaxRetryError(None, '/api', urllib3.exceptions.ProtocolError(
        'Connection aborted.', http.client.RemoteDisconnected('Remote end closed connection without response')))
    timeout = urllib3.exceptions.ReadTimeoutError(None, '/api', 'Read timed out.')
    tls = urllib3.exceptions.MaxRetryError(None, '/api', urllib3.exceptions.SSLError('certificate verify failed'))
    # urllib3's own retries, spent on 429s with Retry-After.
    too_many = urllib3.exceptions.MaxRetryError(None, '/api', urllib3.exceptions.ResponseError(
        'too many 429 error responses'))
    assert [retry.transport_fault(error) for error in (refused, reset, closed, timeout, tls, too_many)] == [
        REFUSED, RESET, RESET, TIMEOUT, None, '429']
    try:
        try:
            raise socket.timeout('timed out')
        except socket.timeout as cause:
            raise urllib3.exceptions.HTTPError('read failed') from cause
    except urllib3.exceptions.HTTPError as chained:
        assert retry.transport_fault(chained) == TIMEOUT


def test_backoff_doubles_from_half_a_second_to_eight_and_retry_after_wins():
    assert [retry.delay(attempt) for attempt in range(1, 8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert retry.delay(1, after=3.0) == 3.0
    assert [retry.retry_after(value) for value in ('2', '0', '1.5', None, 'Wed, 21 Oct 2015 07:28:00 GMT', '-1')] \
        == [2.0, 0.0, 1.5, None, None, None]


def test_no_try_starts_after_the_deadline():
    assert retry.next_try(now=10.0, attempt=3, deadline=12.0) == 2.0
    assert retry.next_try(now=10.5, attempt=3, deadline=12.0) is None
    assert retry.next_try(now=10.0, attempt=1, deadline=12.0, after=5.0) is None


def test_the_tries_of_a_request_lost_for_good_end_within_the_retry_window():
    now, attempt, waits = 0.0, 1, []
    while True:
        wait = retry.next_try(now, attempt, retry.RETRY_SECONDS)
        if wait is None:
            break
        waits.append(wait)
        now += wait
        attempt += 1
    assert now <= retry.RETRY_SECONDS and waits[:5] == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert len(waits) == 18  # 15.5 s for the first five, then thirteen of 8 s: 119.5 s


def test_the_line_says_each_fault_once_with_its_count():
    faults = collections.Counter({'503': 3, '429': 1, REFUSED: 2, RESET: 1})
    assert retry.summary('https://api.example:6443', faults, 5, 4.14) == (
        'the API server at https://api.example:6443 answered 503 x3, 429 x1, refused connections x2 and reset '
        'connections x1; retried 5 request(s), 4.1 s')
    assert retry.summary('https://h', collections.Counter({TIMEOUT: 1}), 1, 30, given_up=1) == (
        'the API server at https://h timed-out requests x1; retried 1 request(s), 30.0 s; 1 request(s) failed after '
        'their retries')
    assert retry.fault_words(collections.Counter({'500': 1})) == 'answered 500 x1'
