"""operand against the local control plane: server-side apply of a state's objects, removal of those it no longer
needs, check mode as a dry run, and the wait for its DaemonSet in the same run."""

import kubernetes

import gpu_fleet
from playbook import run

MODULE = "accelerators.gpu.operand"
MANAGED = {"app.kubernetes.io/managed-by": "accelerators.gpu"}


def config_map(namespace, name, data):
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": MANAGED}, "data": data}


def daemonset(namespace, name, fleet_name):
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": namespace, "labels": MANAGED},
            "spec": {"selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"nodeSelector": {gpu_fleet.FLEET_LABEL: fleet_name},
                         "containers": [{"name": "main", "image": "example.test/sim/operand:1"}]}}}}


def config_maps(cluster, namespace):
    return dict((item.metadata.name, item.data) for item in cluster.core.list_namespaced_config_map(
        namespace, label_selector="app.kubernetes.io/managed-by=accelerators.gpu").items)


def test_applies_in_order_reports_only_real_changes_and_removes_what_is_no_longer_declared(cluster, namespace):
    first = [config_map(namespace, "a", {"k": "1"}), config_map(namespace, "b", {"k": "2"})]

    checked = run(cluster, MODULE, {"definitions": first}, check=True, diff=True)
    assert not checked.get("failed"), checked.get("msg")
    assert checked["changed"] is True and config_maps(cluster, namespace) == {}
    assert [item["action"] for item in checked["objects"]] == ["created", "created"]

    created = run(cluster, MODULE, {"definitions": first})
    assert created["changed"] is True and config_maps(cluster, namespace) == {"a": {"k": "1"}, "b": {"k": "2"}}
    again = run(cluster, MODULE, {"definitions": first})
    assert again["changed"] is False, again["objects"]
    assert run(cluster, MODULE, {"definitions": first}, check=True)["changed"] is False

    # A field edited by hand goes back; a key this collection applied and no longer declares goes.
    cluster.core.patch_namespaced_config_map("a", namespace, {"data": {"k": "edited", "mine": "x"}})
    second = [config_map(namespace, "a", {"k": "1", "new": "3"})]
    updated = run(cluster, MODULE, {"definitions": second, "absent": [first[1]]}, diff=True)
    assert updated["objects"] == [{"object": "ConfigMap %s/a" % namespace, "action": "updated"},
                                  {"object": "ConfigMap %s/b" % namespace, "action": "deleted"}]
    assert config_maps(cluster, namespace) == {"a": {"k": "1", "new": "3", "mine": "x"}}
    assert updated["diff"][0]["before"]["data"] == {"k": "edited", "mine": "x"}
    # What is absent already, or whose kind the API server does not serve, is no error and no change.
    gone = run(cluster, MODULE, {"definitions": second, "absent": [
        first[1], {"apiVersion": "example.test/v1", "kind": "Missing", "metadata": {"name": "x"}}]})
    assert gone["changed"] is False and gone["objects"] == [{"object": "ConfigMap %s/a" % namespace,
                                                             "action": "unchanged"}]


def test_a_secret_is_masked_and_a_rejected_object_is_named(cluster, namespace):
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": namespace},
              "stringData": {"HTTPS_PROXY": "http://user:hunter2@proxy.example.test:3128"}}
    applied = run(cluster, MODULE, {"definitions": [secret]}, diff=True)
    assert "hunter2" not in repr(applied["diff"]) and "aHVudGVyM" not in repr(applied["diff"])

    bad = config_map(namespace, "Not_A_Name", {"k": "1"})
    failed = run(cluster, MODULE, {"definitions": [config_map(namespace, "fine", {}), bad]})
    assert failed["failed"] is True
    assert failed["msg"].startswith("ConfigMap %s/Not_A_Name: PATCH " % namespace), failed["msg"]
    assert failed["objects"] == [{"object": "ConfigMap %s/fine" % namespace, "action": "created"}]
    unknown = run(cluster, MODULE, {"definitions": [
        {"apiVersion": "example.test/v1", "kind": "Missing", "metadata": {"name": "x"}}]})
    assert unknown["msg"] == "Missing x: the API server does not serve kind Missing of example.test/v1"


def test_waits_for_its_daemonset_in_the_same_run_and_fails_naming_the_pull_failure(cluster, namespace, make_fleet):
    made = make_fleet(gpu_fleet.fleet([{"name": "gpu", "count": 2, "gpu": {"count": 2},
                                        "os": {"rhcos": gpu_fleet.RHCOS_418}}]))
    fleet_name = made.spec["name"]
    ready = run(cluster, MODULE, {"definitions": [daemonset(namespace, "op", fleet_name)], "wait_for": "daemonsets",
                                  "namespace": namespace, "names": ["op"], "timeout": 90})
    assert not ready.get("failed"), ready.get("msg")
    assert ready["changed"] is True and ready["ready_nodes"] == sorted(made.node_names)

    broken = daemonset(namespace, "op", fleet_name)
    broken["spec"]["template"]["spec"]["containers"][0]["image"] = "example.invalid/operand:1"
    apps = kubernetes.client.AppsV1Api(cluster.client)
    failed = run(cluster, MODULE, {"definitions": [broken], "wait_for": "daemonsets", "namespace": namespace,
                                   "names": ["op"], "timeout": 120})
    assert failed["failed"] is True and failed["changed"] is True
    assert "example.invalid/operand:1" in failed["msg"] and failed["outcome"] == "failed", failed["msg"]
    assert apps.read_namespaced_daemon_set("op", namespace).spec.template.spec.containers[0].image == (
        "example.invalid/operand:1")
