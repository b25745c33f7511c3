"""The status table: operand readiness per node, newest validation per check, host drivers, alignment."""

from ansible_collections.accelerators.gpu.plugins.module_utils.stack_status import node_rows, table_lines


def pod(node, component, app=None, ready=True, reason=None):
    status = {"phase": "Running" if ready else "Pending",
              "containerStatuses": [{"ready": ready, "state": {"waiting": {"reason": reason}} if reason else {}}]}
    return {"metadata": {"labels": {"app.kubernetes.io/component": component, "app": app or component}},
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


def test_table_lines_align_under_the_header():
    rows = node_rows([fact("gpu-node-0")], [node("gpu-node-0", 4)], [], [job("gpu-node-0", "cuda", failed=1)])
    lines = table_lines(rows)
    assert lines[0].split()[:2] == ["NODE", "GPUS"]
    assert lines[1].startswith("gpu-node-0  4  ")
    assert lines[0].index("GPUS") == lines[1].index("4 ")
    assert lines[1].endswith("cuda:failed (2026-01-01T00:00:00Z)")


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
    lines = table_lines(rows)
    assert lines[0].split()[:6] == ["NODE", "GPUS", "PRODUCT", "MEMORY", "MiB", "MIG"]
    assert lines[1].split()[:5] == ["a", "8", "NVIDIA-A100-SXM4-80GB", "81920", "yes"]
    assert lines[3].split()[:5] == ["c", "2", "-", "-", "-"]


def driver_daemonset(build, managed=True):
    labels = {"app.kubernetes.io/component": "nvidia-driver"}
    if managed:
        labels["app.kubernetes.io/managed-by"] = "accelerators.gpu"
    ostree = "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION"
    return {"metadata": {"name": "nvidia-driver-daemonset-" + build, "labels": labels},
            "spec": {"template": {"spec": {"nodeSelector": {"nvidia.com/gpu.deploy.driver": "true", ostree: build}}}}}


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
