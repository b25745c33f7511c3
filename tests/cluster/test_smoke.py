"""The control plane and the simulator behave as a real cluster with GPU nodes would."""

import time

import pytest
from kubernetes.client.rest import ApiException

from conftest import wait_for

PCI_10DE = "feature.node.kubernetes.io/pci-10de.present"
OSTREE = "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION"
REGISTRY = ["registry.k8s.io/pause:*", "example.test/sim/*"]


def gpu_fleet(**extra):
    spec = {
        "registry": REGISTRY,
        "nodes": [
            {"name": "gpu-vendor", "count": 2, "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 8},
             "os": {"rhcos": "416.94.202405081406-0"}},
            {"name": "gpu-class", "gpu": {"product": "NVIDIA-L40S", "count": 4},
             "os": {"rhcos": "9.6.20260303-1", "openshift": "4.21"}, "nfd_style": "class-vendor"},
            {"name": "cpu", "os": {"rhcos": "416.94.202405081406-0"}},
        ],
    }
    spec.update(extra)
    return spec


def daemonset(name, component=None, node_selector=None, image="registry.k8s.io/pause:3.10", strategy=None,
              env=None):
    labels = {"app": name}
    if component:
        labels["app.kubernetes.io/component"] = component
    spec = {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": labels},
                         "spec": {"nodeSelector": node_selector or {},
                                  "containers": [{"name": "main", "image": image, "env": env or []}]}}}
    if strategy:
        spec["updateStrategy"] = {"type": strategy}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "labels": labels}, "spec": spec}


# The toolkit finds the driver of a driver pod under /run/nvidia/driver (the simulator checks its driver root).
TOOLKIT_ENV = [{"name": "NVIDIA_DRIVER_ROOT", "value": "/run/nvidia/driver"}]


def pods_of(cluster, namespace, app):
    return cluster.core.list_namespaced_pod(namespace, label_selector="app=" + app).items


def ready(pod):
    return pod.status.phase == "Running" and any(
        c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def gpu_allocatable(cluster, node):
    return (cluster.core.read_node(node).status.allocatable or {}).get("nvidia.com/gpu", "0")


def test_daemonset_on_nfd_label_runs_exactly_on_matching_nodes(cluster, namespace, make_fleet):
    fleet = make_fleet(gpu_fleet())
    cluster.apps.create_namespaced_daemon_set(namespace, daemonset("probe", node_selector={PCI_10DE: "true"}))
    # Other fleets may share the cluster: what matches is what carries the label.
    expected = {n.metadata.name for n in cluster.core.list_node(label_selector=PCI_10DE + "=true").items}
    ours = {n for n in fleet.node_names if "gpu-vendor" in n}
    assert ours <= expected

    def placed():
        pods = pods_of(cluster, namespace, "probe")
        return {p.spec.node_name for p in pods} == expected and all(ready(p) for p in pods) and pods
    pods = wait_for(placed, message="probe pods Running and Ready on %s" % sorted(expected))
    assert len(pods) == len(expected)
    # This fleet's node of the other PCI label style and its CPU-only node got none.
    assert not {p.spec.node_name for p in pods} & (set(fleet.node_names) - ours)
    assert all(p.status.pod_ip.startswith(("198.18.", "198.19.")) for p in pods)


def test_on_delete_daemonset_keeps_pod_until_deleted(cluster, namespace, make_fleet):
    fleet = make_fleet(gpu_fleet())
    node = fleet.node_names[0]
    ds = daemonset("ondelete", node_selector={"kubernetes.io/hostname": node}, strategy="OnDelete")
    cluster.apps.create_namespaced_daemon_set(namespace, ds)
    first = wait_for(lambda: [p for p in pods_of(cluster, namespace, "ondelete") if ready(p)], message="first pod")[0]
    cluster.apps.patch_namespaced_daemon_set("ondelete", namespace, {"spec": {"template": {"spec": {
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]}}}})
    wait_for(lambda: cluster.apps.read_namespaced_daemon_set("ondelete", namespace).status.observed_generation == 2,
             message="DaemonSet controller saw the new template")
    # Give the controller time to (wrongly) replace the pod; OnDelete must not.
    import time
    time.sleep(3)
    pods = pods_of(cluster, namespace, "ondelete")
    assert [(p.metadata.uid, p.spec.containers[0].image) for p in pods] == [(first.metadata.uid,
                                                                             "registry.k8s.io/pause:3.10")]
    cluster.core.delete_namespaced_pod(first.metadata.name, namespace)
    replaced = wait_for(lambda: [p for p in pods_of(cluster, namespace, "ondelete")
                                 if p.metadata.uid != first.metadata.uid and ready(p)], message="replacement pod")
    assert replaced[0].spec.containers[0].image == "registry.k8s.io/pause:3.9"


def test_job_pod_completes(cluster, namespace, make_fleet):
    make_fleet(gpu_fleet())
    cluster.batch.create_namespaced_job(namespace, {"metadata": {"name": "hello"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "main", "image": "example.test/sim/busybox:1"}]}}}})
    wait_for(lambda: (cluster.batch.read_namespaced_job("hello", namespace).status.succeeded or 0) == 1,
             message="job hello succeeded")


def test_unknown_image_sits_in_image_pull_back_off(cluster, namespace, make_fleet):
    fleet = make_fleet(gpu_fleet())
    image = "example.test/not-mirrored/driver:0.0"
    cluster.core.create_namespaced_pod(namespace, {"metadata": {"name": "pull"}, "spec": {
        "nodeName": fleet.node_names[0], "containers": [{"name": "main", "image": image}]}})

    def waiting_reason():
        statuses = cluster.core.read_namespaced_pod("pull", namespace).status.container_statuses or []
        return statuses and statuses[0].state.waiting and statuses[0].state.waiting
    waiting = wait_for(waiting_reason, message="pull pod waiting")
    assert waiting.reason == "ImagePullBackOff"
    assert image in waiting.message
    assert cluster.core.read_namespaced_pod("pull", namespace).status.phase == "Pending"


def test_gpu_allocatable_only_with_ready_driver_and_device_plugin(cluster, namespace, make_fleet):
    fleet = make_fleet(gpu_fleet())
    node = [n for n in fleet.node_names if "gpu-vendor" in n][0]
    on_node = {"kubernetes.io/hostname": node}
    cluster.apps.create_namespaced_daemon_set(namespace, daemonset("plugin", "nvidia-device-plugin", on_node))
    waiting = wait_for(lambda: [p for p in pods_of(cluster, namespace, "plugin") if p.status.phase == "Pending"
                                and p.status.container_statuses], message="device plugin waiting")
    assert "nvidia-driver" in waiting[0].status.container_statuses[0].state.waiting.message
    assert gpu_allocatable(cluster, node) == "0"

    cluster.apps.create_namespaced_daemon_set(namespace, daemonset("driver", "nvidia-driver", on_node))
    cluster.apps.create_namespaced_daemon_set(namespace, daemonset("toolkit", "nvidia-container-toolkit", on_node,
                                                                   env=TOOLKIT_ENV))
    wait_for(lambda: gpu_allocatable(cluster, node) == "8", message="8 GPUs allocatable on " + node)
    assert all(ready(p) for app in ("driver", "toolkit", "plugin") for p in pods_of(cluster, namespace, app))

    # The driver goes away: the node stops advertising its GPUs.
    cluster.apps.delete_namespaced_daemon_set("driver", namespace)
    wait_for(lambda: gpu_allocatable(cluster, node) == "0", message="GPUs withdrawn from " + node)


def test_validation_job_fails_without_driver_and_passes_with_it(cluster, namespace, make_fleet):
    fleet = make_fleet(gpu_fleet())
    node = fleet.node_names[0]
    on_node = {"kubernetes.io/hostname": node}

    def validation(name):
        cluster.batch.create_namespaced_job(namespace, {"metadata": {"name": name}, "spec": {
            "backoffLimit": 0, "template": {
                "metadata": {"labels": {"app.kubernetes.io/component": "gpu-validation"}},
                "spec": {"restartPolicy": "Never", "nodeSelector": on_node,
                         "containers": [{"name": "cuda", "image": "example.test/sim/cuda-sample:vectoradd"}]}}}})

    validation("before")
    failed = wait_for(lambda: [p for p in cluster.core.list_namespaced_pod(
        namespace, label_selector="job-name=before").items if p.status.phase == "Failed"], message="failed pod")
    assert "validation failed on node %s: nvidia-driver, nvidia-container-toolkit not ready" % node \
        in failed[0].status.message

    cluster.apps.create_namespaced_daemon_set(namespace, daemonset("driver", "nvidia-driver", on_node))
    cluster.apps.create_namespaced_daemon_set(namespace, daemonset("toolkit", "nvidia-container-toolkit", on_node,
                                                                   env=TOOLKIT_ENV))
    wait_for(lambda: all(ready(p) for app in ("driver", "toolkit") for p in pods_of(cluster, namespace, app))
             and len(pods_of(cluster, namespace, "toolkit")) == 1, message="driver and toolkit ready")
    validation("after")
    wait_for(lambda: (cluster.batch.read_namespaced_job("after", namespace).status.succeeded or 0) == 1,
             message="validation job succeeded")


def test_driver_built_for_another_rhcos_crash_loops(cluster, namespace, make_fleet):
    fleet = make_fleet(gpu_fleet())
    node = fleet.node_names[0]
    cluster.apps.create_namespaced_daemon_set(namespace, daemonset(
        "driver-wrong", "nvidia-driver", {"kubernetes.io/hostname": node},
        env=[{"name": "RHCOS_VERSION", "value": "9.6.20260303-1"}]))

    def crash():
        pods = pods_of(cluster, namespace, "driver-wrong")
        statuses = pods and pods[0].status.container_statuses
        return statuses and statuses[0].state.waiting
    waiting = wait_for(crash, message="driver crash-looping")
    assert waiting.reason == "CrashLoopBackOff"
    assert "RHCOS 9.6.20260303-1 cannot build for node %s, which runs RHCOS 416.94.202405081406-0" % node \
        in waiting.message


def test_fleet_labels_and_node_info_agree(cluster, make_fleet):
    fleet = make_fleet(gpu_fleet(nodes=[
        {"name": "old", "gpu": {"count": 2}, "os": {"rhcos": "416.94.202405081406-0"}},
        {"name": "new", "gpu": {"count": 2}, "os": {"rhcos": "9.6.20260303-1", "openshift": "4.21"},
         "nfd_style": "class-vendor"},
        {"name": "stale", "gpu": {"count": 2}, "os": {"rhcos": "9.6.20260303-1", "openshift": "4.21"},
         "faults": {"stale_nfd_label": "418.94.202509100653-0"}},
    ]))
    nodes = {n.metadata.name.split("-", 1)[1]: n for n in
             (cluster.core.read_node(name) for name in fleet.node_names)}
    nfd = "feature.node.kubernetes.io/"
    old, new, stale = nodes["old"], nodes["new"], nodes["stale"]
    assert old.metadata.labels[OSTREE] == "416.94.202405081406-0"
    assert old.status.node_info.os_image == "Red Hat Enterprise Linux CoreOS 416.94.202405081406-0 (Plow)"
    assert old.metadata.labels[nfd + "system-os_release.ID"] == "rhcos"
    assert old.metadata.labels[nfd + "system-os_release.VERSION_ID"] == "4.16"
    assert old.metadata.labels[nfd + "system-os_release.RHEL_VERSION"] == "9.4"
    assert old.metadata.labels[PCI_10DE] == "true"
    assert new.metadata.labels[OSTREE] == "9.6.20260303-1"
    assert new.status.node_info.os_image == "Red Hat Enterprise Linux CoreOS 9.6.20260303-1 (Plow)"
    assert new.metadata.labels[nfd + "system-os_release.ID"] == "rhel"
    assert new.metadata.labels[nfd + "system-os_release.OPENSHIFT_VERSION"] == "4.21"
    assert nfd + "system-os_release.RHEL_VERSION" not in new.metadata.labels
    assert new.metadata.labels[nfd + "pci-0302_10de.present"] == "true"
    assert PCI_10DE not in new.metadata.labels
    assert new.metadata.labels[nfd + "kernel-version.full"] == "5.14.0-570.42.1.el9_6.x86_64"
    assert stale.metadata.labels[OSTREE] == "418.94.202509100653-0"
    assert "9.6.20260303-1" in stale.status.node_info.os_image
    assert new.status.node_info.container_runtime_version.startswith("cri-o://")


def test_nfd_labels_arrive_with_a_ready_nfd_worker(cluster, namespace, make_fleet):
    # A taint only this test's nfd-worker tolerates: an NFD another test left in the session cluster would label
    # the node too.
    taint = {"key": "smoke.test/nfd", "value": namespace, "effect": "NoSchedule"}
    fleet = make_fleet(gpu_fleet(nfd="worker", nodes=[dict(gpu_fleet()["nodes"][0], count=1, taints=[taint])]))
    node = fleet.node_names[0]
    assert PCI_10DE not in (cluster.core.read_node(node).metadata.labels or {})
    worker = daemonset("worker", "nfd-worker")
    worker["spec"]["template"]["spec"]["tolerations"] = [dict(taint, operator="Equal")]
    cluster.apps.create_namespaced_daemon_set(namespace, worker)
    wait_for(lambda: (cluster.core.read_node(node).metadata.labels or {}).get(PCI_10DE) == "true",
             message="NFD labels on " + node)
    annotations = cluster.core.read_node(node).metadata.annotations
    assert "pci-10de.present" in annotations["nfd.node.kubernetes.io/feature-labels"].split(",")


def test_driver_toolkit_image_stream_and_cluster_version_follow_the_fleet(cluster, make_fleet):
    if cluster.flavour != "openshift":
        pytest.skip("the driver-toolkit image stream exists on the openshift flavour only")
    make_fleet(gpu_fleet(openshift={"version": "4.21.3", "driver_toolkit": {
        "missing": ["416.94.202405081406-0"], "broken": True}}))
    stream = cluster.custom.get_namespaced_custom_object("image.openshift.io", "v1", "openshift", "imagestreams",
                                                         "driver-toolkit")
    tags = {t["name"]: t["from"]["name"] for t in stream["spec"]["tags"]}
    assert "416.94.202405081406-0" not in tags
    assert tags["9.6.20260303-1"].startswith("quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:")
    assert "" in tags  # the broken-stream fault: a tag with an empty name
    assert [i["dockerImageReference"] for t in stream["status"]["tags"] if t["tag"] == "9.6.20260303-1"
            for i in t["items"]] == [tags["9.6.20260303-1"]]
    version = cluster.custom.get_cluster_custom_object("config.openshift.io", "v1", "clusterversions", "version")
    assert version["status"]["desired"]["version"] == "4.21.3"


def test_subscription_yields_succeeded_csv_and_operator(cluster, namespace, make_fleet):
    if cluster.flavour != "openshift":
        pytest.skip("OLM APIs exist on the openshift flavour only")
    make_fleet(gpu_fleet(registry=REGISTRY + ["registry.redhat.io/*"]))
    group = ("operators.coreos.com", "v1alpha1")
    cluster.custom.create_namespaced_custom_object(*group, namespace, "subscriptions", {
        "apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription", "metadata": {"name": "nfd"},
        "spec": {"name": "nfd", "channel": "stable", "source": "redhat-operators",
                 "sourceNamespace": "openshift-marketplace"}})
    installed = wait_for(lambda: cluster.custom.get_namespaced_custom_object(
        *group, namespace, "subscriptions", "nfd").get("status", {}).get("installedCSV"), message="installedCSV")
    csv = cluster.custom.get_namespaced_custom_object(*group, namespace, "clusterserviceversions", installed)
    assert csv["status"]["phase"] == "Succeeded"
    wait_for(lambda: (cluster.apps.read_namespaced_deployment("nfd-controller-manager", namespace)
                      .status.ready_replicas or 0) == 1, message="operator deployment ready")
    cluster.custom.create_namespaced_custom_object(*group, namespace, "subscriptions", {
        "apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription", "metadata": {"name": "nope"},
        "spec": {"name": "no-such-operator", "channel": "stable", "source": "redhat-operators",
                 "sourceNamespace": "openshift-marketplace"}})
    failed = wait_for(lambda: cluster.custom.get_namespaced_custom_object(
        *group, namespace, "subscriptions", "nope").get("status"), message="resolution failure")
    assert failed["state"] == "ResolutionFailed"
    assert "no-such-operator" in failed["conditions"][0]["message"]


def test_deleting_a_namespace_completes(cluster, make_fleet):
    make_fleet(gpu_fleet())
    cluster.core.create_namespace({"metadata": {"name": "t-doomed"}})
    wait_for(lambda: _exists(cluster.core.read_namespaced_service_account, "default", "t-doomed"),
             message="default service account")
    cluster.apps.create_namespaced_daemon_set("t-doomed", daemonset("everywhere"))
    wait_for(lambda: pods_of(cluster, "t-doomed", "everywhere"), message="pods")
    cluster.core.delete_namespace("t-doomed")
    wait_for(lambda: not _exists(cluster.core.read_namespace, "t-doomed"), timeout=60, message="namespace gone")


def _exists(read, *args):
    try:
        return read(*args)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def test_nfd_operator_creates_operands_that_label_the_nodes(cluster, namespace, make_fleet):
    if cluster.flavour != "openshift":
        pytest.skip("the NFD operator runs on the openshift flavour only")
    image = "registry.redhat.io/openshift4/ose-node-feature-discovery-rhel9:v4.18"
    fleet = make_fleet(gpu_fleet(nfd="worker", registry=REGISTRY + ["registry.redhat.io/*"]))
    node = fleet.node_names[0]
    nfd = {"apiVersion": "nfd.openshift.io/v1", "kind": "NodeFeatureDiscovery", "metadata": {"name": "instance"},
           "spec": {"operand": {"image": image}, "workerConfig": {"configData": "sources: {pci: {}}"}}}
    cluster.custom.create_namespaced_custom_object("nfd.openshift.io", "v1", namespace, "nodefeaturediscoveries", nfd)
    time.sleep(2)
    # Without the operator nothing acts on the resource.
    assert cluster.apps.list_namespaced_daemon_set(namespace).items == []
    cluster.custom.create_namespaced_custom_object("operators.coreos.com", "v1alpha1", namespace, "subscriptions", {
        "apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription", "metadata": {"name": "nfd"},
        "spec": {"name": "nfd", "channel": "stable", "source": "redhat-operators",
                 "sourceNamespace": "openshift-marketplace"}})
    # The session's cluster may run other tests' nfd-workers on this node too, so the labels alone do not show that
    # this operator acted: its own worker pod must be Ready there.
    worker = wait_for(lambda: _exists(cluster.apps.read_namespaced_daemon_set, "nfd-worker", namespace), timeout=60,
                      message="nfd-worker DaemonSet created by the operator")
    wait_for(lambda: any(ready(pod) and pod.spec.node_name == node for pod in cluster.core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/component=nfd-worker").items), timeout=60,
        message="the operator's nfd-worker pod Ready on " + node)
    wait_for(lambda: (cluster.core.read_node(node).metadata.labels or {}).get(PCI_10DE) == "true", timeout=60,
             message="NFD labels on " + node)
    assert worker.spec.template.spec.containers[0].image == image
    assert cluster.core.read_namespaced_config_map("nfd-worker", namespace).data["nfd-worker.conf"] == \
        "sources: {pci: {}}"
    status = cluster.custom.get_namespaced_custom_object("nfd.openshift.io", "v1", namespace,
                                                         "nodefeaturediscoveries", "instance")["status"]
    assert status["conditions"][0]["type"] == "Available"


def test_nodes_served_are_as_large_as_a_busy_workers_and_kwok_keeps_their_images(cluster, make_fleet):
    """kwok initialises a node's status from a template: the images, resources and annotations the fleet gave it
    must survive that, or every benchmark reads nodes smaller than real ones."""
    made = make_fleet(gpu_fleet())
    given = {node["name"]: node for node in made.nodes}
    for name in made.node_names:
        node = cluster.client.sanitize_for_serialization(cluster.core.read_node(name))
        assert node["status"]["images"] == given[name]["status"]["images"], name
        assert node["status"]["allocatable"]["ephemeral-storage"] == given[name]["status"]["allocatable"][
            "ephemeral-storage"]
        assert node["metadata"]["annotations"]["k8s.ovn.org/l3-gateway-config"] == given[name]["annotations"][
            "k8s.ovn.org/l3-gateway-config"]
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])
