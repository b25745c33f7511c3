"""Driver configurations (the driver role's driver_configurations, as the GPU Operator's NVIDIADriver) on a mixed
OpenShift fleet, through the deploy playbook: an A100 pool on 570 with the proprietary modules, a B200 pool on 595 with
the open ones and GPUDirect Storage, and the default configuration (the common settings) for the rest. One story on one
module-scoped fleet, in order: deploy, status, a no-op re-run, a version change of one pool, a node relabelled into
another pool (moved by the rollout, its workloads evicted under their PodDisruptionBudget), a change of one pool's
kernel module parameters (rolled out node by node, the parameters reaching the loaded drivers), and the refusals, each
before any write.

The simulator loads the proprietary modules on no B200 (NVIDIA's message), and a driver pod on a node whose GPUs are
held fails ("module nvidia is in use"): a configuration's driver that reached the wrong node, or a move that did not
evict first, fails here.
"""

import collections
import json
import os

import kubernetes
import pytest

from conftest import create_namespace, wait_for
from gpu_fleet import FLEET_LABEL, RHCOS_416, selector
from localcluster.packages import MODULE_PARAMETERS_ANNOTATION
from test_deploy import fleet_variables, gpu_fleet, playbook, status_of
from test_driver_rollout import audit_events, ready_replicas

POOL = "example.com/gpu-pool"
OWNER = "nvidia.com/gpu-operator.driver.owner"
DRIVER_SELECTOR = "app.kubernetes.io/component=nvidia-driver"
GPU = "nvidia.com/gpu"
A100_OLD, A100_NEW, B200_VERSION, DEFAULT_VERSION = "570.172.08", "570.195.03", "595.91.07", "580.95.05"
# The A100 pool's kernel module parameters (its kernel_module_config), as the driver reads /drivers/nvidia.conf.
MODULE_PARAMS = "a100-module-params"


def configurations(a100_version=A100_OLD):
    return [
        {"name": "a100", "node_selector": {POOL: "a100"}, "version": a100_version,
         "kernel_module_type": "proprietary", "kernel_module_config": MODULE_PARAMS,
         "upgrade_policy": {"max_parallel": 1, "max_unavailable": 1}},
        {"name": "b200", "node_selector": {POOL: "b200"}, "version": B200_VERSION, "kernel_module_type": "open",
         "gds": True},
    ]


@pytest.fixture(scope="module")
def pools(cluster):
    """(spec, {pool: [nodes]}, namespace, deploy variables): two A100 nodes, one B200, two L40S for the default."""
    from localcluster import fleet as fleets
    base = {"driver_build_seconds": 1, "os": {"rhcos": RHCOS_416}}
    spec = gpu_fleet(dict(base, name="a100", count=2, gpu={"product": "NVIDIA-A100-SXM4-80GB", "count": 2}),
                     dict(base, name="b200", count=1, gpu={"product": "NVIDIA-B200", "count": 2}),
                     dict(base, name="l40s", count=2, gpu={"product": "NVIDIA-L40S", "count": 2}))
    prefix = "cfg-%s-" % os.urandom(2).hex()
    made = fleets.Fleet(cluster.client, spec, prefix=prefix).apply().wait_ready()
    members = collections.defaultdict(list)
    for name in sorted(made.node_names):
        group = name[len(prefix):].split("-")[0]
        members[group].append(name)
        if group != "l40s":
            # As an admin labels the pools.
            cluster.core.patch_node(name, {"metadata": {"labels": {POOL: group}}})
    namespace = "t-drvcfg-" + os.urandom(2).hex()
    create_namespace(cluster, namespace)
    cluster.core.create_namespaced_config_map(namespace, {"metadata": {"name": MODULE_PARAMS},
                                                          "data": {"nvidia.conf": "NVreg_EnableGpuFirmware=0\n"}})
    variables = dict(fleet_variables(namespace, spec, common_driver_version=DEFAULT_VERSION,
                                     driver_configurations=configurations(), driver_wait_timeout=300,
                                     driver_upgrade_poll=1, driver_upgrade_max_parallel=0,
                                     container_toolkit_validate=False, device_plugin_validate_workload=False),
                     common_wait_timeout=180)
    yield spec, dict(members), namespace, variables
    cluster.core.delete_namespace(namespace)
    made.delete()


def driver_pods(cluster, namespace):
    """{node: (DaemonSet, image, uid)} of the running driver pods."""
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=DRIVER_SELECTOR).items
    return {p.spec.node_name: (p.metadata.owner_references[0].name, p.spec.containers[0].image, p.metadata.uid)
            for p in pods if not p.metadata.deletion_timestamp}


def daemonsets(cluster, namespace):
    """{name: (resourceVersion, spec)} of the namespace's driver DaemonSets."""
    return {d.metadata.name: (d.metadata.resource_version, cluster.client.sanitize_for_serialization(d.spec))
            for d in cluster.apps.list_namespaced_daemon_set(namespace, label_selector=DRIVER_SELECTOR).items}


def snapshot(cluster, namespace, spec):
    nodes = cluster.core.list_node(label_selector=selector(spec)).items
    return ({n.metadata.name: (n.metadata.labels, n.metadata.annotations, n.spec.unschedulable) for n in nodes},
            daemonsets(cluster, namespace),
            sorted(p.metadata.uid for p in cluster.core.list_namespaced_pod(namespace).items))


def owners(cluster, names):
    return {name: cluster.core.read_node(name).metadata.labels.get(OWNER) for name in names}


def test_deploy_brings_up_every_pool_with_its_own_driver_and_status_shows_owner_and_modules(cluster, pools):
    spec, members, namespace, variables = pools
    playbook(cluster, "deploy", variables).succeeded()
    a100, b200, l40s = members["a100"], members["b200"], members["l40s"]
    assert owners(cluster, a100 + b200 + l40s) == dict(
        [(n, "a100") for n in a100] + [(n, "b200") for n in b200] + [(n, "default") for n in l40s])
    pods = driver_pods(cluster, namespace)
    build = RHCOS_416
    expected = dict([(n, ("nvidia-gpu-driver-a100-" + build, A100_OLD)) for n in a100]
                    + [(n, ("nvidia-gpu-driver-b200-" + build, B200_VERSION)) for n in b200]
                    + [(n, ("nvidia-driver-daemonset-" + build, DEFAULT_VERSION)) for n in l40s])
    assert {n: (ds, image.rsplit(":", 1)[1].split("-")[0]) for n, (ds, image, _uid) in pods.items()} == expected
    b200_pod = [p for p in cluster.core.list_namespaced_pod(namespace, label_selector=DRIVER_SELECTOR).items
                if p.spec.node_name == b200[0]][0]
    assert "nvidia-fs-ctr" in [c.name for c in b200_pod.spec.containers]
    rows = {row["node"]: row for row in status_of(cluster, dict(variables, status_columns="wide"))["nodes"]}
    assert {n: (rows[n]["driver_configuration"], rows[n]["kernel_modules"]) for n in rows} == dict(
        [(n, ("a100", "proprietary")) for n in a100] + [(n, ("b200", "open")) for n in b200]
        + [(n, ("default", "open")) for n in l40s])


def test_a_no_op_rerun_changes_nothing(cluster, pools):
    _spec, _members, _namespace, variables = pools
    run = playbook(cluster, "deploy", variables).succeeded()
    assert run.stats["changed"] == 0, [name for name, result in run.results if result.get("changed")]


def test_a_version_change_of_one_pool_rolls_only_its_nodes_and_leaves_the_others_identical(cluster, pools):
    spec, members, namespace, variables = pools
    before_pods, before_sets = driver_pods(cluster, namespace), daemonsets(cluster, namespace)
    changed_variables = dict(variables, driver_configurations=configurations(A100_NEW))
    # Check mode: the plan of each configuration's rollout, within its budget, and nothing written.
    before = snapshot(cluster, namespace, spec)
    checked = playbook(cluster, "deploy", changed_variables, check=True).succeeded()
    plan = [result["msg"] for name, result in checked.results if name.endswith("Show the rollout plan")][0]
    print(plan)
    a100 = members["a100"]
    assert ("2 of 5 GPU node(s) outdated, at most 3 without a working driver at once (a100: 1 of 2, b200: 1 of 1, "
            "default: 1 of 2)") in plan, plan
    assert "Wave 1: %s. Wave 2: %s." % (a100[0], a100[1]) in plan, plan
    assert snapshot(cluster, namespace, spec) == before
    run = playbook(cluster, "deploy", changed_variables).succeeded()
    after_pods, after_sets = driver_pods(cluster, namespace), daemonsets(cluster, namespace)
    changed = sorted(n for n in after_pods if after_pods[n][2] != before_pods[n][2])
    assert changed == members["a100"], changed
    assert all(A100_NEW in after_pods[n][1] for n in members["a100"])
    others = [name for name in before_sets if "-a100-" not in name]
    assert {name: after_sets[name] for name in others} == {name: before_sets[name] for name in others}
    # Its own budget (max_parallel 1): one node a wave.
    waves = [line for line in run.process.stdout.splitlines() if "Driver upgraded on" in line]
    assert len(waves) == 2, waves
    variables["driver_configurations"] = configurations(A100_NEW)


def module_parameters(cluster, names):
    """{node: the parameters its loaded nvidia module took}, as the simulated node shows them."""
    return {name: json.loads((cluster.core.read_node(name).metadata.annotations or {}).get(
        MODULE_PARAMETERS_ANNOTATION, "{}")).get("nvidia") for name in names}


def test_a_change_of_one_pools_module_parameters_rolls_out_on_its_nodes_one_by_one(cluster, pools):
    spec, members, namespace, variables = pools
    a100 = members["a100"]
    assert module_parameters(cluster, a100) == {name: ["NVreg_EnableGpuFirmware=0"] for name in a100}
    before_pods, before_sets = driver_pods(cluster, namespace), daemonsets(cluster, namespace)
    # The ConfigMap's content changes, nothing in the inventory: the digest of the pool's install settings does.
    cluster.core.patch_namespaced_config_map(MODULE_PARAMS, namespace, {"data": {
        "nvidia.conf": "NVreg_EnableGpuFirmware=0\nNVreg_RegistryDwords=RMIntrLockingMode=1\n"}})
    run = playbook(cluster, "deploy", variables).succeeded()
    assert module_parameters(cluster, a100) == {
        name: ["NVreg_EnableGpuFirmware=0", "NVreg_RegistryDwords=RMIntrLockingMode=1"] for name in a100}
    after_pods, after_sets = driver_pods(cluster, namespace), daemonsets(cluster, namespace)
    assert sorted(n for n in after_pods if after_pods[n][2] != before_pods[n][2]) == a100
    waves = [line for line in run.process.stdout.splitlines() if "Driver upgraded on" in line]
    assert len(waves) == 2, waves
    others = [name for name in before_sets if "-a100-" not in name]
    assert {name: after_sets[name] for name in others} == {name: before_sets[name] for name in others}


def test_a_relabelled_node_moves_to_its_new_pool_through_the_rollout_with_its_workload_evicted(cluster, pools):
    spec, members, namespace, variables = pools
    # An A100 node leaves its pool for the default configuration (570 to 580: no downgrade).
    moving = members["a100"][1]
    workloads = "t-cfgwl-" + os.urandom(2).hex()
    cluster.core.create_namespace({"metadata": {"name": workloads}})
    labels = {"app": "serve"}
    cluster.apps.create_namespaced_deployment(workloads, {"metadata": {"name": "serve", "labels": labels}, "spec": {
        "replicas": 2, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
            "nodeSelector": {FLEET_LABEL: spec["name"], "example.com/serve": "yes"},
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "serve", "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                            "resources": {"limits": {GPU: "1"}}}]}}}})
    kubernetes.client.PolicyV1Api(cluster.client).create_namespaced_pod_disruption_budget(workloads, {
        "metadata": {"name": "serve"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}})
    # The workload runs on the node that moves (the other A100 node cordoned meanwhile); its evicted pods find room
    # on the other one.
    spare = members["a100"][0]
    cluster.core.patch_node(spare, {"spec": {"unschedulable": True}})
    for node in (moving, spare):
        cluster.core.patch_node(node, {"metadata": {"labels": {"example.com/serve": "yes"}}})
    wait_for(lambda: ready_replicas(cluster, workloads) == {"serve": 2}, timeout=120, message="the workload running")
    assert {p.spec.node_name for p in cluster.core.list_namespaced_pod(workloads).items} == {moving}
    cluster.core.patch_node(spare, {"spec": {"unschedulable": None}})
    before_sets = daemonsets(cluster, namespace)
    # The admin takes the node out of the A100 pool.
    cluster.core.patch_node(moving, {"metadata": {"labels": {POOL: None}}})
    try:
        run = playbook(cluster, "deploy", variables).succeeded()
        assert owners(cluster, [moving]) == {moving: "default"}
        pods = driver_pods(cluster, namespace)
        assert pods[moving][0] == "nvidia-driver-daemonset-" + RHCOS_416 and DEFAULT_VERSION in pods[moving][1], pods
        assert "accelerators.gpu/driver-owner-next" not in cluster.core.read_node(moving).metadata.labels
        assert not cluster.core.read_node(moving).spec.unschedulable
        assert any("Driver upgraded on %s" % moving in line for line in run.process.stdout.splitlines())
        # The workload left through the Eviction API, its budget held by the rollout.
        _deleted, evicted = audit_events(cluster, workloads)
        assert evicted, "no pod of the workload was evicted"
        after_sets = daemonsets(cluster, namespace)
        assert after_sets["nvidia-gpu-driver-b200-" + RHCOS_416] == before_sets["nvidia-gpu-driver-b200-" + RHCOS_416]
        again = playbook(cluster, "deploy", variables).succeeded()
        assert again.stats["changed"] == 0, [name for name, result in again.results if result.get("changed")]
    finally:
        cluster.core.delete_namespace(workloads)


@pytest.mark.parametrize("change, message", [
    (lambda c: c + [{"name": "wide", "node_selector": {FLEET_LABEL: "{fleet}"}}],
     "is selected by driver configurations a100, wide"),
    (lambda c: c + [{"name": "base", "default": True}, {"name": "other", "default": True}],
     "driver configurations base, other are all default"),
    (lambda c: c + [{"name": "owned", "node_selector": {OWNER: "a100"}}],
     "driver configuration owned selects nodes by nvidia.com/gpu-operator.driver.owner"),
    (lambda c: [dict(c[0], gds=True)] + c[1:],
     "driver configuration a100: kernel_module_type proprietary: GPUDirect Storage"),
    (lambda c: c[:1] + [dict(c[1], kernel_module_type="proprietary")],
     "driver configuration b200: kernel_module_type proprietary: node(s)"),
    (lambda c: [dict(c[0], repo_config="a100-mirror")] + c[1:],
     "ConfigMap a100-mirror (repo_config of driver configuration a100) does not exist"),
    (lambda c: [dict(c[0], secret_env="a100-license")] + c[1:],
     "Secret a100-license (secret_env of driver configuration a100) does not exist"),
], ids=["overlap", "two-defaults", "owner-label", "gds-proprietary", "proprietary-blackwell", "missing-configmap",
        "missing-secret"])
def test_each_refusal_fails_before_any_write_naming_what_to_change(cluster, pools, change, message):
    spec, _members, namespace, variables = pools
    wanted = change([dict(entry) for entry in variables["driver_configurations"]])
    for entry in wanted:
        if entry.get("node_selector", {}).get(FLEET_LABEL) == "{fleet}":
            entry["node_selector"] = {FLEET_LABEL: spec["name"]}
    before = snapshot(cluster, namespace, spec)
    task, refused = playbook(cluster, "deploy", dict(variables, driver_configurations=wanted)).failure()
    assert message in refused["msg"], (task, refused["msg"])
    assert snapshot(cluster, namespace, spec) == before
