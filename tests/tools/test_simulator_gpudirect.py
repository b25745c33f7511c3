"""The simulated network driver and nvidia-peermem: a driver pod rendered by the collection, on nodes with and
without the NVIDIA Network Operator's driver or MOFED on the host."""

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.facts import node_facts
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver.role_template import desired_driver_daemonsets
from localcluster import fleet, gpudirect, simulator

RHCOS = "418.94.202509100653-0"
SPEC = {"namespace": "gpu", "repository": "nvcr.io/nvidia", "version": "570.172.08"}


def node(network=None, style="vendor"):
    group = {"name": "g", "os": {"rhcos": RHCOS}, "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 8},
             "nfd_style": style}
    if network is not None:
        group["network"] = network
    made = fleet.expand_groups({"nodes": [group]})[0]
    return {"metadata": {"name": made["name"], "labels": made["labels"], "annotations": made["annotations"]},
            "status": made["status"]}


def driver_pod(the_node, **spec):
    """A pod of the DTK DaemonSet the collection renders for the node."""
    dtk = {RHCOS: {"status": "resolved", "image": "quay.io/dtk@sha256:" + "a" * 64}}
    daemonset, = desired_driver_daemonsets(dict(SPEC, **spec), [node_facts(the_node)], dtk, "rhcos")["desired"]
    return {"metadata": {"name": "driver-x", "namespace": "gpu", "uid": "u1",
                         "labels": daemonset["spec"]["template"]["metadata"]["labels"]},
            "spec": daemonset["spec"]["template"]["spec"]}


def failures(the_node, **spec):
    return gpudirect.failures(driver_pod(the_node, **spec), the_node, simulator.hardware(the_node).get("network") or {})


def test_the_fleet_shows_the_nic_and_the_network_operators_label():
    assert node({"driver": "doca"})["metadata"]["labels"][gpudirect.NIC_LABEL] == "true"
    assert node({"driver": "doca"})["metadata"]["labels"][gpudirect.MOFED_WAIT_LABEL] == "false"
    assert node({"driver": "none"})["metadata"]["labels"][gpudirect.MOFED_WAIT_LABEL] == "true"
    assert gpudirect.MOFED_WAIT_LABEL not in node({"driver": "host"})["metadata"]["labels"]
    assert "feature.node.kubernetes.io/pci-0207_15b3.present" in node({"driver": "doca"}, style="class-vendor")["metadata"]["labels"]
    assert gpudirect.NIC_LABEL not in node()["metadata"]["labels"]
    with pytest.raises(fleet.FleetError):
        node({"driver": "ofed"})


def test_peermem_loads_only_where_its_network_driver_is():
    assert failures(node({"driver": "doca"}), rdma=True) == {}
    assert failures(node({"driver": "host"}), rdma=True, use_host_mofed=True) == {}
    assert failures(node({"driver": "none"}), rdma=False) == {}
    message = failures(node({"driver": "none"}), rdma=True)["nvidia-peermem-ctr"]
    assert "waiting for mellanox ofed and nvidia drivers to be installed" in message
    assert "/run/mellanox/drivers/.driver-ready is missing" in message
    assert "network.nvidia.com/operator.mofed.wait=true" in message
    assert "no NVIDIA NIC" in failures(node(), rdma=True)["nvidia-peermem-ctr"]
    assert "set use_host_mofed" in failures(node({"driver": "host"}), rdma=True)["nvidia-peermem-ctr"]
    assert "no MOFED is installed on the host" in failures(
        node({"driver": "doca"}), rdma=True, use_host_mofed=True)["nvidia-peermem-ctr"]
    # The label is read live: the Network Operator's driver pod going away takes the driver with it.
    gone = node({"driver": "doca"})
    gone["metadata"]["labels"][gpudirect.MOFED_WAIT_LABEL] = "true"
    assert "nvidia-peermem-ctr" in failures(gone, rdma=True)


def test_a_peermem_container_without_the_mellanox_mount_cannot_see_the_readiness_file():
    the_node = node({"driver": "doca"})
    pod = driver_pod(the_node, rdma=True)
    peermem = [c for c in pod["spec"]["containers"] if c["name"] == "nvidia-peermem-ctr"][0]
    peermem["volumeMounts"] = [m for m in peermem["volumeMounts"] if m["mountPath"] != "/run/mellanox/drivers"]
    assert "is not mounted" in gpudirect.failures(pod, the_node, {"driver": "doca"})["nvidia-peermem-ctr"]


def test_the_pod_is_not_ready_with_the_failing_container_named_and_the_validator_finds_no_peermem():
    the_node = node({"driver": "none"})
    pod = driver_pod(the_node, rdma=True)
    failing = gpudirect.failures(pod, the_node, {"driver": "none"})
    pod["status"] = simulator.status_for(pod, the_node, "ready", "", "", failing)
    assert not simulator.pod_ready(pod)
    states = {c["name"]: c for c in pod["status"]["containerStatuses"]}
    assert states["nvidia-driver-ctr"]["ready"] is True
    assert states["nvidia-peermem-ctr"]["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert "operator.mofed.wait=true" in states["nvidia-peermem-ctr"]["state"]["waiting"]["message"]
    problem, _content = simulator.validator_checks(the_node, {simulator.DRIVER}, "nvidia_peermem missing")["driver"]
    assert problem == "nvidia_peermem missing"
    assert simulator.validator_checks(the_node, {simulator.DRIVER})["driver"][0] is None
