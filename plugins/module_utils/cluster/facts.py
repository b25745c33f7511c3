# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the states of the stack need to know about the cluster before they apply anything, read in one go:
whether it is OpenShift and which version, the container runtime of the toolkit's nodes, the nodes still labelled for
the DRA kubelet plugin, the operand namespace, an NFD already running, the CRDs, namespaces and ClusterRoles of
optional integrations and of parts deployed before, whether the cluster's Proxy sets anything."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ..k8s.views import NODE_INFO, NODE_LABELS
from .proxy import proxy_configured

CLUSTER_VERSION = '/apis/config.openshift.io/v1/clusterversions/version'
NAMESPACE = '/api/v1/namespaces/%s'
CRD = '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/%s'
CLUSTER_ROLE = '/apis/rbac.authorization.k8s.io/v1/clusterroles/%s'
CLUSTER_PROXY = '/apis/config.openshift.io/v1/proxies/cluster'
_RUNTIME_SCHEME = re.compile(r'^([^:]+)://')


def runtime_name(version):
    """The runtime of a node's status.nodeInfo.containerRuntimeVersion (containerd://1.7.2, cri-o://1.31.1):
    containerd, crio (as cri-o is spelled in the collection's settings), or the version itself without a scheme."""
    match = _RUNTIME_SCHEME.match(version or '')
    name = match.group(1) if match else version or ''
    return 'crio' if name == 'cri-o' else name


def container_runtimes(nodes):
    """{node name: runtime name} of Node objects."""
    return dict((node['metadata']['name'], runtime_name(((node.get('status') or {}).get('nodeInfo') or {})
                                                        .get('containerRuntimeVersion')))
                for node in nodes)


def openshift_version(cluster_version):
    """The version the ClusterVersion 'version' says the cluster runs or is being upgraded to (status.desired.version,
    as the cluster's catalogs follow it), or None without one."""
    return (((cluster_version or {}).get('status') or {}).get('desired') or {}).get('version') or None


def running(objects, namespaces):
    """The objects neither being deleted nor in a namespace being deleted (namespaces: {name: Namespace or None}): an
    nfd-worker whose namespace an uninstall just deleted is going away, not an NFD that someone else runs."""
    return [obj for obj in objects
            if not obj['metadata'].get('deletionTimestamp')
            and not ((namespaces.get(obj['metadata']['namespace']) or {}).get('metadata') or {}).get('deletionTimestamp')]


def read_facts(api, namespace, detect_openshift, runtime_label_selector, daemonset_name, crd_names, proxy=False,
               namespace_names=(), labelled_nodes_selector=None, cluster_role_names=()):
    """The facts, as cluster_facts returns them. api: a ClusterAPI."""
    facts = {'namespace': api.read_optional(NAMESPACE % namespace)[0]}
    if detect_openshift:
        cluster_version, facts['openshift_api'] = api.read_optional(CLUSTER_VERSION)
        facts['openshift_version'] = openshift_version(cluster_version)
    if runtime_label_selector is not None:
        facts['container_runtimes'] = container_runtimes(api.list_nodes(runtime_label_selector or None, view=NODE_INFO))
    if labelled_nodes_selector:
        facts['labelled_nodes'] = sorted(node['metadata']['name']
                                         for node in api.list_nodes(labelled_nodes_selector, view=NODE_LABELS))
    if daemonset_name:
        daemonsets = api.list_daemonsets_named(daemonset_name)
        namespaces = dict((name, api.read_optional(NAMESPACE % name)[0])
                          for name in set(item['metadata']['namespace'] for item in daemonsets))
        facts['daemonsets'] = [
            {'namespace': item['metadata']['namespace'], 'name': item['metadata']['name']}
            for item in running(daemonsets, namespaces)]
    facts['crds'] = [name for name in crd_names if api.read_optional(CRD % name)[0]]
    facts['namespaces'] = [name for name in namespace_names if api.read_optional(NAMESPACE % name)[0]]
    facts['cluster_roles'] = [name for name in cluster_role_names if api.read_optional(CLUSTER_ROLE % name)[0]]
    if proxy:
        # Only whether: the values may hold credentials, which this module's result must not carry.
        facts['proxy_configured'] = proxy_configured(api.read_optional(CLUSTER_PROXY)[0])
    return facts
