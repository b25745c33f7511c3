# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The errors of the API layer: a request that failed (APIError), and a module that must fail with a message and
what it found until then (TaskError), which run_module (runner.module) turns into the module's failure."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class APIError(Exception):
    """A request that failed. status: the HTTP status (None when the server was not reached); details: the
    details of the API server's Status answer ({} when it gave none, as for a path it does not serve); fault: the
    retry kind of a fault that retries did not outlast (the API server lost or overloaded), None for an answer."""

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
