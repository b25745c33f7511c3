"""Open or proprietary kernel modules (driver_daemonsets' driver.kernel_module_type, the driver role's
driver_kernel_module_type) against the local control plane: the Blackwell failure the simulator plays on a node no
check knew about yet, and, once GPU feature discovery has labelled it, the deploy's refusals before any write (the
cluster compared before and after), and status's column.

The smallest fleet that shows it: one B200 node and one A100 node, served by one driver DaemonSet.
"""

from conftest import wait_for
from gpu_fleet import COMMON_DEFAULTS, RHCOS_416, create_driver_service_account, driver, fleet, selector, settled
from playbook import run
from test_deploy import fleet_variables, gpu_fleet, playbook, status_of
from test_modules_driver_daemonsets import label_gpu_nodes

MODULE = "accelerators.gpu.driver_daemonsets"
DS = "nvidia-driver-daemonset"


def blackwell_fleet():
    return fleet([{"name": "b200", "gpu": {"product": "NVIDIA-B200", "count": 8}, "os": {"ubuntu": "24.04"}},
                  {"name": "a100", "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 8}, "os": {"ubuntu": "24.04"}}],
                 openshift=None)


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


def driver_env(cluster, namespace, name=DS):
    daemonset = cluster.apps.read_namespaced_daemon_set(name, namespace)
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
    # The B200 node is the cause, whichever way the wait saw its pod fail (a crash loop, a failed container); the
    # A100 node's pod may still be coming up when the wait stops, and no line blames it.
    lines = result["msg"].splitlines()
    assert [line for line in lines if b200 in line and "requires use of the NVIDIA open kernel modules" in line], \
        result["msg"]
    assert not [line for line in lines if a100 in line and any(
        word in line for word in ("crash-looping", "does not load", "RmInitAdapter", "exited with code"))], result["msg"]
    assert "requires use of the NVIDIA open kernel modules" in result["msg"], result["msg"]
    assert "(PCI ID: 10de:2901)" in result["msg"] and "RmInitAdapter failed" in result["msg"], result["msg"]
    assert driver_env(cluster, namespace)["KERNEL_MODULE_TYPE"] == "proprietary"


def test_the_deploy_refuses_proprietary_modules_where_they_fail_and_changes_nothing(cluster, namespace, make_fleet):
    """The driver role on OpenShift: the stack up with the open modules, GPU feature discovery's labels on the nodes;
    then proprietary modules for the B200 node, or with the default GPUDirect Storage (nvidia-fs from 2.17.5), refused
    before any write."""
    spec = gpu_fleet({"name": "b200", "gpu": {"product": "NVIDIA-B200", "count": 8}, "os": {"rhcos": RHCOS_416}},
                     {"name": "a100", "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 8},
                      "os": {"rhcos": RHCOS_416}})
    b200, a100 = make_fleet(spec).node_names
    variables = dict(fleet_variables(namespace, spec, driver_kernel_module_type="open", container_toolkit_validate=False,
                                     device_plugin_validate_workload=False),
                     common_wait_timeout=120)
    playbook(cluster, "deploy", variables).succeeded()
    env = driver_env(cluster, namespace, "nvidia-driver-daemonset-" + RHCOS_416)
    assert (env["KERNEL_MODULE_TYPE"], env["OPEN_KERNEL_MODULES_ENABLED"]) == ("open", "true")
    assert cluster.core.read_node(b200).metadata.labels["nvidia.com/gpu.family"] == "blackwell"
    rows = {row["node"]: row for row in status_of(cluster, dict(variables, status_columns="wide"))["nodes"]}
    assert {name: (row["kernel_module_type"], row["kernel_modules"]) for name, row in rows.items()} == {
        b200: ("open", "open"), a100: ("open", "open")}
    wait_for(lambda: settled(cluster, namespace), timeout=60, message="DaemonSet status settled")
    before = snapshot(cluster, namespace, spec)

    task, refused = playbook(cluster, "deploy", dict(variables, driver_kernel_module_type="proprietary")).failure()
    assert task.endswith("Driver DaemonSets, then wait for the driver on every GPU node"), task
    assert ("kernel_module_type proprietary: node(s) %s carry Blackwell GPUs (NVIDIA-B200), which run only on the "
            "open kernel modules" % b200) in refused["msg"], refused["msg"]
    assert "set kernel_module_type open (the driver role's driver_kernel_module_type)" in refused["msg"]
    assert a100 not in refused["msg"], refused["msg"]

    # GPUDirect Storage from nvidia-fs 2.17.5 (the default common_gds_image): every node of the driver.
    _task, gds = playbook(cluster, "deploy", dict(variables, driver_kernel_module_type="proprietary",
                                                  driver_gds=True)).failure()
    assert ("GPUDirect Storage %s (from nvidia-fs 2.17.5) is supported only with the open kernel modules, on node(s) "
            "%s" % (COMMON_DEFAULTS["common_gds_image"], ", ".join(sorted([a100, b200])))) in gds["msg"]
    assert snapshot(cluster, namespace, spec) == before
