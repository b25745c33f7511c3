"""gpu_workload_eviction against the local control plane: the API server's Eviction API and PodDisruptionBudgets."""

import kubernetes

import gpu_fleet
from conftest import wait_for
from playbook import run

MODULE = "accelerators.gpu.gpu_workload_eviction"
SKIP = "nvidia.com/gpu-driver-upgrade-drain.skip"


def workload(name, node, resources=None, labels=None, init=False):
    container = {"name": "main", "image": "example.test/sim/workload:1"}
    if resources:
        container["resources"] = resources
    spec = {"nodeName": node, "containers": [container]}
    if init:
        spec["initContainers"] = [dict(container, name="init", resources={"limits": {"nvidia.com/gpu": "1"}})]
        spec["containers"] = [{"name": "main", "image": "example.test/sim/workload:1"}]
    return {"metadata": {"name": name, "labels": dict({"app": name}, **(labels or {}))}, "spec": spec}


def pods(cluster, namespace):
    return sorted(p.metadata.name for p in cluster.core.list_namespaced_pod(namespace).items
                  if p.metadata.deletion_timestamp is None)


def test_gpu_workloads_go_budgets_hold_and_skip_labelled_stay(cluster, namespace, make_fleet):
    made = make_fleet(gpu_fleet.fleet([{"name": "gpu", "count": 2, "gpu": {"count": 2},
                                        "os": {"rhcos": gpu_fleet.RHCOS_418}}]))
    node, other = sorted(made.node_names)
    for pod in (workload("trainer", node, {"limits": {"nvidia.com/gpu": "1"}}),
                workload("shared", node, {"requests": {"nvidia.com/gpu.shared": "1"}, "limits": {"nvidia.com/gpu.shared": "1"}}),
                workload("warmup", node, init=True),
                workload("notebook", node, {"limits": {"nvidia.com/gpu": "1"}}, labels={SKIP: "true"}),
                workload("web", node, {"requests": {"cpu": "100m"}}),
                workload("elsewhere", other, {"limits": {"nvidia.com/gpu": "1"}})):
        cluster.core.create_namespaced_pod(namespace, pod)
    policy = kubernetes.client.PolicyV1Api(cluster.client)
    policy.create_namespaced_pod_disruption_budget(namespace, {
        "metadata": {"name": "trainer"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "trainer"}}}})
    wait_for(lambda: (policy.read_namespaced_pod_disruption_budget("trainer", namespace).status
                      .current_healthy or 0) == 1, message="the budget counts the trainer healthy")

    checked = run(cluster, MODULE, {"nodes": [node]}, check=True)
    assert not checked.get("failed"), checked.get("msg")
    assert checked["evicted"] == ["%s/shared" % namespace, "%s/warmup" % namespace]
    assert len(pods(cluster, namespace)) == 6  # dry runs

    held = run(cluster, MODULE, {"nodes": [node], "timeout": 4, "poll_interval": 1})
    assert held["failed"] is True
    # (The others evicted may still be terminating: they would be named after.)
    assert held["msg"].startswith(
        "GPU workloads of %s not gone within 4 s: %s/trainer: eviction held back by PodDisruptionBudget trainer "
        "(disruptionsAllowed 0, currentHealthy 1 of desiredHealthy 1)" % (node, namespace)), held["msg"]
    assert held["spared"] == [{"pod": "%s/notebook" % namespace, "reason": "labelled %s=true" % SKIP}]
    wait_for(lambda: pods(cluster, namespace) == ["elsewhere", "notebook", "trainer", "web"],
             message="the unguarded GPU workloads gone")

    policy.delete_namespaced_pod_disruption_budget("trainer", namespace)
    done = run(cluster, MODULE, {"nodes": [node], "timeout": 60, "poll_interval": 1})
    assert not done.get("failed"), done.get("msg")
    assert (done["changed"], done["evicted"]) == (True, ["%s/trainer" % namespace])
    assert pods(cluster, namespace) == ["elsewhere", "notebook", "web"]
    again = run(cluster, MODULE, {"nodes": [node]})
    assert (again["changed"], again["evicted"]) == (False, [])
