# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The retry budget of every module that talks to the API server (module_utils/k8s/retry.py)."""

    DOCUMENTATION = r'''
options:
  api_retry_seconds:
    description:
      - Seconds a request that meets a fault the API server may recover from (429, 500, 502, 503, 504, a refused,
        reset or timed-out connection) is tried for, from its first try, with backoff; within a wait never past the
        wait's timeout. An API server restart takes seconds to a minute or two.
      - V(0) tries each request once.
      - Can also be specified via the E(ACCELERATORS_GPU_API_RETRY_SECONDS) environment variable, which the
        playbooks set from the inventory variable C(gpu_cluster_api_retry_seconds) of each cluster.
    type: float
    default: 120
'''
