"""accelerators.gpu.dtk_image_lookup run by ansible-playbook against the local control plane."""

import os
import shutil
import sys

import pytest
from kubernetes.client.rest import ApiException

from gpu_fleet import RHCOS_416, RHCOS_96, fake_oc, fleet
from localcluster.fleet import dtk_image
from playbook import run, warm_up

MODULE = "accelerators.gpu.dtk_image_lookup"
ART = "quay.io/openshift-release-dev/ocp-v4.0-art-dev"
RELEASE_DTK = ART + "@sha256:" + "f" * 64


@pytest.fixture
def mirror_sets(cluster):
    """Creates cluster-scoped mirror set objects (kind, plural, group/version, spec) and removes them after."""
    created = []

    def make(kind, plural, api_version, spec):
        group, version = api_version.split("/")
        name = "t-" + os.urandom(3).hex()
        cluster.custom.create_cluster_custom_object(group, version, plural, {
            "apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": spec})
        created.append((group, version, plural, name))
        return "%s/%s" % (kind, name)

    yield make
    for group, version, plural, name in created:
        try:
            cluster.custom.delete_cluster_custom_object(group, version, plural, name)
        except ApiException as error:
            if error.status != 404:
                raise


def test_tags_broken_stream_overrides_and_mirror_rules(cluster, make_fleet, mirror_sets):
    make_fleet(fleet([{"name": "old", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}},
                      {"name": "new", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_96}}],
                     openshift={"version": "4.21.3", "driver_toolkit": {"missing": [RHCOS_96], "broken": True}}))
    # The most specific source wins whatever kind of object holds it; tag mirrors only serve tagged references.
    idms = mirror_sets("ImageDigestMirrorSet", "imagedigestmirrorsets", "config.openshift.io/v1", {
        "imageDigestMirrors": [{"source": ART, "mirrors": ["mirror.example.test/ocp/dtk"]}]})
    mirror_sets("ImageContentSourcePolicy", "imagecontentsourcepolicies", "operator.openshift.io/v1alpha1", {
        "repositoryDigestMirrors": [{"source": "quay.io/openshift-release-dev", "mirrors": ["wide.example.test/ocp"]}]})
    itms = mirror_sets("ImageTagMirrorSet", "imagetagmirrorsets", "config.openshift.io/v1", {
        "imageTagMirrors": [{"source": "registry.example.test/pinned", "mirrors": ["mirror.example.test/pinned"],
                             "mirrorSourcePolicy": "NeverContactSource"}]})
    warm_up(cluster)
    pinned = "registry.example.test/pinned/dtk:9.6"
    unknown = "9.6.20260101-0"
    result = run(cluster, MODULE, {"versions": [RHCOS_416, RHCOS_96, unknown, RHCOS_416],
                                   "overrides": {unknown: pinned}})
    assert not result.get("failed"), result.get("msg")
    images = result["images"]
    assert sorted(images) == [RHCOS_416, unknown, RHCOS_96]

    found = images[RHCOS_416]
    digest = dtk_image(RHCOS_416).split("@")[1]
    assert (found["status"], found["source"], found["image"]) == ("resolved", "imagestream", dtk_image(RHCOS_416))
    assert found["candidates"] == ["mirror.example.test/ocp/dtk@" + digest, found["image"]]
    assert found["pull_from"] == "mirror.example.test/ocp/dtk@" + digest
    assert found["history"][0]["image"] == found["image"]

    override = images[unknown]
    assert (override["status"], override["source"]) == ("resolved", "override")
    assert override["candidates"] == ["mirror.example.test/pinned/dtk:9.6"]  # the source is never contacted

    broken = images[RHCOS_96]
    assert (broken["status"], broken["image"], broken["pull_from"]) == ("broken", None, None)
    assert "oc delete imagestream driver-toolkit -n openshift" in broken["message"]
    assert result["unresolved"] == [RHCOS_96]
    assert any("is broken: a tag has an empty name" in problem for problem in result["problems"])
    assert broken["message"] in result["warnings"]
    assert {rule["origin"] for rule in result["mirror_rules"]} >= {idms, itms}
    # The image stream and three mirror set lists, nothing else.
    assert result["api_requests"] == {"GET": 4}

    strict = run(cluster, MODULE, {"versions": [RHCOS_96], "fail_on_unresolved": True, "apply_mirrors": False})
    assert strict["failed"] is True
    assert strict["msg"].startswith("no usable DTK image for RHCOS %s: RHCOS %s has no tag" % (RHCOS_96, RHCOS_96))
    assert strict["api_requests"] == {"GET": 1}


def test_placeholder_stream_leaves_the_version_unresolved(cluster, make_fleet):
    make_fleet(fleet([{"name": "gpu", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_96}}],
                     openshift={"version": "4.21.3", "driver_toolkit": {"missing": [RHCOS_96], "placeholder": True}}))
    result = run(cluster, MODULE, {"versions": [RHCOS_96]})
    entry = result["images"][RHCOS_96]
    assert entry["status"] == "placeholder"
    assert "0.0.1-snapshot-machine-os" in entry["message"] and "pass an override for %s" % RHCOS_96 in entry["message"]
    assert result["unresolved"] == [RHCOS_96]


def test_release_is_resolved_with_oc_through_the_site_mirror_file(cluster, make_fleet, mirror_sets, tmp_path):
    make_fleet(fleet([{"name": "gpu", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}}]))
    mirror_sets("ImageDigestMirrorSet", "imagedigestmirrorsets", "config.openshift.io/v1", {
        "imageDigestMirrors": [{"source": ART, "mirrors": ["mirror.example.test/ocp/dtk"]}]})
    oc = fake_oc(tmp_path, RELEASE_DTK, RHCOS_96)
    idms_file = tmp_path / "idms.yaml"
    idms_file.write_text("kind: ImageDigestMirrorSet\n")
    result = run(cluster, MODULE, {"release": "4.19.10", "oc_path": oc, "idms_file": str(idms_file)})
    assert not result.get("failed"), result.get("msg")
    assert result["release"] == {"release": "4.19.10", "image": RELEASE_DTK, "rhcos": RHCOS_96,
                                 "pull_from": "mirror.example.test/ocp/dtk@sha256:" + "f" * 64,
                                 "candidates": ["mirror.example.test/ocp/dtk@sha256:" + "f" * 64, RELEASE_DTK]}
    with open(oc + ".args") as recorded:
        assert recorded.read().split() == ["adm", "release", "info", "4.19.10", "--output=json",
                                           "--idms-file=%s" % idms_file]


def test_release_without_oc_is_a_clear_error(cluster, make_fleet):
    make_fleet(fleet([{"name": "gpu", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}}]))
    path = os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin", "/bin"])
    if shutil.which("oc", path=path):
        pytest.skip("an oc client is installed on this machine")
    result = run(cluster, MODULE, {"release": "4.19.10"}, extra_env={"PATH": path})
    assert result["failed"] is True
    assert result["msg"] == (
        "release 4.19.10 was given, and finding its DTK image and RHCOS build needs the oc client (`oc adm release "
        "info 4.19.10 --output=json`), which is not in PATH: install oc or set oc_path")
