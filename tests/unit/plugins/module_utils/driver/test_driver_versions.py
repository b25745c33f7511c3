# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.driver.versions import (
    downgrade_refusal, driver_downgrades, image_driver_version, is_older, label_driver_version)
from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.facts import node_facts
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver.role_template import desired_driver_daemonsets
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.node_dicts import (
    RHCOS_416, rhcos_node, ubuntu_node)

DTK = {RHCOS_416: {'image': 'quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:' + 'a' * 64,
                   'status': 'resolved', 'message': 'ok', 'history': []}}
SPEC = {'namespace': 'gpu', 'repository': 'nvcr.io/nvidia', 'image': 'driver', 'branch': '580'}
DS_416 = 'nvidia-driver-daemonset-' + RHCOS_416
GFD_FULL = 'nvidia.com/cuda.driver-version.full'


@pytest.mark.parametrize('image, version', [
    ('nvcr.io/nvidia/driver:570.172.08-rhcos4.18', '570.172.08'),
    ('nvcr.io/nvidia/driver:580.95.05-ubuntu22.04', '580.95.05'),
    # Precompiled: the branch alone.
    ('nvcr.io/nvidia/driver:570-5.14.0-427.33.1.el9_4.x86_64-rhcos4.16', '570'),
    ('registry.example.com:5000/nvidia/driver:550.90.07', '550.90.07'),
    ('nvcr.io/nvidia/driver:570.172.08-rhcos4.18@sha256:' + 'b' * 64, '570.172.08'),
    ('registry.example.com:5000/nvidia/driver@sha256:' + 'b' * 64, None),
    ('nvcr.io/nvidia/driver:latest', None),
    ('nvcr.io/nvidia/driver', None),
    (None, None),
])
def test_the_version_of_a_driver_image_is_where_its_tag_starts(image, version):
    assert image_driver_version(image) == version


def test_versions_compare_number_by_number_over_the_components_both_have():
    assert is_older('570.172.08', '580.95.05') and not is_older('580.95.05', '570.172.08')
    # Numbers, not strings: 86 < 172, 9 < 10.
    assert is_older('570.86.15', '570.172.08') and is_older('9.1', '10.0')
    assert not is_older('570.172.08', '570.172.08')
    # A branch is neither older nor newer than a version of it.
    assert not is_older('570', '570.172.08') and not is_older('570.172.08', '570')
    assert is_older('570', '580.95.05') and is_older('570.172.08', '580')


def test_the_loaded_driver_is_gfds_full_version_else_its_parts():
    assert label_driver_version({GFD_FULL: '580.95.05'}) == '580.95.05'
    assert label_driver_version({'nvidia.com/cuda.driver.major': '580', 'nvidia.com/cuda.driver.minor': '95',
                                 'nvidia.com/cuda.driver.rev': '05'}) == '580.95.05'
    # A two-part version has an empty rev (GFD's nvml.go).
    assert label_driver_version({'nvidia.com/cuda.driver.major': '580', 'nvidia.com/cuda.driver.minor': '95',
                                 'nvidia.com/cuda.driver.rev': ''}) == '580.95'
    assert label_driver_version({}) is None and label_driver_version({GFD_FULL: 'x.y'}) is None


def plan(version, *nodes, **spec):
    return desired_driver_daemonsets(dict(SPEC, version=version, **spec), [node_facts(n) for n in nodes], DTK, 'rhcos')


def live(daemonset):
    daemonset['metadata'].update(uid='u', resourceVersion='1')
    return daemonset


def node(name, loaded=None, **labels):
    extra = {'nvidia.com/gpu.deploy.driver': 'true'}
    if loaded:
        extra[GFD_FULL] = loaded
    extra.update(labels)
    return rhcos_node(name, extra=extra)


def test_a_daemonset_moved_back_to_an_older_version_downgrades_its_nodes():
    nodes = [node('a'), node('b')]
    existing = [live(ds) for ds in plan('580.95.05', *nodes)['desired']]
    older = plan('570.172.08', *nodes)
    found = driver_downgrades(older['assignments'], existing, [node_facts(n) for n in nodes])
    assert found == dict((name, {'running': '580.95.05', 'requested': '570.172.08', 'daemonset': DS_416})
                         for name in ('a', 'b'))
    assert downgrade_refusal(found) == (
        'refusing to downgrade the driver from 580.95.05 to 570.172.08 on 2 GPU node(s) (a, b)')
    # The same version, a newer one, or a first deploy: nothing.
    for version in ('580.95.05', '580.105.08'):
        assert driver_downgrades(plan(version, *nodes)['assignments'], existing, [node_facts(n) for n in nodes]) == {}
    assert driver_downgrades(older['assignments'], [], [node_facts(n) for n in nodes]) == {}


def test_the_loaded_driver_counts_where_the_daemonset_already_says_the_older_one():
    # A rollback allowed before and stopped half way: the DaemonSet asks for 570 already, node b still runs 580.
    nodes = [node('a', loaded='570.172.08'), node('b', loaded='580.95.05'), node('c')]
    older = plan('570.172.08', *nodes)
    existing = [live(ds) for ds in older['desired']]
    found = driver_downgrades(older['assignments'], existing, [node_facts(n) for n in nodes])
    assert found == {'b': {'running': '580.95.05', 'requested': '570.172.08', 'daemonset': DS_416}}


def test_the_newer_of_daemonset_and_loaded_driver_is_named_and_moves_are_grouped():
    nodes = [node('a', loaded='590.10.01'), node('b')]
    existing = [live(ds) for ds in plan('580.95.05', *nodes)['desired']]
    found = driver_downgrades(plan('570.172.08', *nodes)['assignments'], existing, [node_facts(n) for n in nodes])
    assert (found['a']['running'], found['b']['running']) == ('590.10.01', '580.95.05')
    assert downgrade_refusal(found) == (
        'refusing to downgrade the driver from 580.95.05 to 570.172.08 on 1 GPU node(s) (b); '
        'from 590.10.01 to 570.172.08 on 1 GPU node(s) (a)')


def test_host_drivers_opted_out_nodes_unversioned_images_and_other_daemonsets_are_left_out():
    nodes = [node('host', loaded='590.10.01', **{'nvidia.com/gpu.deploy.driver': 'pre-installed'}),
             node('out', loaded='590.10.01', **{'nvidia.com/gpu.deploy.driver': 'false'}),
             node('a', loaded='580.95.05')]
    facts = [node_facts(n) for n in nodes]
    older = plan('570.172.08', *nodes)
    assert sorted(driver_downgrades(older['assignments'], [], facts)) == ['a']
    # An image_ref without a version in its tag: no order is known.
    latest = plan(None, *nodes, image_ref='registry.example.com/driver:latest')
    assert driver_downgrades(latest['assignments'], [], facts) == {}
    # A DaemonSet of the same name this collection does not manage (the GPU Operator's) tells nothing.
    foreign = live(plan('590.10.01', *nodes)['desired'][0])
    foreign['metadata']['labels'] = {'app': DS_416}
    assert driver_downgrades(older['assignments'], [foreign], [node_facts(node('a'))]) == {}


def test_a_precompiled_branch_compares_with_the_versions_it_can_be_told_from():
    ubuntu = ubuntu_node('u', extra={'nvidia.com/gpu.deploy.driver': 'true', GFD_FULL: '580.95.05'})
    facts = [node_facts(ubuntu)]

    def kernel_plan(branch):
        return desired_driver_daemonsets(dict(SPEC, branch=branch), facts, {}, 'kernel')

    existing = [live(ds) for ds in kernel_plan('580')['desired']]
    assert driver_downgrades(kernel_plan('580')['assignments'], existing, facts) == {}
    found = driver_downgrades(kernel_plan('570')['assignments'], existing, facts)
    assert [(entry['running'], entry['requested']) for entry in found.values()] == [('580.95.05', '570')]


def test_a_refusal_names_twenty_nodes_and_counts_the_rest():
    found = dict(('n%02d' % index, {'running': '580.95.05', 'requested': '570.172.08', 'daemonset': 'd'})
                 for index in range(25))
    text = downgrade_refusal(found)
    assert text.endswith('on 25 GPU node(s) (%s and 5 more)' % ', '.join('n%02d' % i for i in range(20)))
