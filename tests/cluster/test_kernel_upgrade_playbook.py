"""The rhcos_upgrade playbook's drain method on plain Kubernetes: a kernel change of Ubuntu GPU nodes with precompiled
per-kernel driver DaemonSets, driven by cordon, drain and a reboot step, against the simulated kernel reboot
(tools/localcluster/kernel.py). The stack is installed by the deploy playbook (driver mode kernel); the reboot step
is a task file that asks the simulated node to reboot into the kernel. The capacity invariant is checked here, by
sampling the cluster every second, not taken from the playbook's word.
"""

import os
import re
import statistics
import time

import pytest

from conftest import wait_for
from gpu_fleet import COMMON_DEFAULTS, FLEET_LABEL, ready, selector
from localcluster import kernel as reboots
from sampler import Sampler
from test_deploy import fleet_variables, gpu_fleet, playbook
from test_rhcos_upgrade_playbook import UpgradeRun, is_ready, record_of

OLD, NEW = "5.15.0-100-generic", "5.15.0-105-generic"
BRANCH, REPOSITORY = COMMON_DEFAULTS["common_driver_branch"], "nvcr.io/nvidia"


def image(kernel):
    return "%s/driver:%s-%s-ubuntu22.04" % (REPOSITORY, BRANCH, kernel)


def daemonset(kernel):
    return "nvidia-driver-daemonset-%s-ubuntu22.04" % kernel


# The simulated registry holds the precompiled images of both kernels, the operands' (the validator's is the GPU
# Operator's own image) and the CUDA sample.
REGISTRY = [image(OLD), image(NEW), "nvcr.io/nvidia/k8s/*", "nvcr.io/nvidia/cloud-native/*", "nvcr.io/nvidia/k8s-*",
            "nvcr.io/nvidia/gpu-operator:*"]
REBOOT_SECONDS, NFD_LAG_SECONDS = 6, 2
REBOOT_TASKS = """---
- name: Ask the simulated node to reboot into kernel {{ rhcos_upgrade_kernel }}
  kubernetes.core.k8s:
    state: patched
    kind: Node
    name: "{{ rhcos_upgrade_reboot_node }}"
    definition:
      metadata:
        annotations:
          %s: "{{ rhcos_upgrade_kernel }}"
""" % reboots.REBOOT_ANNOTATION


@pytest.fixture
def installed(kubernetes_cluster, make_fleet, request):
    """(spec, node names, namespace, deploy variables) of Ubuntu GPU nodes on kernel OLD, the stack deployed in mode
    kernel (precompiled), on the vanilla cluster."""
    groups = [dict({"name": "gpu", "gpu": {"count": 2}, "os": {"ubuntu": "22.04"}, "kernel": OLD,
                    "runtime": "containerd", "reboot_seconds": REBOOT_SECONDS, "nfd_lag_seconds": NFD_LAG_SECONDS},
                   **group) for group in request.param]
    spec = gpu_fleet(*groups, openshift=None, registry=REGISTRY)
    names = make_fleet(spec, on=kubernetes_cluster).node_names
    namespace = "t-kernel-" + os.urandom(2).hex()
    deploy = dict(fleet_variables(namespace, spec, driver_mode="kernel", common_driver_branch=BRANCH,
                                  driver_precompiled_available=[image(OLD)], container_toolkit_validate=False,
                                  device_plugin_validate_workload=False), common_wait_timeout=120)
    playbook(kubernetes_cluster, "deploy", deploy).succeeded()
    yield spec, names, namespace, deploy
    kubernetes_cluster.core.delete_namespace(namespace)


def upgrade_variables(spec, deploy, reboot_tasks, available, **extra):
    values = {key: deploy[key] for key in ("common_namespace", "common_driver_branch", "common_wait_timeout")}
    values.update(rhcos_upgrade_kernel=NEW, rhcos_upgrade_reboot_tasks=str(reboot_tasks),
                  rhcos_upgrade_nodes=selector(spec), rhcos_upgrade_driver_label_selector=selector(spec),
                  rhcos_upgrade_driver={"node_selector": {FLEET_LABEL: spec["name"]}},
                  rhcos_upgrade_precompiled_available=available, rhcos_upgrade_poll=1,
                  rhcos_upgrade_node_timeout=120, rhcos_upgrade_stack_timeout=120)
    values.update(extra)
    return values


def reboot_tasks(tmp_path):
    path = tmp_path / "reboot.yml"
    path.write_text(REBOOT_TASKS)
    return path


def observe(cluster, namespace, spec):
    """One sample: per GPU node, its kernel, and whether it is Ready with a ready driver pod built for its kernel."""
    nodes = cluster.core.list_node(label_selector=selector(spec)).items
    pods = cluster.core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=nvidia-driver").items
    kernels = {node.metadata.name: node.status.node_info.kernel_version for node in nodes}
    served = {pod.spec.node_name for pod in pods if ready(pod) and pod.spec.node_name in kernels
              and "-%s-" % kernels[pod.spec.node_name] in pod.spec.containers[0].image}
    return {"kernels": kernels, "without_driver": sorted(node.metadata.name for node in nodes
                                                         if not (is_ready(node) and node.metadata.name in served))}


def driver_daemonsets(cluster, namespace):
    return sorted(ds.metadata.name for ds in cluster.apps.list_namespaced_daemon_set(
        namespace, label_selector="app.kubernetes.io/component=nvidia-driver").items)


@pytest.mark.parametrize("installed", [[{"count": 4}]], indirect=True)
def test_four_ubuntu_gpu_nodes_change_kernel_within_a_budget_of_two(kubernetes_cluster, installed, tmp_path):
    spec, names, namespace, deploy = installed
    cordoned = names[1]  # cordoned by its admin before the upgrade: it is upgraded, and stays cordoned
    kubernetes_cluster.core.patch_node(cordoned, {"spec": {"unschedulable": True}})

    # No rhcos_upgrade_method: the cluster has no machine-config API, so the nodes move by drain and reboot.
    values = upgrade_variables(spec, deploy, reboot_tasks(tmp_path), [image(OLD), image(NEW)],
                               rhcos_upgrade_budget=2)
    with Sampler(lambda: observe(kubernetes_cluster, namespace, spec), interval=1.0) as sampler:
        run = UpgradeRun(kubernetes_cluster, values, tmp_path)
        code = run.wait(timeout=600)
    output = run.output
    assert code == 0, output[-6000:]
    assert "By cordon, drain and the reboot step" in output
    assert not sampler.errors, sampler.errors[:3]
    worst = max(sampler.values, key=lambda sample: len(sample["without_driver"]))
    print("\nmost GPU nodes without a driver for their kernel at one time: %d %s" % (
        len(worst["without_driver"]), worst["without_driver"]))
    assert len(worst["without_driver"]) <= 2, worst
    assert sampler.values[0]["without_driver"] == [] and sampler.values[-1]["without_driver"] == []
    assert any(len(sample["without_driver"]) > 0 for sample in sampler.values)  # the sampler saw nodes go

    assert driver_daemonsets(kubernetes_cluster, namespace) == [daemonset(NEW)]
    out_of_service = {}
    for node in kubernetes_cluster.core.list_node(label_selector=selector(spec)).items:
        name, record = node.metadata.name, record_of(node)
        assert node.status.node_info.kernel_version == NEW, name
        assert node.metadata.labels["feature.node.kubernetes.io/kernel-version.full"] == NEW, name
        assert (record.get("from"), record.get("to"), record.get("result")) == (OLD, NEW, "validated"), (name, record)
        assert int((node.status.allocatable or {}).get("nvidia.com/gpu", "0")) > 0, name
        assert bool(node.spec.unschedulable) == (name == cordoned), name
        assert reboots.REBOOT_ANNOTATION not in (node.metadata.annotations or {}), name  # the simulated reboot is over
        out_of_service[name] = record["validated"] - record["started"]
    print("total: %.0f s for %d nodes, budget 2; out of service per node (s): %s; median %.1f max %.1f "
          "(reboot %d s, NFD lag %d s)" % (
              run.seconds, len(out_of_service), ", ".join("%s %.1f" % item for item in sorted(out_of_service.items())),
              statistics.median(out_of_service.values()), max(out_of_service.values()), REBOOT_SECONDS,
              NFD_LAG_SECONDS))

    # Run again: every node is done, so nothing moves and nothing changes.
    (tmp_path / "again").mkdir()
    again = UpgradeRun(kubernetes_cluster, values, tmp_path / "again")
    assert again.wait(timeout=300) == 0, again.output[-4000:]
    assert "4 of 4 node(s) done on kernel %s; moving: none; waiting: 0" % NEW in again.output
    assert re.search(r"localhost\s*: ok=\d+\s+changed=0\s", again.output), again.output[-2000:]


@pytest.mark.parametrize("installed", [[{"name": "bad", "faults": {"never_returns": True}}, {"count": 2}]],
                         indirect=True)
def test_node_that_never_comes_back_stops_the_line(kubernetes_cluster, installed, tmp_path):
    spec, names, namespace, deploy = installed
    bad, others = names[0], names[1:]
    values = upgrade_variables(spec, deploy, reboot_tasks(tmp_path), [image(OLD), image(NEW)], rhcos_upgrade_budget=1,
                               rhcos_upgrade_node_timeout=20)
    run = UpgradeRun(kubernetes_cluster, values, tmp_path)
    assert run.wait(timeout=300) != 0
    output = run.output
    assert ("Node %s did not come back on kernel %s within 20 s: NotReady (rebooting into kernel %s), runs kernel %s"
            % (bad, NEW, NEW, OLD)) in output, output[-4000:]
    assert "No further node moves" in output
    time.sleep(REBOOT_SECONDS)  # a node wrongly drained after the failure would be down by now
    nodes = {n.metadata.name: n for n in kubernetes_cluster.core.list_node(label_selector=selector(spec)).items}
    assert nodes[bad].spec.unschedulable and not is_ready(nodes[bad])
    for name in others:
        node = nodes[name]
        assert is_ready(node) and not node.spec.unschedulable and node.status.node_info.kernel_version == OLD, name
        assert record_of(node) == {} and int(node.status.allocatable["nvidia.com/gpu"]) > 0, name
        assert name not in observe(kubernetes_cluster, namespace, spec)["without_driver"]
    # The new kernel's DaemonSet was prepared and stays, for the next run; the old one serves the others.
    assert driver_daemonsets(kubernetes_cluster, namespace) == sorted([daemonset(OLD), daemonset(NEW)])


def refused_without_a_precompiled_image(cluster, spec, namespace, deploy, tmp_path):
    """A run to a kernel without a precompiled image is refused before anything changes."""
    def snapshot():
        nodes = cluster.core.list_node(label_selector=selector(spec)).items
        return ({n.metadata.name: (n.metadata.labels, n.metadata.annotations, n.spec.unschedulable) for n in nodes},
                {d.metadata.name: d.metadata.resource_version for d in
                 cluster.apps.list_namespaced_daemon_set(namespace).items})
    before = snapshot()
    run = UpgradeRun(cluster, upgrade_variables(spec, deploy, reboot_tasks(tmp_path), [image(OLD)]), tmp_path)
    assert run.wait(timeout=300) != 0
    output = run.output
    assert "Preflight refuses kernel %s" % NEW in output and image(NEW) in output, output[-3000:]
    assert "Nothing was changed" in output
    assert snapshot() == before
    assert driver_daemonsets(cluster, namespace) == [daemonset(OLD)]


# One fleet for two stories: the refused run changes nothing (checked), so the interrupted one starts from a deploy.
@pytest.mark.parametrize("installed", [[{"count": 2}]], indirect=True)
def test_a_kernel_without_a_precompiled_image_is_refused_then_a_run_interrupted_before_the_reboot_step_resumes(
        kubernetes_cluster, installed, tmp_path):
    spec, names, namespace, deploy = installed
    (tmp_path / "refused").mkdir()
    refused_without_a_precompiled_image(kubernetes_cluster, spec, namespace, deploy, tmp_path / "refused")

    values = upgrade_variables(spec, deploy, reboot_tasks(tmp_path), [image(OLD), image(NEW)], rhcos_upgrade_budget=1)
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()

    def taken_not_rebooted():
        records = {n.metadata.name: record_of(n) for n in kubernetes_cluster.core.list_node(
            label_selector=selector(spec)).items}
        return [name for name, record in records.items() if record.get("to") == NEW and "rebooted" not in record]
    first = UpgradeRun(kubernetes_cluster, values, tmp_path / "first")
    found = wait_for(lambda: taken_not_rebooted() or first.process.poll() is not None, timeout=240, interval=0.2,
                     message="a node taken, its reboot step not run yet")
    first.kill()
    assert found is not True, "the first run ended before it was interrupted: " + first.output[-3000:]
    [taken] = found
    started = record_of(kubernetes_cluster.core.read_node(taken))["started"]

    with Sampler(lambda: observe(kubernetes_cluster, namespace, spec), interval=1.0) as sampler:
        second = UpgradeRun(kubernetes_cluster, values, tmp_path / "second")
        code = second.wait(timeout=600)
    assert code == 0, second.output[-6000:]
    assert max(len(sample["without_driver"]) for sample in sampler.values) <= 1
    assert driver_daemonsets(kubernetes_cluster, namespace) == [daemonset(NEW)]
    for node in kubernetes_cluster.core.list_node(label_selector=selector(spec)).items:
        record = record_of(node)
        assert (node.status.node_info.kernel_version, record.get("result")) == (NEW, "validated"), node.metadata.name
        assert not node.spec.unschedulable, node.metadata.name
    assert record_of(kubernetes_cluster.core.read_node(taken))["started"] == started  # the first run's record kept
    print("\nresumed with %s taken by the first run; second run %.0f s" % (taken, second.seconds))
