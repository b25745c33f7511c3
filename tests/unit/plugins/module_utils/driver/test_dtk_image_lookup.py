# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import json

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.errors import TaskError
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.dtk import NOT_OPENSHIFT
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.dtk_image_lookup import (
    parse_release_info, release_info_command, run)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.fakes import FakeCluster, FakeModule
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.node_dicts import RHCOS_416, RHCOS_418

ART = 'quay.io/openshift-release-dev/ocp-v4.0-art-dev'
DTK_416 = ART + '@sha256:' + 'a' * 64
RELEASE_DTK = ART + '@sha256:' + 'f' * 64


def params(**overrides):
    base = {'versions': [], 'overrides': {}, 'apply_mirrors': True, 'release': None, 'oc_path': None,
            'idms_file': None, 'registry_config': None, 'fail_on_unresolved': False}
    base.update(overrides)
    return base


def stream(*tags):
    return {'metadata': {'name': 'driver-toolkit', 'namespace': 'openshift'},
            'spec': {'tags': [{'name': name, 'from': {'kind': 'DockerImage', 'name': image}} for name, image in tags]}}


def mirror_set(field, source, mirrors, policy=None):
    entry = {'source': source, 'mirrors': mirrors}
    if policy:
        entry['mirrorSourcePolicy'] = policy
    return {'metadata': {'name': 'site'}, 'spec': {field: [entry]}}


def test_not_openshift_leaves_versions_unresolved_and_says_why():
    cluster = FakeCluster(stream_absence=NOT_OPENSHIFT)
    module = FakeModule(params(versions=[RHCOS_416, RHCOS_418], overrides={RHCOS_418: 'mirror.local/dtk:418'}))
    result = run(module, cluster)
    assert result['unresolved'] == [RHCOS_416]
    assert result['images'][RHCOS_418]['pull_from'] == 'mirror.local/dtk:418'
    assert 'not OpenShift' in result['problems'][0]
    assert result['images'][RHCOS_416]['message'] in module.warnings
    with pytest.raises(TaskError) as error:
        run(FakeModule(params(versions=[RHCOS_416], fail_on_unresolved=True)), cluster)
    assert str(error.value).startswith('no usable DTK image for RHCOS %s: no DTK image for RHCOS %s' % (
        RHCOS_416, RHCOS_416))
    assert error.value.result['unresolved'] == [RHCOS_416]


def test_pull_that_no_rule_allows_is_a_problem():
    # The source may not be contacted and the only mirror is a tag mirror, useless for a digest reference.
    cluster = FakeCluster(imagestream=stream((RHCOS_416, DTK_416)), mirror_sets={
        'idms': [], 'icsp': [],
        'itms': [mirror_set('imageTagMirrors', ART, ['mirror.local/dtk'], 'NeverContactSource')]})
    result = run(FakeModule(params(versions=[RHCOS_416])), cluster)
    entry = result['images'][RHCOS_416]
    assert (entry['status'], entry['candidates'], entry['pull_from']) == ('resolved', [], None)
    assert result['problems'] == [
        'DTK image of RHCOS %s %s cannot be pulled: its source is NeverContactSource and no mirror rule fits a digest '
        'reference; add a matching ImageDigestMirrorSet/ImageTagMirrorSet mirror' % (RHCOS_416, DTK_416)]


def test_without_mirrors_no_mirror_set_is_read():
    cluster = FakeCluster(imagestream=stream((RHCOS_416, DTK_416)))
    result = run(FakeModule(params(versions=[RHCOS_416], apply_mirrors=False)), cluster)
    assert result['images'][RHCOS_416]['candidates'] == [DTK_416]
    assert cluster.reads == [('imagestream', None)]


def release_info(dtk_image=RELEASE_DTK, rhcos=RHCOS_418):
    """`oc adm release info --output=json` output, shortened to what the lookup reads."""
    return json.dumps({'image': 'quay.io/openshift-release-dev/ocp-release@sha256:' + 'e' * 64,
                       'references': {'kind': 'ImageStream', 'spec': {'tags': [
                           {'name': 'cli', 'from': {'kind': 'DockerImage', 'name': ART + '@sha256:' + 'b' * 64}},
                           {'name': 'driver-toolkit', 'from': {'kind': 'DockerImage', 'name': dtk_image}}]}},
                       'displayVersions': {'machine-os': {'Version': rhcos, 'DisplayName': 'Red Hat Enterprise Linux '
                                                                                           'CoreOS'},
                                           'kubernetes': {'Version': '1.31.8', 'DisplayName': ''}}})


def test_release_through_oc_with_mirror_file_and_credentials():
    cluster = FakeCluster(imagestream=stream(), mirror_sets={
        'idms': [mirror_set('imageDigestMirrors', ART, ['mirror.local/dtk'])], 'itms': [], 'icsp': []})
    module = FakeModule(params(release='4.19.10', idms_file='/site/idms.yaml', registry_config='/site/auth.json'),
                        bin_paths={'oc': '/usr/local/bin/oc'}, command_results=[(0, release_info() + '\n', '')])
    result = run(module, cluster)
    assert module.commands == [['/usr/local/bin/oc', 'adm', 'release', 'info', '4.19.10', '--output=json',
                                '--idms-file=/site/idms.yaml', '--registry-config=/site/auth.json']]
    assert result['release'] == {'release': '4.19.10', 'image': RELEASE_DTK, 'rhcos': RHCOS_418,
                                 'pull_from': 'mirror.local/dtk@sha256:' + 'f' * 64,
                                 'candidates': ['mirror.local/dtk@sha256:' + 'f' * 64, RELEASE_DTK]}


def test_release_command_without_mirror_file_or_credentials():
    assert release_info_command({'idms_file': None, 'registry_config': None}, 'oc', 'quay.io/x/release:4.20.1') == [
        'oc', 'adm', 'release', 'info', 'quay.io/x/release:4.20.1', '--output=json']


def test_release_info_without_machine_os_gives_no_build():
    info = json.loads(release_info())
    del info['displayVersions']
    assert parse_release_info(json.dumps(info), '4.19.10') == (RELEASE_DTK, None)


@pytest.mark.parametrize('output, message', [
    ('error: no such release', '`oc adm release info 4.19.10 --output=json` did not print a JSON object: error: no '
                               'such release'),
    (json.dumps({'references': {'spec': {'tags': [{'name': 'cli', 'from': {'name': 'x'}}]}}}),
     'release 4.19.10 has no driver-toolkit image among its 1 image references: a release before OpenShift 4.6, or '
     'not an OpenShift release'),
])
def test_release_info_without_a_dtk_image_is_explained(output, message):
    with pytest.raises(TaskError) as error:
        parse_release_info(output, '4.19.10')
    assert str(error.value) == message


def test_release_lookup_failures_are_explained():
    cluster = FakeCluster(imagestream=stream())
    with pytest.raises(TaskError) as error:
        run(FakeModule(params(release='4.19.10')), cluster)
    assert str(error.value) == (
        'release 4.19.10 was given, and finding its DTK image and RHCOS build needs the oc client (`oc adm release '
        'info 4.19.10 --output=json`), which is not in PATH: install oc or set oc_path')
    failing = FakeModule(params(release='4.99.0', oc_path='/opt/oc'),
                         command_results=[(1, '', 'error: unable to read image 4.99.0: manifest unknown\n')])
    with pytest.raises(TaskError) as error:
        run(failing, cluster)
    assert str(error.value) == ('`/opt/oc adm release info 4.99.0 --output=json` failed (rc=1): '
                                'error: unable to read image 4.99.0: manifest unknown')
