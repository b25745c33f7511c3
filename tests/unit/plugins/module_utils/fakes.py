# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A module and a cluster in memory, for the tests of the modules' work (nfd_labels, dtk_image_lookup, driver_daemonsets)."""

import contextlib
import copy
import re

from ansible_collections.accelerators.gpu.plugins.module_utils.driver.dtk import DTK_IMAGESTREAM_PATH, NOT_OPENSHIFT
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.errors import APIError
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.views import (
    NODE_FULL, NODE_INFO, NODE_METADATA, node_from_table_row)
from ansible_collections.accelerators.gpu.plugins.module_utils.registry.mirrors import MIRROR_SET_PATHS

# The columns of the API server's Node Table, and a row as its node printer fills them (cells of a Table read
# with includeObject=Metadata).
NODE_TABLE_COLUMNS = ['Name', 'Status', 'Roles', 'Age', 'Version', 'Internal-IP', 'External-IP', 'OS-Image',
                      'Kernel-Version', 'Container-Runtime']


def node_table_row(node):
    status = node.get('status') or {}
    info = status.get('nodeInfo') or {}
    ready = [condition['status'] == 'True' for condition in status.get('conditions') or []
             if condition.get('type') == 'Ready']
    cells = [node['metadata']['name'], ('Ready' if ready[0] else 'NotReady') if ready else 'Unknown', '<none>', '1d',
             info.get('kubeletVersion', ''), '<none>', '<none>']
    cells += [info.get(field) or '<unknown>' for field in ('osImage', 'kernelVersion', 'containerRuntimeVersion')]
    if (node.get('spec') or {}).get('unschedulable'):
        cells[1] += ',SchedulingDisabled'
    return {'cells': cells, 'object': {'kind': 'PartialObjectMetadata', 'metadata': node['metadata']}}


def served_node(node, view):
    """A node as the API server sends it in a view of ClusterAPI.list_nodes()."""
    if view == NODE_METADATA:
        return {'metadata': node['metadata']}
    if view == NODE_INFO:
        return node_from_table_row(node_table_row(node), NODE_TABLE_COLUMNS)
    return node


class Deadlines:
    """ClusterAPI.deadline, for stand-ins of the API layer whose requests meet no fault (never retried)."""

    def deadline(self, seconds):
        return contextlib.nullcontext()


class FakeModule:
    """What the modules' work uses of GPUModule: params, check mode, diff, warnings, running commands."""

    def __init__(self, params, check_mode=False, diff=False, bin_paths=None, command_results=None):
        self.params = params
        self.check_mode = check_mode
        self._diff = diff
        self.warnings = []
        self.bin_paths = bin_paths or {}
        self.command_results = list(command_results or [])
        self.commands = []

    def warn(self, message):
        self.warnings.append(message)

    def get_bin_path(self, name):
        return self.bin_paths.get(name)

    def run_command(self, command):
        self.commands.append(command)
        return self.command_results.pop(0)


def matches(labels, selector):
    """Label selectors of equalities and set exclusions ('a=b,c notin (d,e)'), which is all the tests use."""
    for term in re.findall(r'[^,(]+(?:\([^)]*\))?', selector or ''):
        exclusion = re.match(r'\s*(\S+) notin \(([^)]*)\)$', term)
        if exclusion:
            if labels.get(exclusion.group(1)) in exclusion.group(2).split(','):
                return False
        elif labels.get(term.split('=', 1)[0]) != term.split('=', 1)[1]:
            return False
    return True


class FakeCluster(Deadlines):
    """Nodes, DaemonSets, the DTK image stream and mirror sets in memory, with ClusterAPI's methods.

    writes records every write as (verb, object name); before_patch(name) runs before each node label patch,
    so that a test can change the node under the module (as an admin or NFD would).
    """

    def __init__(self, nodes=(), daemonsets=(), imagestream=None, stream_absence=None, mirror_sets=None,
                 objects=None):
        self.nodes = dict((node['metadata']['name'], copy.deepcopy(node)) for node in nodes)
        for index, node in enumerate(self.nodes.values()):
            node['metadata'].setdefault('resourceVersion', str(index + 1))
        self.daemonsets = dict((ds['metadata']['name'], copy.deepcopy(ds)) for ds in daemonsets)
        self.imagestream = imagestream
        self.stream_absence = stream_absence
        self.mirror_sets = mirror_sets or {'idms': [], 'itms': [], 'icsp': []}
        # Other objects read by path, such as the driver's ConfigMaps and Secret.
        self.objects = dict(objects or {})
        self.reads = []
        self.writes = []
        self.before_patch = None
        self.delete_conflicts = set()

    def list_nodes(self, label_selector=None, page_size=None, view=NODE_FULL):
        self.reads.append(('nodes', label_selector, view))
        return iter([served_node(copy.deepcopy(node), view) for name, node in sorted(self.nodes.items())
                     if matches(node['metadata']['labels'], label_selector)])

    def read_node(self, name):
        self.reads.append(('node', name))
        if name not in self.nodes:
            raise APIError('GET', '/api/v1/nodes/' + name, 404, 'nodes "%s" not found' % name)
        return copy.deepcopy(self.nodes[name])

    def set_labels(self, name, labels):
        metadata = self.nodes[name]['metadata']
        for key, value in labels.items():
            if value is None:
                metadata['labels'].pop(key, None)
            else:
                metadata['labels'][key] = value
        metadata['resourceVersion'] = str(int(metadata['resourceVersion']) + 1)

    def patch_node_labels(self, name, labels, resource_version):
        if self.before_patch:
            self.before_patch(name)
        self.writes.append(('PATCH', name))
        if self.nodes[name]['metadata']['resourceVersion'] != resource_version:
            raise APIError('PATCH', '/api/v1/nodes/' + name, 409, 'the object has been modified')
        self.set_labels(name, labels)
        return copy.deepcopy(self.nodes[name])

    def patch_node(self, name, body):
        """A merge patch of a node's labels (what the driver planner writes: owner labels)."""
        self.writes.append(('PATCH', name))
        self.set_labels(name, body['metadata']['labels'])
        return copy.deepcopy(self.nodes[name])

    def list_daemonsets(self, namespace, label_selector=None):
        self.reads.append(('daemonsets', label_selector))
        return [copy.deepcopy(ds) for name, ds in sorted(self.daemonsets.items())
                if matches(ds['metadata'].get('labels') or {}, label_selector)]

    def apply_daemonset(self, daemonset):
        self.writes.append(('APPLY', daemonset['metadata']['name']))
        stored = copy.deepcopy(daemonset)
        stored['metadata'].update(uid='uid-' + daemonset['metadata']['name'], resourceVersion='1')
        self.daemonsets[daemonset['metadata']['name']] = stored
        return copy.deepcopy(stored)

    def delete_daemonset(self, namespace, name, uid, resource_version):
        self.writes.append(('DELETE', name))
        if name in self.delete_conflicts:
            raise APIError('DELETE', name, 409, 'Precondition failed: ResourceVersion in precondition')
        del self.daemonsets[name]

    def read_optional(self, path):
        """The DTK image stream (dtk.read_dtk_imagestream), served unless stream_absence is NOT_OPENSHIFT; the
        objects given by path."""
        if path != DTK_IMAGESTREAM_PATH:
            self.reads.append(('object', path))
            return copy.deepcopy(self.objects.get(path)), True
        self.reads.append(('imagestream', None))
        return copy.deepcopy(self.imagestream), self.stream_absence != NOT_OPENSHIFT

    def list_items(self, path):
        """A kind of mirror set (mirrors.list_mirror_sets)."""
        self.reads.append(('mirror sets', path))
        return copy.deepcopy(self.mirror_sets[dict((path, kind) for kind, path in MIRROR_SET_PATHS)[path]])
