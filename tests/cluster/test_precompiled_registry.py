"""Precompiled driver images checked in a real registry (module_utils/driver/precompiled.py) decide driver_daemonsets' kernel mode.

The driver repository is nvcr.invalid/nvidia (a name that never resolves), mirrored by a tag mirror rule to the
local registry, which needs the pull secret's credentials and trusts only its own CA: a kernel whose tag was pushed
gets a precompiled DaemonSet, a kernel whose tag is missing falls back to the DTK build of its RHCOS version.
"""

import json

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.driver.precompiled import precompiled_available
from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.facts import node_facts
from ansible_collections.accelerators.gpu.plugins.module_utils.registry.client import RegistryClient, urllib_transport
from ansible_collections.accelerators.gpu.plugins.module_utils.registry.mirrors import mirror_rules
from gpu_fleet import RHCOS_416, driver, fleet, selector
from playbook import run

pytestmark = pytest.mark.registry

KERNEL = "5.14.0-427.33.1.el9_4.x86_64"
SOURCE = "nvcr.invalid/nvidia"


def test_missing_precompiled_tag_falls_back_to_dtk(cluster, namespace, make_fleet, local_registry):
    spec = fleet([{"name": "std", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}},
                  {"name": "rt", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}, "kernel": KERNEL + "+rt"}])
    std, rt = make_fleet(spec).node_names
    local_registry.push("nvidia/driver", ["550-%s-rhcos4.16" % KERNEL])
    nodes = [node_facts(cluster.client.sanitize_for_serialization(cluster.core.read_node(name))) for name in (std, rt)]
    rules = mirror_rules(itms=[{"metadata": {"name": "disconnected"}, "spec": {"imageTagMirrors": [
        {"source": SOURCE, "mirrors": [local_registry.host + "/nvidia"]}]}}])
    checker = RegistryClient(urllib_transport(ca_file=local_registry.ca_file), [local_registry.pull_secret()], rules)
    driver_spec = driver(spec, repository=SOURCE, branch="550")

    available, checks = precompiled_available(driver_spec, nodes, checker)
    published = "%s/driver:550-%s-rhcos4.16" % (SOURCE, KERNEL)
    missing = "%s/driver:550-%s_rt-rhcos4.16" % (SOURCE, KERNEL)
    assert available == {published}
    assert checks[published]["found"] == "%s/nvidia/driver:550-%s-rhcos4.16" % (local_registry.host, KERNEL)
    assert [attempt["reason"] for attempt in checks[missing]["attempts"]] == ["not found", "connection"]

    result = run(cluster, "accelerators.gpu.driver_daemonsets", {
        "namespace": namespace, "label_selector": selector(spec), "mode": "kernel", "driver": driver_spec,
        "precompiled_available": sorted(available), "plan_only": True})
    assert not result.get("failed"), result.get("msg")
    assert result["assignments"][std] == {"daemonset": "nvidia-driver-daemonset-5.14.0-427.33.1.el9.4-rhcos4.16",
                                          "build": "precompiled", "image": published}
    assert result["assignments"][rt]["build"] == "dtk"
    assert "precompiled image %s does not exist" % missing in " ".join(result["warnings"])


def test_module_asks_the_registry_through_the_cluster_mirrors_and_pull_secret(cluster, namespace, make_fleet,
                                                                              local_registry):
    spec = fleet([{"name": "std", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}},
                  {"name": "rt", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}, "kernel": KERNEL + "+rt"}])
    std, rt = make_fleet(spec).node_names
    local_registry.push("nvidia/driver", ["550-%s-rhcos4.16" % KERNEL])
    itms = {"apiVersion": "config.openshift.io/v1", "kind": "ImageTagMirrorSet", "metadata": {"name": namespace},
            "spec": {"imageTagMirrors": [{"source": SOURCE, "mirrors": [local_registry.host + "/nvidia"]}]}}
    cluster.custom.create_cluster_custom_object("config.openshift.io", "v1", "imagetagmirrorsets", itms)
    cluster.core.create_namespaced_secret(namespace, {
        "metadata": {"name": "driver-pull"}, "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": json.dumps(local_registry.pull_secret())}})
    try:
        result = run(cluster, "accelerators.gpu.driver_daemonsets", {
            "namespace": namespace, "label_selector": selector(spec), "mode": "kernel",
            "driver": driver(spec, repository=SOURCE, branch="550", image_pull_secrets=["driver-pull"]),
            "precompiled_registry_check": {"ca_file": local_registry.ca_file}, "plan_only": True})
    finally:
        cluster.custom.delete_cluster_custom_object("config.openshift.io", "v1", "imagetagmirrorsets", namespace)
    assert not result.get("failed"), result.get("msg")
    published = "%s/driver:550-%s-rhcos4.16" % (SOURCE, KERNEL)
    assert result["assignments"][std]["build"] == "precompiled" and result["assignments"][rt]["build"] == "dtk"
    assert result["precompiled_checks"][published]["found"] == "%s/nvidia/driver:550-%s-rhcos4.16" % (
        local_registry.host, KERNEL)
    assert local_registry.password not in json.dumps(result)
