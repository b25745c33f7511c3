# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading the GPU nodes' health (records): their Nodes, the ResourceSlices of nodes in DRA mode, and the DCGM
exporter's fields from a Prometheus query URL or, without one, from each exporter's page through the API server's
pod proxy; and the gpu_health module's work (run).

The readers take a k8s.api.ClusterAPI (or any object with the same methods).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible.module_utils.six.moves.urllib.parse import urlencode
from ansible.module_utils.urls import open_url

from ..dra import API as RESOURCE_API, DRIVER as DRA_DRIVER
from ..k8s.errors import APIError, TaskError
from ..k8s.views import NODE_FULL, POD_CELLS
from ..nodes.facts import node_facts
from .metrics import FIELDS, HOSTNAME, parse_text, parse_vector
from .records import dra_gpus, in_dra_mode, records, summary, unhealthy

# The stack's DCGM exporter pods, and where they serve their metrics.
EXPORTER_SELECTOR = 'app.kubernetes.io/managed-by=accelerators.gpu,app.kubernetes.io/component=nvidia-dcgm-exporter'
EXPORTER_PORT = 9400
# Seconds a Prometheus query may take.
PROMETHEUS_TIMEOUT = 30
# The options of the modules that read the health (gpu_health, stack_status): doc fragment accelerators.gpu.gpu_health.
ARGUMENT_SPEC = dict(
    prometheus_url=dict(type='str'),
    prometheus_token=dict(type='str', no_log=True),
    prometheus_validate_certs=dict(type='bool', default=True),
)


def read_exporters(api, namespace, nodes, pods=None):
    """({node: its GPUs' samples}, {node: why its exporter could not be read}) of the GPU nodes named (nodes), from
    the page of each node's exporter pod through the API server's pod proxy, each tried once (a pod not ready does
    not answer, which says why). pods: the exporter pods (EXPORTER_SELECTOR) where the caller read them already, in
    any view with their name and node."""
    if pods is None:
        pods = api.list_pods(namespace, EXPORTER_SELECTOR, view=POD_CELLS)
    samples, unread = {}, dict((node, 'no DCGM exporter pod') for node in nodes)
    for pod in pods:
        node, name = (pod.get('spec') or {}).get('nodeName'), pod['metadata']['name']
        if node not in unread or node in samples:
            continue
        try:
            page = api.read_once('/api/v1/namespaces/%s/pods/%s:%d/proxy/metrics' % (namespace, name, EXPORTER_PORT))
            if not isinstance(page, str):
                raise ValueError('its page is not in the text format of Prometheus')
            samples[node] = parse_text(page)
        except (APIError, ValueError) as error:
            unread[node] = 'DCGM exporter pod %s: %s' % (name, error)
            continue
        del unread[node]
    return samples, unread


def read_prometheus(url, nodes, token=None, validate_certs=True):
    """({node: its GPUs' samples}, {node: why none}) of the GPU nodes named (nodes), from a Prometheus instant query
    of each field (GET <url>/api/v1/query), by the series' Hostname. TaskError where Prometheus does not answer."""
    samples = dict((node, []) for node in nodes)
    headers = {'Accept': 'application/json'}
    if token:
        headers['Authorization'] = 'Bearer %s' % token
    for name in FIELDS:
        query = '%s/api/v1/query?%s' % (url.rstrip('/'), urlencode({'query': name}))
        try:
            answer = json.loads(open_url(query, headers=headers, validate_certs=validate_certs,
                                         timeout=PROMETHEUS_TIMEOUT).read())
            found = parse_vector(answer, name)
        except Exception as error:  # urllib's, ssl's and socket's errors, and a body that is no JSON vector
            raise TaskError('prometheus_url: cannot read %s from %s: %s' % (name, url, error))
        for sample in found:
            node = sample['labels'].get(HOSTNAME)
            if node in samples:
                samples[node].append(sample)
    return samples, dict((node, 'no series in Prometheus') for node, found in samples.items() if not found)


def read_gpu_nodes(api, label_selector=None):
    """The GPU nodes (a node with an NFD NVIDIA PCI label), full."""
    return [node for node in api.list_nodes(label_selector, view=NODE_FULL) if node_facts(node)['gpu_present']]


def read_slices(api):
    """The NVIDIA DRA driver's ResourceSlices, [] where the API server serves no resource.k8s.io/v1."""
    try:
        return api.list_items(RESOURCE_API + '/resourceslices', field_selector='spec.driver=' + DRA_DRIVER)
    except APIError as error:
        if error.status == 404:
            return []
        raise


def read_health(api, params, nodes, exporter_pods=None, slices=None, every_exporter=True):
    """(the health records of the GPU nodes (Node dicts, or their status_node() and health_parts() parts), sorted by
    name; the summary, with where the DCGM fields came from and the nodes whose fields could not be read). params: the
    module's (namespace, prometheus_*); exporter_pods and slices where the caller read them already.

    every_exporter false (the status, over fleets of thousands of nodes): without a Prometheus, only the exporters of
    nodes that show a fault without them are read (a GPU short of capacity, a GPU condition True), to name the GPU and
    its XID; an XID the device plugin ignores (an application error) goes unseen elsewhere."""
    nodes = sorted(nodes, key=lambda node: node['metadata']['name'])
    names = [node['metadata']['name'] for node in nodes]
    if slices is None and any(in_dra_mode(node) for node in nodes):
        slices = read_slices(api)
    gpus = dra_gpus(slices or [])
    if params.get('prometheus_url'):
        source = 'prometheus'
        samples, unread = read_prometheus(params['prometheus_url'], names, params.get('prometheus_token'),
                                          params.get('prometheus_validate_certs', True))
    else:
        source = 'exporter'
        read = names if every_exporter else [record['node'] for record in records(nodes, dra_gpu_counts=gpus)
                                             if record['faults']]
        samples, unread = read_exporters(api, params['namespace'], read, exporter_pods) if read else ({}, {})
    health = records(nodes, samples, source, gpus)
    return health, dict(summary(health), metrics_source=source, metrics_unread=unread)


def run(module, api):
    nodes = read_gpu_nodes(api, module.params['label_selector'])
    health, counts = read_health(api, module.params, nodes)
    return {'changed': False, 'gpu_health': health, 'unhealthy': unhealthy(health), 'summary': counts}
