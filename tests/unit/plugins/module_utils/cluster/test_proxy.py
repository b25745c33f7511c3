# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from ansible_collections.accelerators.gpu.plugins.module_utils.cluster.proxy import proxy_configured, proxy_settings
from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.facts import node_facts
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver.role_template import desired_driver_daemonsets
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.node_dicts import RHCOS_416, rhcos_node

HTTP = 'http://user:hunter2@proxy.example.com:3128'
HTTPS = 'http://user:hunter2@proxy.example.com:3129'
CLUSTER_PROXY = {'apiVersion': 'config.openshift.io/v1', 'kind': 'Proxy', 'metadata': {'name': 'cluster'},
                 'spec': {'httpProxy': 'http://spec-only', 'trustedCA': {'name': 'user-ca-bundle'}},
                 'status': {'httpProxy': HTTP, 'httpsProxy': HTTPS, 'noProxy': '.cluster.local,10.0.0.0/16'}}


def secret_ref(name):
    return {'name': name, 'valueFrom': {'secretKeyRef': {'name': 'accelerators-gpu-proxy', 'key': name}}}


def test_the_cluster_proxy_status_gives_both_spellings_and_the_env_reads_them_from_the_secret():
    settings = proxy_settings(CLUSTER_PROXY)
    assert settings['secret_data'] == {'HTTP_PROXY': HTTP, 'http_proxy': HTTP, 'HTTPS_PROXY': HTTPS,
                                       'https_proxy': HTTPS, 'NO_PROXY': '.cluster.local,10.0.0.0/16',
                                       'no_proxy': '.cluster.local,10.0.0.0/16'}
    assert settings['env'] == [secret_ref(name) for name in sorted(settings['secret_data'])]
    # No credentials in what a DaemonSet carries.
    assert 'hunter2' not in str(settings['env'])
    assert (settings['trusted_ca'], settings['trusted_ca_bundle']) == (True, '')


def test_given_settings_win_and_empty_ones_leave_the_cluster_s():
    settings = proxy_settings(CLUSTER_PROXY, {'httpProxy': 'http://other:8080', 'httpsProxy': '', 'noProxy': ''})
    assert settings['secret_data']['HTTP_PROXY'] == 'http://other:8080'
    assert settings['secret_data']['https_proxy'] == HTTPS


def test_no_proxy_anywhere_gives_nothing():
    assert proxy_settings(None, {}) == {'secret_data': {}, 'env': [], 'trusted_ca': False, 'trusted_ca_bundle': ''}
    assert proxy_settings({'status': {}, 'spec': {'trustedCA': {'name': ''}}})['trusted_ca'] is False


def test_a_cluster_proxy_is_configured_by_any_proxy_status_field_or_a_trusted_ca():
    assert proxy_configured(CLUSTER_PROXY) is True
    assert proxy_configured({'spec': {'trustedCA': {'name': 'user-ca-bundle'}}, 'status': {}}) is True
    assert proxy_configured({'spec': {}, 'status': {}}) is False
    assert proxy_configured(None) is False


def test_a_given_bundle_is_a_trusted_ca_on_any_cluster():
    settings = proxy_settings(None, {'trustedCA': '-----BEGIN CERTIFICATE-----\n...'})
    assert settings['trusted_ca'] is True and settings['trusted_ca_bundle'].startswith('-----BEGIN')


def test_the_driver_container_mounts_the_trusted_ca_where_the_gpu_operator_does():
    spec = {'namespace': 'gpu', 'repository': 'nvcr.io/nvidia', 'version': '550.90.07',
            'trusted_ca_config_map': 'gpu-operator-trusted-ca'}
    dtk = {RHCOS_416: {'status': 'resolved', 'image': 'quay.io/dtk@sha256:' + 'a' * 64, 'message': ''}}
    (daemonset,) = desired_driver_daemonsets(spec, [node_facts(rhcos_node('w1'))], dtk, 'rhcos')['desired']
    pod = daemonset['spec']['template']['spec']
    assert {'name': 'trusted-ca', 'configMap': {'name': 'gpu-operator-trusted-ca', 'items': [
        {'key': 'ca-bundle.crt', 'path': 'tls-ca-bundle.pem'}]}} in pod['volumes']
    mounts = {c['name']: c['volumeMounts'] for c in pod['containers']}
    assert {'name': 'trusted-ca', 'mountPath': '/etc/pki/ca-trust/extracted/pem', 'readOnly': True} in mounts[
        'nvidia-driver-ctr']
    assert all(m['name'] != 'trusted-ca' for name, ms in mounts.items() if name != 'nvidia-driver-ctr' for m in ms)
    without = desired_driver_daemonsets(dict(spec, trusted_ca_config_map=None), [node_facts(rhcos_node('w1'))], dtk,
                                        'rhcos')['desired'][0]
    assert all(v['name'] != 'trusted-ca' for v in without['spec']['template']['spec']['volumes'])
