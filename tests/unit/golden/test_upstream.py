# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The golden DaemonSets beside the GPU Operator's manifests (upstream.py): every difference has its reason in
tests/golden/upstream-differences.yml, and the compatibility page's table is the one generated from them."""

import pytest

from ansible_collections.accelerators.gpu.tests.unit.golden import upstream
from ansible_collections.accelerators.gpu.tests.unit.golden.compare import ABSENT


@pytest.fixture(scope='module')
def found():
    return upstream.upstream_differences()


def test_every_difference_from_the_gpu_operators_manifests_has_its_reason(found):
    problems = upstream.unexplained(found, upstream.reasons())
    assert not problems, '\n'.join(problems + [
        'Give each new difference its reason in tests/golden/upstream-differences.yml, then `make golden`.'])


def test_the_compatibility_pages_table_is_the_one_generated_from_the_reasons(found):
    assert upstream.page_table() == upstream.table(found, upstream.reasons()), (
        '%s: its table is not the one generated from tests/golden/upstream-differences.yml: run `make golden`'
        % upstream.PAGE.relative_to(upstream.ROOT))


def test_the_gpu_operators_manifests_missing_from_the_cache_fail_saying_make_deps(tmp_path, monkeypatch):
    monkeypatch.setenv('ACCEL_GPU_CACHE', str(tmp_path))
    with pytest.raises(AssertionError, match='run make deps'):
        upstream.assets_dir()
    assert list(tmp_path.iterdir()) == []


def test_what_the_gpu_operator_fills_in_and_environment_values_are_not_compared():
    def daemonset(image, value, config_map, host_path):
        return {'metadata': {'name': 'x', 'namespace': image}, 'spec': {
            'selector': {'matchLabels': {'app': 'x'}},
            'template': {'metadata': {'labels': {'app': 'x'}}, 'spec': {
                'containers': [{'name': 'c', 'image': image, 'env': [{'name': 'A', 'value': value}]}],
                'volumes': [{'name': 'v', 'configMap': {'name': config_map}}, {'name': 'w', 'hostPath': host_path}]}}}}

    theirs = daemonset('FILLED BY THE OPERATOR', '1', 'FILLED_BY_OPERATOR', {'path': '/run'})
    ours = daemonset('nvcr.io/nvidia/x:1', '2', 'default-config', {'path': '/run', 'type': 'Directory'})
    assert upstream.compared(theirs, ours) == [('spec.template.spec.volumes[w].hostPath.type', ABSENT, 'Directory')]
