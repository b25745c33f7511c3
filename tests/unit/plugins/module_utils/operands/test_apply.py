# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from ansible_collections.accelerators.gpu.plugins.module_utils.operands.apply import MASK, comparable, shown


def config_map(data, **metadata):
    return {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': dict({'name': 'c', 'namespace': 'n'}, **metadata),
            'data': data}


def test_the_servers_bookkeeping_and_status_are_no_change():
    stored = config_map({'k': '1'}, resourceVersion='7', generation=2, managedFields=[{'manager': 'x'}])
    rewritten = dict(config_map({'k': '1'}, resourceVersion='8', generation=3, managedFields=[]), status={'a': 1})
    assert comparable(stored) == comparable(rewritten) == config_map({'k': '1'})
    assert comparable(stored) != comparable(config_map({'k': '2'}))
    assert comparable(None) is None


def test_only_a_secrets_values_are_masked():
    secret = {'kind': 'Secret', 'metadata': {'name': 's'}, 'data': {'a': 'c2VjcmV0'}, 'stringData': {'b': 'secret'}}
    assert shown(secret) == dict(secret, data={'a': MASK}, stringData={'b': MASK})
    assert secret['data'] == {'a': 'c2VjcmV0'}
    assert shown(config_map({'k': '1'})) == config_map({'k': '1'})
    assert shown(None) is None
