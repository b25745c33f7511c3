"""The status playbook over an inventory of two clusters (the session's OpenShift-flavoured one and the vanilla
Kubernetes one), each reached with the kubeconfig its inventory host names and nothing in the environment: one table
with a CLUSTER column, a summary line per cluster, the stat gpu_fleet_status keyed by cluster; then with a third
cluster whose API server is down, which the others' output survives and which fails the run, named with its error.
No stack is deployed: simulated GPU nodes with NFD's labels are rows enough, none of them ready."""

import json
import os
import subprocess
import sys

import yaml

from gpu_fleet import FLEET_LABEL, REGISTRY, RHCOS_416
from localcluster import controlplane
from playbook import COLLECTIONS, UNREACHABLE_RETRY_SECONDS, assert_tried_within_budget

FLEET_TASK = "Print the status table of every cluster and a summary line per cluster"
SINGLE_TASK = "Print the status table"
GPU = {"product": "NVIDIA-A100-SXM4-80GB", "count": 2}
# What a GPU node without the stack misses.
BARE = "driver no pod, toolkit no pod, device plugin no pod, dcgm exporter no pod, no allocatable GPUs, not validated"


def spec(name, nodes, openshift=True):
    fleet = {"name": "%s-%s" % (name, os.urandom(3).hex()), "registry": REGISTRY, "nodes": nodes}
    if openshift:
        fleet["openshift"] = {"version": "4.18.22"}
    return fleet


def run_status(tmp_path, hosts, namespace):
    """ansible-playbook -i <inventory> accelerators.gpu.status, the clusters' credentials in the inventory only."""
    inventory = tmp_path / ("inventory-%s.yml" % os.urandom(3).hex())
    inventory.write_text(yaml.safe_dump({"gpu_clusters": {"hosts": hosts, "vars": {"common_namespace": namespace}}},
                                        sort_keys=False))
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("K8S_AUTH_") and name != "KUBECONFIG"}
    # HOME too: no ~/.kube/config to fall back on.
    env.update(ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_SHOW_CUSTOM_STATS="true", HOME=str(tmp_path))
    process = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory),
                              "accelerators.gpu.status"], env=env, capture_output=True, text=True, timeout=600,
                             check=False)
    try:
        report = json.loads(process.stdout)
    except ValueError:
        raise AssertionError("no JSON report (rc=%d)\nstdout: %s\nstderr: %s" % (
            process.returncode, process.stdout[-3000:], process.stderr[-3000:]))
    tasks = {task["task"]["name"]: task["hosts"] for play in report["plays"] for task in play["tasks"]}
    return process, report, tasks


def fleet_lines(tasks):
    """The fleet's lines, printed once (run_once: by the first cluster)."""
    printed = [result["msg"] for result in tasks[FLEET_TASK].values() if "msg" in result]
    assert len(printed) == 1, tasks[FLEET_TASK]
    return printed[0]


def test_status_over_two_clusters_then_with_one_down(cluster, kubernetes_cluster, make_fleet, tmp_path):
    ocp = spec("fs-ocp", [{"name": "gpu", "count": 2, "gpu": GPU, "os": {"rhcos": RHCOS_416}},
                          {"name": "host", "gpu": GPU, "os": {"rhcos": RHCOS_416}, "host_driver": "570.172.08"},
                          {"name": "cpu", "os": {"rhcos": RHCOS_416}}])
    k8s = spec("fs-k8s", [{"name": "gpu", "gpu": GPU, "os": {"ubuntu": "22.04"}, "runtime": "containerd"}],
               openshift=False)
    gpu0, gpu1, host, _cpu = make_fleet(ocp).node_names
    [k8s_gpu] = make_fleet(k8s, on=kubernetes_cluster).node_names
    # A namespace neither cluster has: no stack's pods, Jobs or DaemonSets of another test.
    namespace = "t-fleet-status-" + os.urandom(2).hex()
    hosts = {"ocp-a": {"gpu_cluster_kubeconfig": cluster.kubeconfig, "driver_node_selector": {FLEET_LABEL: ocp["name"]}},
             "k8s-b": {"gpu_cluster_kubeconfig": kubernetes_cluster.kubeconfig,
                       "driver_node_selector": {FLEET_LABEL: k8s["name"]}}}

    process, report, tasks = run_status(tmp_path, hosts, namespace)
    assert process.returncode == 0, (process.stdout[-3000:], process.stderr[-3000:])
    assert not [line for line in process.stderr.splitlines() if "WARNING]" in line], process.stderr
    lines = fleet_lines(tasks)
    print("\n".join(lines))
    assert lines[0].split()[:4] == ["CLUSTER", "NODE", "GPUS", "PRODUCT"]
    # Every GPU node of each cluster, the cluster first, in inventory order; the CPU node is no row. Without GPU
    # feature discovery or a device plugin, GPUs and product are unknown (NFD's vendor labels name no device).
    assert [line.split()[:4] for line in lines[1:5]] == [["ocp-a", gpu0, "-", "-"], ["ocp-a", gpu1, "-", "-"],
                                                         ["ocp-a", host, "-", "-"], ["k8s-b", k8s_gpu, "-", "-"]]
    assert {line.index(" %s " % name) for line, name in zip(lines[1:5], (gpu0, gpu1, host, k8s_gpu))} == {
        lines[0].index(" NODE ")}
    assert lines[5:] == [
        "ocp-a: 3 GPU nodes, 0 ready, driver none (2), host (1), 0 mid-upgrade, 3 problems: "
        "%s not ready: %s; %s not ready: %s; %s not ready: %s" % (
            gpu0, BARE, gpu1, BARE, host, BARE.replace("driver no pod, ", "")),
        "k8s-b: 1 GPU node, 0 ready, driver none (1), 0 mid-upgrade, 1 problem: %s not ready: %s" % (k8s_gpu, BARE),
        "GPU stack NOT ready on ocp-a, k8s-b"]
    # Each cluster's table is not printed on its own.
    assert all(result.get("skipped") for result in tasks[SINGLE_TASK].values())

    # For automation: the summaries keyed by cluster, merged into one stat; each cluster's rows its own stat.
    fleet_status = report["global_custom_stats"]["gpu_fleet_status"]
    assert sorted(fleet_status) == ["k8s-b", "ocp-a"]
    assert {key: value for key, value in fleet_status["ocp-a"].items() if key != "problems"} == {
        "ready": False, "failed": False, "error": None, "gpu_nodes": 3, "ready_nodes": 0,
        "driver_versions": {"none": 2, "host": 1}, "mid_upgrade": 0}
    assert [problem.split(" not ready: ")[0] for problem in fleet_status["ocp-a"]["problems"]] == [gpu0, gpu1, host]
    assert fleet_status["k8s-b"] == {
        "ready": False, "failed": False, "error": None, "gpu_nodes": 1, "ready_nodes": 0,
        "driver_versions": {"none": 1}, "mid_upgrade": 0, "problems": ["%s not ready: %s" % (k8s_gpu, BARE)]}
    assert "gpu_stack_status" not in report["global_custom_stats"]
    assert {name: [row["node"] for row in report["custom_stats"][name]["gpu_stack_status"]["nodes"]]
            for name in hosts} == {"ocp-a": [gpu0, gpu1, host], "k8s-b": [k8s_gpu]}

    # A third cluster whose API server is down: the other two are read and shown, it is named with its error, and
    # the run fails for it alone.
    down = yaml.safe_load(open(cluster.kubeconfig))
    down["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:%d" % controlplane.free_port()
    (tmp_path / "down.kubeconfig").write_text(yaml.safe_dump(down))
    hosts = {"ocp-a": hosts["ocp-a"], "down": {"gpu_cluster_kubeconfig": str(tmp_path / "down.kubeconfig"),
                                               "gpu_cluster_api_retry_seconds": UNREACHABLE_RETRY_SECONDS},
             "k8s-b": hosts["k8s-b"]}
    process, report, tasks = run_status(tmp_path, hosts, namespace)
    assert process.returncode == 2, (process.stdout[-3000:], process.stderr[-3000:])
    lines = fleet_lines(tasks)
    print("\n".join(lines))
    assert [line.split()[:2] for line in lines[1:5]] == [["ocp-a", gpu0], ["ocp-a", gpu1], ["ocp-a", host],
                                                         ["k8s-b", k8s_gpu]]
    error = report["global_custom_stats"]["gpu_fleet_status"]["down"]["error"]
    assert "cannot reach the API server" in error, error
    assert_tried_within_budget(error)
    assert lines[5].startswith("ocp-a: 3 GPU nodes, 0 ready") and lines[7].startswith("k8s-b: 1 GPU node, 0 ready")
    assert lines[6] == "down: status read FAILED: " + error
    assert lines[8] == "GPU stack NOT ready on ocp-a, down (status read failed), k8s-b"
    failed = tasks["Fail for a cluster whose status could not be read"]
    assert sorted(failed) == ["down", "k8s-b", "ocp-a"] and failed["down"]["failed"]
    assert "down: the status could not be read: " in failed["down"]["msg"]
    assert all(failed[name].get("skipped") for name in ("ocp-a", "k8s-b"))
    assert {name: (stats["failures"], stats["ignored"]) for name, stats in report["stats"].items()} == {
        "ocp-a": (0, 0), "k8s-b": (0, 0), "down": (1, 1)}
    assert report["global_custom_stats"]["gpu_fleet_status"]["down"] == {
        "ready": False, "failed": True, "error": error, "gpu_nodes": None, "ready_nodes": None,
        "driver_versions": {}, "mid_upgrade": None, "problems": []}
