# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How every module of this collection runs (run_module): its options (its own, kubernetes.core's connection options
and api_retry_seconds), its ClusterAPI, and its result, which always says what the module asked of the API server
(api_requests, api_response_bytes, and api_faults when requests met faults). A module process that the module worker
(worker) can serve hands its run over to it first."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.basic import env_fallback
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule

from ..k8s import retry
from ..k8s.api import ClusterAPI
from ..k8s.client import cyclic_gc_paused
from ..k8s.errors import APIError, TaskError
from . import worker as module_worker


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
