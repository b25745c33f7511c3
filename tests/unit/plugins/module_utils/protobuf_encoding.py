# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The protobuf encoding the API server writes of a PartialObjectMetadataList, for test answers: the fields
kube_protobuf reads, and some it skips (generation, creationTimestamp, managedFields)."""

from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.protobuf import MAGIC


def varint(value):
    out = bytearray()
    while True:
        byte, value = value & 0x7f, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number, payload):
    """A length-delimited field (a string, bytes or a message)."""
    payload = payload.encode() if isinstance(payload, str) else payload
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def number_field(number, value):
    return varint(number << 3) + varint(value)


def object_meta(metadata):
    out = b''.join(field(number, metadata[name]) for number, name in ((1, 'name'), (3, 'namespace'), (5, 'uid'),
                                                                      (6, 'resourceVersion')) if name in metadata)
    out += number_field(7, 3) + field(8, number_field(1, 1764000000))
    for number, name in ((11, 'labels'), (12, 'annotations')):
        out += b''.join(field(number, field(1, key) + field(2, value))
                        for key, value in sorted((metadata.get(name) or {}).items()))
    return out + field(17, field(1, 'kubelet') + field(7, b'{"f:status":{}}'))


def metadata_list(nodes, continue_token='', resource_version='42'):
    """The answer to a list of nodes in the metadata view, encoded: the envelope (runtime.Unknown), the list."""
    listed = field(1, field(2, resource_version) + field(3, continue_token) + number_field(4, len(nodes)))
    listed += b''.join(field(2, field(1, object_meta(node['metadata']))) for node in nodes)
    type_meta = field(1, 'meta.k8s.io/v1') + field(2, 'PartialObjectMetadataList')
    return MAGIC + field(1, type_meta) + field(2, listed) + field(3, '') + field(4, '')
