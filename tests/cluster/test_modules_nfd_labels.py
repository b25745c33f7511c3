"""accelerators.gpu.nfd_labels run by ansible-playbook against the local control plane."""

import threading
import time

from gpu_fleet import FLEET_LABEL, RHCOS_416, RHCOS_96, fleet, selector
from playbook import findings, run, warm_up

MODULE = "accelerators.gpu.nfd_labels"
PRESENT = "nvidia.com/gpu.present"
DEPLOY = "nvidia.com/gpu.deploy."
# One per state the collection deploys: nfd_labels' default.
OPERANDS = ("driver", "container-toolkit", "device-plugin", "dcgm-exporter", "gpu-feature-discovery", "dcgm",
            "operator-validator")


def gpu_labels(cluster, node):
    labels = cluster.core.read_node(node).metadata.labels or {}
    return {key: value for key, value in labels.items() if key == PRESENT or key.startswith(DEPLOY)}


def set_labels(cluster, node, labels):
    cluster.core.patch_node(node, {"metadata": {"labels": labels}})


def test_facts_groupings_and_warnings_of_a_mixed_fleet(cluster, make_fleet):
    spec = fleet([
        {"name": "a100", "count": 2, "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 8}, "os": {"rhcos": RHCOS_416}},
        {"name": "l40s", "gpu": {"count": 4}, "os": {"rhcos": RHCOS_96, "openshift": "4.21"}, "nfd_style": "class-vendor"},
        {"name": "stale", "gpu": {"count": 4}, "os": {"rhcos": RHCOS_96, "openshift": "4.21"},
         "faults": {"stale_nfd_label": RHCOS_416}},
        {"name": "cpu", "os": {"rhcos": RHCOS_416}},
        {"name": "ubuntu", "gpu": {"count": 1}, "os": {"ubuntu": "22.04"}, "nfd_style": "class-vendor"},
    ])
    names = {n.split("-", 1)[1]: n for n in make_fleet(spec).node_names}
    result = run(cluster, MODULE, {"label_selector": selector(spec)})
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is False
    # Both PCI label shapes (pci-10de, pci-0302_10de) count; the CPU node does not.
    assert result["gpu_nodes"] == sorted(names[n] for n in ("a100-0", "a100-1", "l40s", "stale", "ubuntu"))
    # The stale node groups under what its osImage says, not under its NFD label.
    assert result["groups"]["by_rhcos"] == {RHCOS_416: [names["a100-0"], names["a100-1"]],
                                            RHCOS_96: [names["l40s"], names["stale"]]}
    assert result["rhcos_versions"] == [RHCOS_416, RHCOS_96]
    assert result["groups"]["by_os"]["ubuntu22.04"] == [names["ubuntu"]]
    assert result["groups"]["by_kernel"]["5.14.0-570.42.1.el9_6.x86_64"] == [names["l40s"], names["stale"]]

    facts = {node["name"]: node for node in result["nodes"]}
    layered = facts[names["l40s"]]
    assert (layered["os"]["id"], layered["os"]["version_id"], layered["os"]["openshift_version"]) == (
        "rhel", "9.6", "4.21")
    assert layered["kernel"]["full"] == "5.14.0-570.42.1.el9_6.x86_64"
    assert (layered["runtime"], facts[names["ubuntu"]]["runtime"]) == ("cri-o", "containerd")
    assert facts[names["a100-0"]]["os"]["id"] == "rhcos" and facts[names["a100-0"]]["os"]["version_id"] == "4.16"
    stale = facts[names["stale"]]
    assert (stale["rhcos_version"], stale["rhcos_label"], stale["rhcos_os_image"]) == (RHCOS_96, RHCOS_416, RHCOS_96)
    [warning] = result["node_warnings"][names["stale"]]
    assert warning.startswith("node %s: stale NFD label" % names["stale"])
    assert "using %s (osImage)" % RHCOS_96 in warning
    assert warning in result["warnings"]
    assert list(result["node_warnings"]) == [names["stale"]]
    assert set(result["api_requests"]) == {"GET"}

    # Six nodes in pages of two: three list requests, nothing else.
    warm_up(cluster)
    paged = run(cluster, MODULE, {"label_selector": selector(spec), "page_size": 2})
    assert [node["name"] for node in paged["nodes"]] == sorted(names.values())
    assert paged["api_requests"] == {"GET": 3}


def test_label_management_check_mode_diff_opt_out_kill_switch_and_uninstall(cluster, make_fleet):
    spec = fleet([{"name": "gpu", "count": 2, "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}},
                  {"name": "cpu", "os": {"rhcos": RHCOS_416}}])
    gpu0, gpu1, cpu = make_fleet(spec).node_names
    set_labels(cluster, gpu1, {DEPLOY + "driver": "false"})  # an admin's opt-out
    args = {"label_selector": selector(spec), "manage_labels": True}
    everything = dict({PRESENT: "true"}, **{DEPLOY + operand: "true" for operand in OPERANDS})
    opted_out = dict(everything, **{DEPLOY + "driver": "false"})

    checked = run(cluster, MODULE, args, check=True, diff=True)
    assert checked["changed"] is True
    assert checked["label_changes"] == {gpu0: everything,
                                        gpu1: {k: v for k, v in everything.items() if k != DEPLOY + "driver"}}
    assert {d["before_header"] for d in checked["diff"]} == {"node %s labels" % gpu0, "node %s labels" % gpu1}
    assert [d["after"] for d in checked["diff"] if d["after_header"] == "node %s labels" % gpu0] == [everything]
    # The check-mode facts show the labels as they would be, the nodes still carry none of them.
    assert {n["name"]: n["deploy_labels"].get("driver") for n in checked["nodes"]} == {
        gpu0: "true", gpu1: "false", cpu: None}
    assert (gpu_labels(cluster, gpu0), gpu_labels(cluster, gpu1), gpu_labels(cluster, cpu)) == (
        {}, {DEPLOY + "driver": "false"}, {})

    applied = run(cluster, MODULE, args)
    assert applied["changed"] is True and applied["api_requests"]["PATCH"] == 2
    assert (gpu_labels(cluster, gpu0), gpu_labels(cluster, gpu1), gpu_labels(cluster, cpu)) == (
        everything, opted_out, {})

    again = run(cluster, MODULE, args, diff=True)
    assert (again["changed"], again["label_changes"], again["diff"]) == (False, {}, [])
    assert "PATCH" not in again["api_requests"]

    # A state switched off loses its label; an admin's value stays. Enabled again, the label comes back.
    set_labels(cluster, gpu1, {DEPLOY + "operator-validator": "false"})
    without_gfd = run(cluster, MODULE, dict(args, operands=[op for op in OPERANDS if op not in (
        "gpu-feature-discovery", "operator-validator")]))
    assert without_gfd["label_changes"] == {
        gpu0: {DEPLOY + "gpu-feature-discovery": None, DEPLOY + "operator-validator": None},
        gpu1: {DEPLOY + "gpu-feature-discovery": None}}
    assert run(cluster, MODULE, args)["label_changes"] == {
        gpu0: {DEPLOY + "gpu-feature-discovery": "true", DEPLOY + "operator-validator": "true"},
        gpu1: {DEPLOY + "gpu-feature-discovery": "true"}}
    # absent with operands: those operands' labels only (GPU feature discovery switched off with its tag alone).
    only_gfd = run(cluster, MODULE, dict(args, labels_state="absent", operands=["gpu-feature-discovery"]))
    assert only_gfd["label_changes"] == {gpu0: {DEPLOY + "gpu-feature-discovery": None},
                                         gpu1: {DEPLOY + "gpu-feature-discovery": None}}
    run(cluster, MODULE, args)
    set_labels(cluster, gpu1, {DEPLOY + "operator-validator": "true"})

    # The kill switch takes gpu0's operands away; gpu.present stays (the node still has its GPU).
    set_labels(cluster, gpu0, {DEPLOY + "operands": "false"})
    switched = run(cluster, MODULE, args)
    assert switched["label_changes"] == {gpu0: {DEPLOY + operand: None for operand in OPERANDS}}
    assert gpu_labels(cluster, gpu0) == {PRESENT: "true", DEPLOY + "operands": "false"}

    removed = run(cluster, MODULE, dict(args, labels_state="absent"))
    assert removed["changed"] is True
    # What this collection set is gone; the admin's choices stay.
    assert (gpu_labels(cluster, gpu0), gpu_labels(cluster, gpu1)) == (
        {DEPLOY + "operands": "false"}, {DEPLOY + "driver": "false"})


def test_wait_times_out_naming_the_nodes_without_nfd_labels(cluster, make_fleet):
    spec = fleet([{"name": "labelled", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}},
                  {"name": "bare", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}, "faults": {"no_nfd_labels": True}}])
    labelled, bare = make_fleet(spec).node_names
    args = {"label_selector": selector(spec), "wait": True, "wait_timeout": 2, "wait_sleep": 1}

    every_node = run(cluster, MODULE, args)
    assert every_node["failed"] is True
    assert every_node["msg"] == ("timed out after 2s waiting for NFD labels: 1 of 2 Ready untainted node(s) have no NFD labels; "
                                 "Ready untainted nodes without feature.node.kubernetes.io/ labels: %s" % bare)
    assert every_node["without_nfd"] == [bare] and every_node["gpu_nodes"] == [labelled]
    assert every_node["api_requests"]["GET"] >= 2  # it looked more than once

    gpu_count = run(cluster, MODULE, dict(args, min_gpu_nodes=2))
    assert gpu_count["failed"] is True
    assert "1 GPU node(s) found (%s), at least 2 wanted; Ready untainted nodes without feature.node.kubernetes.io/ labels: %s" % (
        labelled, bare) in gpu_count["msg"]


def test_wait_returns_once_nfd_has_labelled_the_gpu_nodes(cluster, namespace, make_fleet):
    spec = fleet([{"name": "gpu", "count": 2, "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}}], nfd="worker")
    nodes = make_fleet(spec).node_names
    outcome = {}
    waiting = threading.Thread(target=lambda: outcome.update(run(cluster, MODULE, {
        "label_selector": selector(spec), "wait": True, "wait_timeout": 120, "wait_sleep": 1, "min_gpu_nodes": 2})))
    waiting.start()
    # The module starts (how long ansible-playbook takes to get there depends on the machine's load) and polls nodes
    # that have no NFD labels; their labels can only come from the nfd-worker pods created now. That the module
    # loops until then is proven deterministically by the unit tests (nodes/test_nfd_labels.py).
    time.sleep(4)
    name = "nfd-worker"
    cluster.apps.create_namespaced_daemon_set(namespace, {
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name, "app.kubernetes.io/component": "nfd-worker"}},
            "spec": {"nodeSelector": {FLEET_LABEL: spec["name"]},
                     "containers": [{"name": "worker", "image": "example.test/sim/nfd:0.16"}]}}}})
    waiting.join(150)
    assert not outcome.get("failed"), outcome.get("msg")
    assert (outcome["gpu_nodes"], outcome["without_nfd"]) == (sorted(nodes), [])


def test_a_real_node_table_then_the_node_without_nfd_labels_in_full(cluster, make_fleet):
    # GPU nodes tainted for GPU workloads: nfd-worker tolerates the taint and labelled three; the fourth has no NFD
    # labels yet, its taint (read in full) says nfd-worker does not run there.
    taint = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    spec = fleet([{"name": "gpu", "count": 3, "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}, "taints": [taint]},
                  {"name": "bare", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}, "taints": [taint],
                   "faults": {"no_nfd_labels": True}}])
    *labelled, bare = make_fleet(spec).node_names
    warm_up(cluster)
    result = run(cluster, MODULE, {"label_selector": selector(spec), "wait": True, "wait_timeout": 5, "manage_labels": True})
    assert not result.get("failed"), result.get("msg")
    # One Node Table, one GET of the node without NFD labels (one of four), a label patch per GPU node.
    assert result["api_requests"] == {"GET": 2, "PATCH": 3}
    assert {node["name"]: node["tainted"] for node in result["nodes"]} == dict({bare: True}, **{n: None for n in labelled})
    assert result["gpu_nodes"] == sorted(labelled) == sorted(result["label_changes"])
    assert result["without_nfd"] == [bare]
    # The patches (with the resourceVersion of the Table's metadata) are in place: nothing left to change.
    assert run(cluster, MODULE, {"label_selector": selector(spec), "manage_labels": True})["changed"] is False


def test_a_fleet_over_one_first_page_reads_the_cells_and_the_labels_and_gives_the_same_facts(cluster, make_fleet):
    # More nodes than the first page of the Node Table with metadata (k8s.api.SMALL_FLEET, 100) holds, on two
    # RHCOS builds, a fifth without GPUs.
    spec = fleet([{"name": "a100", "count": 50, "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}},
                  {"name": "l40s", "count": 50, "gpu": {"count": 4}, "os": {"rhcos": RHCOS_96, "openshift": "4.21"}},
                  {"name": "cpu", "count": 25, "os": {"rhcos": RHCOS_416}}])
    names = make_fleet(spec).node_names
    warm_up(cluster)
    result = run(cluster, MODULE, {"label_selector": selector(spec)})
    assert not result.get("failed"), result.get("msg")
    # The first page (100 rows with metadata), then the cells and the labels of all 125.
    assert result["api_requests"] == {"GET": 3}
    assert [node["name"] for node in result["nodes"]] == sorted(names)
    assert len(result["gpu_nodes"]) == 100 and sorted(result["groups"]["by_rhcos"]) == [RHCOS_416, RHCOS_96]
    # The same facts as the Node Table with metadata in pages gives them, nothing more read.
    paged = run(cluster, MODULE, {"label_selector": selector(spec), "page_size": 60})
    assert paged["api_requests"] == {"GET": 3}
    # The same facts, whatever the reads cost and however long they waited.
    assert findings(paged) == findings(result)
