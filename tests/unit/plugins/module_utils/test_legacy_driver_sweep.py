"""TEMPORARY (removed with the dict builders): the settings the unit tests leave out, crossed with every mode, each
plan compared with the dict builders' by legacy_driver_comparison (load it with -p)."""

import itertools

from ansible_collections.accelerators.gpu.plugins.module_utils import driver_plan
from ansible_collections.accelerators.gpu.plugins.module_utils.node_facts import node_facts
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver_template import TEMPLATE
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.nodes import (
    KERNEL_418, RHCOS_416, RHCOS_418, layered_rhcos_node, rhcos_node, ubuntu_node)

DTK = {version: {'image': 'quay.io/dtk@sha256:' + c * 64, 'status': 'resolved', 'message': 'ok'}
       for version, c in ((RHCOS_416, 'a'), (RHCOS_418, 'b'), ('9.6.20260303-1', 'c'))}
BASE = {'namespace': 'gpu', 'repository': 'nvcr.io/nvidia', 'version': '570.172.08', 'branch': '570'}
VARIANTS = [
    {},
    {'image_pull_policy': 'Always', 'image_pull_secrets': ['a', 'b'], 'priority_class_name': 'p',
     'service_account_name': 's', 'tolerations': [], 'node_selector': {'pool': 'gpu'}, 'labels': {'team': 'ml', 'app': 'x'}},
    {'annotations': {'owner': 'ml', 'kubectl.kubernetes.io/default-container': 'other',
                     'accelerators.gpu/prepared-for-upgrade': 'mine'}},
    {'env': [{'name': 'GDS_ENABLED', 'value': 'false'}, {'name': 'X', 'value': '1'}, {'name': 'X', 'value': '2'},
             {'name': 'NODE_IP', 'value': 'ip'}, {'name': 'GPU_DIRECT_RDMA_ENABLED', 'valueFrom': {'fieldRef': {'fieldPath': 'x'}}}],
     'rdma': True, 'gds_image': 'nvcr.io/nvidia/gds:2.20', 'gdrcopy_image': 'nvcr.io/nvidia/gdrcopy@sha256:' + 'd' * 64},
    {'rdma': True, 'use_host_mofed': True, 'resources': {'limits': {'memory': '2Gi'}},
     'manager': {'image': 'mgr:v1', 'env': [{'name': 'NODE_NAME', 'value': 'n'}, {'name': 'ENABLE_AUTO_DRAIN', 'value': 'true'},
                                            {'name': 'USE_HOST_MOFED', 'value': 'false'}]}},
    {'startup_probe': {'exec': {'command': ['true']}, 'periodSeconds': 5}, 'liveness_probe': {'tcpSocket': {'port': 1}},
     'readiness_probe': {'exec': {'command': ['ready']}}, 'trusted_ca_config_map': 'ca', 'image_ref': 'r/d:1',
     'tolerations': [{'operator': 'Exists'}], 'manager': {'image': 'mgr:v2', 'env': None}},
    {'gds_image': 'nvcr.io/nvidia/gds:2.20', 'image': 'driver-x', 'annotations': {'n': 1}, 'env': None, 'resources': {}},
]
NODES = [
    [rhcos_node('a'), rhcos_node('b', rhcos=RHCOS_418, kernel=KERNEL_418, ocp='4.18')],
    [layered_rhcos_node('c'), rhcos_node('d', kernel=KERNEL_418 + '+rt')],
    [ubuntu_node('u1'), ubuntu_node('u2', kernel='6.8.0-45-generic', version='24.04')],
    [ubuntu_node('u3')],
]


def test_every_variant_in_every_mode_renders_what_the_dict_builders_built():
    made = 0
    for variant, nodes, mode, available, prepare in itertools.product(
            VARIANTS, NODES, driver_plan.MODES, (None, set()), ((), (RHCOS_418,), ('6.8.0-50-generic',))):
        if prepare and mode == 'single':
            continue
        try:
            driver_plan.desired_driver_daemonsets(TEMPLATE, dict(BASE, **variant), [node_facts(n) for n in nodes], DTK,
                                                  mode, available, prepare)
        except driver_plan.PlanError:
            pass
        made += 1
    assert made == 7 * 4 * (3 * 2 * 3 - 4)
