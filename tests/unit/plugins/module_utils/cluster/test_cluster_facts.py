# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import json

from ansible_collections.accelerators.gpu.plugins.module_utils.cluster.facts import (
    container_runtimes, openshift_version, read_facts, runtime_name)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.protobuf_encoding import metadata_list
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.k8s.test_client import (
    METADATA_ACCEPT, DynamicClient, make_api)

NAMESPACE = {'kind': 'Namespace', 'metadata': {'name': 'gpu', 'labels': {'app.kubernetes.io/managed-by': 'x'}}}
CRD_PATH = '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/%s'


def missing(name):
    return (404, json.dumps({'kind': 'Status', 'code': 404, 'message': 'not found', 'details': {'name': name}}))


def node(name, runtime):
    return {'metadata': {'name': name}, 'status': {'nodeInfo': {'containerRuntimeVersion': runtime}}}


def test_runtime_names_drop_the_version_and_spell_cri_o_crio():
    assert runtime_name('containerd://1.7.2') == 'containerd'
    assert runtime_name('cri-o://1.31.1-3.rhaos4.18') == 'crio'
    assert runtime_name('docker://27.1') == 'docker'
    assert runtime_name('') == '' and runtime_name(None) == ''
    assert container_runtimes([node('a', 'cri-o://1.31'), node('b', 'containerd://2.0')]) == {
        'a': 'crio', 'b': 'containerd'}


def test_every_fact_in_one_pass(monkeypatch):
    client = DynamicClient({
        ('GET', '/api/v1/namespaces/gpu'): NAMESPACE,
        ('GET', '/apis/config.openshift.io/v1/clusterversions/version'): {
            'kind': 'ClusterVersion', 'status': {'desired': {'version': '4.19.3'}}},
        ('GET', '/api/v1/nodes'): {'items': [node('gpu-0', 'cri-o://1.31')], 'metadata': {}},
        # One NFD runs; one is in a namespace an uninstall just deleted, one is being deleted itself: both going away.
        ('GET', '/apis/apps/v1/daemonsets'): {'items': [
            {'metadata': {'namespace': 'site-nfd', 'name': 'nfd-worker'}},
            {'metadata': {'namespace': 'old-nfd', 'name': 'nfd-worker'}},
            {'metadata': {'namespace': 'other-nfd', 'name': 'nfd-worker', 'deletionTimestamp': '2026-11-27T12:00:00Z'}},
        ], 'metadata': {}},
        ('GET', '/api/v1/namespaces/site-nfd'): {'kind': 'Namespace', 'metadata': {'name': 'site-nfd'}},
        ('GET', '/api/v1/namespaces/old-nfd'): {'kind': 'Namespace', 'metadata': {
            'name': 'old-nfd', 'deletionTimestamp': '2026-11-27T12:00:00Z'}},
        ('GET', '/api/v1/namespaces/other-nfd'): {'kind': 'Namespace', 'metadata': {'name': 'other-nfd'}},
        ('GET', CRD_PATH % 'servicemonitors.monitoring.coreos.com'): {'kind': 'CustomResourceDefinition'},
        ('GET', CRD_PATH % 'podmonitors.monitoring.coreos.com'): missing('podmonitors.monitoring.coreos.com'),
        ('GET', '/api/v1/namespaces/openshift-config-managed'): {'kind': 'Namespace'},
        ('GET', '/api/v1/namespaces/openshift-console'): missing('openshift-console'),
        ('GET', '/apis/rbac.authorization.k8s.io/v1/clusterroles/nvidia-dra-driver-kubeletplugin'): {
            'kind': 'ClusterRole'},
        ('GET', '/apis/rbac.authorization.k8s.io/v1/clusterroles/other'): missing('other'),
        ('GET', '/apis/config.openshift.io/v1/proxies/cluster'): {
            'kind': 'Proxy', 'spec': {}, 'status': {'httpsProxy': 'http://user:secret@proxy:3128'}}})
    facts = read_facts(make_api(monkeypatch, client), 'gpu', True, 'toolkit=true', 'nfd-worker',
                       ['servicemonitors.monitoring.coreos.com', 'podmonitors.monitoring.coreos.com'], proxy=True,
                       namespace_names=['openshift-config-managed', 'openshift-console'],
                       cluster_role_names=['nvidia-dra-driver-kubeletplugin', 'other'])
    assert facts == {'namespace': NAMESPACE, 'openshift_api': True, 'openshift_version': '4.19.3',
                     'container_runtimes': {'gpu-0': 'crio'},
                     'daemonsets': [{'namespace': 'site-nfd', 'name': 'nfd-worker'}],
                     'crds': ['servicemonitors.monitoring.coreos.com'], 'namespaces': ['openshift-config-managed'],
                     'cluster_roles': ['nvidia-dra-driver-kubeletplugin'], 'proxy_configured': True}
    params = dict((path, params) for _method, path, _body, params in client.requests)
    assert params['/api/v1/nodes']['label_selector'] == 'toolkit=true'
    assert params['/apis/apps/v1/daemonsets']['field_selector'] == 'metadata.name=nfd-worker'


def test_a_missing_namespace_and_plain_kubernetes_read_only_what_is_asked(monkeypatch):
    client = DynamicClient({
        ('GET', '/api/v1/namespaces/gpu'): missing('gpu'),
        # An API the server does not serve: no Status details.
        ('GET', '/apis/config.openshift.io/v1/clusterversions/version'): (404, '404 page not found\n')})
    facts = read_facts(make_api(monkeypatch, client), 'gpu', True, None, None, [])
    assert facts == {'namespace': None, 'openshift_api': False, 'openshift_version': None, 'crds': [],
                     'namespaces': [], 'cluster_roles': []}
    assert [path for _method, path, _body, _params in client.requests] == [
        '/api/v1/namespaces/gpu', '/apis/config.openshift.io/v1/clusterversions/version']


def test_the_labelled_nodes_are_read_as_their_metadata_without_annotations(monkeypatch):
    """The nodes still labelled for the DRA kubelet plugin, say: names only, from the protobuf metadata list."""
    labelled = [{'metadata': {'name': name, 'labels': {'nvidia.com/gpu.deploy.dra-driver': 'true'}}}
                for name in ('gpu-9', 'gpu-3')]
    client = DynamicClient({
        ('GET', '/api/v1/namespaces/gpu'): NAMESPACE,
        ('GET', '/api/v1/nodes'): lambda params: metadata_list(labelled)})
    facts = read_facts(make_api(monkeypatch, client), 'gpu', False, None, None, [],
                       labelled_nodes_selector='nvidia.com/gpu.deploy.dra-driver=true')
    assert facts['labelled_nodes'] == ['gpu-3', 'gpu-9']
    (nodes,) = [params for _method, path, _body, params in client.requests if path == '/api/v1/nodes']
    assert (nodes['label_selector'], nodes['header_params']['Accept']) == (
        'nvidia.com/gpu.deploy.dra-driver=true', METADATA_ACCEPT)


def test_openshift_version_is_the_desired_one_or_none():
    assert openshift_version({'status': {'desired': {'version': '4.19.0-rc.2'}, 'history': []}}) == '4.19.0-rc.2'
    # Just created, no status yet; no ClusterVersion at all.
    assert openshift_version({'kind': 'ClusterVersion'}) is None
    assert openshift_version(None) is None
