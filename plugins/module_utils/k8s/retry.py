# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which failed requests to the API server are tried again, how long to wait before each try, and how to say it.

An API server restarts during every OpenShift control-plane upgrade and, under load, answers 429 (API Priority and
Fairness) and 5xx; a rollout that runs for hours meets both. ClusterAPI._request asks these pure functions:

- status_fault(), transport_fault(): what went wrong, as a short kind: the HTTP status of a retryable answer
  ('429', '500', '502', '503', '504'), or REFUSED, RESET or TIMEOUT for a connection that failed; None for an
  answer that is an answer (403, 404, 409, 422..., a 429 that a PodDisruptionBudget causes: an eviction the
  budget holds back, for the caller to decide, and a 500 refusing an applied object that does not fit its schema),
  or a transport error that a retry would not cure (a TLS error).
- retryable(): whether the request may be sent again. A read, a server-side apply, a JSON merge patch (it sets
  absolute values: applied twice it is applied once) and a delete (a delete whose object is gone afterwards is
  done) are idempotent and retried on every fault. Anything else (a POST: an eviction, a create) only when the API
  server certainly did not act on it: the connection was refused, or it answered 429 before doing anything
  (kubectl drain retries an eviction so).
- delay(): the wait before the next try, Retry-After when the API server gave one, else exponential from
  BACKOFF_FIRST seconds, doubled each time, at most BACKOFF_CAP; the tries end when the next one would start after
  the request's deadline (the module's api_retry_seconds after its first try, RETRY_SECONDS unless the user set it,
  or the end of the caller's wait, the sooner).
- summary(): the one line a module says when it met faults.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

RETRY_STATUSES = (429, 500, 502, 503, 504)
REFUSED, RESET, TIMEOUT = 'refused', 'reset', 'timeout'
# Seconds a request is tried for, from its first try (an API server restart takes seconds to a minute or two): the
# default of every module's api_retry_seconds (doc fragment accelerators.gpu.api_retry).
RETRY_SECONDS = 120
RETRY_SECONDS_ENV = 'ACCELERATORS_GPU_API_RETRY_SECONDS'
BACKOFF_FIRST, BACKOFF_CAP = 0.5, 8.0
IDEMPOTENT_METHODS = ('GET', 'HEAD', 'DELETE')
# Patches that set values, whatever the object's state: server-side apply and JSON merge patch.
IDEMPOTENT_PATCHES = ('application/apply-patch+yaml', 'application/merge-patch+json')
DISRUPTION_BUDGET_CAUSE = 'DisruptionBudget'
# A 5xx that answers the request itself, not the server's state: the API server answers a server-side apply whose
# object does not fit its kind's schema (under fieldValidation=Strict an unknown field, for a custom resource) with
# 500 "failed to create typed patch object (...): .spec.x: field not declared in schema". Sent again, it fails again.
REQUEST_REFUSED_AS_500 = ('failed to create typed patch object',)
_FAULT_WORDS = ((REFUSED, 'refused connections'), (RESET, 'reset connections'), (TIMEOUT, 'timed-out requests'))


def _chain(error):
    """The error and the errors it wraps (urllib3's reason, Python's __cause__ and __context__), outermost first."""
    seen = []
    while error is not None and not any(error is other for other in seen):
        seen.append(error)
        reason = getattr(error, 'reason', None)
        error = reason if isinstance(reason, BaseException) else (error.__cause__ or error.__context__)
    return seen


def transport_fault(error):
    """REFUSED, RESET or TIMEOUT for an exception of a request that got no HTTP answer (urllib3's, with the OS
    error it wraps), None when a retry would not help (a TLS or protocol error: a wrong address or CA). urllib3,
    under the kubernetes client, itself tries a request again a few times on a failed connection and on a 429 or 503
    with Retry-After, and then raises ResponseError('too many 429 error responses'): that status is the fault."""
    names = [type(link).__name__ for link in _chain(error)]
    text = ' '.join(str(link) for link in _chain(error))
    too_many = re.search(r'too many (\d{3}) error responses', text)
    if too_many:
        return status_fault(int(too_many.group(1)))
    if 'ConnectionRefusedError' in names or 'NewConnectionError' in names or 'Connection refused' in text:
        return REFUSED
    if any(name in names for name in ('ReadTimeoutError', 'ConnectTimeoutError', 'TimeoutError', 'timeout')):
        return TIMEOUT
    if any(name in names for name in ('ConnectionResetError', 'RemoteDisconnected', 'BrokenPipeError',
                                      'ConnectionAbortedError', 'IncompleteRead', 'ProtocolError')):
        return RESET
    return None


def status_fault(status, details=None, message=None):
    """The fault of an HTTP answer's status, Status details and message, None for an answer that is not one (a 429
    that a PodDisruptionBudget causes is the eviction's answer; a 500 refusing an object that does not fit its
    schema is the apply's)."""
    if status not in RETRY_STATUSES or (status == 429 and held_by_budget(details)):
        return None
    if status == 500 and any(words in (message or '') for words in REQUEST_REFUSED_AS_500):
        return None
    return str(status)


def held_by_budget(details):
    """Whether a 429's Status details name a PodDisruptionBudget (an eviction the budget holds back)."""
    return any(DISRUPTION_BUDGET_CAUSE in ((cause or {}).get('reason'), (cause or {}).get('type'))
               for cause in (details or {}).get('causes') or [])


def idempotent(method, content_type=None):
    method = method.upper()
    return method in IDEMPOTENT_METHODS or (method == 'PATCH' and content_type in IDEMPOTENT_PATCHES)


def retryable(method, content_type, fault):
    """Whether a request that met fault (status_fault's or transport_fault's kind, None for none) may be sent again."""
    if fault is None:
        return False
    return idempotent(method, content_type) or fault in (REFUSED, '429')


def retry_after(value):
    """The seconds of a Retry-After header, None when absent or not a number of seconds."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None


def delay(attempt, after=None):
    """Seconds to wait before try attempt + 1 (attempt: the tries made, from 1); after: the answer's Retry-After."""
    if after is not None:
        return after
    return min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** (attempt - 1))


def next_try(now, attempt, deadline, after=None):
    """The seconds to sleep before the next try, or None when it would start after the deadline."""
    wait = delay(attempt, after)
    return wait if now + wait <= deadline else None


def fault_words(faults):
    """A Counter of faults in words, most frequent kind of answer first: '503 x3, 429 x1 and refused connections x2'."""
    statuses = sorted((kind for kind in faults if kind.isdigit()), key=lambda kind: (-faults[kind], kind))
    parts = []
    if statuses:
        parts.append('answered %s' % ', '.join('%s x%d' % (kind, faults[kind]) for kind in statuses))
    parts.extend('%s x%d' % (words, faults[kind]) for kind, words in _FAULT_WORDS if faults.get(kind))
    return ' and '.join(', '.join(parts).rsplit(', ', 1)) if len(parts) > 1 else ''.join(parts)


def summary(host, faults, retries, seconds, given_up=0):
    """The line a module says once when its requests met faults: what the API server at host did, the requests
    retried and the seconds spent on them."""
    line = 'the API server at %s %s; retried %d request(s), %.1f s' % (host, fault_words(faults), retries, seconds)
    if given_up:
        line += '; %d request(s) failed after their retries' % given_up
    return line
