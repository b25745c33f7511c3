"""A driver pod that finds its driver loaded with its DRIVER_CONFIG_DIGEST: no unload, no build."""

import json
import time

from localcluster import fleet, simulator

DRIVER_IMAGE = "nvcr.io/nvidia/driver:570.172.08-rhcos4.18"


def gpu_node(build_seconds):
    group = {"name": "g", "os": {"rhcos": "418.94.202509100653-0"}, "driver_build_seconds": build_seconds,
             "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 2}}
    node = fleet.expand_groups({"nodes": [group]})[0]
    return {"metadata": {"name": node["name"], "labels": node["labels"], "annotations": node["annotations"]},
            "status": node["status"]}


def driver_pod(digest):
    env = [{"name": simulator.DIGEST_ENV, "value": digest}] if digest else []
    return {"metadata": {"name": "nvidia-driver-daemonset-x", "namespace": "gpu", "uid": "d",
                         "labels": {"app.kubernetes.io/component": simulator.DRIVER},
                         "creationTimestamp": simulator.now()},
            "spec": {"containers": [{"name": "nvidia-driver-ctr", "image": DRIVER_IMAGE, "env": env}]}}


def gpu_workload():
    return {"metadata": {"name": "train", "namespace": "ml", "uid": "w"}, "spec": {"containers": [
        {"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def registry():
    found = simulator.Registry()
    found.patterns = ["*"]
    return found


def test_the_digest_is_the_driver_containers():
    assert simulator.config_digest(driver_pod("abc")) == "abc"
    assert simulator.config_digest(driver_pod(None)) is None


def test_a_reused_driver_is_ready_at_once_where_a_build_takes_its_time():
    node = gpu_node(60)
    built = simulator.outcome(driver_pod("abc"), node, set(), registry(), time.time())
    assert built[:2] == ("waiting", "DriverBuilding")
    assert simulator.outcome(driver_pod("abc"), node, set(), registry(), time.time(), reuse=True)[0] == "ready"


def test_a_reused_driver_leaves_the_gpu_workloads_alone():
    node = gpu_node(0)
    state, reason, message, _retry = simulator.outcome(driver_pod("abc"), node, set(), registry(), time.time(),
                                                       holders=[gpu_workload()])
    assert (state, reason) == ("waiting", "CrashLoopBackOff") and "module nvidia is in use by ml/train" in message
    assert simulator.outcome(driver_pod("abc"), node, set(), registry(), time.time(), holders=[gpu_workload()],
                             reuse=True)[0] == "ready"


class Core:
    """The CoreV1Api calls of a node's reconcile, applied to the node dict."""

    def __init__(self, node):
        self.node = node
        self.statuses = {}

    def patch_namespaced_pod_status(self, name, _namespace, body):
        self.statuses[name] = body["status"]

    def patch_node(self, _name, body):
        self.node["metadata"].setdefault("annotations", {}).update(body["metadata"].get("annotations") or {})

    def patch_node_status(self, _name, _body):
        pass


def test_a_node_records_the_build_then_the_reuse_of_a_restarted_pod_then_a_rebuild_after_boot():
    node = gpu_node(0)
    node["status"]["nodeInfo"]["bootID"] = "boot-1"
    sim = simulator.Simulator(None)
    sim.core, sim.registry = Core(node), registry()

    def start(uid, digest):
        pod = dict(driver_pod(digest), status={})
        pod["metadata"] = dict(pod["metadata"], uid=uid, name="driver-" + uid)
        sim.reconcile_node(node, [pod])
        return [(r["pod"], r["install"]) for r in json.loads(node["metadata"]["annotations"][
            simulator.INSTALLS_ANNOTATION])]

    assert start("1", "abc") == [("driver-1", "build")]
    assert start("2", "abc")[-1] == ("driver-2", "reuse")
    assert start("3", "def")[-1] == ("driver-3", "build")
    node["status"]["nodeInfo"]["bootID"] = "boot-2"
    assert start("4", "def")[-1] == ("driver-4", "build")
    assert start("5", None)[-1] == ("driver-5", "build")
