"""Open or proprietary kernel modules (driver_daemonsets' driver.kernel_module_type, the driver role's
driver_kernel_module_type) against the local control plane: the refusals before any write, with the cluster compared
before and after, the Blackwell failure the simulator plays on a node no check knew about, and status's column.

The smallest fleet that shows it: one B200 node and one A100 node (Ubuntu 24.04, one driver DaemonSet for both).
"""

import json

from conftest import wait_for
from gpu_fleet import create_driver_service_account, driver, fleet, selector, settled
from localcluster import simulator
from localcluster.fleet import HARDWARE_ANNOTATION
from playbook import run
from test_modules_driver_daemonsets import label_gpu_nodes, writes

MODULE = "accelerators.gpu.driver_daemonsets"
DS = "nvidia-driver-daemonset"
GDS = "example.test/sim/nvidia-fs:2.20.5"


def blackwell_fleet():
    return fleet([{"name": "b200", "gpu": {"product": "NVIDIA-B200", "count": 8}, "os": {"ubuntu": "24.04"}},
                  {"name": "a100", "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 8}, "os": {"ubuntu": "24.04"}}],
                 openshift=None)


def label_as_gfd(cluster, name, version):
    """The labels GPU feature discovery writes for the node's simulated GPUs (the simulator's GFD, as when its pod is
    Ready there): how the refusal knows a node's GPUs."""
    node = cluster.core.read_node(name).to_dict()
    hardware = json.loads(node["metadata"]["annotations"][HARDWARE_ANNOTATION])
    cluster.core.patch_node(name, {"metadata": {"labels": simulator.gfd_node_labels(hardware, version, "none", "1")}})


def snapshot(cluster, namespace, spec):
    """The fleet's node labels and annotations, the namespace's DaemonSets and ConfigMaps by resourceVersion, its pods
    by uid."""
    nodes = cluster.core.list_node(label_selector=selector(spec)).items
    return ({n.metadata.name: (n.metadata.labels, n.metadata.annotations) for n in nodes},
            {d.metadata.name: d.metadata.resource_version
             for d in cluster.apps.list_namespaced_daemon_set(namespace).items},
            sorted(p.metadata.uid for p in cluster.core.list_namespaced_pod(namespace).items),
            {c.metadata.name: c.metadata.resource_version
             for c in cluster.core.list_namespaced_config_map(namespace).items})


def driver_env(cluster, namespace):
    daemonset = cluster.apps.read_namespaced_daemon_set(DS, namespace)
    return {e.name: e.value for e in daemonset.spec.template.spec.containers[0].env if e.value is not None}


def test_proprietary_on_blackwell_fails_on_the_node_as_nvidia_says(cluster, namespace, make_fleet):
    # A B200 node GPU feature discovery has not labelled yet: nothing tells the plan what its GPUs are.
    spec = blackwell_fleet()
    b200, a100 = make_fleet(spec).node_names
    create_driver_service_account(cluster, namespace)
    label_gpu_nodes(cluster, spec)
    result = run(cluster, MODULE, {
        "namespace": namespace, "label_selector": selector(spec), "mode": "single", "wait": {"timeout": 120},
        "driver": driver(spec, version="595.91.07", kernel_module_type="proprietary")})
    assert result.get("failed") and result["created"] == [DS], result
    assert b200 in result["msg"] and a100 not in result["msg"], result["msg"]
    assert "requires use of the NVIDIA open kernel modules" in result["msg"], result["msg"]
    assert "(PCI ID: 10de:2901)" in result["msg"] and "RmInitAdapter failed" in result["msg"], result["msg"]
    assert driver_env(cluster, namespace)["KERNEL_MODULE_TYPE"] == "proprietary"


def test_refusals_name_the_nodes_and_what_to_set_and_change_nothing(cluster, namespace, make_fleet):
    spec = blackwell_fleet()
    b200, a100 = make_fleet(spec).node_names
    create_driver_service_account(cluster, namespace)
    label_gpu_nodes(cluster, spec)
    args = {"namespace": namespace, "label_selector": selector(spec), "mode": "single"}
    opened = run(cluster, MODULE, dict(args, driver=driver(spec, version="595.91.07", kernel_module_type="open"),
                                       wait={"timeout": 120}))
    assert not opened.get("failed") and opened["created"] == [DS], opened.get("msg")
    wait_for(lambda: settled(cluster, namespace), timeout=60, message="DaemonSet status settled")
    env = driver_env(cluster, namespace)
    assert (env["KERNEL_MODULE_TYPE"], env["OPEN_KERNEL_MODULES_ENABLED"]) == ("open", "true")
    for name in (b200, a100):
        label_as_gfd(cluster, name, "595.91.07")
    before = snapshot(cluster, namespace, spec)

    refused = run(cluster, MODULE, dict(args, driver=driver(spec, version="595.91.07",
                                                              kernel_module_type="proprietary")))
    assert refused.get("failed"), refused
    assert ("kernel_module_type proprietary: node(s) %s carry Blackwell GPUs (NVIDIA-B200), which run only on the "
            "open kernel modules" % b200) in refused["msg"], refused["msg"]
    assert "set kernel_module_type open (the driver role's driver_kernel_module_type)" in refused["msg"]
    assert a100 not in refused["msg"] and writes(refused) == {}, refused

    # auto on a branch below 560 is the proprietary modules too.
    below = run(cluster, MODULE, dict(args, driver=driver(spec, version="550.90.07", kernel_module_type="auto")))
    assert below.get("failed") and ("kernel_module_type auto, which driver example.test/nvidia/driver:"
                                    "550.90.07-ubuntu24.04 resolves to proprietary") in below["msg"], below
    assert writes(below) == {}

    # GPUDirect Storage from nvidia-fs 2.17.5 with the proprietary modules: every node of the driver is named.
    gds = run(cluster, MODULE, dict(args, driver=driver(spec, version="595.91.07", kernel_module_type="proprietary",
                                                        gds_image=GDS)))
    assert gds.get("failed") and ("GPUDirect Storage %s (from nvidia-fs 2.17.5) is supported only with the open "
                                  "kernel modules, on node(s) %s" % (GDS, ", ".join(sorted([a100, b200])))) in gds["msg"]
    assert "switch GPUDirect Storage off (driver_gds)" in gds["msg"] and writes(gds) == {}
    assert snapshot(cluster, namespace, spec) == before

    # The status shows each node's modules, from its driver DaemonSet.
    status = run(cluster, "accelerators.gpu.stack_status", {
        "namespace": namespace, "label_selector": selector(spec), "columns": ["kernel_modules"]})
    assert {row["node"]: (row["kernel_module_type"], row["kernel_modules"]) for row in status["nodes"]} == {
        b200: ("open", "open"), a100: ("open", "open")}
    header, *lines = status["lines"][:3]
    assert header.split() == ["NODE", "KERNEL", "MODULES"]
    assert sorted(line.split() for line in lines) == sorted([[a100, "open"], [b200, "open"]])
