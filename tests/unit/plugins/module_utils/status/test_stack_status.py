"""The status rows and lines: operand readiness per node, newest validation per check, host drivers, the module's
reads and its columns."""

import copy

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.errors import APIError, TaskError
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.views import (
    NODE_FULL, POD_CELLS, POD_FULL, POD_READINESS)
from ansible_collections.accelerators.gpu.plugins.module_utils.status.stack_status import (
    dra_devices, node_rows, not_ready_reasons, operand_pod_reads, pending_claims, read_gpu_nodes, run, status_node,
    table_lines, verdict)
from ansible_collections.accelerators.gpu.plugins.module_utils.status.table import cell
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.fakes import matches


def pod(node, component, app=None, ready=True, reason=None):
    status = {"phase": "Running" if ready else "Pending",
              "containerStatuses": [{"ready": ready, "state": {"waiting": {"reason": reason}} if reason else {}}]}
    labels = {"app.kubernetes.io/managed-by": "accelerators.gpu", "app.kubernetes.io/component": component,
              "app": app or component}
    return {"metadata": {"name": "%s-%s" % (app or component, node), "labels": labels},
            "spec": {"nodeName": node}, "status": status}


def job(node, check, succeeded=0, failed=0, time="2026-01-01T00:00:00Z"):
    return {"metadata": {"labels": {"accelerators.gpu/validation": check},
                         "annotations": {"accelerators.gpu/node": node}},
            "status": {"succeeded": succeeded, "failed": failed, "completionTime": time}}


def fact(name, gpu=True, driver="true", rhcos="9.6.20260303-1"):
    return {"name": name, "gpu_present": gpu, "gpu_count": None, "rhcos_version": rhcos,
            "kernel": {"running": "5.15.0-100-generic"}, "deploy_labels": {"driver": driver}}


def node(name, gpus):
    return {"metadata": {"name": name},
            "status": {"capacity": {"nvidia.com/gpu": str(gpus)}, "allocatable": {"nvidia.com/gpu": str(gpus)}}}


OPERANDS = ("nvidia-container-toolkit", "nvidia-device-plugin", "nvidia-dcgm-exporter")
# A DCGM exporter's page of one GPU, for the node and the XID to fill in.
EXPORTER_PAGE = ('# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n'
                 '# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n'
                 'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-5f0c2a8e-1d3b-4c7a-9e21-0b6d4f8a7c13",'
                 'pci_bus_id="00000000:07:00.0",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="%s"} %d\n')


def test_ready_node_pre_installed_driver_and_a_failing_pull():
    pods = [pod("a", "nvidia-driver", app="nvidia-driver-daemonset-9.6.20260303-1")]
    pods += [pod("a", component) for component in OPERANDS] + [pod("b", component) for component in OPERANDS[:1]]
    pods.append(pod("b", "nvidia-device-plugin", ready=False, reason="ImagePullBackOff"))
    jobs = [job("a", "toolkit", failed=1, time="2026-01-01T00:00:00Z"),
            job("a", "toolkit", succeeded=1, time="2026-01-02T00:00:00Z"), job("a", "cuda", succeeded=1)]
    rows = node_rows([fact("a"), fact("b", driver="pre-installed", rhcos=None), fact("cpu", gpu=False)],
                     [node("a", 8), node("b", 0)], pods, jobs)
    assert [row["node"] for row in rows] == ["a", "b"]
    first, second = rows
    assert first["ready"] and first["validation"] == {"cuda": "ok", "toolkit": "ok"}
    assert (first["gpus"], first["allocatable"], first["driver_daemonset"]) == (8, 8, "nvidia-driver-daemonset-9.6.20260303-1")
    assert first["validated_at"] == "2026-01-02T00:00:00Z"
    assert (second["driver"], second["driver_daemonset"], second["os"]) == ("host", "pre-installed", "5.15.0-100-generic")
    assert (second["device_plugin"], second["dcgm_exporter"], second["ready"]) == ("ImagePullBackOff", "-", False)
    assert second["gpus"] is None and second["validation"] == {}


def test_table_lines_align_under_the_header_in_the_default_view_or_the_columns_chosen():
    rows = node_rows([fact("gpu-node-0")], [node("gpu-node-0", 4)], [], [job("gpu-node-0", "cuda", failed=1)])
    assert table_lines(rows)[:2] == ["NODE        GPUS  PRODUCT  DRIVER  STACK",
                                     "gpu-node-0  4     -        -       driver no pod"]
    lines = table_lines(rows, columns=["validation"])
    assert lines[:2] == ["NODE        LAST VALIDATION", "gpu-node-0  cuda:failed (2026-01-01T00:00:00Z)"]
    wide = table_lines(rows, columns=["wide"])
    assert wide[0].split()[:2] == ["NODE", "GPUS"] and wide[0].index("GPUS") == wide[1].index("4 ")
    assert "cuda:failed (2026-01-01T00:00:00Z)" in wide[1]


def test_product_memory_and_mig_from_gfd_else_from_nfd_pci_labels_and_gfd_readiness():
    gfd = node("a", 8)
    gfd["metadata"]["labels"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920",
                                 "nvidia.com/mig.capable": "true"}
    pci = node("b", 4)
    pci["metadata"]["labels"] = {"feature.node.kubernetes.io/pci-0302_10de_26b9.present": "true"}
    bare = node("c", 2)
    pods = [pod(name, component) for name in "abc" for component in ("nvidia-driver",) + OPERANDS]
    pods += [pod("a", "gpu-feature-discovery"), pod("b", "gpu-feature-discovery", ready=False, reason="CrashLoopBackOff")]
    jobs = [job(name, "cuda", succeeded=1) for name in "abc"]
    rows = node_rows([fact("a"), fact("b"), fact("c")], [gfd, pci, bare], pods, jobs)
    summary = [(r["product"], r["memory"], r["mig_capable"], r["gpu_info"], r["gpu_feature_discovery"], r["ready"])
               for r in rows]
    assert summary == [("NVIDIA-A100-SXM4-80GB", 81920, True, "gfd", "ready", True),
                       ("NVIDIA-L40S", 46068, False, "pci", "CrashLoopBackOff", False),
                       (None, None, None, None, "-", True)]
    lines = table_lines(rows, columns=["wide"])
    assert lines[0].split()[:6] == ["NODE", "GPUS", "PRODUCT", "MEMORY", "MiB", "MIG"]
    assert lines[1].split()[:5] == ["a", "8", "NVIDIA-A100-SXM4-80GB", "81920", "yes"]
    assert lines[3].split()[:5] == ["c", "2", "-", "-", "-"]


def test_driver_version_of_each_row_from_gfd_labels():
    labelled = node("a", 8)
    labelled["metadata"]["labels"] = {"nvidia.com/cuda.driver-version.full": "570.172.08"}
    rows = node_rows([fact("a"), fact("b", driver="pre-installed")], [labelled, node("b", 4)], [], [])
    assert [(row["node"], row["driver_version"]) for row in rows] == [("a", "570.172.08"), ("b", None)]
    # The column DRIVER: the version loaded, then the state of the driver pod ("-": none), or the host's driver.
    assert [line.split()[:4] for line in table_lines(rows)[:3]] == [
        ["NODE", "GPUS", "PRODUCT", "DRIVER"], ["a", "8", "-", "570.172.08"], ["b", "4", "-", "host"]]


def test_not_ready_reasons_say_what_the_ready_rule_misses():
    pods = [pod("a", "nvidia-driver")] + [pod("a", component) for component in OPERANDS]
    pods += [pod("b", "nvidia-driver", ready=False, reason="CrashLoopBackOff"),
             pod("b", "gpu-feature-discovery", ready=False, reason="Init:0/1")]
    jobs = [job("a", "cuda", succeeded=1), job("b", "cuda", failed=1), job("b", "driver", succeeded=1)]
    failed = node("b", 0)
    failed["metadata"]["labels"] = {"nvidia.com/gpu-driver-upgrade-state": "upgrade-failed"}
    failed["metadata"]["annotations"] = {"accelerators.gpu/driver-upgrade-failure": "validation cuda failed"}
    ready, broken = node_rows([fact("a"), fact("b")], [node("a", 8), failed], pods, jobs)
    assert ready["ready"] and not_ready_reasons(ready) == []
    assert not broken["ready"]
    assert not_ready_reasons(broken) == [
        "driver CrashLoopBackOff", "toolkit no pod", "device plugin no pod", "dcgm exporter no pod",
        "gpu feature discovery Init:0/1", "driver upgrade: upgrade-failed (validation cuda failed)",
        "no allocatable GPUs", "validation cuda failed"]
    unvalidated = node_rows([fact("c", driver="pre-installed")], [node("c", 2)],
                            [pod("c", component) for component in OPERANDS], [])[0]
    assert not_ready_reasons(unvalidated) == ["not validated"] and not unvalidated["ready"]


def driver_daemonset(build, managed=True):
    labels = {"app.kubernetes.io/component": "nvidia-driver"}
    if managed:
        labels["app.kubernetes.io/managed-by"] = "accelerators.gpu"
    ostree = "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION"
    name = "nvidia-driver-daemonset-" + build
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"spec": {"nodeSelector": {"nvidia.com/gpu.deploy.driver": "true", ostree: build}}}}}


def test_a_node_on_a_build_without_driver_daemonset_is_named_and_not_ready():
    ostree = "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION"
    facts, nodes = [], []
    for name, build, driver in (("old", "9.6.20260303-1", "true"), ("moved", "9.6.20260401-0", "true"),
                                ("host", "9.6.20260401-0", "pre-installed")):
        facts.append(fact(name, driver=driver, rhcos=build))
        nodes.append(node(name, 8))
        nodes[-1]["metadata"]["labels"] = {ostree: build, "nvidia.com/gpu.deploy.driver": driver}
    pods = [pod("old", "nvidia-driver")] + [pod(name, component) for name in ("old", "moved") for component in OPERANDS]
    jobs = [job("old", "cuda", succeeded=1), job("moved", "cuda", succeeded=1)]
    # A DaemonSet of the new build that the collection does not manage serves nothing.
    daemonsets = [driver_daemonset("9.6.20260303-1"), driver_daemonset("9.6.20260401-0", managed=False)]
    rows = {row["node"]: row for row in node_rows(facts, nodes, pods, jobs, daemonsets)}
    assert [name for name, row in rows.items() if row["without_driver_daemonset"]] == ["moved"]
    assert rows["old"]["ready"] and not rows["moved"]["ready"]
    assert table_lines(list(rows.values()))[-1] == (
        "moved: no driver DaemonSet is for 9.6.20260401-0, which it runs (an upgrade outside "
        "accelerators.gpu.rhcos_upgrade?): run accelerators.gpu.reconcile")
    # Without the DaemonSets read (an older caller), nothing is claimed.
    assert not any(row["without_driver_daemonset"] for row in node_rows(facts, nodes, pods, jobs))


def test_each_node_shows_the_kernel_modules_of_its_driver_daemonset():
    daemonsets = []
    for build, image, env in (("9.6.20260303-1", "nvcr.io/nvidia/driver:550.90.07-rhel9.6", []),
                              ("9.6.20260401-0", "nvcr.io/nvidia/driver:595.91.07-rhel9.6",
                               [{"name": "KERNEL_MODULE_TYPE", "value": "proprietary"}]),
                              ("9.6.20260501-0", "nvcr.io/nvidia/driver@sha256:" + "d" * 64,
                               [{"name": "KERNEL_MODULE_TYPE", "value": "auto"}])):
        daemonsets.append(driver_daemonset(build))
        daemonsets[-1]["spec"]["template"]["spec"]["containers"] = [
            {"name": "nvidia-driver-ctr", "image": image, "env": env}]
    facts = [fact("unset", rhcos="9.6.20260303-1"), fact("pinned", rhcos="9.6.20260401-0"),
             fact("digest", rhcos="9.6.20260501-0"), fact("host", driver="pre-installed")]
    pods = [pod("unset", "nvidia-driver", app=daemonsets[0]["metadata"]["name"]),
            pod("pinned", "nvidia-driver", app=daemonsets[1]["metadata"]["name"]),
            pod("digest", "nvidia-driver", app=daemonsets[2]["metadata"]["name"])]
    rows = {row["node"]: row for row in node_rows(facts, [node(f["name"], 8) for f in facts], pods, [], daemonsets)}
    assert {name: (row["kernel_module_type"], row["kernel_modules"]) for name, row in rows.items()} == {
        # No KERNEL_MODULE_TYPE is auto, as the driver container takes it: proprietary below branch 560.
        "unset": ("auto", "proprietary"), "pinned": ("proprietary", "proprietary"), "digest": ("auto", None),
        "host": (None, None)}
    assert [cell(rows[name], "kernel_modules", []) for name in ("unset", "pinned", "digest", "host")] == [
        "proprietary (auto)", "proprietary", "auto", "-"]


def test_mig_layout_and_manager_per_node_and_mig_devices_count_as_allocatable():
    mixed = {"metadata": {"name": "a", "labels": {"nvidia.com/mig.config": "all-1g.10gb",
                                                  "nvidia.com/mig.config.state": "success"}},
             "status": {"allocatable": {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "14", "cpu": "8"}}}
    pods = [pod(name, component) for name in ("a", "b") for component in ("nvidia-driver",) + OPERANDS]
    pods.append(pod("a", "nvidia-mig-manager"))
    jobs = [job(name, "cuda", succeeded=1) for name in ("a", "b")]
    first, second = node_rows([fact("a"), fact("b")], [mixed, node("b", 2)], pods, jobs)
    assert (first["mig_manager"], first["mig_config"], first["mig_config_state"], first["allocatable"]) == (
        "ready", "all-1g.10gb", "success", 14)
    # Without a MIG manager (no MIG-capable GPU) a node is ready all the same.
    assert (second["mig_manager"], second["mig_config"], second["ready"]) == ("-", None, True)
    assert first["ready"] is True
    # Applied: a column of the wide view, not of the default one.
    assert "MIG CONFIG" not in table_lines([first, second])[0]
    lines = table_lines([first, second], columns="wide")
    assert "all-1g.10gb (success)" in lines[1] and "MIG CONFIG" in lines[0]


def test_sharing_per_node_from_gfd_labels_and_an_mps_node_needs_its_control_daemon():
    def shared(name, strategy, replicas):
        found = node(name, 8)
        found["metadata"]["labels"] = {"nvidia.com/gpu.sharing-strategy": strategy, "nvidia.com/gpu.replicas": replicas}
        return found
    nodes = [shared("mps", "mps", "4"), shared("ts", "time-slicing", "2"), shared("none", "none", "1"), node("old", 8)]
    names = [found["metadata"]["name"] for found in nodes]
    pods = [pod(name, component) for name in names for component in ("nvidia-driver",) + OPERANDS]
    jobs = [job(name, "cuda", succeeded=1) for name in names]
    rows = {row["node"]: row for row in node_rows([fact(name) for name in names], nodes, pods, jobs)}
    assert {name: (row["sharing"], row["sharing_replicas"], row["mps_control_daemon"]) for name, row in rows.items()} \
        == {"mps": ("mps", 4, "-"), "ts": ("time-slicing", 2, "-"), "none": ("none", 1, "-"), "old": (None, None, "-")}
    assert not_ready_reasons(rows["mps"]) == ["mps control daemon no pod"]
    assert [name for name, row in rows.items() if not row["ready"]] == ["mps"]
    assert [cell(rows[name], "sharing", []) for name in names] == ["mps x4", "time-slicing x2", "none", "-"]
    pods.append(pod("mps", "nvidia-mps-control-daemon"))
    row = node_rows([fact("mps")], nodes[:1], pods, jobs)[0]
    assert (row["mps_control_daemon"], row["ready"]) == ("ready", True)


def status_module(label_selector=None, columns=None):
    """The stack_status module as run() uses it: its params, and its warnings kept."""
    return type("Module", (), {"params": {"namespace": "gpu", "label_selector": label_selector, "columns": columns},
                               "warnings": [], "warn": lambda self, message: self.warnings.append(message)})()


class StatusCluster:
    """The lists the stack_status module reads, in memory; reads records (what, view or selector). Pods are
    label-selected and sent as the API server sends them in the view asked for: without labels as Table cells,
    unless full_pods (a server that serves no Table, whose full objects have them)."""

    def __init__(self, nodes, pods, jobs, daemonsets, full_pods=False, resource_lists=None, objects=None):
        self.nodes, self.pods, self.jobs, self.daemonsets = nodes, pods, jobs, daemonsets
        self.full_pods = full_pods
        # {path: items} of resource.k8s.io/v1; None: a server without it (before Kubernetes 1.34).
        self.resource_lists = resource_lists
        # {path: object} read one by one (the ComputeDomain controller's Deployment).
        self.objects = objects or {}
        # {exporter pod name: its page}.
        self.metrics = {}
        self.reads = []

    def read_once(self, path):
        """An exporter's page through the pod proxy: its metrics (self.metrics by pod name), else no XID."""
        self.reads.append(("proxy", path))
        name = path.split("/pods/")[1].split(":")[0]
        return self.metrics.get(name, EXPORTER_PAGE % (name.rsplit("-", 1)[-1], 0))

    def read_optional(self, path):
        self.reads.append(("object", path))
        found = self.objects.get(path)
        return found, found is not None

    def list_items(self, path, label_selector=None, field_selector=None):
        self.reads.append(("items", path, field_selector))
        if self.resource_lists is None:
            raise APIError("GET", path, 404, "the server could not find the requested resource")
        return self.resource_lists[path]

    def list_nodes(self, label_selector=None, page_size=None, view=NODE_FULL):
        self.reads.append(("nodes", label_selector, view))
        return iter(self.nodes)

    def list_pods(self, namespace, label_selector=None, view=NODE_FULL):
        self.reads.append(("pods", namespace, label_selector, view))
        served = [copy.deepcopy(pod) for pod in self.pods if matches(pod["metadata"]["labels"], label_selector)]
        if view == POD_CELLS and not self.full_pods:
            for pod_read in served:
                pod_read["metadata"] = {"name": pod_read["metadata"]["name"], "namespace": namespace}
        return served

    def list_jobs(self, namespace, label_selector=None):
        self.reads.append(("jobs", namespace, label_selector))
        return self.jobs

    def list_daemonsets(self, namespace, label_selector=None):
        self.reads.append(("daemonsets", namespace, label_selector))
        return self.daemonsets


def full_node(name, build, pci=True, annotations=None):
    labels = {"feature.node.kubernetes.io/system-os_release.OSTREE_VERSION": build,
              "nvidia.com/gpu.deploy.driver": "true"}
    if pci:
        labels["feature.node.kubernetes.io/pci-10de.present"] = "true"
    return {"metadata": {"name": name, "labels": labels, "annotations": dict(annotations or {}, big="x" * 100)},
            "spec": {"taints": []},
            "status": {"nodeInfo": {"osImage": "Red Hat Enterprise Linux CoreOS %s (Plow)" % build},
                       "capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8", "cpu": "64"},
                       "images": [{"names": ["big"], "sizeBytes": 1}]}}


def test_the_module_reads_each_list_once_keeps_only_what_rows_show_and_says_where_the_stack_is_not_ready():
    build = "9.6.20260303-1"
    failure = {"accelerators.gpu/driver-upgrade-failure": "driver pod not ready after 600s"}
    # No NFD label but a GPU resource: not a GPU node, and the warning nfd_labels gives.
    unlabelled = full_node("c-unlabelled", build, pci=False)
    unlabelled["metadata"]["labels"] = {}
    cluster = StatusCluster(
        [full_node("b-failed", build, annotations=failure), full_node("a-ready", build), unlabelled],
        [pod(name, component) for name in ("a-ready", "b-failed") for component in ("nvidia-driver",) + OPERANDS],
        [job(name, "cuda", succeeded=1) for name in ("a-ready", "b-failed")], [driver_daemonset(build)])
    for pod_read in cluster.pods:
        pod_read["metadata"]["labels"]["app"] = "nvidia-driver-daemonset-" + build
    cluster.nodes[0]["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] = "upgrade-failed"
    module = status_module("role=gpu")
    result = run(module, cluster)
    managed = "app.kubernetes.io/managed-by=accelerators.gpu"
    drivers = managed + ",app.kubernetes.io/component=nvidia-driver"
    assert cluster.reads == [("nodes", "role=gpu", NODE_FULL), ("daemonsets", "gpu", drivers)] + [
        ("pods", "gpu", managed + ",app.kubernetes.io/component=" + component, POD_CELLS)
        for component in OPERANDS + ("gpu-feature-discovery", "nvidia-mig-manager", "nvidia-mps-control-daemon",
                                     "nvidia-dra-driver-kubelet-plugin")] + [
        ("pods", "gpu", drivers + ",app=nvidia-driver-daemonset-" + build, POD_CELLS),
        ("pods", "gpu", drivers + ",app notin (nvidia-driver-daemonset-%s)" % build, POD_READINESS),
        # No node runs the DRA stack: nothing of resource.k8s.io is read.
        # No node shows a GPU fault: no DCGM exporter is read.
        ("jobs", "gpu", "app.kubernetes.io/component=gpu-validation")]
    assert [(row["node"], row["ready"], row["driver_upgrade"]) for row in result["nodes"]] == [
        ("a-ready", True, "-"), ("b-failed", False, "upgrade-failed")]
    assert [(record["node"], record["healthy"], record["gpus"]) for record in result["gpu_health"]] == [
        ("a-ready", True, {"capacity": 8, "allocatable": 8}), ("b-failed", True, {"capacity": 8, "allocatable": 8})]
    assert (result["ready"], result["changed"]) == (False, False)
    assert result["lines"][-2:] == ["b-failed: driver upgrade-failed: driver pod not ready after 600s",
                                    "GPU stack NOT ready on b-failed"]
    assert result["lines"][:-1] == table_lines(result["nodes"])
    assert [warning.split(":")[0] for warning in module.warnings] == ["node c-unlabelled"]
    assert status_node(cluster.nodes[0]) == {
        "metadata": {"name": "b-failed", "labels": cluster.nodes[0]["metadata"]["labels"], "annotations": failure},
        "spec": {"unschedulable": False, "taints": []},
        "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8", "cpu": "64"},
                   "conditions": []}}


def test_an_unknown_column_fails_the_module_before_it_reads_anything():
    cluster = StatusCluster([full_node("a", "9.6.20260303-1")], [], [], [])
    with pytest.raises(TaskError) as failed:
        run(status_module(columns=["node", "driver_state"]), cluster)
    assert str(failed.value).startswith("columns: unknown status column 'driver_state': the columns are node, gpus, ")
    assert cluster.reads == []


def test_verdict_names_the_nodes_not_ready_and_an_empty_fleet():
    assert verdict([{"node": "a", "ready": True}]) == "GPU stack ready on every GPU node"
    assert verdict([{"node": "a", "ready": False}, {"node": "b", "ready": True}, {"node": "c", "ready": False}]) == (
        "GPU stack NOT ready on a, c")
    assert verdict([]) == "GPU stack NOT ready on any node: no GPU node found"


def test_pods_are_read_per_component_and_per_driver_daemonset_and_rows_are_those_of_full_pods():
    build, gone = "9.6.20260303-1", "nvidia-driver-daemonset-9.4.20250101-0"
    nodes = [full_node(name, build) for name in ("a", "b", "c")]
    pods = [pod(name, component) for name in ("a", "b", "c") for component in OPERANDS]
    pods += [pod("a", "nvidia-driver", app="nvidia-driver-daemonset-" + build),
             pod("b", "nvidia-driver", app="nvidia-driver-daemonset-" + build, ready=False, reason="CrashLoopBackOff"),
             # The pod of a DaemonSet deleted with its dependents orphaned: shown with its DaemonSet's name.
             pod("c", "nvidia-driver", app=gone, ready=False, reason="Terminating"),
             pod("a", "gpu-feature-discovery"), pod("b", "nvidia-mig-manager", ready=False, reason="Init:0/1"),
             # A managed pod of no operand column is not read.
             pod("a", "gpu-validation")]
    jobs = [job(name, "cuda", succeeded=1) for name in ("a", "b", "c")]
    module = status_module()
    cells = StatusCluster(nodes, pods, jobs, [driver_daemonset(build)])
    result = run(module, cells)
    rows = [(row["node"], row["driver"], row["driver_daemonset"], row["gpu_feature_discovery"], row["mig_manager"],
             row["ready"]) for row in result["nodes"]]
    assert rows == [("a", "ready", "nvidia-driver-daemonset-" + build, "ready", "-", True),
                    ("b", "CrashLoopBackOff", "nvidia-driver-daemonset-" + build, "-", "Init:0/1", False),
                    ("c", "Terminating", gone, "-", "-", False)]
    # A server that answers every view with full pods, and one read of every managed pod: the same rows.
    full = StatusCluster(nodes, pods, jobs, [driver_daemonset(build)], full_pods=True)
    assert run(module, full) == result
    # Each row with its GPUs' health: none here.
    assert [(row.pop("health"), row.pop("gpu_faults")) for row in result["nodes"]] == [("none", [])] * 3
    assert result["nodes"] == node_rows(*read_gpu_nodes(cells)[:2], pods, jobs, [driver_daemonset(build)])


def test_operand_pod_reads_without_driver_daemonsets_read_every_driver_pod_with_its_labels():
    managed = "app.kubernetes.io/managed-by=accelerators.gpu"
    reads = operand_pod_reads([])
    assert [(selector.split(",", 1)[1], view, labels) for selector, view, labels in reads] == [
        ("app.kubernetes.io/component=" + component, POD_CELLS, {"app.kubernetes.io/component": component})
        for component in OPERANDS + ("gpu-feature-discovery", "nvidia-mig-manager", "nvidia-mps-control-daemon",
                                     "nvidia-dra-driver-kubelet-plugin")] + [
        ("app.kubernetes.io/component=nvidia-driver", POD_READINESS, {})]
    assert all(selector.startswith(managed + ",") for selector, _view, _labels in reads)
    two = operand_pod_reads([driver_daemonset("b"), driver_daemonset("a")])
    drivers = managed + ",app.kubernetes.io/component=nvidia-driver,"
    assert [(selector, view, labels.get("app")) for selector, view, labels in two[-3:]] == [
        (drivers + "app=nvidia-driver-daemonset-a", POD_CELLS, "nvidia-driver-daemonset-a"),
        (drivers + "app=nvidia-driver-daemonset-b", POD_CELLS, "nvidia-driver-daemonset-b"),
        (drivers + "app notin (nvidia-driver-daemonset-a,nvidia-driver-daemonset-b)", POD_READINESS, None)]


def claim(name, node=None, device_class="gpu.nvidia.com", owner=None):
    """A ResourceClaim in namespace ml, allocated a device of the node's pool, or not."""
    metadata = {"name": name, "namespace": "ml"}
    status = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": node, "device": "gpu-0"}]}}} if node else {}
    return {"metadata": metadata, "status": status,
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}}}


def resource_slice(node, devices):
    return {"spec": {"driver": "gpu.nvidia.com", "nodeName": node, "pool": {"name": node},
                     "devices": [{"name": "gpu-%d" % index} for index in range(devices)]}}


def test_a_dra_node_is_ready_with_its_kubelet_plugin_and_published_gpus_and_pending_claims_say_why():
    build = "9.6.20260303-1"
    nodes = [full_node(name, build) for name in ("dp", "dra", "dra-empty")]
    for node_read in nodes[1:]:
        node_read["metadata"]["labels"]["nvidia.com/gpu.deploy.dra-driver"] = "true"
        node_read["status"] = {"capacity": {}, "allocatable": {}}
    pods = [pod(name, component, app="nvidia-driver-daemonset-" + build if component == "nvidia-driver" else None)
            for name in ("dp", "dra", "dra-empty") for component in ("nvidia-driver",) + OPERANDS
            if not (name != "dp" and component == "nvidia-device-plugin")]
    pods += [pod(name, "nvidia-dra-driver-kubelet-plugin") for name in ("dra", "dra-empty")]
    unschedulable = {"metadata": {"name": "train", "namespace": "ml", "labels": {}},
                     "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]},
                     "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "train-gpu-x"}],
                                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                                "message": "0/3 nodes are available: 3 cannot allocate all claims."}]}}
    claims = [claim("served", "dra"), claim("train-gpu-x"), claim("a-nic", device_class="nic.example.com")]
    lists = {"/apis/resource.k8s.io/v1/resourceslices": [resource_slice("dra", 2)],
             "/apis/resource.k8s.io/v1/resourceclaims": claims}
    cluster = StatusCluster(nodes, pods + [unschedulable], [job(name, "cuda", succeeded=1) for name in ("dp",)]
                            + [job(name, "dra", succeeded=1) for name in ("dra", "dra-empty")],
                            [driver_daemonset(build)], resource_lists=lists)
    module = status_module(columns=["dra_devices", "STACK"])
    result = run(module, cluster)
    rows = dict((row["node"], row) for row in result["nodes"])
    assert [(rows[name]["stack"], rows[name]["dra_devices"], rows[name]["dra_allocated"], rows[name]["ready"])
            for name in ("dp", "dra", "dra-empty")] == [
        ("device-plugin", None, None, True), ("dra", 2, 1, True), ("dra", 0, 0, False)]
    assert not_ready_reasons(rows["dra-empty"]) == ["no GPUs published (ResourceSlice of gpu.nvidia.com)"]
    assert result["pending_claims"] == [{"claim": "ml/train-gpu-x", "pod": "ml/train",
                                         "reason": "0/3 nodes are available: 3 cannot allocate all claims."}]
    # The pods of the namespaces of the claims not allocated only.
    assert ("pods", "ml", None, POD_FULL) in cluster.reads
    assert result["lines"][-2] == ("claim ml/train-gpu-x of pod ml/train pending: 0/3 nodes are available: 3 cannot "
                                   "allocate all claims.")
    assert result["lines"][:4] == ["NODE       DRA DEVICES      STACK", "dp         -                ready",
                                   "dra        2 (1 allocated)  ready",
                                   "dra-empty  0 (0 allocated)  no GPUs published (ResourceSlice of gpu.nvidia.com)"]
    # A claim of every GPU of a node with admin access (the node agents') allocates none of them.
    agents = claim("agents", "dra")
    agents["status"]["allocation"]["devices"]["results"] = [
        {"request": "admin-gpus", "driver": "gpu.nvidia.com", "pool": "dra", "device": "gpu-%d" % index,
         "adminAccess": True} for index in range(2)]
    assert dra_devices([resource_slice("dra", 2)], [agents, claim("served", "dra")]) == ({"dra": 2}, {"dra": 1})
    assert dra_devices([], []) == ({}, {}) and pending_claims([claim("lonely")], []) == [
        {"claim": "ml/lonely", "pod": None, "reason": "no pod uses it"}]
    assert result["dra_controller"] is None


def test_the_compute_domain_controller_is_shown_and_the_stack_not_ready_while_it_is_not_available():
    build = "9.6.20260303-1"
    node_read = full_node("dra", build)
    node_read["metadata"]["labels"]["nvidia.com/gpu.deploy.dra-driver"] = "true"
    pods = [pod("dra", component, app="nvidia-driver-daemonset-" + build if component == "nvidia-driver" else None)
            for component in ("nvidia-driver",) + OPERANDS + ("nvidia-dra-driver-kubelet-plugin",)
            if component != "nvidia-device-plugin"]
    path = "/apis/apps/v1/namespaces/gpu/deployments/nvidia-dra-driver-controller"
    module = status_module()
    deployment = {"metadata": {"name": "nvidia-dra-driver-controller", "namespace": "gpu", "generation": 2},
                  "spec": {"replicas": 1}, "status": {"observedGeneration": 2, "updatedReplicas": 1}}
    results = []
    for available in (0, 1):
        deployment["status"]["availableReplicas"] = available
        cluster = StatusCluster([node_read], pods, [job("dra", "dra", succeeded=1)], [driver_daemonset(build)],
                                resource_lists={"/apis/resource.k8s.io/v1/resourceslices": [resource_slice("dra", 1)],
                                                "/apis/resource.k8s.io/v1/resourceclaims": []},
                                objects={path: deployment})
        results.append(run(module, cluster))
    assert [(result["ready"], result["dra_controller"]["ready"]) for result in results] == [(False, False), (True, True)]
    assert results[0]["lines"][-2:] == [
        "ComputeDomain controller gpu/nvidia-dra-driver-controller NOT available: 0 of 1 replicas available",
        "GPU stack NOT ready: ComputeDomain controller gpu/nvidia-dra-driver-controller NOT available: 0 of 1 "
        "replicas available"]
    assert results[1]["lines"][-2:] == [
        "ComputeDomain controller gpu/nvidia-dra-driver-controller available: 1 of 1 replicas available",
        "GPU stack ready on every GPU node"]


def test_the_status_names_the_gpu_faults_of_each_node_and_returns_the_health_records():
    build = "9.6.20260303-1"
    nodes = [full_node(name, build) for name in ("a", "b", "c")]
    # The device plugin marked a GPU of a Unhealthy.
    nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] = "7"
    nodes[1]["status"]["conditions"] = [{"type": "SysLogsGPUFallenOff", "status": "True", "reason": "Xid79",
                                         "message": "[79] GPU has fallen off the bus - RecommendedAction: RESTART_BM"}]
    pods = [pod(name, component) for name in ("a", "b", "c") for component in OPERANDS]
    pods += [pod(name, "nvidia-driver", app="nvidia-driver-daemonset-" + build) for name in ("a", "b", "c")]
    cluster = StatusCluster(nodes, pods, [job(name, "cuda", succeeded=1) for name in ("a", "b", "c")],
                            [driver_daemonset(build)])
    cluster.metrics["nvidia-dcgm-exporter-a"] = EXPORTER_PAGE % ("a", 48)
    # An application error on c, which the device plugin ignores: the status does not read c's exporter for it.
    cluster.metrics["nvidia-dcgm-exporter-c"] = EXPORTER_PAGE % ("c", 13)
    result = run(status_module(), cluster)
    # The exporters of the nodes that show a fault, to name their GPUs and XIDs.
    assert [read[1] for read in cluster.reads if read[0] == "proxy"] == [
        "/api/v1/namespaces/gpu/pods/nvidia-dcgm-exporter-%s:9400/proxy/metrics" % name for name in ("a", "b")]
    assert [(record["node"], record["action"], [fault["xid"] for fault in record["faults"]])
            for record in result["gpu_health"]] == [("a", "reset", [48]), ("b", "reboot", [79]), ("c", "none", [])]
    assert [(row["node"], row["health"], row["ready"]) for row in result["nodes"]] == [
        ("a", "reset", True), ("b", "reboot", True), ("c", "none", True)]
    # Below the table, before the verdict (the GPUs' faults do not make the stack not ready).
    assert result["lines"][-5:] == [
        "Unhealthy GPUs on 2 nodes:",
        "NODE  GPU                                       XID  ACTION  SOURCE",
        "a     GPU-5f0c2a8e-1d3b-4c7a-9e21-0b6d4f8a7c13  48   reset   exporter",
        "b     -                                         79   reboot  condition",
        "GPU stack ready on every GPU node"]
