"""accelerators.gpu.driver_daemonsets run by ansible-playbook against the local control plane.

The simulator makes driver pods honest: a pod whose DTK side-car's RHCOS_VERSION is not the RHCOS of the node's
osImage crash-loops, a precompiled image for another kernel crash-loops, an image outside the fleet's registry
stays in ImagePullBackOff. Pods Ready on the right nodes therefore prove the DaemonSets right.
"""

import json

from conftest import wait_for
from gpu_fleet import (
    FLEET_LABEL, OSTREE, RHCOS_416, RHCOS_418, RHCOS_96, create_driver_service_account, daemonset_versions, driver, driver_pods,
    fleet, selector, settled)
from localcluster.fleet import HARDWARE_ANNOTATION, dtk_image
from playbook import run

MODULE = "accelerators.gpu.driver_daemonsets"
DS_416 = "nvidia-driver-daemonset-" + RHCOS_416
DS_418 = "nvidia-driver-daemonset-" + RHCOS_418
DS_96 = "nvidia-driver-daemonset-" + RHCOS_96
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def label_gpu_nodes(cluster, spec):
    """What a playbook does first: nfd_labels puts nvidia.com/gpu.deploy.driver=true on the GPU nodes."""
    result = run(cluster, "accelerators.gpu.nfd_labels", {"label_selector": selector(spec), "manage_labels": True})
    assert not result.get("failed"), result.get("msg")


def placement(cluster, namespace):
    """{DaemonSet name: sorted nodes of its Ready pods}, once every driver pod of the namespace is Ready."""
    pods = driver_pods(cluster, namespace)
    if not pods or not all(pod.ready for pod in pods.values()):
        return None
    placed = {}
    for pod in pods.values():
        placed.setdefault(pod.daemonset, []).append(pod.node)
    return {daemonset: sorted(nodes) for daemonset, nodes in placed.items()}


def wait_placed(cluster, namespace, expected):
    wait_for(lambda: placement(cluster, namespace) == expected, timeout=120,
             message="driver pods Ready exactly as %s (now %s)" % (expected, driver_pods(cluster, namespace)))


def writes(result):
    return {verb: count for verb, count in result["api_requests"].items() if verb in WRITES}


def test_two_rhcos_versions_get_two_daemonsets_check_mode_and_second_run_write_nothing(cluster, namespace, make_fleet):
    spec = fleet([{"name": "old", "count": 2, "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}},
                  {"name": "new", "gpu": {"count": 4}, "os": {"rhcos": RHCOS_96}, "nfd_style": "class-vendor"},
                  {"name": "cpu", "os": {"rhcos": RHCOS_416}}])
    old0, old1, new, _cpu = make_fleet(spec).node_names
    create_driver_service_account(cluster, namespace)
    label_gpu_nodes(cluster, spec)
    args = {"namespace": namespace, "label_selector": selector(spec), "driver": driver(spec)}

    planned = run(cluster, MODULE, dict(args, plan_only=True))
    assert (planned["changed"], planned["created"], writes(planned)) == (False, [DS_416, DS_96], {})
    checked = run(cluster, MODULE, args, check=True, diff=True)
    assert (checked["changed"], checked["created"]) == (True, [DS_416, DS_96])
    assert [(d["before"], d["after"]["metadata"]["name"]) for d in checked["diff"]] == [({}, DS_416), ({}, DS_96)]
    # The "after" is the API server's answer to a dry run: defaults filled in, so the server saw and admitted it.
    assert checked["diff"][0]["after"]["spec"]["revisionHistoryLimit"] == 10
    assert daemonset_versions(cluster, namespace) == {}

    applied = run(cluster, MODULE, args)
    # The three GPU nodes' owner label (the default driver configuration's), then the two DaemonSets.
    assert (applied["changed"], applied["created"], writes(applied)) == (True, [DS_416, DS_96], {"PATCH": 5})
    assert applied["owner_labelled"] == sorted([old0, old1, new])
    assert applied["assignments"][old0] == {
        "daemonset": DS_416, "build": "dtk", "image": "example.test/nvidia/driver:550.90.07-rhcos4.16",
        "dtk_image": dtk_image(RHCOS_416)}
    assert applied["assignments"][new]["image"] == "example.test/nvidia/driver:550.90.07-rhel9.6"
    wait_placed(cluster, namespace, {DS_416: sorted([old0, old1]), DS_96: [new]})
    ds = cluster.apps.read_namespaced_daemon_set(DS_416, namespace)
    assert ds.spec.update_strategy.type == "OnDelete"
    assert ds.spec.template.spec.node_selector == {OSTREE: RHCOS_416, "nvidia.com/gpu.deploy.driver": "true",
                                                   FLEET_LABEL: spec["name"],
                                                   "nvidia.com/gpu-operator.driver.owner": "default"}
    assert [c.name for c in ds.spec.template.spec.containers] == ["nvidia-driver-ctr", "openshift-driver-toolkit-ctr"]

    wait_for(lambda: settled(cluster, namespace), timeout=60, message="DaemonSet status settled")
    before, pods = daemonset_versions(cluster, namespace), driver_pods(cluster, namespace)
    again = run(cluster, MODULE, args, diff=True)
    assert (again["changed"], again["unchanged"], again["diff"]) == (False, [DS_416, DS_96], [])
    # Nodes, image stream, the three kinds of mirror rules (as dtk_image_lookup reads them) and DaemonSets: one list
    # each, no write.
    assert again["api_requests"] == {"GET": 6}

    upgrade = run(cluster, MODULE, dict(args, driver=driver(spec, version="570.124.06")), check=True, diff=True)
    assert (upgrade["changed"], upgrade["updated"]) == (True, [DS_416, DS_96])
    images = [[c["image"] for c in d[side]["spec"]["template"]["spec"]["containers"]][0]
              for d in upgrade["diff"] for side in ("before", "after")]
    assert images == ["example.test/nvidia/driver:550.90.07-rhcos4.16", "example.test/nvidia/driver:570.124.06-rhcos4.16",
                      "example.test/nvidia/driver:550.90.07-rhel9.6", "example.test/nvidia/driver:570.124.06-rhel9.6"]
    assert daemonset_versions(cluster, namespace) == before
    assert driver_pods(cluster, namespace) == pods


def test_node_upgraded_to_a_third_rhcos_version(cluster, namespace, make_fleet):
    spec = fleet([{"name": "a", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}},
                  {"name": "b", "count": 2, "gpu": {"count": 8}, "os": {"rhcos": RHCOS_96}}],
                 openshift={"version": "4.18.22", "driver_toolkit": {"extra": [RHCOS_418]}})
    node_a, b0, b1 = make_fleet(spec).node_names
    create_driver_service_account(cluster, namespace)
    label_gpu_nodes(cluster, spec)
    args = {"namespace": namespace, "label_selector": selector(spec), "driver": driver(spec)}
    assert run(cluster, MODULE, args)["created"] == [DS_416, DS_96]
    wait_placed(cluster, namespace, {DS_416: [node_a], DS_96: [b0, b1]})
    [old_pod] = [name for name, pod in driver_pods(cluster, namespace).items() if pod.daemonset == DS_416]

    # Node a reboots into RHCOS 418: its osImage says so at once, NFD's label follows within its sleepInterval.
    cluster.core.patch_node_status(node_a, {"status": {"nodeInfo": {
        "osImage": "Red Hat Enterprise Linux CoreOS %s (Plow)" % RHCOS_418}}})
    wait_for(lambda: driver_pods(cluster, namespace)[old_pod].ready is False, timeout=60,
             message="the RHCOS 416 driver pod failing on the RHCOS 418 node")
    midway = run(cluster, MODULE, args)
    assert not midway.get("failed"), midway.get("msg")
    assert (midway["created"], midway["unchanged"], midway["deleted"]) == ([DS_418], [DS_96], [])
    [kept] = midway["kept"]
    assert kept["name"] == DS_416 and kept["reason"].startswith("not desired, but it still has pods (")
    assert [m["node"] for m in midway["mismatched"]] == [node_a]
    assert old_pod in driver_pods(cluster, namespace)
    assert set(daemonset_versions(cluster, namespace)) == {DS_416, DS_418, DS_96}

    # NFD relabels: the 416 DaemonSet lets go of the node, the 418 one takes it. The node's simulated hardware says
    # what NFD sees from now on: a simulated nfd-worker on it (another test's NFD, on this shared cluster) would
    # otherwise put back the label of the OS the node was made with.
    hardware = json.loads(cluster.core.read_node(node_a).metadata.annotations[HARDWARE_ANNOTATION])
    hardware["nfd_labels"][OSTREE] = RHCOS_418
    cluster.core.patch_node(node_a, {"metadata": {"labels": {OSTREE: RHCOS_418}, "annotations": {
        HARDWARE_ANNOTATION: json.dumps(hardware, sort_keys=True)}}})
    wait_placed(cluster, namespace, {DS_418: [node_a], DS_96: [b0, b1]})

    def emptied():
        status = cluster.apps.read_namespaced_daemon_set(DS_416, namespace).status
        return (status.desired_number_scheduled, status.current_number_scheduled, status.number_misscheduled) == (
            0, 0, 0)
    wait_for(emptied, timeout=60, message="DaemonSet %s status without pods" % DS_416)
    finished = run(cluster, MODULE, args, diff=True)
    assert (finished["deleted"], finished["kept"], finished["unchanged"]) == ([DS_416], [], [DS_418, DS_96])
    assert [(d["before"]["metadata"]["name"], d["after"]) for d in finished["diff"]] == [(DS_416, {})]
    assert set(daemonset_versions(cluster, namespace)) == {DS_418, DS_96}
    assert run(cluster, MODULE, args)["changed"] is False


def test_missing_dtk_tag_blocks_its_version_and_leaves_the_rest_untouched(cluster, namespace, make_fleet):
    first = fleet([{"name": "old", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}}])
    [old] = make_fleet(first).node_names
    create_driver_service_account(cluster, namespace)
    label_gpu_nodes(cluster, first)
    args = {"namespace": namespace, "label_selector": selector(first), "driver": driver(first)}
    assert run(cluster, MODULE, args)["created"] == [DS_416]
    wait_placed(cluster, namespace, {DS_416: [old]})
    wait_for(lambda: settled(cluster, namespace), timeout=60, message="DaemonSet status settled")
    before = daemonset_versions(cluster, namespace)

    # A node on a version whose DTK tag the image stream lacks joins the same fleet.
    second = dict(fleet([{"name": "new", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_96}}],
                        openshift={"version": "4.21.3", "driver_toolkit": {"missing": [RHCOS_96]}}), name=first["name"])
    [new] = make_fleet(second).node_names
    label_gpu_nodes(cluster, second)
    blocked = run(cluster, MODULE, args)
    assert blocked["failed"] is True
    assert blocked["msg"].startswith(
        "driver DaemonSets left unchanged, because %s: node(s) %s would be left without a driver: RHCOS %s has no tag "
        "in image stream openshift/driver-toolkit" % (RHCOS_96, new, RHCOS_96))
    assert "set allow_blocked: true" in blocked["msg"]
    assert blocked["left_without_driver"] == [new]
    assert (blocked["plan"]["created"], blocked["plan"]["unchanged"]) == ([], [DS_416])
    assert writes(blocked) == {}
    assert daemonset_versions(cluster, namespace) == before

    tolerated = run(cluster, MODULE, dict(args, allow_blocked=True))
    # The blocked node gets its owner label (the default configuration's), as every GPU node; no DaemonSet changes.
    assert (tolerated.get("failed"), tolerated["changed"], tolerated["unchanged"]) == (None, True, [DS_416])
    assert tolerated["owner_labelled"] == [new]
    assert tolerated["blocked"][0]["nodes"] == [new]
    assert tolerated["assignments"][new]["build"] == "blocked"
    assert any(w.startswith("driver for %s blocked, node(s) %s:" % (RHCOS_96, new)) for w in tolerated["warnings"])
    assert daemonset_versions(cluster, namespace) == before

    # The remedy the message names: an override, through dtk_image_lookup.
    dtk = run(cluster, "accelerators.gpu.dtk_image_lookup", {
        "versions": [RHCOS_416, RHCOS_96], "overrides": {RHCOS_96: dtk_image(RHCOS_96)}})
    fixed = run(cluster, MODULE, dict(args, dtk_images=dtk["images"]))
    assert (fixed["created"], fixed["unchanged"]) == ([DS_96], [DS_416])
    wait_placed(cluster, namespace, {DS_416: [old], DS_96: [new]})
    assert daemonset_versions(cluster, namespace)[DS_416] == before[DS_416]


def test_foreign_daemonsets_are_left_alone_and_absent_removes_only_owned_ones(cluster, namespace, make_fleet):
    spec = fleet([{"name": "old", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}},
                  {"name": "new", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_96}}])
    make_fleet(spec)
    create_driver_service_account(cluster, namespace)
    label_gpu_nodes(cluster, spec)
    # The GPU Operator's DaemonSet of the same name (no managed-by label); its selector matches no node here.
    cluster.apps.create_namespaced_daemon_set(namespace, {
        "metadata": {"name": DS_416, "labels": {"app": DS_416, "openshift.driver-toolkit": "true"}},
        "spec": {"selector": {"matchLabels": {"app": DS_416}}, "template": {
            "metadata": {"labels": {"app": DS_416}},
            "spec": {"nodeSelector": {"example.test/nowhere": "true"},
                     "containers": [{"name": "nvidia-driver-ctr", "image": "example.test/nvidia/driver:535"}]}}}})
    wait_for(lambda: settled(cluster, namespace), timeout=60, message="DaemonSet status settled")
    foreign = daemonset_versions(cluster, namespace)[DS_416]
    args = {"namespace": namespace, "label_selector": selector(spec), "driver": driver(spec)}

    applied = run(cluster, MODULE, args)
    assert (applied["created"], applied["updated"], [k["name"] for k in applied["kept"]]) == ([DS_96], [], [DS_416])
    assert "this collection does not manage" in applied["kept"][0]["reason"]
    assert any(w.startswith("DaemonSet %s: a DaemonSet of this name exists" % DS_416) for w in applied["warnings"])
    assert daemonset_versions(cluster, namespace)[DS_416] == foreign

    absent = {"namespace": namespace, "state": "absent"}
    checked = run(cluster, MODULE, absent, check=True)
    assert (checked["changed"], checked["deleted"]) == (True, [DS_96])
    assert set(daemonset_versions(cluster, namespace)) == {DS_416, DS_96}
    removed = run(cluster, MODULE, absent)
    assert (removed["changed"], removed["deleted"]) == (True, [DS_96])
    assert daemonset_versions(cluster, namespace) == {DS_416: foreign}
    again = run(cluster, MODULE, absent)
    assert (again["changed"], again["deleted"], writes(again)) == (False, [], {})


def test_what_the_declaration_no_longer_has_is_removed(cluster, namespace, make_fleet):
    spec = fleet([{"name": "gpu", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}}])
    make_fleet(spec)
    create_driver_service_account(cluster, namespace)
    label_gpu_nodes(cluster, spec)
    args = {"namespace": namespace, "label_selector": selector(spec)}
    # Unlike a removed list item, a removed label leaves everything still declared in place.
    labelled = driver(spec, labels={"example.test/team": "ml"})
    assert run(cluster, MODULE, dict(args, driver=labelled))["created"] == [DS_416]
    # An edit by hand is not this collection's: declared again, the DaemonSet keeps it.
    cluster.apps.patch_namespaced_daemon_set(DS_416, namespace, {"metadata": {"labels": {"example.test/by-hand": "x"}}})

    removed = run(cluster, MODULE, dict(args, driver=driver(spec)), diff=True)
    assert (removed["changed"], removed["updated"]) == (True, [DS_416])
    ds = cluster.apps.read_namespaced_daemon_set(DS_416, namespace)
    assert "example.test/team" not in ds.metadata.labels and "example.test/team" not in ds.spec.template.metadata.labels
    assert ds.metadata.labels["example.test/by-hand"] == "x"
    again = run(cluster, MODULE, dict(args, driver=driver(spec)))
    assert (again["changed"], again["unchanged"], writes(again)) == (False, [DS_416], {})


def test_kernel_mode_uses_precompiled_images_and_falls_back_to_dtk(cluster, namespace, make_fleet):
    kernel = "5.14.0-427.33.1.el9_4.x86_64"
    spec = fleet([{"name": "std", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}},
                  {"name": "rt", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}, "kernel": kernel + "+rt"}])
    std, rt = make_fleet(spec).node_names
    create_driver_service_account(cluster, namespace)
    label_gpu_nodes(cluster, spec)
    precompiled = "example.test/nvidia/driver:550-%s-rhcos4.16" % kernel
    result = run(cluster, MODULE, {"namespace": namespace, "label_selector": selector(spec), "mode": "kernel",
                                   "driver": driver(spec, branch="550"), "precompiled_available": [precompiled]})
    precompiled_ds = "nvidia-driver-daemonset-5.14.0-427.33.1.el9.4-rhcos4.16"
    assert result["created"] == [precompiled_ds, DS_416]
    assert result["assignments"][std] == {"daemonset": precompiled_ds, "build": "precompiled", "image": precompiled}
    assert (result["assignments"][rt]["daemonset"], result["assignments"][rt]["build"]) == (DS_416, "dtk")
    assert ("precompiled image example.test/nvidia/driver:550-%s_rt-rhcos4.16 does not exist; node(s) %s fall back "
            "to a DTK build (DaemonSet %s)" % (kernel, rt, DS_416)) in result["warnings"]
    wait_placed(cluster, namespace, {precompiled_ds: [std], DS_416: [rt]})
