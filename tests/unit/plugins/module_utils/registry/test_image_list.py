# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from ansible_collections.accelerators.gpu.plugins.module_utils.registry.image_list import (
    image_list, image_set_configuration, nfd_image, pinned_reference, pod_template_images, skopeo_sync)

DIGEST = 'sha256:' + 'a' * 64
OTHER = 'sha256:' + 'b' * 64
IMAGES = [
    'nvcr.io/nvidia/driver:570.172.08-rhcos4.18',
    'nvcr.io/nvidia/driver:570.172.08-rhel9.6',
    'nvcr.io/nvidia/driver:570.172.08-rhcos4.18',
    'quay.io/openshift-release-dev/ocp-v4.0-art-dev@' + DIGEST,
    'mirror.example.com:5000/nvidia/k8s-device-plugin:v0.17.4@' + OTHER,
    'localhost:5000/validator',
    'busybox:1.36',
    '',
]


def test_image_list_is_sorted_unique_and_keeps_references_as_given():
    assert image_list(IMAGES) == [
        'busybox:1.36',
        'localhost:5000/validator',
        'mirror.example.com:5000/nvidia/k8s-device-plugin:v0.17.4@' + OTHER,
        'nvcr.io/nvidia/driver:570.172.08-rhcos4.18',
        'nvcr.io/nvidia/driver:570.172.08-rhel9.6',
        'quay.io/openshift-release-dev/ocp-v4.0-art-dev@' + DIGEST,
    ]


def test_pinned_reference_prefers_the_digest_spells_the_registry_and_defaults_the_tag():
    assert pinned_reference('mirror.example.com:5000/nvidia/x:v1@' + OTHER) == 'mirror.example.com:5000/nvidia/x@' + OTHER
    assert pinned_reference('quay.io/a/b@' + DIGEST) == 'quay.io/a/b@' + DIGEST
    assert pinned_reference('nvcr.io/nvidia/driver:570') == 'nvcr.io/nvidia/driver:570'
    assert pinned_reference('localhost:5000/validator') == 'localhost:5000/validator:latest'
    assert pinned_reference('busybox:1.36') == 'docker.io/library/busybox:1.36'
    assert pinned_reference('bitnami/redis:7') == 'docker.io/bitnami/redis:7'


def test_image_set_configuration_lists_each_image_once_and_groups_operators_by_catalog():
    redhat = 'registry.redhat.io/redhat/redhat-operator-index:v4.18'
    certified = 'registry.redhat.io/redhat/certified-operator-index:v4.18'
    config = image_set_configuration(IMAGES + ['docker.io/library/busybox:1.36'], [
        {'catalog': redhat, 'package': 'nfd', 'channel': 'stable'},
        {'catalog': certified, 'package': 'gpu-operator-certified'},
        {'catalog': redhat, 'package': 'nfd', 'channel': 'stable'}])
    assert config['apiVersion'] == 'mirror.openshift.io/v2alpha1' and config['kind'] == 'ImageSetConfiguration'
    names = [entry['name'] for entry in config['mirror']['additionalImages']]
    assert names == sorted(set(names)) and len(names) == 6
    assert 'docker.io/library/busybox:1.36' in names
    assert 'mirror.example.com:5000/nvidia/k8s-device-plugin@' + OTHER in names
    assert config['mirror']['operators'] == [
        {'catalog': certified, 'packages': [{'name': 'gpu-operator-certified'}]},
        {'catalog': redhat, 'packages': [{'name': 'nfd', 'channels': [{'name': 'stable'}]}]}]


def test_image_set_configuration_without_olm_has_no_operators():
    assert image_set_configuration(['nvcr.io/nvidia/driver:570'])['mirror'] == {
        'additionalImages': [{'name': 'nvcr.io/nvidia/driver:570'}]}


def test_skopeo_sync_groups_tags_and_digests_by_registry_and_repository():
    assert skopeo_sync(IMAGES) == {
        'docker.io': {'images': {'library/busybox': ['1.36']}},
        'localhost:5000': {'images': {'validator': ['latest']}},
        'mirror.example.com:5000': {'images': {'nvidia/k8s-device-plugin': [OTHER]}},
        'nvcr.io': {'images': {'nvidia/driver': ['570.172.08-rhcos4.18', '570.172.08-rhel9.6']}},
        'quay.io': {'images': {'openshift-release-dev/ocp-v4.0-art-dev': [DIGEST]}},
    }


def test_pod_template_images_reads_init_containers_and_containers_of_every_workload():
    daemonset = {'kind': 'DaemonSet', 'spec': {'template': {'spec': {
        'initContainers': [{'name': 'wait', 'image': 'nvcr.io/nvidia/validator:v1'}],
        'containers': [{'name': 'driver', 'image': 'nvcr.io/nvidia/driver:570-rhcos4.18'},
                       {'name': 'dtk', 'image': 'quay.io/dtk@' + DIGEST}]}}}}
    job = {'kind': 'Job', 'spec': {'template': {'spec': {'containers': [{'image': 'nvcr.io/nvidia/validator:v1'}]}}}}
    assert pod_template_images([daemonset, job, {'kind': 'Deployment', 'spec': {}}]) == [
        'nvcr.io/nvidia/driver:570-rhcos4.18', 'nvcr.io/nvidia/validator:v1', 'quay.io/dtk@' + DIGEST]


def test_nfd_image_follows_the_openshift_minor_unless_set_and_is_upstream_elsewhere():
    upstream = 'registry.k8s.io/nfd/node-feature-discovery:v0.17.3'
    assert nfd_image('4.18.22', True, '', upstream) == \
        'registry.redhat.io/openshift4/ose-node-feature-discovery-rhel9:v4.18'
    assert nfd_image('4.21.0-rc.1', True) == 'registry.redhat.io/openshift4/ose-node-feature-discovery-rhel9:v4.21'
    assert nfd_image('4.15.3', True) == 'registry.redhat.io/openshift4/ose-node-feature-discovery-rhel9:v4.15'
    # Before 4.15 the build is RHEL 8 based, without the suffix.
    assert nfd_image('4.14.9', True) == 'registry.redhat.io/openshift4/ose-node-feature-discovery:v4.14'
    # The user's image wins, whatever the version.
    assert nfd_image('4.18.22', True, 'mirror.example.com/nfd:v4.18-fix') == 'mirror.example.com/nfd:v4.18-fix'
    assert nfd_image(None, True, 'mirror.example.com/nfd:v4.18') == 'mirror.example.com/nfd:v4.18'
    # No version to follow.
    assert nfd_image(None, True) is None
    assert nfd_image('', True) is None
    assert nfd_image('stable', True) is None
    # Plain Kubernetes: upstream NFD, the OpenShift settings do not matter.
    assert nfd_image(None, False, 'mirror.example.com/nfd:v4.18', upstream) == upstream
    assert nfd_image('4.18.22', False, '', upstream) == upstream
