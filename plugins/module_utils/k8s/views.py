# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a list is read as: the views smaller than whole objects that a caller may ask for, and their decoding.

Reads ask for no more than their callers use: a list of nodes comes in the smallest view that carries what its
caller reads (api.ClusterAPI.list_nodes: NODE_METADATA, their metadata in the protobuf encoding, which costs the API
server and this process a fraction of the CPU of JSON, read as it arrives (protobuf); NODE_LABELS, that without
annotations; NODE_INFO, the Node Table with each row's metadata for a small fleet, else that metadata and the
Table's cells, each in one request; or NODE_FULL), a list of pods as a Table when its caller reads their labels, node
and readiness only (api.ClusterAPI.list_pods: POD_READINESS), as the Table's cells alone when it reads no labels
(POD_CELLS). A server that does not serve a view answers with full objects (view_items tells).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from . import protobuf

# What ClusterAPI.list_nodes() asks the API server to send of each node.
NODE_FULL = 'full'          # the whole Node
NODE_METADATA = 'metadata'  # metadata only: name, uid, resourceVersion, labels, annotations (no spec, no status)
NODE_LABELS = 'labels'      # NODE_METADATA without annotations (left out of a protobuf answer unread)
NODE_INFO = 'info'          # NODE_LABELS, status.nodeInfo's osImage, kernelVersion and containerRuntimeVersion, Ready
NODE_CELLS = 'node cells'   # name, status.nodeInfo's osImage, kernelVersion and containerRuntimeVersion, Ready
NODE_ROWS = 'node rows'     # NODE_CELLS and the metadata of NODE_LABELS, one Table in JSON (includeObject=Metadata)
# What ClusterAPI.list_pods() asks for: the whole Pod, or its metadata, node and readiness (pod_from_table_row), or its
# name, node and readiness without labels: the Table's cells only, about a tenth of the bytes of the metadata with
# managedFields.
POD_FULL = NODE_FULL
POD_READINESS = 'readiness'
POD_CELLS = 'cells'
_TABLE_ACCEPT = 'application/json;as=Table;g=meta.k8s.io;v=v1, application/json'
# The Node Table's columns (the API server's node printer) that NODE_INFO reads, and the status.nodeInfo fields
# they show; the printer shows an empty field as '<unknown>', an empty Pod column as '<none>'.
_NODE_INFO_COLUMNS = (('OS-Image', 'osImage'), ('Kernel-Version', 'kernelVersion'),
                      ('Container-Runtime', 'containerRuntimeVersion'))
_UNKNOWN_CELL = '<unknown>'
# The metadata fields of NODE_LABELS (protobuf.object_meta with LABELS).
_NODE_LABELS_METADATA = ('name', 'namespace', 'uid', 'resourceVersion', 'labels')
_NONE_CELL = '<none>'


def _row_metadata(row, cells, namespace):
    """The metadata of a Table row: its object's (includeObject=Metadata), else (includeObject=None: the API server
    sends "object": null) its Name cell and the namespace the list was read in, if any."""
    if row.get('object'):
        return row['object'].get('metadata') or {}
    metadata = {'name': cells.get('Name')}
    if namespace:
        metadata['namespace'] = namespace
    return metadata


def node_from_table_row(row, columns, namespace=None):
    """A Node dict of one row of a Node Table read with includeObject=Metadata: the row's metadata, the
    status.nodeInfo fields of its cells and a Ready condition, status 'True' or, for NotReady, 'False' (the Table
    does not tell False from Unknown). columns: the Table's column names, in order; namespace: the request's,
    which names the object of a row read without one (_row_metadata), None for cluster-scoped Nodes."""
    cells = dict(zip(columns, row.get('cells') or []))
    node = {'metadata': _row_metadata(row, cells, namespace), 'status': {}}
    info = dict((field, cells[column]) for column, field in _NODE_INFO_COLUMNS
                if cells.get(column) not in (None, _UNKNOWN_CELL))
    if info:
        node['status']['nodeInfo'] = info
    # The Status cell: Ready, NotReady or Unknown (no Ready condition), then ',SchedulingDisabled' when cordoned.
    ready = str(cells.get('Status') or '').split(',', 1)[0]
    if ready in ('Ready', 'NotReady'):
        node['status']['conditions'] = [{'type': 'Ready', 'status': 'True' if ready == 'Ready' else 'False'}]
    return node


def node_info_from_table_row(row, columns, namespace=None):
    """node_from_table_row with the metadata a protobuf read of NODE_LABELS gives: no annotations, no managedFields."""
    node = node_from_table_row(row, columns, namespace)
    node['metadata'] = dict((key, value) for key, value in node['metadata'].items() if key in _NODE_LABELS_METADATA)
    return node


def pod_from_table_row(row, columns, namespace=None):
    """A Pod dict of one row of a Pod Table: the row's metadata (includeObject=Metadata), else (includeObject=None)
    the Name cell and the namespace of the request, without labels; spec.nodeName from the Node cell, and in status
    what the Table tells of readiness: a Ready condition, 'True' when every container counted in the Ready cell
    ('1/1') is ready, and as status.reason the Status cell, the reason kubectl get pods shows (Running,
    ContainerCreating, CrashLoopBackOff, Init:0/1, Terminating...). The Table has no phase and no container statuses.
    columns: the Table's column names, in order."""
    cells = dict(zip(columns, row.get('cells') or []))
    pod = {'metadata': _row_metadata(row, cells, namespace), 'spec': {}, 'status': {}}
    if cells.get('Node') not in (None, _NONE_CELL):
        pod['spec']['nodeName'] = cells['Node']
    ready, _slash, total = str(cells.get('Ready') or '').partition('/')
    pod['status']['conditions'] = [{'type': 'Ready', 'status': 'True' if total not in ('', '0') and ready == total
                                    else 'False'}]
    if cells.get('Status'):
        pod['status']['reason'] = cells['Status']
    return pod


# For each smaller view: the Accept header (the plain list is the fallback a server that does not serve the view
# answers with), the kind of a list in the view, the includeObject parameter and what makes an item of a Table row.
_METADATA_ACCEPT = ', '.join(encoding + ';as=PartialObjectMetadataList;g=meta.k8s.io;v=v1'
                             for encoding in (protobuf.MEDIA_TYPE, 'application/json')) + ', application/json'
_METADATA_VIEW = (_METADATA_ACCEPT, 'PartialObjectMetadataList', None, None)
VIEWS = {
    NODE_METADATA: _METADATA_VIEW,
    NODE_LABELS: _METADATA_VIEW,
    NODE_CELLS: (_TABLE_ACCEPT, 'Table', 'None', node_from_table_row),
    NODE_ROWS: (_TABLE_ACCEPT, 'Table', 'Metadata', node_info_from_table_row),
    POD_READINESS: (_TABLE_ACCEPT, 'Table', 'Metadata', pod_from_table_row),
    POD_CELLS: (_TABLE_ACCEPT, 'Table', 'None', pod_from_table_row),
}
# The string maps of ObjectMeta a protobuf answer is read for, by view.
PROTOBUF_MAPS = {NODE_LABELS: protobuf.LABELS}


def view_items(page, view, namespace=None):
    """(the items of a page of a list as dicts, whether the page is in the view asked for). A server that does
    not serve the view answers with the full list. namespace: the one the list was read in, if any."""
    kind = VIEWS[view][1] if view in VIEWS else None
    if kind is None or page.get('kind') != kind:
        return page.get('items') or [], kind is None
    if kind == 'Table':
        columns = [column.get('name') for column in page.get('columnDefinitions') or []]
        return [VIEWS[view][3](row, columns, namespace) for row in page.get('rows') or []], True
    return page.get('items') or [], True
