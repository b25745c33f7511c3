"""A driver pod that finds its driver loaded with its DRIVER_CONFIG_DIGEST: no unload, no build."""

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
