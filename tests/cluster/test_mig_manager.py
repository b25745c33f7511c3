"""The MIG manager through the deploy, mig_config, status and uninstall playbooks against the local control plane: the
MIG manager on the MIG-capable nodes only, their default layout, a re-run that changes nothing, a node without MIG
refused by name before anything changes, as is a layout enabling MIG under the none strategy, a layout applied after
the GPU workloads were evicted, a node whose reconfiguration fails named by the play, and an uninstall that leaves the
nodes' labels as they were."""

import copy
import os

import kubernetes

from conftest import wait_for
from strict_schema import rendered_objects, strict_problems
from gpu_fleet import RHCOS_416
from test_deploy import fleet_variables, gpu_fleet, node_labels, playbook, status_of
from test_driver_rollout import audit_events
from test_gpu_feature_discovery import delete_namespace, no_warnings

A100 = {"product": "NVIDIA-A100-SXM4-80GB", "count": 2}
GROUPS = [
    {"name": "a100", "count": 2, "gpu": A100, "os": {"rhcos": RHCOS_416}},
    {"name": "bad", "gpu": A100, "os": {"rhcos": RHCOS_416}, "faults": {"mig_reconfig_fails": True}},
    {"name": "l40s", "gpu": {"product": "NVIDIA-L40S", "count": 1}, "os": {"rhcos": RHCOS_416}},
]
CONFIG, STATE = "nvidia.com/mig.config", "nvidia.com/mig.config.state"
WORKLOAD_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"


def gpu_resources(cluster, name):
    allocatable = cluster.core.read_node(name).status.allocatable or {}
    return {key: value for key, value in allocatable.items() if key.startswith(("nvidia.com/gpu", "nvidia.com/mig-"))}


def mig_labels(cluster, names):
    return {name: {key: value for key, value in labels.items() if key in (CONFIG, STATE)}
            for name, labels in node_labels(cluster, names).items()}


def test_mig_layout_applied_after_eviction_refused_without_mig_failure_named_uninstall_restores(cluster, make_fleet):
    spec = gpu_fleet(*GROUPS)
    a100, other, bad, l40s = make_fleet(spec).node_names
    names = [a100, other, bad, l40s]
    before = node_labels(cluster, names)
    namespace = "t-mig-" + os.urandom(2).hex()
    workloads = namespace + "-work"
    variables = fleet_variables(namespace, spec, common_mig_strategy="mixed")
    try:
        deployed = no_warnings(playbook(cluster, "deploy", variables).succeeded())
        # Every built-in object the roles rendered passes the API server's strict field validation (Kubernetes 1.34),
        # the GFD, MIG manager and DCGM exporter ones (the console dashboard's ConfigMap) among them; a misspelt field
        # would not.
        rendered = rendered_objects(deployed)
        assert strict_problems(cluster, [obj for _task, obj in rendered]) == {}
        kinds = {(obj["kind"], obj["metadata"]["name"]) for _task, obj in rendered}
        assert {("DaemonSet", "gpu-feature-discovery"), ("DaemonSet", "nvidia-mig-manager"),
                ("ConfigMap", "default-mig-parted-config"), ("ClusterRole", "nvidia-mig-manager"),
                ("DaemonSet", "nvidia-dcgm-exporter"), ("ConfigMap", "nvidia-dcgm-exporter-dashboard")} <= kinds
        (misspelt,) = [copy.deepcopy(obj) for _task, obj in rendered if obj["metadata"]["name"] == "nvidia-mig-manager"
                       and obj["kind"] == "DaemonSet"]
        misspelt["spec"]["template"]["spec"]["nodeSelecter"] = misspelt["spec"]["template"]["spec"].pop("nodeSelector")
        assert 'unknown field "spec.template.spec.nodeSelecter"' in "".join(strict_problems(cluster, [misspelt]).values())
        # On the MIG-capable nodes only, each given the default layout, which needs no change.
        daemonset = cluster.apps.read_namespaced_daemon_set("nvidia-mig-manager", namespace)
        assert daemonset.status.number_ready == 3
        assert daemonset.spec.template.spec.node_selector == {"nvidia.com/mig.capable": "true"}
        assert {p.spec.node_name for p in cluster.core.list_namespaced_pod(
            namespace, label_selector="app=nvidia-mig-manager").items} == {a100, other, bad}
        wait_for(lambda: mig_labels(cluster, names) == {
            a100: {CONFIG: "all-disabled", STATE: "success"}, other: {CONFIG: "all-disabled", STATE: "success"},
            bad: {CONFIG: "all-disabled", STATE: "success"}, l40s: {}}, timeout=30, message="default MIG layout")
        assert gpu_resources(cluster, a100) == {"nvidia.com/gpu": "2"}
        assert no_warnings(playbook(cluster, "deploy", variables).succeeded()).stats["changed"] == 0

        cluster.core.create_namespace({"metadata": {"name": workloads}})
        cluster.core.create_namespaced_pod(workloads, {
            "metadata": {"name": "trainer"},
            "spec": {"nodeName": a100, "containers": [{"name": "main", "image": WORKLOAD_IMAGE, "resources": {
                "limits": {"nvidia.com/gpu": "1"}}}]}})
        wait_for(lambda: cluster.core.read_namespaced_pod("trainer", workloads).status.phase == "Running",
                 timeout=30, message="the GPU workload running")

        # An L40S has no MIG: refused by name before any eviction or label, the A100 asked with it untouched.
        labelled = node_labels(cluster, names)
        refused = playbook(cluster, "mig_config", dict(variables, mig_config_layout="all-1g.10gb",
                                                       mig_config_nodes=[a100, l40s]))
        task, failed = refused.failure()
        assert task.endswith("The layout is known and every node can take it (nothing changes yet)")
        assert "node %s: GPU NVIDIA-L40S is not MIG-capable" % l40s in failed["msg"]
        assert a100 not in failed["msg"]
        assert node_labels(cluster, names) == labelled
        assert cluster.core.read_namespaced_pod("trainer", workloads).metadata.deletion_timestamp is None
        # Under the none strategy the MIG devices of a layout would never be advertised: refused up front, the setting
        # to change named, before any eviction or label (the simulated MIG manager would have applied it).
        refused = playbook(cluster, "mig_config", dict(variables, common_mig_strategy="none",
                                                       mig_config_layout="all-1g.10gb", mig_config_nodes=[a100]))
        task, failed = refused.failure()
        assert task.endswith("The layout is known and every node can take it (nothing changes yet)")
        assert failed["msg"].startswith("MIG layout all-1g.10gb enables MIG on node(s) %s, but the MIG strategy is "
                                        "none" % a100), failed["msg"]
        assert "Set common_mig_strategy (mig_strategy) to single or mixed" in failed["msg"]
        assert node_labels(cluster, names) == labelled
        assert cluster.core.read_namespaced_pod("trainer", workloads).metadata.deletion_timestamp is None

        applied = no_warnings(playbook(cluster, "mig_config", dict(
            variables, mig_config_layout="all-1g.10gb", mig_config_nodes=[a100, other])).succeeded())
        assert applied.stats["changed"] == 2
        _deleted, evicted = audit_events(cluster, workloads)
        assert evicted == {"trainer": 1}
        assert mig_labels(cluster, [a100, other]) == {name: {CONFIG: "all-1g.10gb", STATE: "success"}
                                                      for name in (a100, other)}
        # Seven 1g.10gb devices on each of the two GPUs, under the mixed strategy.
        for name in (a100, other):
            assert gpu_resources(cluster, name) == {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "14"}
        again = no_warnings(playbook(cluster, "mig_config", dict(
            variables, mig_config_layout="all-1g.10gb", mig_config_nodes=[a100, other])).succeeded())
        assert again.stats["changed"] == 0
        # The MIG manager stopped the node's GPU clients for the change and restarted them (new device plugin pods).
        # A re-run (a scheduled reconcile) checks those again, each node with a CUDA Job asking for one of its MIG
        # devices (no nvidia.com/gpu is left there), as the GPU Operator's validator does.
        no_warnings(playbook(cluster, "reconcile", variables).succeeded())
        jobs = {job.metadata.annotations["accelerators.gpu/node"]: job for job in cluster.batch.list_namespaced_job(
            namespace, label_selector="accelerators.gpu/validation=cuda").items}
        assert {name: (jobs[name].spec.template.spec.containers[0].resources.limits, jobs[name].status.succeeded)
                for name in (a100, other)} == {name: ({"nvidia.com/mig-1g.10gb": "1"}, 1) for name in (a100, other)}

        failing = playbook(cluster, "mig_config", dict(variables, mig_config_layout="all-1g.10gb",
                                                       mig_config_nodes=[bad]))
        task, failed = failing.failure()
        assert task.endswith("then wait until the MIG manager applied it and the nodes advertise it")
        assert "node %s: nvidia.com/mig.config.state=failed applying all-1g.10gb" % bad in failed["msg"]
        assert failed["failed_nodes"] == [bad]
        assert gpu_resources(cluster, bad) == {"nvidia.com/gpu": "2"}

        rows = {row["node"]: row for row in status_of(cluster, variables)["nodes"]}
        assert {name: (rows[name]["mig_manager"], rows[name]["mig_config"], rows[name]["mig_config_state"])
                for name in names} == {
            a100: ("ready", "all-1g.10gb", "success"), other: ("ready", "all-1g.10gb", "success"),
            bad: ("ready", "all-1g.10gb", "failed"), l40s: ("-", None, None)}
        assert rows[a100]["allocatable"] == 14

        no_warnings(playbook(cluster, "uninstall", variables).succeeded())
        assert node_labels(cluster, names) == before
        assert not cluster.apps.list_namespaced_daemon_set(
            namespace, field_selector="metadata.name=nvidia-mig-manager").items
        rbac = kubernetes.client.RbacAuthorizationV1Api(cluster.client)
        assert "nvidia-mig-manager" not in [r.metadata.name for r in rbac.list_cluster_role().items]
    finally:
        delete_namespace(cluster, workloads)
        delete_namespace(cluster, namespace)
