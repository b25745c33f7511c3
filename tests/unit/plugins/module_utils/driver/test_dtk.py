# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import json

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.driver.dtk import (
    NOT_OPENSHIFT, STREAM_MISSING, dtk_tags, read_dtk_imagestream, resolve_dtk_images)
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.errors import APIError
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.k8s.test_client import (
    NOT_FOUND_OBJECT, DynamicClient, make_api)

ART = 'quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:'
IMG_416 = ART + 'a' * 64
IMG_416_OLD = ART + 'b' * 64
IMG_418 = ART + 'c' * 64
IMG_RHEL10 = ART + 'd' * 64


def imagestream(spec_tags, status_tags=None):
    return {
        'apiVersion': 'image.openshift.io/v1',
        'kind': 'ImageStream',
        'metadata': {'name': 'driver-toolkit', 'namespace': 'openshift'},
        'spec': {'tags': spec_tags},
        'status': {'tags': status_tags or []},
    }


def tag(name, image, kind='DockerImage'):
    return {'name': name, 'from': {'kind': kind, 'name': image}, 'importPolicy': {'scheduled': True}}


def healthy_stream():
    return imagestream(
        [tag('latest', IMG_418), tag('416.94.202405081406-0', IMG_416), tag('418.94.202509100653-0', IMG_418),
         {'name': '49.84.202110081407-0'}],
        [{'tag': '416.94.202405081406-0', 'items': [
            {'dockerImageReference': IMG_416, 'created': '2024-06-01T10:00:00Z', 'image': 'sha256:' + 'a' * 64},
            {'dockerImageReference': IMG_416_OLD, 'created': '2024-05-09T10:00:00Z', 'image': 'sha256:' + 'b' * 64},
        ]}])


def test_dtk_tags_reads_spec_skips_latest_and_tags_without_from():
    parsed = dtk_tags(healthy_stream())
    assert sorted(parsed['tags']) == ['416.94.202405081406-0', '418.94.202509100653-0']
    assert parsed['tags']['416.94.202405081406-0']['image'] == IMG_416
    assert [h['image'] for h in parsed['tags']['416.94.202405081406-0']['history']] == [IMG_416, IMG_416_OLD]
    assert parsed['tags']['418.94.202509100653-0']['history'] == []
    assert parsed['streams'] == ['latest']
    assert parsed['broken'] is False
    assert parsed['problems'] == [] and parsed['notes'] == []


def test_dtk_tags_reads_layered_and_rhel10_versions_and_second_stream():
    parsed = dtk_tags(imagestream([
        tag('latest', IMG_418), tag('latest-rhel-10', IMG_RHEL10),
        tag('9.6.20260303-1', IMG_418), tag('10.1.20260126-0', IMG_RHEL10)]))
    assert sorted(parsed['tags']) == ['10.1.20260126-0', '9.6.20260303-1']
    assert parsed['streams'] == ['latest', 'latest-rhel-10']
    assert parsed['notes'] == [
        'image stream openshift/driver-toolkit carries several RHCOS streams (latest, latest-rhel-10): nodes may '
        'run different RHCOS streams at once, each gets the DTK of its own version']


def test_dtk_tags_detects_broken_stream():
    parsed = dtk_tags(imagestream([tag('416.94.202405081406-0', IMG_416), tag('', IMG_418)]))
    assert parsed['broken'] is True
    assert len(parsed['problems']) == 1
    assert 'BZ#2014071' in parsed['problems'][0]
    assert 'oc delete imagestream driver-toolkit -n openshift' in parsed['problems'][0]
    assert 'cluster-version operator recreates it' in parsed['problems'][0]


def test_dtk_tags_detects_placeholders_and_non_rhcos_tags():
    parsed = dtk_tags(imagestream([
        tag('0.0.1-snapshot-machine-os', 'example.com/image-reference-placeholder:driver-toolkit'),
        tag('418.94.202509100653-0', 'example.com/image-reference-placeholder:driver-toolkit'),
        tag('my-custom', IMG_416)]))
    assert parsed['placeholders'] == ['0.0.1-snapshot-machine-os', '418.94.202509100653-0']
    assert parsed['not_rhcos'] == ['my-custom']
    assert list(parsed['tags']) == ['my-custom']
    assert 'bad' in parsed['problems'][0] and '0.0.1-snapshot-machine-os' in parsed['problems'][0]
    assert parsed['notes'] == [
        'image stream openshift/driver-toolkit has tag(s) that are not RHCOS versions: my-custom']


def test_dtk_tag_from_image_stream_tag_uses_status_image():
    stream = imagestream([tag('416.94.202405081406-0', 'driver-toolkit:other', kind='ImageStreamTag')],
                         [{'tag': '416.94.202405081406-0', 'items': [{'dockerImageReference': IMG_416}]}])
    assert dtk_tags(stream)['tags']['416.94.202405081406-0']['image'] == IMG_416


def test_resolve_found_missing_and_override():
    result = resolve_dtk_images(
        healthy_stream(), ['416.94.202405081406-0', '418.94.202509100653-1', '9.6.20260303-1', '416.94.202405081406-0'],
        overrides={'9.6.20260303-1': 'registry.local/dtk@sha256:' + 'e' * 64})
    versions = result['versions']
    assert sorted(versions) == ['416.94.202405081406-0', '418.94.202509100653-1', '9.6.20260303-1']
    found = versions['416.94.202405081406-0']
    assert (found['image'], found['source'], found['status']) == (IMG_416, 'imagestream', 'resolved')
    assert len(found['history']) == 2
    missing = versions['418.94.202509100653-1']
    # A near tag (418.94.202509100653-0) exists: it must not be guessed.
    assert (missing['image'], missing['source'], missing['status']) == (None, None, 'missing')
    assert 'RHCOS 418.94.202509100653-1 has no tag' in missing['message']
    assert 'pass an override for 418.94.202509100653-1' in missing['message'].lower()
    assert 'cluster-version operator' in missing['message']
    override = versions['9.6.20260303-1']
    assert (override['image'], override['source'], override['status']) == (
        'registry.local/dtk@sha256:' + 'e' * 64, 'override', 'resolved')
    assert result['problems'] == []


def test_override_beats_image_stream():
    versions = resolve_dtk_images(healthy_stream(), ['416.94.202405081406-0'],
                                  {'416.94.202405081406-0': 'mirror.local/dtk:416'})['versions']
    assert versions['416.94.202405081406-0']['image'] == 'mirror.local/dtk:416'
    assert versions['416.94.202405081406-0']['source'] == 'override'


def test_missing_stream_leaves_every_version_unresolved():
    result = resolve_dtk_images(None, ['416.94.202405081406-0', '9.6.20260303-1'])
    assert [v['status'] for v in result['versions'].values()] == ['missing', 'missing']
    assert all(v['image'] is None for v in result['versions'].values())
    assert 'not OpenShift' in result['versions']['9.6.20260303-1']['message']
    assert result['problems'] == [
        'image stream openshift/driver-toolkit not found: the cluster is not OpenShift or its Driver Toolkit '
        'image stream is absent']


def test_missing_stream_says_whether_the_cluster_is_openshift():
    not_openshift = resolve_dtk_images(None, ['9.6.20260303-1'], stream_absence=NOT_OPENSHIFT)
    assert 'does not serve image.openshift.io/v1, so this is not OpenShift' in not_openshift['problems'][0]
    assert 'not OpenShift' in not_openshift['versions']['9.6.20260303-1']['message']
    missing = resolve_dtk_images(None, ['9.6.20260303-1'], stream_absence=STREAM_MISSING)
    assert 'serves image.openshift.io/v1 but the stream does not exist' in missing['problems'][0]
    assert 'cluster-version operator' in missing['versions']['9.6.20260303-1']['message']
    assert 'pass an override for 9.6.20260303-1' in missing['versions']['9.6.20260303-1']['message']


def test_broken_stream_marks_absent_versions_broken_and_keeps_present_ones():
    stream = imagestream([tag('416.94.202405081406-0', IMG_416), tag('', IMG_418)])
    result = resolve_dtk_images(stream, ['416.94.202405081406-0', '418.94.202509100653-0'])
    assert result['versions']['416.94.202405081406-0']['status'] == 'resolved'
    broken = result['versions']['418.94.202509100653-0']
    assert broken['status'] == 'broken'
    assert 'oc delete imagestream driver-toolkit -n openshift' in broken['message']
    assert len(result['problems']) == 1


def test_placeholder_stream_marks_versions_placeholder():
    stream = imagestream([tag('0.0.1-snapshot-machine-os', 'example.com/image-reference-placeholder:driver-toolkit')])
    result = resolve_dtk_images(stream, ['418.94.202509100653-0'])
    entry = result['versions']['418.94.202509100653-0']
    assert entry['status'] == 'placeholder'
    assert '0.0.1-snapshot-machine-os' in entry['message'] and 'bad' in entry['message']


def test_dtk_stream_absence_is_told_apart(monkeypatch):
    path = '/apis/image.openshift.io/v1/namespaces/openshift/imagestreams/driver-toolkit'

    def read(answer):
        return read_dtk_imagestream(make_api(monkeypatch, DynamicClient({('GET', path): answer})))
    assert read((404, json.dumps(NOT_FOUND_OBJECT))) == (None, STREAM_MISSING)
    assert read((404, '404 page not found\n')) == (None, NOT_OPENSHIFT)
    assert read({'kind': 'ImageStream'}) == ({'kind': 'ImageStream'}, None)
    with pytest.raises(APIError) as error:
        read((403, json.dumps({'message': 'imagestreams is forbidden'})))
    assert str(error.value) == 'GET %s: HTTP 403: imagestreams is forbidden' % path
