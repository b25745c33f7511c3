# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """Where a module reading the GPU nodes' health finds the DCGM exporter's fields (health.read.ARGUMENT_SPEC)."""

    DOCUMENTATION = r'''
options:
  prometheus_url:
    description:
      - A Prometheus (or Thanos querier) that scrapes the DCGM exporters, for example
        C(https://thanos-querier.openshift-monitoring.svc:9091). The fields C(DCGM_FI_DEV_XID_ERRORS),
        C(DCGM_FI_DEV_ROW_REMAP_FAILURE) and C(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS) are read with one instant
        query each (C(GET <url>/api/v1/query)), each series matched to its node by its C(Hostname) label. Prometheus
        not answering fails the module.
      - Omitted, each ready DCGM exporter pod of O(namespace) is read on its own page (C(:9400/metrics)) through the
        API server's pod proxy, once; an exporter that does not answer leaves its node's XIDs unread, which the
        summary says (C(metrics_unread)), and its node's other signals are read.
    type: str
  prometheus_token:
    description: A bearer token for O(prometheus_url) (OpenShift's Thanos querier asks for one).
    type: str
  prometheus_validate_certs:
    description: Whether the certificate of O(prometheus_url) is verified.
    type: bool
    default: true
'''
