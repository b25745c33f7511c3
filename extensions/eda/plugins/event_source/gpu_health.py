# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An ansible-rulebook event source: the GPU nodes' health, polled with the collection's health reader (what the
gpu_health module returns), one event per node whose faults are new or changed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
short_description: One event per GPU node whose faults are new or changed
description:
  - Polls the health of the cluster's GPU nodes every O(interval) seconds, as M(accelerators.gpu.gpu_health) reads it
    (allocatable against capacity C(nvidia.com/gpu), the GPU health monitors' node conditions, and the DCGM exporter's
    XID and row-remap fields from O(prometheus_url) or, without one, from each exporter pod through the API server).
  - Puts one event C({"gpu_health": <the node's health record>, "cluster": <cluster>}) per node whose faults are new or
    changed since the last poll. A node's faults are told apart by their source, action, XID and GPU (UUID, PCI bus
    ID, index), not by their message; a node seen healthy is forgotten, so a fault that comes back is an event again.
    Application errors (action V(none)) are events too, for rules that report them.
  - A poll that fails (the API server or Prometheus unreachable) is logged and tried again at the next interval; the
    faults seen before it stay seen.
  - The connection is kubernetes.core's, as the collection's modules take it: O(kubeconfig) and O(context), else the
    C(K8S_AUTH_*) variables, the in-cluster configuration or C(~/.kube/config).
options:
  cluster:
    description: The cluster's name in each event (the inventory host of the cluster in the collection's playbooks).
    type: str
    default: localhost
  kubeconfig:
    description: Path of the kubeconfig of the cluster.
    type: str
  context:
    description: The kubeconfig's context to use.
    type: str
  interval:
    description: Seconds between two polls.
    type: float
    default: 30
  namespace:
    description: The namespace of the GPU stack, where the DCGM exporter pods are read without O(prometheus_url).
    type: str
    default: nvidia-gpu-operator
  label_selector:
    description: Label selector of the nodes read; every GPU node when empty.
    type: str
  prometheus_url:
    description: A Prometheus (or Thanos querier) scraping the DCGM exporters, where the XIDs are read.
    type: str
  prometheus_token:
    description: A bearer token for O(prometheus_url).
    type: str
  prometheus_validate_certs:
    description: Whether the certificate of O(prometheus_url) is verified.
    type: bool
    default: true
  api_retry_seconds:
    description: Seconds a request to the API server is retried for through faults (429, 5xx, lost connections).
    type: float
    default: 30
'''

EXAMPLES = r'''
- name: Remediate failing GPUs
  hosts: localhost
  sources:
    - accelerators.gpu.gpu_health:
        kubeconfig: /etc/eda/kubeconfig
        cluster: gpu-prod-1
        interval: 30
        prometheus_url: https://thanos-querier.openshift-monitoring.svc:9091
  rules:
    - name: Report a failing GPU
      condition: event.gpu_health.action != "none"
      action:
        debug:
          msg: "{{ event.cluster }} {{ event.gpu_health.node }}: {{ event.gpu_health.action }}"
'''

import asyncio
import logging

from ansible_collections.accelerators.gpu.plugins.module_utils.health.read import read_gpu_nodes, read_health
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.api import ClusterAPI
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.errors import APIError, TaskError

LOG = logging.getLogger(__name__)
# What tells one fault of a node from another: not its message, which counts what changes with every poll.
FAULT_KEYS = ('source', 'action', 'xid', 'gpu_uuid', 'pci_bus_id', 'gpu_index')
# The options and their defaults (DOCUMENTATION's); the connection's go to kubernetes.core as they are.
DEFAULTS = {'cluster': 'localhost', 'kubeconfig': None, 'context': None, 'interval': 30.0,
            'namespace': 'nvidia-gpu-operator', 'label_selector': None, 'prometheus_url': None,
            'prometheus_token': None, 'prometheus_validate_certs': True, 'api_retry_seconds': 30.0}


def settings(args):
    """The source's options: args over DEFAULTS, numbers as numbers. ValueError naming an option it does not know or
    a number that is not one above 0."""
    unknown = sorted(set(args) - set(DEFAULTS))
    if unknown:
        raise ValueError('accelerators.gpu.gpu_health: unknown options %s; known: %s' % (
            ', '.join(unknown), ', '.join(sorted(DEFAULTS))))
    options = dict(DEFAULTS, **dict((key, value) for key, value in args.items() if value is not None))
    for name in ('interval', 'api_retry_seconds'):
        try:
            options[name] = float(options[name])
        except (TypeError, ValueError):
            raise ValueError('accelerators.gpu.gpu_health: %s is %r, not a number of seconds' % (name, options[name]))
    if options['interval'] <= 0:
        raise ValueError('accelerators.gpu.gpu_health: interval is %s: the seconds between polls are above 0'
                         % options['interval'])
    return options


def fault_set(record):
    """The faults of a health record, each by FAULT_KEYS, as a set: equal for the same faults however reported."""
    return frozenset(tuple(fault.get(key) for key in FAULT_KEYS) for fault in record['faults'])


def changed_faults(seen, health):
    """(the health records whose faults are new or changed since seen, the fault sets to remember next): seen is
    {node: fault_set} of the nodes with faults at the last poll; a node without faults now is forgotten."""
    now = dict((record['node'], fault_set(record)) for record in health if record['faults'])
    return [record for record in health if record['node'] in now and seen.get(record['node']) != now[record['node']]], now


def event(record, cluster):
    return {'gpu_health': record, 'cluster': cluster}


class Connection:
    """What the collection's ClusterAPI asks of a module, for a process that is none: the options, check mode (off:
    the source only reads), and where warnings go."""

    check_mode = False
    # kubernetes.core's get_api_client() asks for these of a module.
    server_side_dry_run = False

    def __init__(self, params):
        self.params = params

    def warn(self, message):
        LOG.warning(message)

    def requires(self, name, version, reason):
        """kubernetes.core asks for a kubernetes client of version for some options (in-memory kubeconfigs,
        no_proxy): the collection supports only clients newer than every such version."""


class HealthReader:
    """Reads the GPU nodes' health records; its ClusterAPI made at the first read that reaches the API server, then
    kept (the client's discovery and connections reused)."""

    def __init__(self, options):
        self.options = options
        self.api = None

    def __call__(self):
        if self.api is None:
            self.api = ClusterAPI(Connection(self.options))
        health, _counts = read_health(self.api, self.options, read_gpu_nodes(self.api, self.options['label_selector']))
        return health


async def watch(queue, read, cluster, interval):
    """Polls read() (blocking: in a thread) every interval seconds, putting an event for each node whose faults are
    new or changed."""
    seen = {}
    while True:
        try:
            health = await asyncio.to_thread(read)
        except (APIError, TaskError) as error:
            LOG.warning('accelerators.gpu.gpu_health: cannot read the GPU nodes of %s: %s', cluster, error)
        else:
            records, seen = changed_faults(seen, health)
            for record in records:
                await queue.put(event(record, cluster))
        await asyncio.sleep(interval)


async def main(queue, args):
    options = settings(args)
    await watch(queue, HealthReader(options), options['cluster'], options['interval'])


if __name__ == '__main__':
    # Prints the events of the cluster of KUBECONFIG (or the in-cluster one), as ansible-rulebook would get them.
    class PrintQueue:
        async def put(self, item):
            print(item)

    asyncio.run(main(PrintQueue(), {}))
