"""A driver version change on 12 GPU nodes on two RHCOS builds, through the deploy playbook: node by node within the
budget, GPU workloads evicted through the Eviction API with a PodDisruptionBudget held, a run stopped after its first
wave resumed, the manual policy and check mode changing nothing, a rollout that leaves a node under GPU remediation
alone and takes it once its remediation is done, a scheduled reconcile without the new version refused (no downgrade
without driver_allow_downgrade), and a rollback allowed in which a node whose driver fails stops the line.

The invariants are checked by sampling the cluster every second and by the API server's audit log of pod deletions
and evictions, not taken from the playbook's word. The simulator refuses to load a new driver on a node whose GPUs
are still held by pods ("module nvidia is in use"), so a rollout that did not evict first fails here. One module-scoped
fleet serves the tests, in order: they are one story, and sharing the fleet keeps CI time down.
"""

import collections
import json
import os
import signal
import statistics
import time

import kubernetes
import pytest

from conftest import wait_for
from gpu_fleet import COMMON_DEFAULTS, FLEET_LABEL, RHCOS_416, RHCOS_96, selector
from sampler import Sampler
from test_deploy import fleet_variables, gpu_fleet, playbook, status_of
from test_rhcos_upgrade_playbook import UpgradeRun

# OLD is the common role's default, which a reconcile that does not set the version asks for; NEW, a newer driver
# NVIDIA builds images of (gpu-driver-container's versions.mk); BAD, an older one, which fails on one node.
OLD, NEW, BAD = COMMON_DEFAULTS["common_driver_version"], "610.57.04", "575.64.05"
STATE = "nvidia.com/gpu-driver-upgrade-state"
DRIVER_SELECTOR = "app.kubernetes.io/component=nvidia-driver"
BUILD_SECONDS = 2
GPU = "nvidia.com/gpu"
BUDGET = 3  # 25 % of 12 GPU nodes
WORKLOADS = "gpu-workloads"
REMEDIATION_STATE = "accelerators.gpu/gpu-remediation-state"
REMEDIATION_TAINT = "accelerators.gpu/gpu-remediation"


def node_groups():
    """12 GPU nodes on two RHCOS builds; gpu-ab, seventh by name, cannot load driver BAD."""
    base = {"gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 2}, "driver_build_seconds": BUILD_SECONDS}
    return [dict(base, name="gpu-a", count=6, os={"rhcos": RHCOS_416}),
            dict(base, name="gpu-ab", count=1, os={"rhcos": RHCOS_96, "openshift": "4.21"},
                 faults={"driver_fails_for": BAD}),
            dict(base, name="gpu-b", count=5, os={"rhcos": RHCOS_96, "openshift": "4.21"})]


@pytest.fixture(scope="module")
def fleet_ns(cluster, tmp_path_factory):
    """(spec, GPU node names sorted, namespace, deploy variables): the stack deployed with driver OLD and GPU
    workloads running, one Deployment guarded by a PodDisruptionBudget with minAvailable 1."""
    from localcluster import fleet as fleets
    spec = gpu_fleet(*node_groups())
    made = fleets.Fleet(cluster.client, spec, prefix="up-%s-" % os.urandom(2).hex()).apply().wait_ready()
    names = sorted(made.node_names)
    namespace = "t-drvup-" + os.urandom(2).hex()
    variables = dict(fleet_variables(namespace, spec, common_driver_version=OLD, driver_wait_timeout=300,
                                     driver_upgrade_max_parallel=0, driver_upgrade_poll=1,
                                     container_toolkit_validate=False,
                                     device_plugin_validate_workload=False), common_wait_timeout=120)
    playbook(cluster, "deploy", variables).succeeded()
    workloads = WORKLOADS + "-" + os.urandom(2).hex()
    cluster.core.create_namespace({"metadata": {"name": workloads}})
    start_workloads(cluster, workloads, spec)
    yield spec, names, namespace, variables, workloads
    cluster.core.delete_namespace(workloads)
    cluster.core.delete_namespace(namespace)
    made.delete()


def deployment(name, replicas, spec):
    labels = {"app": name}
    return {"metadata": {"name": name, "labels": labels}, "spec": {
        "replicas": replicas, "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels}, "spec": {
            "nodeSelector": {FLEET_LABEL: spec["name"]},
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "train", "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                            "resources": {"limits": {GPU: "1"}}}]}}}}


def start_workloads(cluster, workloads, spec):
    cluster.apps.create_namespaced_deployment(workloads, deployment("train", 6, spec))
    cluster.apps.create_namespaced_deployment(workloads, deployment("serve", 2, spec))
    kubernetes.client.PolicyV1Api(cluster.client).create_namespaced_pod_disruption_budget(workloads, {
        "metadata": {"name": "serve"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "serve"}}}})
    wait_for(lambda: ready_replicas(cluster, workloads) == {"train": 6, "serve": 2}, timeout=120,
             message="the GPU workloads running")


def ready_replicas(cluster, workloads):
    return {d.metadata.name: d.status.ready_replicas or 0 for d in cluster.apps.list_namespaced_deployment(workloads).items}


def observe(cluster, namespace, spec, workloads):
    """One sample: the GPU nodes without a working driver (no ready driver pod, or no allocatable GPU), each node's
    driver pod uid, and the ready pods behind the PodDisruptionBudget."""
    nodes = cluster.core.list_node(label_selector=selector(spec)).items
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=DRIVER_SELECTOR).items
    serving = {p.spec.node_name: p.metadata.uid for p in pods
               if p.status.phase == "Running" and p.status.container_statuses
               and all(c.ready for c in p.status.container_statuses)}
    down = sorted(n.metadata.name for n in nodes if n.metadata.name not in serving
                  or int((n.status.allocatable or {}).get(GPU, "0")) == 0)
    guarded = [p for p in cluster.core.list_namespaced_pod(workloads, label_selector="app=serve").items
               if not p.metadata.deletion_timestamp and p.status.phase == "Running"]
    return {"down": down, "driver_pods": {p.spec.node_name: p.metadata.uid for p in pods},
            "guarded_ready": len(guarded)}


def states(cluster, names):
    return {name: (cluster.core.read_node(name).metadata.labels or {}).get(STATE) for name in names}


def driver_images(cluster, namespace):
    """{node: the driver image its driver pod runs}."""
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=DRIVER_SELECTOR).items
    return {p.spec.node_name: p.spec.containers[0].image for p in pods if not p.metadata.deletion_timestamp}


def audit_events(cluster, namespace):
    """(pods deleted by a DELETE, pods evicted) in namespace, from the API server's audit log."""
    deleted, evicted = collections.Counter(), collections.Counter()
    with open(cluster.audit_log) as log:
        for line in log:
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if ref.get("namespace") != namespace or ref.get("resource") != "pods":
                continue
            code = (event.get("responseStatus") or {}).get("code")
            if event["verb"] == "create" and ref.get("subresource") == "eviction" and code == 201:
                evicted[ref["name"]] += 1
            elif event["verb"] == "delete" and not ref.get("subresource") and code == 200:
                deleted[(ref["name"], event.get("userAgent", "").split("/")[0])] += 1
    return deleted, evicted


def snapshot(cluster, namespace, spec):
    nodes = cluster.core.list_node(label_selector=selector(spec)).items
    return ({n.metadata.name: (n.metadata.labels, n.metadata.annotations, n.spec.unschedulable) for n in nodes},
            {d.metadata.name: d.metadata.resource_version for d in cluster.apps.list_namespaced_daemon_set(namespace).items},
            sorted(p.metadata.uid for p in cluster.core.list_namespaced_pod(namespace).items))


def test_manual_policy_refuses_at_once_naming_the_nodes_and_changes_nothing(cluster, fleet_ns):
    spec, names, namespace, variables, _workloads = fleet_ns
    before = snapshot(cluster, namespace, spec)
    run = playbook(cluster, "deploy", dict(variables, common_driver_version=NEW, driver_upgrade_policy="manual"))
    name, result = run.failure()
    assert "driver_upgrade_policy is manual" in result["msg"], result["msg"]
    assert all(node in result["msg"] for node in names), result["msg"]
    assert "accelerators.gpu.driver_upgrade" in result["msg"]
    assert snapshot(cluster, namespace, spec) == before


def test_check_mode_prints_the_rollout_plan_and_changes_nothing(cluster, fleet_ns):
    spec, names, namespace, variables, _workloads = fleet_ns
    before = snapshot(cluster, namespace, spec)
    run = playbook(cluster, "deploy", dict(variables, common_driver_version=NEW), check=True).succeeded()
    plans = [result["msg"] for name, result in run.results if name.endswith("Show the rollout plan")]
    assert plans, [name for name, _result in run.results]
    plan = plans[0]
    assert "Check mode, nothing changes" in plan and "12 of 12 GPU node(s) outdated" in plan, plan
    # Budget 3: four waves of three, in name order.
    for index in range(4):
        assert "Wave %d: %s." % (index + 1, ", ".join(names[index * 3:index * 3 + 3])) in plan, plan
    assert "cordon-required -> pod-deletion-required -> pod-restart-required" in plan
    assert snapshot(cluster, namespace, spec) == before


def test_rollout_stopped_after_its_first_wave_resumes_within_the_budget_and_evicts_through_the_api(
        cluster, fleet_ns, tmp_path):
    spec, names, namespace, variables, workloads = fleet_ns
    daemonsets = sorted(d.metadata.name for d in cluster.apps.list_namespaced_daemon_set(namespace).items)
    values = dict(variables, common_driver_version=NEW)
    with Sampler(lambda: observe(cluster, namespace, spec, workloads)) as sampler:
        first = UpgradeRun(cluster, values, tmp_path, playbook="accelerators.gpu.deploy")
        wait_for(lambda: list(states(cluster, names).values()).count("upgrade-done") >= BUDGET, timeout=300,
                 interval=0.5, message="the first wave done")
        os.killpg(first.process.pid, signal.SIGTERM)
        first.wait(timeout=60)
        stopped_at = states(cluster, names)
        (tmp_path / "again").mkdir()
        second = UpgradeRun(cluster, values, tmp_path / "again", playbook="accelerators.gpu.deploy")
        assert second.wait(timeout=900) == 0, second.output[-5000:]
    print("stopped at", stopped_at)
    assert list(stopped_at.values()).count("upgrade-done") < len(names), stopped_at
    assert set(states(cluster, names).values()) == {"upgrade-done"}
    images = driver_images(cluster, namespace)
    assert all(NEW in images[name] for name in names), images
    # Within the budget, all along.
    worst = max(len(sample["down"]) for sample in sampler.values)
    assert worst <= BUDGET, [s["down"] for s in sampler.values if len(s["down"]) > BUDGET]
    assert worst > 0, "the sampler never saw a node without its driver"
    assert not sampler.errors, sampler.errors[:3]
    # No node upgraded twice: each node had its old driver pod, then one new one.
    uids = collections.defaultdict(set)
    for sample in sampler.values:
        for node, uid in sample["driver_pods"].items():
            uids[node].add(uid)
    assert {node: len(uids[node]) for node in names} == {node: 2 for node in names}, uids
    # No DaemonSet duplicated.
    assert sorted(d.metadata.name for d in cluster.apps.list_namespaced_daemon_set(namespace).items) == daemonsets
    # The PodDisruptionBudget held: a guarded pod was always running once the rollout began.
    assert min(sample["guarded_ready"] for sample in sampler.values) >= 1
    # GPU workloads left through the Eviction API only (kwok removes the evicted pods once they terminated).
    deleted, evicted = audit_events(cluster, workloads)
    assert evicted, "no GPU workload was evicted"
    assert all(agent == "kwok" and name in evicted for (name, agent) in deleted), (deleted, evicted)
    assert ready_replicas(cluster, workloads) == {"train": 6, "serve": 2} or wait_for(
        lambda: ready_replicas(cluster, workloads) == {"train": 6, "serve": 2}, timeout=120)
    # Figures: the rollout's orchestration overhead per node beyond the simulated build.
    print("rollout: first run stopped after %.1fs, second run %.1fs" % (first.seconds, second.seconds))
    waves = [line for line in second.output.splitlines() if "Driver upgraded on" in line]
    print("\n".join(waves))
    per_wave = [float(line.rsplit(" in ", 1)[1].split(" s")[0]) for line in waves if " in " in line]
    if per_wave:
        print("per wave (s): median %.1f, build %d s" % (statistics.median(per_wave), BUILD_SECONDS))


def test_a_second_run_after_the_rollout_changes_nothing_and_creates_no_job(cluster, fleet_ns):
    spec, names, namespace, variables, _workloads = fleet_ns
    jobs = sorted(j.metadata.uid for j in cluster.batch.list_namespaced_job(namespace).items)
    run = playbook(cluster, "deploy", dict(variables, common_driver_version=NEW)).succeeded()
    assert run.stats["changed"] == 0, [name for name, result in run.results if result.get("changed")]
    assert sorted(j.metadata.uid for j in cluster.batch.list_namespaced_job(namespace).items) == jobs


def validated_driver_nodes(cluster, namespace):
    """The nodes whose driver pod has passed the driver check (a succeeded Job keyed by its uid)."""
    pods = {p.spec.node_name: p.metadata.uid for p in cluster.core.list_namespaced_pod(
        namespace, label_selector=DRIVER_SELECTOR).items if not p.metadata.deletion_timestamp}
    jobs = cluster.batch.list_namespaced_job(namespace, label_selector="accelerators.gpu/validation=driver").items
    return sorted(job.metadata.annotations["accelerators.gpu/node"] for job in jobs
                  if (job.status.succeeded or 0) > 0
                  and pods.get(job.metadata.annotations.get("accelerators.gpu/node")) in (
                      job.metadata.annotations.get("accelerators.gpu/validated-pods") or "").split(","))


def quarantine(cluster, name, state):
    """The node's remediation state label and, but for done (the node returned), the marks of a node taken: the
    cordon and the NoSchedule taint."""
    taken = state != "done"
    node = cluster.core.read_node(name)
    taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.spec.taints or []
              if t.key != REMEDIATION_TAINT]
    if taken:
        taints.append({"key": REMEDIATION_TAINT, "value": "reset", "effect": "NoSchedule"})
    cluster.core.patch_node(name, {"metadata": {"labels": {REMEDIATION_STATE: state}},
                                   "spec": {"unschedulable": taken, "taints": taints}})


def test_a_node_under_gpu_remediation_is_left_alone_while_the_others_roll_out(cluster, fleet_ns):
    spec, names, namespace, variables, workloads = fleet_ns
    # A node whose driver pod passed the driver check: the deploy validates no node under remediation here (its
    # quarantine taint would keep the check's Job off it).
    held = [name for name in validated_driver_nodes(cluster, namespace)
            if states(cluster, [name])[name] != "upgrade-failed"][0]
    quarantine(cluster, held, "reset-required")
    pod_before = {p.spec.node_name: p.metadata.uid for p in cluster.core.list_namespaced_pod(
        namespace, label_selector=DRIVER_SELECTOR).items}[held]
    image_before, state_before = driver_images(cluster, namespace)[held], states(cluster, [held])[held]
    on_held = sorted(p.metadata.uid for p in cluster.core.list_namespaced_pod(workloads).items
                     if p.spec.node_name == held)
    # A changed environment makes every driver pod outdated, whichever version it runs now (NEW is no downgrade).
    values = dict(variables, common_driver_version=NEW, driver_upgrade_max_unavailable="4",
                  driver_env=[{"name": "REMEDIATION_TEST", "value": "1"}])
    run = playbook(cluster, "deploy", values).succeeded()
    plans = [task for name, task in run.results if "Plan the next wave" in name and task.get("wave")]
    assert plans, [name for name, _task in run.results]
    words = "%s under GPU remediation (%s=reset-required)" % (held, REMEDIATION_STATE)
    for plan in plans:
        # Never in a wave, not counted in progress, but among the unavailable: three of four at a time.
        assert held in plan["remediation"] and held not in plan["wave"] + plan["in_progress"], plan
        assert len(plan["wave"]) <= 3, plan["wave"]
    said = [task.get("msg", "") for name, task in run.results if "GPU remediation" in name or "rollout plan" in name]
    assert any(words in msg and "left alone" in msg.lower() for msg in said), said
    node = cluster.core.read_node(held)
    assert node.metadata.labels[REMEDIATION_STATE] == "reset-required" and node.spec.unschedulable
    assert REMEDIATION_TAINT in [t.key for t in node.spec.taints or []]
    # Its upgrade-required label taken off (the remediation waits for it); any other state as it was.
    assert states(cluster, [held])[held] == (None if state_before == "upgrade-required" else state_before)
    pods = {p.spec.node_name: p.metadata.uid for p in cluster.core.list_namespaced_pod(
        namespace, label_selector=DRIVER_SELECTOR).items if not p.metadata.deletion_timestamp}
    assert pods[held] == pod_before and driver_images(cluster, namespace)[held] == image_before
    assert sorted(p.metadata.uid for p in cluster.core.list_namespaced_pod(workloads).items
                  if p.spec.node_name == held and not p.metadata.deletion_timestamp) == on_held
    others = [name for name in names if name != held]
    images = driver_images(cluster, namespace)
    assert all(NEW in images[name] for name in others), images
    assert {name: state for name, state in states(cluster, others).items() if state != "upgrade-done"} == {}
    # Its remediation done (and the node returned), the next run rolls it out as any node.
    quarantine(cluster, held, "done")
    playbook(cluster, "deploy", values).succeeded()
    assert states(cluster, [held])[held] == "upgrade-done"
    assert {p.spec.node_name: p.metadata.uid for p in cluster.core.list_namespaced_pod(
        namespace, label_selector=DRIVER_SELECTOR).items if not p.metadata.deletion_timestamp}[held] != pod_before


def test_a_reconcile_without_the_new_version_refuses_the_downgrade_and_changes_nothing(cluster, fleet_ns):
    spec, names, namespace, variables, _workloads = fleet_ns
    # As a schedule that lacks the variable setting NEW runs it: the common role's default, OLD, is asked for.
    scheduled = {key: value for key, value in variables.items() if key != "common_driver_version"}
    before = snapshot(cluster, namespace, spec)
    for check in (True, False):
        run = playbook(cluster, "reconcile", scheduled, check=check)
        name, result = run.failure()
        assert name.endswith("Refuse a driver change to an older version"), (name, result.get("msg"))
        assert result["msg"].startswith(
            "refusing to downgrade the driver from %s to %s on %d GPU node(s) (%s): set driver_allow_downgrade: true "
            "to do it. Nothing was changed." % (NEW, OLD, len(names), ", ".join(names))), result["msg"]
        # Driver DaemonSets, every pod of the namespace and the nodes' labels and annotations as they were.
        assert snapshot(cluster, namespace, spec) == before
    images = driver_images(cluster, namespace)
    assert sorted(images) == names and all(NEW in image for image in images.values()), images


def test_an_allowed_rollback_in_which_a_nodes_driver_fails_stops_the_line(cluster, fleet_ns):
    spec, names, namespace, variables, _workloads = fleet_ns
    failing = [name for name in names if "gpu-ab" in name][0]
    before = driver_images(cluster, namespace)
    started = time.monotonic()
    # BAD is older than NEW, which every node runs: a rollback, which only goes with driver_allow_downgrade.
    run = playbook(cluster, "deploy", dict(variables, common_driver_version=BAD, driver_upgrade_max_parallel=4,
                                           driver_upgrade_max_unavailable="4", driver_allow_downgrade=True))
    _name, result = run.failure()
    print("failure after %.1fs: %s" % (time.monotonic() - started, result["msg"]))
    # The waves as the rollout planned them: a node already without a working driver when a wave is planned joins
    # it ahead of name order (it costs no budget), so the waves are read from the plans, not derived from names.
    waves = []
    for name, task in run.results:
        if "Plan the next wave" in name and task.get("wave"):
            waves.append(task["wave"])
            down = [n for n in task.get("nodes", []) if n["name"] in task.get("unavailable", [])]
            print("wave %s; already without a working driver: %s" % (task["wave"], [
                {key: n.get(key) for key in ("name", "state", "driver_ready", "gpus", "pod")} for n in down]))
    assert "node %s is upgrade-failed" % failing in result["msg"], result["msg"]
    assert "does not load on node %s" % failing in result["msg"], result["msg"]
    after = states(cluster, names)
    assert after[failing] == "upgrade-failed"
    # Waves of at most four; the line stopped with the failing node's wave: an earlier wave moved, the rest untouched.
    assert all(len(wave) <= 4 for wave in waves), waves
    assert failing in waves[-1] and len(waves) >= 2, waves
    moved = [name for wave in waves for name in wave]
    images = driver_images(cluster, namespace)
    for name in names:
        if name in moved and name != failing:
            assert BAD in images[name] and after[name] == "upgrade-done", (name, images[name], after[name])
        elif name not in moved:
            assert images[name] == before[name] and after[name] == "upgrade-required", (name, after[name])
    status = status_of(cluster, {"common_namespace": namespace, "driver_node_selector": {FLEET_LABEL: spec["name"]}})
    row = [row for row in status["nodes"] if row["node"] == failing][0]
    assert row["driver_upgrade"] == "upgrade-failed" and "does not load" in row["driver_upgrade_failure"], row
    assert not row["ready"]
