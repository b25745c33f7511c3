# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.protobuf import (
    LABELS, MAGIC, ProtobufError, object_meta, read_metadata_list)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.protobuf_encoding import (
    field, metadata_list, number_field, varint)

LONG = 'x' * 300  # lengths of two varint bytes, and a map entry off the one-byte fast path
NODE = {'metadata': {'name': 'gpu-0', 'uid': 'u-1', 'resourceVersion': '77', 'labels': {
    'feature.node.kubernetes.io/pci-10de.present': 'true', 'node-role.kubernetes.io/worker': '', 'long': LONG},
    'annotations': {'machineconfiguration.openshift.io/state': 'Done', LONG: 'v'}}}


def test_a_metadata_list_reads_as_its_json_encoding():
    page = read_metadata_list([metadata_list([NODE, {'metadata': {'name': 'bare'}}], continue_token='next')])
    assert page == {'apiVersion': 'meta.k8s.io/v1', 'kind': 'PartialObjectMetadataList',
                    'metadata': {'resourceVersion': '42', 'continue': 'next'},
                    'items': [NODE, {'metadata': {'name': 'bare'}}]}


def test_a_node_without_labels_has_no_labels_key_and_empty_strings_are_left_out():
    # The last page's continue is empty, as is a cluster-scoped object's namespace: JSON leaves both out.
    page = read_metadata_list([metadata_list([{'metadata': {'name': 'bare', 'namespace': ''}}])])
    assert page['items'] == [{'metadata': {'name': 'bare'}}]
    assert page['metadata'] == {'resourceVersion': '42'}


def test_map_entries_in_any_order_and_with_an_empty_value():
    labels = (field(11, field(2, 'v') + field(1, 'k'))  # value first
              + field(11, field(1, 'role'))  # no value field: ''
              + field(11, number_field(3, 1) + field(1, 'a') + field(2, 'b')))  # an unknown field first
    assert object_meta(labels, 0, len(labels)) == {'labels': {'k': 'v', 'role': '', 'a': 'b'}}


def test_fields_of_every_wire_type_are_skipped():
    fixed64, fixed32 = varint(20 << 3 | 1) + b'\x00' * 8, varint(21 << 3 | 5) + b'\x00' * 4
    data = fixed64 + field(1, 'n') + fixed32 + number_field(22, 300) + field(6, '5')
    assert object_meta(data, 0, len(data)) == {'name': 'n', 'resourceVersion': '5'}


@pytest.mark.parametrize('data, message', [
    (b'{"kind": "NodeList"}', "no protobuf envelope (the answer starts with b'{\"kind\":')"),
    (MAGIC + field(1, field(2, 'NodeList')) + field(2, b''), 'a NodeList, not a PartialObjectMetadataList'),
    (MAGIC + field(2, b''), 'a message of no kind, not a PartialObjectMetadataList'),
    (metadata_list([NODE])[:-40], 'a field runs past the end of its message'),
    (MAGIC + varint(1 << 3 | 3), 'wire type 3 at byte 5'),
    (MAGIC + b'\x0a', 'the answer ends within a field'),
])
def test_what_is_not_a_metadata_list_is_an_error(data, message):
    with pytest.raises(ProtobufError) as error:
        read_metadata_list([data])
    assert str(error.value).startswith(message)


def test_an_answer_read_in_chunks_of_any_size_reads_as_the_whole():
    data = metadata_list([NODE, {'metadata': {'name': 'bare'}}, NODE], continue_token='next')
    whole = read_metadata_list([data])
    for size in (1, 2, 3, 7, 64, len(data)):
        assert read_metadata_list(data[start:start + size] for start in range(0, len(data), size)) == whole


def test_labels_only_leaves_the_annotations_unread():
    page = read_metadata_list([metadata_list([NODE])], LABELS)
    assert page['items'] == [{'metadata': dict((key, value) for key, value in NODE['metadata'].items()
                                               if key != 'annotations')}]


def test_an_answer_cut_short_between_chunks_is_an_error():
    data = metadata_list([NODE])
    with pytest.raises(ProtobufError) as error:
        read_metadata_list([data[:30], data[30:-40]])
    assert str(error.value).startswith('a field runs past the end of its message')
