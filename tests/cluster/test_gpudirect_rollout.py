"""GPUDirect RDMA, Storage and GDRCopy in the driver DaemonSets, on the local control plane.

Four GPU nodes with an NVIDIA NIC, deployed in driver mode kernel: three on RHCOS 4.16 built with the Driver Toolkit
(no precompiled image for them), one on RHCOS 4.18 with its precompiled image. The simulator's nvidia-peermem-ctr
loads only where the NVIDIA Network Operator's driver is ready (node label network.nvidia.com/operator.mofed.wait=
false, tools/localcluster/gpudirect.py), so a rollout that ignored the network driver would pass where it must stop.
One module-scoped fleet serves the tests, in order: they are one story.
"""

import os

import pytest

from conftest import wait_for
from gpu_fleet import COMMON_DEFAULTS, RHCOS_416, RHCOS_418, create_driver_service_account, driver, fleet, selector
from localcluster.gpudirect import MOFED_WAIT_LABEL
from playbook import run
from sampler import Sampler
from test_deploy import fleet_variables, gpu_fleet, playbook
from test_driver_rollout import DRIVER_SELECTOR, states
from test_modules_driver_daemonsets import label_gpu_nodes

# The default driver's branch, so that the precompiled node and the DTK-built ones run one driver branch.
BRANCH, KERNEL = COMMON_DEFAULTS["common_driver_branch"], "5.14.0-427.33.1.el9_4.x86_64"
PRECOMPILED = "nvcr.io/nvidia/driver:%s-%s-rhcos4.18" % (BRANCH, KERNEL)
PEERMEM, GDS, GDRCOPY = "nvidia-peermem-ctr", "nvidia-fs-ctr", "nvidia-gdrcopy-ctr"
DS_DTK = "nvidia-driver-daemonset-" + RHCOS_416


@pytest.fixture(scope="module")
def stack(cluster, tmp_path_factory):
    """(spec, GPU node names, the node that loses its network driver, namespace, deploy variables)."""
    from localcluster import fleet as fleets
    base = {"gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 2}, "network": {"driver": "doca"},
            "driver_build_seconds": 1}
    spec = gpu_fleet(dict(base, name="gpu-a", count=2, os={"rhcos": RHCOS_416}),
                     dict(base, name="gpu-n", os={"rhcos": RHCOS_416}),
                     dict(base, name="gpu-p", os={"rhcos": RHCOS_418}))
    made = fleets.Fleet(cluster.client, spec, prefix="rdma-%s-" % os.urandom(2).hex()).apply().wait_ready()
    names = sorted(made.node_names)
    failing = [name for name in names if "gpu-n" in name][0]
    namespace = "t-rdma-" + os.urandom(2).hex()
    variables = dict(fleet_variables(namespace, spec, driver_mode="kernel", common_driver_branch=BRANCH,
                                     driver_precompiled_available=[PRECOMPILED], driver_wait_timeout=300,
                                     driver_upgrade_poll=1, container_toolkit_validate=False,
                                     device_plugin_validate_workload=False), common_wait_timeout=120)
    playbook(cluster, "deploy", variables).succeeded()
    yield spec, names, failing, namespace, variables
    cluster.core.delete_namespace(namespace)
    made.delete()


def driver_pods(cluster, namespace):
    """{node: pod} of the driver pods not being deleted."""
    return {p.spec.node_name: p for p in cluster.core.list_namespaced_pod(namespace, label_selector=DRIVER_SELECTOR).items
            if not p.metadata.deletion_timestamp}


def containers(daemonset_or_pod):
    spec = daemonset_or_pod.spec.template.spec if hasattr(daemonset_or_pod.spec, "template") else daemonset_or_pod.spec
    return [c.name for c in spec.containers]


def ready_containers(pod):
    return {c.name: c.ready for c in pod.status.container_statuses or []}


def driver_daemonsets(cluster, namespace):
    return {d.metadata.name: d for d in cluster.apps.list_namespaced_daemon_set(namespace, label_selector=DRIVER_SELECTOR).items}


def snapshot(cluster, namespace, spec):
    nodes = cluster.core.list_node(label_selector=selector(spec)).items
    return ({n.metadata.name: (n.metadata.labels, n.spec.unschedulable) for n in nodes},
            {d.metadata.name: d.metadata.resource_version for d in cluster.apps.list_namespaced_daemon_set(namespace).items},
            sorted(p.metadata.uid for p in cluster.core.list_namespaced_pod(namespace).items))


def set_network_driver(cluster, node, ready):
    """What the NVIDIA Network Operator writes when its driver pod on the node becomes ready, or stops being so."""
    cluster.core.patch_node(node, {"metadata": {"labels": {MOFED_WAIT_LABEL: "false" if ready else "true"}}})


def test_gds_and_gdrcopy_with_a_precompiled_driver_are_refused_before_any_write(cluster, stack):
    spec, names, _failing, namespace, variables = stack
    daemonsets = driver_daemonsets(cluster, namespace)
    precompiled = [name for name in daemonsets if name != DS_DTK]
    assert sorted(daemonsets) == sorted([DS_DTK] + precompiled) and len(precompiled) == 1, sorted(daemonsets)
    before = snapshot(cluster, namespace, spec)
    run_ = playbook(cluster, "deploy", dict(variables, driver_rdma=True, driver_gds=True, driver_gdrcopy=True))
    _name, result = run_.failure()
    assert "DaemonSet %s runs a precompiled driver image" % precompiled[0] in result["msg"], result["msg"]
    assert "nvidia-fs-ctr and nvidia-gdrcopy-ctr" in result["msg"], result["msg"]
    assert snapshot(cluster, namespace, spec) == before


def test_rdma_rolls_out_node_by_node_and_stops_at_the_node_without_its_network_driver(cluster, stack):
    spec, names, failing, namespace, variables = stack
    before = driver_pods(cluster, namespace)
    set_network_driver(cluster, failing, ready=False)

    def down():
        pods = driver_pods(cluster, namespace)
        return sorted(name for name in names if name not in pods or not all(ready_containers(pods[name]).values())
                      or not pods[name].status.container_statuses)
    with Sampler(down) as sampler:
        run_ = playbook(cluster, "deploy", dict(variables, driver_rdma=True))
    _name, result = run_.failure()
    print(result["msg"])
    assert "node %s is upgrade-failed" % failing in result["msg"], result["msg"]
    assert "container %s is crash-looping" % PEERMEM in result["msg"], result["msg"]
    assert "%s=true" % MOFED_WAIT_LABEL in result["msg"], result["msg"]
    # Every driver DaemonSet, DTK-built and precompiled, carries nvidia-peermem-ctr.
    daemonsets = driver_daemonsets(cluster, namespace)
    assert {name: containers(ds) for name, ds in daemonsets.items()} == {
        name: (["nvidia-driver-ctr", PEERMEM, "openshift-driver-toolkit-ctr"] if name == DS_DTK
               else ["nvidia-driver-ctr", PEERMEM]) for name in daemonsets}
    # Node by node: the nodes before the failing one moved, the one after it kept its old driver, serving.
    after, pods = states(cluster, names), driver_pods(cluster, namespace)
    moved, kept = names[:names.index(failing)], names[names.index(failing) + 1:]
    assert kept and moved, names
    for name in moved:
        assert after[name] == "upgrade-done" and containers(pods[name])[:2] == ["nvidia-driver-ctr", PEERMEM]
        assert all(ready_containers(pods[name]).values()), (name, ready_containers(pods[name]))
    for name in kept:
        assert after[name] == "upgrade-required" and pods[name].metadata.uid == before[name].metadata.uid
        assert all(ready_containers(pods[name]).values()) and PEERMEM not in containers(pods[name])
    assert after[failing] == "upgrade-failed"
    # On the failing node the driver loaded beside the failing container: the pod is not ready, its GPUs stay.
    assert ready_containers(pods[failing]) == {"nvidia-driver-ctr": True, PEERMEM: False,
                                               "openshift-driver-toolkit-ctr": True}
    assert int(cluster.core.read_node(failing).status.allocatable.get("nvidia.com/gpu", "0")) == 2
    # At most one node without a working driver at a time (budget 25 % of 4), the failing one included.
    assert max(len(sample) for sample in sampler.values) <= 1, [s for s in sampler.values if len(s) > 1]
    assert not sampler.errors, sampler.errors[:3]


def test_once_the_network_driver_is_ready_the_rollout_completes_on_every_daemonset(cluster, stack):
    spec, names, failing, namespace, variables = stack
    set_network_driver(cluster, failing, ready=True)
    playbook(cluster, "deploy", dict(variables, driver_rdma=True)).succeeded()
    assert set(states(cluster, names).values()) == {"upgrade-done"}
    pods = driver_pods(cluster, namespace)
    for name in names:
        assert PEERMEM in containers(pods[name]) and all(ready_containers(pods[name]).values()), name
        peermem = [c for c in pods[name].spec.containers if c.name == PEERMEM][0]
        assert peermem.image == pods[name].spec.containers[0].image and peermem.args == ["reload_nvidia_peermem"]
    precompiled = [name for name in names if "gpu-p" in name][0]
    assert pods[precompiled].spec.containers[0].image == PRECOMPILED
    env = {e.name: e.value for e in pods[precompiled].spec.containers[0].env}
    assert env["GPU_DIRECT_RDMA_ENABLED"] == "true"
    # A second run changes nothing.
    again = playbook(cluster, "deploy", dict(variables, driver_rdma=True)).succeeded()
    assert again.stats["changed"] == 0, [name for name, result in again.results if result.get("changed")]


def test_switching_rdma_off_rolls_every_node_back(cluster, stack):
    spec, names, _failing, namespace, variables = stack
    before = driver_pods(cluster, namespace)
    playbook(cluster, "deploy", variables).succeeded()
    pods = driver_pods(cluster, namespace)
    assert set(states(cluster, names).values()) == {"upgrade-done"}
    for name in names:
        assert pods[name].metadata.uid != before[name].metadata.uid, name
        assert PEERMEM not in containers(pods[name]) and all(ready_containers(pods[name]).values()), name
        assert "GPU_DIRECT_RDMA_ENABLED" not in {e.name for e in pods[name].spec.containers[0].env}
    assert all(PEERMEM not in containers(ds) for ds in driver_daemonsets(cluster, namespace).values())


def test_a_dtk_build_runs_gds_and_gdrcopy_beside_peermem(cluster, namespace, make_fleet):
    spec = fleet([{"name": "gds", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}, "network": {"driver": "doca"}}])
    node, = make_fleet(spec).node_names
    create_driver_service_account(cluster, namespace)
    label_gpu_nodes(cluster, spec)
    result = run(cluster, "accelerators.gpu.driver_daemonsets", {
        "namespace": namespace, "label_selector": selector(spec), "wait": {"timeout": 120},
        # nvidia-fs 2.20.5 runs only on the open kernel modules, which auto does not give on branch 550.
        "driver": driver(spec, rdma=True, gds_image="example.test/sim/nvidia-fs:2.20.5",
                         gdrcopy_image="example.test/sim/gdrdrv:v2.5", kernel_module_type="open")})
    assert not result.get("failed"), result.get("msg")
    assert "example.test/sim/nvidia-fs:2.20.5-rhcos4.16" in result["images"], result["images"]
    pod = driver_pods(cluster, namespace)[node]
    assert containers(pod) == ["nvidia-driver-ctr", PEERMEM, GDS, GDRCOPY, "openshift-driver-toolkit-ctr"]
    wait_for(lambda: all(ready_containers(driver_pods(cluster, namespace)[node]).values()), timeout=60,
             message="every container of the driver pod ready")
    dtk = {e.name: e.value for e in pod.spec.containers[-1].env}
    assert (dtk["GDS_ENABLED"], dtk["GDRCOPY_ENABLED"]) == ("true", "true")
    assert [c.args for c in pod.spec.containers if c.name in (GDS, GDRCOPY)] == [
        ["nv-fs-ctr-run-with-dtk"], ["gdrcopy-ctr-run-with-dtk"]]
