# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """What accelerators.gpu.k8s, k8s_info and k8s_drain add to the kubernetes.core module of their name
    (plugins/plugin_utils/kubernetes_core_retry.py)."""

    DOCUMENTATION = r'''
attributes:
  action:
    description: An action plugin of this collection runs, on the controller, the C(kubernetes.core) module's action.
    support: full
  async:
    description: As the collection's modules, it does not run asynchronously.
    support: none
notes:
  - The module is the C(kubernetes.core) module of the same name, run through that module's action with the task's
    options, which it checks and documents; only O(api_retry_seconds) is this collection's. Its result is that
    module's result.
  - While the run fails on a fault the API server recovers from (429, 500, 502, 503, 504, a refused, reset or
    timed-out connection), the module runs again, with the backoff of this collection's modules (from 0.5 s, doubled
    each time up to 8 s), until O(api_retry_seconds) after the first fault. A whole run is tried again, not a
    request; the C(kubernetes.core) modules declare a state and read the cluster before they write, so a run after a
    fault finds what the one before did and does the rest. Any other failure (403, 404, 409, 422, a 429 of a
    PodDisruptionBudget, a wait that timed out) is the result at once.
  - A result after faults says so in a warning and in RV(api_faults); a run that still failed says its tries in its
    message.
  - The roles and playbooks of this collection reach the API server through this collection's modules and
    M(accelerators.gpu.k8s), M(accelerators.gpu.k8s_info) and M(accelerators.gpu.k8s_drain) only, so that every API
    call of a run outlasts an API server restart. Their connection settings come from the action group
    C(accelerators.gpu.cluster), as for every module of the collection.
'''
