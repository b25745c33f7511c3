"""The roles' kubernetes.core tasks (accelerators.gpu.k8s, k8s_info, k8s_drain: plugins/plugin_utils/
kubernetes_core_retry.py) through a real API server restart, against the session cluster.

- The RHCOS rollout's read of where the nodes stand (roles/rhcos_upgrade/tasks/state.yml, the drain method's), run
  while the API server is stopped: the read is tried again until it is back, and the run goes on.
- The rollout's writes as its drain method sends them (the record patch of each node, the cordon, the uncordon),
  the first while the API server is stopped: each lands once it is back.
- An object the API server refuses (422) fails its task at once: a permanent error is never tried again.

Each restart stops the API server before the play starts and starts it DOWN_SECONDS after the play reached the tasks
(ControlPlane.start waits until it is ready): whatever the machine's load, the first of them meets it away. The tries and faults each task met are
printed (pytest -s, the CI log).
"""

import json
import os
import threading
import time

from conftest import wait_for
from gpu_fleet import RHCOS_416, selector
from playbook import ROOT, play
from test_deploy import gpu_fleet

STATE_TASKS = os.path.join(ROOT, "roles", "rhcos_upgrade", "tasks", "state.yml")
RECORD = "accelerators.gpu/rhcos-upgrade"
TARGET = "5.14.0-570.49.1.el9_6.x86_64"
# Seconds the API server stays stopped once the play reached the tasks under test: the first of them starts within
# a few seconds (a kubernetes.core module run against a stopped API server takes seconds more, its client trying a
# refused connection again), however loaded the machine; the API server is away longer, as it starts.
DOWN_SECONDS = 15


def while_the_api_server_is_away(cluster, plane, tasks, reached):
    """The results of tasks, run in a play that the API server is stopped for: it starts again DOWN_SECONDS after
    the play reached them (a first task touches the file `reached`), whatever the time ansible-playbook took."""
    plane.stop("kube-apiserver")

    def bring_back():
        wait_for(reached.exists, timeout=300, message="the play at its tasks")
        time.sleep(DOWN_SECONDS)
        plane.start("kube-apiserver")
    back = threading.Thread(target=bring_back)
    back.start()
    try:
        run = play(cluster, [("ansible.builtin.file", {"path": str(reached), "state": "touch", "mode": "0644"})]
                   + tasks, timeout=600)
    finally:
        back.join()
    assert run.process.returncode == 0, run.process.stderr[-3000:]
    return run[1:]


def through_the_fault(what, result):
    """The task succeeded after it met the API server away, and said so; its faults and tries printed."""
    faults = result.get("api_faults") or {}
    print("%s: %s%s" % (what, json.dumps(faults), "".join("\n  " + line for line in result.get("warnings") or [])))
    assert not result.get("failed") and faults.get("given_up") == 0, result
    assert faults["tries"] >= 2 and sum(faults["faults"].values()) == faults["tries"] - 1, faults
    # Refused while it was down; reset, timed out or 5xx while it came up.
    assert set(faults["faults"]) <= {"refused", "reset", "timeout", "500", "503"}, faults
    assert any("the API server" in line and "ran %d times" % faults["tries"] in line
               for line in result["warnings"]), result["warnings"]


def one_gpu_node(make_fleet):
    spec = gpu_fleet({"name": "gpu", "count": 1, "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 1},
                      "os": {"rhcos": RHCOS_416}})
    return spec, make_fleet(spec)


def test_the_rollouts_read_of_the_nodes_goes_on_through_an_api_server_restart(cluster, plane, make_fleet, tmp_path):
    spec, made = one_gpu_node(make_fleet)
    variables = {"rhcos_upgrade_by_pool": False, "rhcos_upgrade_pool_object": {}, "rhcos_upgrade_build": TARGET,
                 "rhcos_upgrade_selector": [selector(spec)]}
    run = while_the_api_server_is_away(cluster, plane, [
        ("ansible.builtin.set_fact", variables),
        # The role's own task file, as its preflight, waves and finish include it.
        ("ansible.builtin.include_tasks", {"file": STATE_TASKS}),
        ("ansible.builtin.debug", {"var": "rhcos_upgrade_state.nodes"})], tmp_path / "read")
    # The results of the included file's tasks follow the include's: its read of the nodes, then where each stands.
    read = next(result for result in run if "resources" in result)
    through_the_fault("Read the nodes (roles/rhcos_upgrade/tasks/state.yml)", read)
    assert sorted(node["metadata"]["name"] for node in read["resources"]) == sorted(made.node_names)
    assert [node["name"] for node in run[-1]["rhcos_upgrade_state.nodes"]] == sorted(made.node_names)


def test_the_rollouts_patch_cordon_and_uncordon_land_through_an_api_server_restart(cluster, plane, make_fleet,
                                                                                   tmp_path):
    _spec, made = one_gpu_node(make_fleet)
    (name,) = made.node_names
    record = json.dumps({"from": "unknown", "to": TARGET, "started": 1.0}, sort_keys=True)
    # As drain.yml notes a node of the wave (rhcos_upgrade_record_patches) and cordons it.
    run = while_the_api_server_is_away(cluster, plane, [
        ("accelerators.gpu.k8s", {"state": "patched", "definition": [
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": {RECORD: record}}}]}),
        ("accelerators.gpu.k8s_drain", {"state": "cordon", "name": name})], tmp_path / "cordon")
    through_the_fault("Note the node (accelerators.gpu.k8s, state patched)", run[0])
    node = cluster.core.read_node(name)
    assert node.metadata.annotations[RECORD] == record and node.spec.unschedulable
    # As settle.yml uncordons it.
    (uncordoned,) = while_the_api_server_is_away(cluster, plane, [
        ("accelerators.gpu.k8s_drain", {"state": "uncordon", "name": name})], tmp_path / "uncordon")
    through_the_fault("Uncordon the node (accelerators.gpu.k8s_drain)", uncordoned)
    assert not cluster.core.read_node(name).spec.unschedulable


def test_an_object_the_api_server_refuses_fails_its_task_at_once(cluster, namespace):
    run = play(cluster, [("accelerators.gpu.k8s", {"definition": {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Not_A_DNS_Name", "namespace": namespace}}})])
    (result,) = run
    print("refused (422) in %.1f s, tried once: %s" % (run.seconds, result.get("msg", "")[:160]))
    assert result.get("failed") and "422" in result["msg"] and "Invalid" in result["msg"], result
    assert "api_faults" not in result and not result.get("warnings"), result
