"""The nfd role: NFD installed through OLM on OpenShift, the upstream operand on Kubernetes, then waited for."""

import os

import kubernetes
import yaml
from kubernetes.client.rest import ApiException

from conftest import wait_until_deleted_namespaces_are_gone
from gpu_fleet import FLEET_LABEL, OSTREE, RHCOS_416, RHCOS_96
from playbook import play
from strict_schema import refused_field

PCI_10DE = "feature.node.kubernetes.io/pci-10de.present"


def unlabelled_fleet(registry, **extra):
    """Nodes that get NFD labels only once an nfd-worker pod is ready on them."""
    return {"name": "nfd-" + os.urandom(3).hex(), "nfd": "worker", "registry": registry, **extra,
            "nodes": [{"name": "gpu", "count": 2, "gpu": {"count": 4}, "os": {"rhcos": RHCOS_416}},
                      {"name": "gpu-new", "gpu": {"count": 4}, "os": {"rhcos": RHCOS_96, "openshift": "4.21"}},
                      {"name": "cpu", "os": {"rhcos": RHCOS_416}}]}


def run_nfd(cluster, spec, **variables):
    variables = dict({"nfd_node_selector": "%s=%s" % (FLEET_LABEL, spec["name"]), "nfd_min_gpu_nodes": 0},
                     **variables)
    return play(cluster, [("ansible.builtin.set_fact", variables),
                          ("ansible.builtin.include_role", {"name": "accelerators.gpu.nfd"})])


def outcome(playbook_run):
    failed = [r.get("msg") for r in playbook_run if r.get("failed")]
    assert not failed and playbook_run.process.returncode == 0, (failed, playbook_run.process.stdout[-3000:])
    return playbook_run


def changed(playbook_run):
    return [r.get("invocation", {}).get("module_args", {}).get("template") or r.get("msg")
            for r in playbook_run if r.get("changed")]


def test_openshift_installs_nfd_through_olm_and_waits_for_the_labels(cluster, make_fleet):
    # The NFD operand image follows the cluster's OpenShift minor.
    fleet = make_fleet(unlabelled_fleet(["registry.redhat.io/*"], openshift={"version": "4.17.9"}))
    assert not [n for n in fleet.node_names if PCI_10DE in (cluster.core.read_node(n).metadata.labels or {})]
    first = outcome(run_nfd(cluster, fleet.spec))
    facts = [r for r in first if "nodes" in r and "groups" in r][-1]
    # Every node of the fleet was labelled by the time the role returned; the wait said which were GPU nodes, and
    # labelled those for the operands.
    for name in fleet.node_names:
        labels = cluster.core.read_node(name).metadata.labels
        assert labels[OSTREE] in (RHCOS_416, RHCOS_96)
        assert (labels.get(PCI_10DE) == "true") == ("cpu" not in name)
        expected = "true" if "cpu" not in name else None
        assert [labels.get("nvidia.com/gpu.present"), labels.get("nvidia.com/gpu.deploy.driver")] == [expected] * 2
    assert sorted(facts["groups"]["by_rhcos"][RHCOS_416]) == sorted(n for n in fleet.node_names if n.endswith(
        ("gpu-0", "gpu-1")))
    subscription = cluster.custom.get_namespaced_custom_object("operators.coreos.com", "v1alpha1", "openshift-nfd",
                                                               "subscriptions", "nfd")
    assert (subscription["spec"]["channel"], subscription["spec"]["source"]) == ("stable", "redhat-operators")
    nfd = cluster.custom.get_namespaced_custom_object("nfd.openshift.io", "v1", "openshift-nfd",
                                                      "nodefeaturediscoveries", "nfd-instance")
    assert nfd["spec"]["operand"]["image"] == "registry.redhat.io/openshift4/ose-node-feature-discovery-rhel9:v4.17"
    assert yaml.safe_load(nfd["spec"]["workerConfig"]["configData"]) == {"sources": {"pci": {
        "deviceClassWhitelist": ["0200", "03", "12"], "deviceLabelFields": ["vendor"]}}}
    namespace = cluster.core.read_namespace("openshift-nfd")
    assert namespace.metadata.labels["openshift.io/cluster-monitoring"] == "true"

    second = outcome(run_nfd(cluster, fleet.spec))
    assert changed(second) == []


def test_openshift_unknown_package_fails_with_olm_reason(cluster, make_fleet):
    fleet = make_fleet(unlabelled_fleet(["registry.redhat.io/*"], openshift={"version": "4.18.22"}))
    run = run_nfd(cluster, fleet.spec, nfd_olm_package="nfd-typo", nfd_install="always")
    try:
        failed = [r for r in run if r.get("failed")]
        assert failed, run.process.stdout[-2000:]
        assert "openshift-nfd/nfd-typo" in failed[-1]["msg"]
        assert "no operators found in package nfd-typo" in failed[-1]["msg"]
    finally:
        try:
            cluster.custom.delete_namespaced_custom_object("operators.coreos.com", "v1alpha1", "openshift-nfd",
                                                           "subscriptions", "nfd-typo")
        except ApiException as error:
            assert error.status == 404


def test_kubernetes_deploys_upstream_nfd_with_the_ostree_rule(kubernetes_cluster, make_fleet):
    fleet = make_fleet(unlabelled_fleet(["registry.k8s.io/nfd/*"]), on=kubernetes_cluster)
    first = outcome(run_nfd(kubernetes_cluster, fleet.spec))
    for name in fleet.node_names:
        assert OSTREE in kubernetes_cluster.core.read_node(name).metadata.labels
    # The role's NodeFeatureRule API has upstream's schema: the rule as the role rendered it passes, a misspelt
    # field of it is refused (nfd.k8s-sigs.io).
    (rendered,) = [obj for r in first for obj in (r.get("invocation") or {}).get("module_args", {}).get("definition")
                   or [] if obj.get("kind") == "NodeFeatureRule"]
    refused_field(kubernetes_cluster, rendered, ["spec", "rules", 0, "matchFeatures"], "matchFeature")
    worker = kubernetes_cluster.apps.read_namespaced_daemon_set("nfd-worker", "node-feature-discovery")
    assert worker.spec.template.spec.containers[0].image == "registry.k8s.io/nfd/node-feature-discovery:v0.17.3"
    namespace = kubernetes_cluster.core.read_namespace("node-feature-discovery")
    assert namespace.metadata.labels["pod-security.kubernetes.io/enforce"] == "privileged"
    rule = kubernetes_cluster.custom.get_cluster_custom_object("nfd.k8s-sigs.io", "v1alpha1", "nodefeaturerules",
                                                               "accelerators-gpu-ostree-version")
    assert rule["spec"]["rules"][0]["labels"] == {
        "system-os_release.OSTREE_VERSION": "@system.osrelease.OSTREE_VERSION"}
    assert changed(outcome(run_nfd(kubernetes_cluster, fleet.spec))) == []


def objects(cluster):
    """What the role could create: namespaces, CRDs, cluster RBAC, DaemonSets, Deployments, NodeFeatureRules."""
    rbac = kubernetes.client.RbacAuthorizationV1Api(cluster.client)
    listed = {
        "namespaces": cluster.core.list_namespace().items,
        "crds": kubernetes.client.ApiextensionsV1Api(cluster.client).list_custom_resource_definition().items,
        "clusterroles": rbac.list_cluster_role().items,
        "clusterrolebindings": rbac.list_cluster_role_binding().items,
        "daemonsets": cluster.apps.list_daemon_set_for_all_namespaces().items,
        "deployments": cluster.apps.list_deployment_for_all_namespaces().items,
    }
    # generation moves with spec changes only; status updates (new nodes) move resourceVersion too.
    found = {kind: sorted((o.metadata.namespace or "", o.metadata.name, o.metadata.generation or o.metadata.resource_version)
                          for o in items) for kind, items in listed.items()}
    try:
        rules = cluster.custom.list_cluster_custom_object("nfd.k8s-sigs.io", "v1alpha1", "nodefeaturerules")["items"]
    except ApiException as error:
        assert error.status == 404
        rules = []
    found["nodefeaturerules"] = sorted((r["metadata"]["name"], r["metadata"]["resourceVersion"]) for r in rules)
    return found


def test_check_mode_on_kubernetes_writes_nothing(kubernetes_cluster, make_fleet):
    fleet = make_fleet(unlabelled_fleet(["registry.k8s.io/nfd/*"]), on=kubernetes_cluster)
    wait_until_deleted_namespaces_are_gone(kubernetes_cluster)
    before = objects(kubernetes_cluster)
    run = play(kubernetes_cluster, [("ansible.builtin.set_fact", {"nfd_node_selector": "%s=%s" % (
        FLEET_LABEL, fleet.spec["name"]), "nfd_namespace": "nfd-check-mode", "nfd_install": "always"}),
        ("ansible.builtin.include_role", {"name": "accelerators.gpu.nfd"})], check=True)
    assert run.process.returncode == 0, run.process.stdout[-3000:]
    assert [r for r in run if r.get("changed")], "check mode reported nothing to do on a cluster without NFD there"
    assert objects(kubernetes_cluster) == before
