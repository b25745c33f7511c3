"""The simulated GPU feature discovery: its labels from the node's hardware and driver, its dependencies, its fault."""

import json

import pytest

from localcluster import fleet, simulator


def gpu_node(gpu, faults=None, machine=None):
    group = {"name": "g", "os": {"rhcos": "418.94.202509100653-0"}, "gpu": gpu, "faults": faults or {}}
    if machine:
        group["machine"] = machine
    node = fleet.expand_groups({"nodes": [group]})[0]
    return {"metadata": {"name": node["name"], "labels": node["labels"], "annotations": node["annotations"]},
            "status": node["status"]}


def gfd_pod(strategy="none"):
    return {"metadata": {"name": "gpu-feature-discovery-x", "namespace": "gpu", "uid": "u",
                         "labels": {"app.kubernetes.io/component": "gpu-feature-discovery"}},
            "spec": {"containers": [{"name": "gpu-feature-discovery", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.4",
                                     "env": [{"name": "MIG_STRATEGY", "value": strategy}]}]}}


@pytest.mark.parametrize("image, version", [
    ("nvcr.io/nvidia/driver:570.172.08-rhcos4.18", "570.172.08"),
    ("nvcr.io/nvidia/driver:580.95.05-ubuntu22.04", "580.95.05"),
    ("nvcr.io/nvidia/driver:570-5.15.0-100-generic-ubuntu22.04", "570.0.0"),
    ("registry.local:5000/nvidia/driver:550.90.07-rhel9.6", "550.90.07"),
])
def test_driver_version_of_an_image(image, version):
    assert simulator.driver_version(image) == version


def test_labels_of_an_a100_node():
    hw = simulator.hardware(gpu_node({"product": "NVIDIA-A100-SXM4-80GB", "count": 8}, machine="PowerEdge-XE8545"))
    labels = simulator.gfd_node_labels(hw, "570.172.08", "none", "1764000000")
    assert {key: labels[key] for key in (
        "nvidia.com/gpu.product", "nvidia.com/gpu.memory", "nvidia.com/gpu.count", "nvidia.com/gpu.family",
        "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor", "nvidia.com/cuda.driver.major",
        "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev", "nvidia.com/gpu.machine",
        "nvidia.com/mig.capable", "nvidia.com/cuda.runtime-version.full")} == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920",
        "nvidia.com/gpu.count": "8", "nvidia.com/gpu.family": "ampere", "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0", "nvidia.com/cuda.driver.major": "570",
        "nvidia.com/cuda.driver.minor": "172", "nvidia.com/cuda.driver.rev": "08",
        "nvidia.com/gpu.machine": "PowerEdge-XE8545", "nvidia.com/mig.capable": "true",
        "nvidia.com/cuda.runtime-version.full": "12.8"}
    assert "nvidia.com/mig.strategy" not in labels
    assert simulator.gfd_node_labels(hw, "570.172.08", "mixed", "1")["nvidia.com/mig.strategy"] == "mixed"
    assert set(labels) <= set(simulator.GFD_LABEL_KEYS)


def test_a_cpu_node_gets_no_gfd_labels():
    assert simulator.gfd_node_labels({"gpu": None}, "570.172.08", "none", "1") == {}


def test_gfd_waits_for_driver_and_toolkit_and_crash_loops_with_the_fault():
    registry = simulator.Registry()
    registry.patterns = ["nvcr.io/nvidia/*"]
    node = gpu_node({"product": "NVIDIA-L40S", "count": 4})
    state, reason, message, _retry = simulator.outcome(gfd_pod(), node, {simulator.DRIVER}, registry, 0)
    assert (state, reason) == ("pending", "PodInitializing") and "nvidia-container-toolkit" in message
    ready = {simulator.DRIVER, simulator.TOOLKIT}
    assert simulator.outcome(gfd_pod(), node, ready, registry, 0)[0] == "ready"
    broken = gpu_node({"product": "NVIDIA-L40S", "count": 4}, faults={"gfd_init_fails": True})
    state, reason, message, _retry = simulator.outcome(gfd_pod(), broken, ready, registry, 0)
    assert (state, reason) == ("waiting", "CrashLoopBackOff")
    assert "failed to initialize NVML" in message and broken["metadata"]["name"] in message


def test_hardware_annotation_is_what_the_simulator_reads():
    node = gpu_node({"product": "Tesla-T4", "count": 1})
    assert simulator.hardware(node) == json.loads(node["metadata"]["annotations"][fleet.HARDWARE_ANNOTATION])


class Core:
    """Records node label patches as the API server would apply them (a null value removes the label)."""

    def __init__(self, node):
        self.node = node
        self.patches = []

    def read_node(self, name):
        """The node as the API server has it now: its labels may be newer than the simulator's watch gave it."""
        server_labels = dict(self.node["metadata"].get("labels") or {}, **self.newer_labels)
        return type("Node", (), {"metadata": type("Meta", (), {"labels": server_labels})})()

    newer_labels = {}

    def patch_node(self, name, body):
        self.patches.append(body["metadata"]["labels"])
        labels = self.node["metadata"].setdefault("labels", {})
        for key, value in body["metadata"]["labels"].items():
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value


def pod(uid, component, image, env=()):
    return {"metadata": {"uid": uid, "labels": {"app.kubernetes.io/component": component}},
            "spec": {"containers": [{"name": "c", "image": image, "env": list(env)}]}}


def test_labels_come_while_gfd_is_ready_stay_put_and_go_with_it():
    node = gpu_node({"product": "NVIDIA-H100-80GB-HBM3", "count": 8}, machine="DGX-H100")
    sim = simulator.Simulator.__new__(simulator.Simulator)
    sim.core = Core(node)
    driver = pod("d", simulator.DRIVER, "nvcr.io/nvidia/driver:580.95.05-rhcos4.18")
    gfd = pod("g", simulator.GFD, "nvcr.io/nvidia/k8s-device-plugin:v0.17.4", [{"name": "MIG_STRATEGY", "value": "single"}])
    sim.written = {"d": ["ready", "", ""], "g": ["ready", "", ""]}
    ready = {simulator.DRIVER, simulator.TOOLKIT, simulator.GFD}
    sim.reconcile_gfd_labels(node, ready, [driver, gfd])
    labels = node["metadata"]["labels"]
    assert (labels["nvidia.com/gpu.product"], labels["nvidia.com/gpu.family"], labels["nvidia.com/cuda.driver.major"],
            labels["nvidia.com/cuda.runtime-version.full"], labels["nvidia.com/mig.strategy"],
            labels["nvidia.com/gpu.machine"]) == ("NVIDIA-H100-80GB-HBM3", "hopper", "580", "13.0", "single", "DGX-H100")
    sim.reconcile_gfd_labels(node, ready, [driver, gfd])
    assert len(sim.core.patches) == 1  # nothing changed, nothing written (the timestamp kept)
    sim.written["g"] = ["pending", "PodInitializing", "waiting"]
    # The MIG manager paused GFD and the DaemonSet controller deleted its pod, the watch giving the deletion before the
    # node's new label: what GFD published stays (the MIG manager's DaemonSet selects on nvidia.com/mig.capable).
    sim.core.newer_labels = {"nvidia.com/gpu.deploy.gpu-feature-discovery": "paused-for-mig-change"}
    sim.reconcile_gfd_labels(node, ready - {simulator.GFD}, [driver, gfd])
    assert node["metadata"]["labels"]["nvidia.com/mig.strategy"] == "single" and len(sim.core.patches) == 1
    sim.core.newer_labels = {}
    sim.reconcile_gfd_labels(node, ready - {simulator.GFD}, [driver, gfd])
    assert not [key for key in node["metadata"]["labels"] if key in simulator.GFD_LABEL_KEYS]
    assert node["metadata"]["labels"]["feature.node.kubernetes.io/pci-10de.present"] == "true"
