# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ClusterAPI: the reads and writes this collection's modules make, at fixed paths, over the client (client.Client).

Reads go to fixed paths rather than through API discovery: every path is known, and a discovery miss (an OpenShift
API on plain Kubernetes) would make the client re-discover every API group. A list of nodes or pods comes in the
smallest view its caller reads (views), a large list of nodes in as few requests as the API server answers from its
cache (list_nodes).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .client import DEFAULT_PAGE_SIZE, Client
from .views import NODE_CELLS, NODE_FULL, NODE_INFO, NODE_LABELS, NODE_ROWS, POD_CELLS, POD_FULL

# Full Nodes of a busy cluster are 10-40 KB of JSON each, several times that once decoded: pages of 100 keep the
# memory of a module reading thousands flat.
FULL_NODE_PAGE_SIZE = 100
# Pod Table cells are about 250 bytes of JSON a row: pages of 10,000 are one gzip-compressed answer per operand on
# fleets of up to 10,000 nodes. The API server serves a first page from its watch cache, but the request for a next
# page (continue) from etcd, decoding every pod of the namespace after the page's last (measured: 500-row pages of
# one operand each made the API server's CPU time four times that of one list of every pod).
POD_CELLS_PAGE_SIZE = 10000
# Node Table cells (no objects) are about 200 bytes of JSON a node: one request, answered from the watch cache.
ONE_PAGE = 100000
# Nodes that NODE_INFO reads in one request, the Node Table with each row's metadata; more are read in two (_node_info).
SMALL_FLEET = 100
NODES = '/api/v1/nodes'
PODS = '/api/v1/pods'
DAEMONSETS = '/apis/apps/v1/namespaces/%s/daemonsets'


class ClusterAPI(Client):
    """Reads and writes of the objects this collection's modules handle: the Client's at any path, and these."""

    def list_nodes(self, label_selector=None, page_size=None, view=NODE_FULL):
        """Nodes, optionally label-selected, as a generator over paginated lists, in view: NODE_FULL (whole Node
        dicts), NODE_METADATA (metadata only: protobuf.object_meta), NODE_LABELS (that without annotations) or
        NODE_INFO (NODE_LABELS, and the status.nodeInfo fields osImage, kernelVersion, containerRuntimeVersion and
        the Ready condition of the Node Table's cells: see views.node_from_table_row). page_size: nodes per request, by
        default FULL_NODE_PAGE_SIZE for full Nodes, DEFAULT_PAGE_SIZE for metadata; NODE_INFO: see _node_info."""
        if view == NODE_INFO:
            return self._node_info(label_selector, page_size)
        return self._list(NODES, label_selector, page_size or (FULL_NODE_PAGE_SIZE if view == NODE_FULL
                                                               else DEFAULT_PAGE_SIZE), view=view)

    def _node_info(self, label_selector, page_size):
        """NODE_INFO. First the Node Table with each row's metadata (NODE_ROWS), page_size rows a request, by default
        a first page of SMALL_FLEET: a fleet that fits is read in that one request. A page_size given is the size of
        every page. Else, on a larger fleet, the rest is read in two requests, each answered from the API server's
        cache: the Node Table's cells, about 200 bytes a node, then the nodes' metadata without annotations
        (NODE_LABELS), each node with the status of its cells. Two reads cost less than the Table with each row's
        metadata: the API server encodes that in JSON only, and JSON costs it and this process twice the CPU of
        protobuf; pages after the first come from etcd. A node that the metadata lists and the cells do not (created
        in between) is read whole; one the cells list and the metadata do not (deleted in between) is left out, as
        one list would."""
        pages = self._pages(NODES, label_selector, page_size or SMALL_FLEET, view=NODE_ROWS)
        first, token = next(pages, ([], ''))
        yield from first
        if page_size or not token or NODE_ROWS in self._warned_full_views:
            # Explicit pages, one page, or a server that serves no Table and answered with full Nodes (and said so).
            for items, _token in pages:
                yield from items
            return
        pages.close()
        read = set(node['metadata']['name'] for node in first)
        del first
        statuses = dict((node['metadata']['name'], node['status'])
                        for node in self._list(NODES, label_selector, ONE_PAGE, view=NODE_CELLS))
        for node in self._list(NODES, label_selector, ONE_PAGE, view=NODE_LABELS):
            name = node['metadata']['name']
            if name in read:
                continue
            if 'status' in node:
                # A server that answered the metadata request with full Nodes.
                yield node
            elif name in statuses:
                node['status'] = statuses[name]
                yield node
            else:
                node = self.read_optional('%s/%s' % (NODES, name))[0]
                if node is not None:
                    yield node

    def read_node(self, name):
        return self._request('GET', '%s/%s' % (NODES, name))

    def patch_node_labels(self, name, labels, resource_version):
        """Set labels (a None value removes one) if the node is still at resource_version (else 409).

        Returns the node as stored (or as it would be, in check mode).
        """
        body = {'metadata': {'labels': labels, 'resourceVersion': resource_version}}
        return self._request('PATCH', '%s/%s' % (NODES, name), body=body,
                             content_type='application/merge-patch+json', write=True)

    def read_secret(self, namespace, name):
        return self._request('GET', '/api/v1/namespaces/%s/secrets/%s' % (namespace, name))

    def list_daemonsets(self, namespace, label_selector=None):
        return list(self._list(DAEMONSETS % namespace, label_selector))

    def list_daemonsets_named(self, name):
        """The DaemonSets of that name, in every namespace."""
        return list(self._list('/apis/apps/v1/daemonsets', field_selector='metadata.name=%s' % name))

    def apply_daemonset(self, daemonset):
        """apply_object() at the DaemonSet's fixed path (no discovery); returns it as stored."""
        metadata = daemonset['metadata']
        return self.apply_object('%s/%s' % (DAEMONSETS % metadata['namespace'], metadata['name']), daemonset)

    def delete_daemonset(self, namespace, name, uid, resource_version):
        """Delete a DaemonSet only if it is still the object read (uid) in the state read (resourceVersion).

        Raises APIError with status 409 when it changed since (for instance its status now counts a pod).
        """
        return self.delete_object('%s/%s' % (DAEMONSETS % namespace, name),
                                  {'uid': uid, 'resourceVersion': resource_version})

    def list_node_pods(self, node):
        """The pods bound to a node, in every namespace."""
        return list(self._list(PODS, field_selector='spec.nodeName=%s' % node))

    def evict_pod(self, eviction):
        """POST a policy/v1 Eviction; APIError 429 when a PodDisruptionBudget allows no disruption now."""
        metadata = eviction['metadata']
        path = '/api/v1/namespaces/%s/pods/%s/eviction' % (metadata['namespace'], metadata['name'])
        return self._request('POST', path, body=eviction, write=True)

    def list_pod_disruption_budgets(self, namespace):
        return list(self._list('/apis/policy/v1/namespaces/%s/poddisruptionbudgets' % namespace))

    def patch_node(self, name, body):
        """A JSON merge patch of a node (metadata labels and annotations, spec.unschedulable; None removes)."""
        return self._request('PATCH', '%s/%s' % (NODES, name), body=body,
                             content_type='application/merge-patch+json', write=True)

    def list_pods(self, namespace, label_selector=None, view=POD_FULL):
        """The pods of a namespace, in view: POD_FULL (whole Pod dicts), POD_READINESS (metadata, node and
        readiness, from a Table: see views.pod_from_table_row) or POD_CELLS (name, namespace, node and readiness, no
        labels: the caller knows them from its label_selector)."""
        return list(self._list('/api/v1/namespaces/%s/pods' % namespace, label_selector, view=view,
                               page_size=POD_CELLS_PAGE_SIZE if view == POD_CELLS else DEFAULT_PAGE_SIZE,
                               namespace=namespace))

    def delete_pod(self, namespace, name, uid):
        """Delete a pod only if it is still the pod read (uid), else APIError 409."""
        return self.delete_object('/api/v1/namespaces/%s/pods/%s' % (namespace, name), {'uid': uid})

    def list_revisions(self, namespace, label_selector=None):
        """ControllerRevisions: a DaemonSet's carry its pods' labels (and so its selector)."""
        return list(self._list('/apis/apps/v1/namespaces/%s/controllerrevisions' % namespace, label_selector))

    def list_jobs(self, namespace, label_selector=None):
        return list(self._list('/apis/batch/v1/namespaces/%s/jobs' % namespace, label_selector))
