"""The simulated open and proprietary kernel modules: a driver pod rendered by the collection loads on Blackwell and
Grace Hopper nodes only with the open modules, and fails there as NVIDIA's proprietary nvidia.ko does."""

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.facts import node_facts
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver.role_template import desired_driver_daemonsets
from localcluster import fleet, simulator

SPEC = {"namespace": "gpu", "repository": "nvcr.io/nvidia"}


def node(product, **group):
    made = fleet.expand_groups({"nodes": [dict({"name": "g", "os": {"ubuntu": "24.04"},
                                                "gpu": {"product": product, "count": 8}}, **group)]})[0]
    return {"metadata": {"name": made["name"], "labels": made["labels"], "annotations": made["annotations"]},
            "status": made["status"]}


def driver_pod(the_node, version, kernel_module_type=None):
    """A pod of the single DaemonSet the collection renders for the node (no GFD labels yet: nothing refuses it)."""
    spec = dict(SPEC, version=version, kernel_module_type=kernel_module_type)
    daemonset, = desired_driver_daemonsets(spec, [node_facts(the_node)], {}, "single")["desired"]
    return {"metadata": {"name": "driver-x", "namespace": "gpu", "uid": "u1",
                         "labels": daemonset["spec"]["template"]["metadata"]["labels"]},
            "spec": daemonset["spec"]["template"]["spec"]}


def test_blackwell_and_grace_models_with_their_labels_and_architecture():
    b200, gb200 = node("NVIDIA-B200"), node("NVIDIA-GB200", os={"rhel": "9.6"})
    for made in (b200, gb200):
        labels = simulator.gfd_node_labels(simulator.hardware(made), "595.91.07", "none", "1")
        assert (labels["nvidia.com/gpu.family"], labels["nvidia.com/gpu.compute.major"]) == ("blackwell", "10")
    assert b200["metadata"]["labels"]["kubernetes.io/arch"] == "amd64"
    assert gb200["metadata"]["labels"]["kubernetes.io/arch"] == "arm64"
    assert gb200["status"]["nodeInfo"]["architecture"] == "arm64"
    assert gb200["status"]["nodeInfo"]["kernelVersion"].endswith(".aarch64")
    assert node("NVIDIA-GH200-480GB")["metadata"]["labels"]["kubernetes.io/arch"] == "arm64"


@pytest.mark.parametrize("product, version, setting, loads", [
    ("NVIDIA-B200", "595.91.07", "open", True),
    ("NVIDIA-B200", "595.91.07", "proprietary", False),
    # auto (and no setting, which the driver container takes as auto) resolves by branch.
    ("NVIDIA-B200", "595.91.07", "auto", True),
    ("NVIDIA-B200", "550.90.07", "auto", False),
    ("NVIDIA-GB200", "550.90.07", None, False),
    ("NVIDIA-GH200-480GB", "570.172.08", "proprietary", False),
    ("NVIDIA-H100-80GB-HBM3", "550.90.07", "proprietary", True),
    ("NVIDIA-A100-SXM4-80GB", "595.91.07", "open", True),
])
def test_the_proprietary_modules_fail_where_the_gpus_need_the_open_ones(product, version, setting, loads):
    the_node = node(product)
    hw = simulator.hardware(the_node)
    problem = simulator.driver_problem(driver_pod(the_node, version, setting), the_node, hw,
                                       lambda namespace, name: None)
    if loads:
        assert problem is None
    else:
        assert ("(proprietary kernel modules): NVRM: The NVIDIA GPU 0000:18:00.0 (PCI ID: 10de:%s) installed in this "
                "system requires use of the NVIDIA open kernel modules. NVRM: GPU 0000:18:00.0: RmInitAdapter "
                "failed!" % hw["gpu"]["pci_device"]) in problem
        assert "nvcr.io/nvidia/driver:%s-ubuntu24.04 does not load on node g" % version in problem


def test_the_failing_driver_pod_crash_loops():
    registry = simulator.Registry()
    registry.patterns = ["nvcr.io/nvidia/*"]
    the_node = node("NVIDIA-B200")
    state, reason, message, _retry = simulator.outcome(driver_pod(the_node, "595.91.07", "proprietary"), the_node,
                                                       set(), registry, 0)
    assert (state, reason) == ("waiting", "CrashLoopBackOff")
    assert "requires use of the NVIDIA open kernel modules" in message
