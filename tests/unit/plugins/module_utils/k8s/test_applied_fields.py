# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import copy

from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.applied_fields import applied_fields, dropped_fields

# fieldsV1 as the API server records an apply of DECLARED (trimmed to the shapes that matter).
FIELDS = {
    'f:metadata': {'f:labels': {'f:app': {}, 'f:team': {}}},
    'f:spec': {'f:template': {'f:spec': {
        'f:containers': {'k:{"name":"driver"}': {
            '.': {}, 'f:name': {}, 'f:image': {},
            'f:env': {'k:{"name":"A"}': {'.': {}, 'f:name': {}, 'f:value': {}}},
            'f:args': {'i:0': {}}}},
        'f:finalizers': {'v:"x"': {}}}}},
}
DECLARED = {
    'metadata': {'labels': {'app': 'd', 'team': 't'}},
    'spec': {'template': {'spec': {
        'containers': [{'name': 'driver', 'image': 'i', 'env': [{'name': 'A', 'value': '1'}], 'args': ['--x']}],
        'finalizers': ['x']}}},
}


def declared(edit):
    """A copy of DECLARED changed by edit(copy)."""
    obj = copy.deepcopy(DECLARED)
    edit(obj)
    return obj


def test_the_same_declaration_drops_nothing():
    assert dropped_fields(FIELDS, DECLARED) == []


def test_a_label_taken_out_is_dropped():
    obj = declared(lambda o: o['metadata']['labels'].pop('team'))
    assert dropped_fields(FIELDS, obj) == ['metadata.labels.team']


def container(obj):
    return obj['spec']['template']['spec']['containers'][0]


def test_list_items_by_key_by_value_and_by_index():
    assert dropped_fields(FIELDS, declared(lambda o: container(o).update(env=[{'name': 'B', 'value': '2'}]))) == [
        'spec.template.spec.containers[{"name":"driver"}].env[{"name":"A"}]']
    assert dropped_fields(FIELDS, declared(lambda o: container(o).pop('args'))) == [
        'spec.template.spec.containers[{"name":"driver"}].args']
    assert dropped_fields(FIELDS, declared(lambda o: container(o).update(args=[]))) == [
        'spec.template.spec.containers[{"name":"driver"}].args[0]']
    assert dropped_fields(FIELDS, declared(lambda o: o['spec']['template']['spec'].update(finalizers=['y']))) == [
        'spec.template.spec.finalizers["x"]']


def test_a_key_field_the_server_defaulted_still_matches():
    fields = {'f:ports': {'k:{"containerPort":9400,"protocol":"TCP"}': {'.': {}, 'f:containerPort': {}}}}
    assert dropped_fields(fields, {'ports': [{'containerPort': 9400}]}) == []
    assert dropped_fields(fields, {'ports': [{'containerPort': 9401}]}) == [
        'ports[{"containerPort":9400,"protocol":"TCP"}]']


def test_a_renamed_container_drops_the_old_one_whole():
    obj = declared(lambda o: o['spec']['template']['spec']['containers'][0].update(name='other'))
    assert dropped_fields(FIELDS, obj) == ['spec.template.spec.containers[{"name":"driver"}]']


def test_only_the_managers_own_apply_counts():
    obj = {'metadata': {'managedFields': [
        {'manager': 'kubectl', 'operation': 'Apply', 'fieldsV1': {'f:metadata': {}}},
        {'manager': 'accelerators.gpu', 'operation': 'Update', 'fieldsV1': {'f:status': {}}},
        {'manager': 'accelerators.gpu', 'operation': 'Apply', 'fieldsV1': FIELDS}]}}
    assert applied_fields(obj, 'accelerators.gpu') is FIELDS
    assert applied_fields(obj, 'someone-else') == {}
    assert applied_fields({'metadata': {}}, 'accelerators.gpu') == {}
