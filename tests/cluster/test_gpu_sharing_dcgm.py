"""GPU sharing through MPS (device_plugin's MPS control daemon) and the standalone DCGM hostengine (role dcgm) with the
exporter reading it, run by ansible-playbook against the local control plane on a fleet whose driver is a stand-in
DaemonSet (test_roles_operands.prepare). The simulator advertises an MPS node's replicas only while its control daemon
is ready, and serves an exporter's metrics only while the hostengine it is given answers (sharing.py, hostengine.py)."""

from conftest import wait_for
from gpu_fleet import FLEET_LABEL, RHCOS_416, fleet, ready
from playbook import run
from test_deploy import playbook
from test_roles_operands import REGISTRY, env_of, failed_fast, prepare, run_roles, stats, succeeded

TOOLKIT, DEVICE_PLUGIN, GFD = ("accelerators.gpu.container_toolkit", "accelerators.gpu.device_plugin",
                               "accelerators.gpu.gpu_feature_discovery")
DCGM, DCGM_EXPORTER = "accelerators.gpu.dcgm", "accelerators.gpu.dcgm_exporter"
MPS_DAEMON = "nvidia-device-plugin-mps-control-daemon"
CONFIG_LABEL = "nvidia.com/device-plugin.config"


def gpus(cluster, node):
    return int(cluster.core.read_node(node).status.allocatable.get("nvidia.com/gpu", "0"))


def pods_by_node(cluster, namespace, app):
    return {pod.spec.node_name: pod for pod in cluster.core.list_namespaced_pod(
        namespace, label_selector="app=" + app).items if pod.spec.node_name and not pod.metadata.deletion_timestamp}


def test_mps_replicas_follow_the_control_daemon_status_shows_each_nodes_sharing(cluster, namespace, make_fleet):
    group = {"gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 2}, "os": {"rhcos": RHCOS_416}}
    mps, sliced, plain = make_fleet(fleet([dict(group, name="mps"), dict(group, name="sliced"),
                                           dict(group, name="plain")], registry=REGISTRY)).node_names
    prepare(cluster, namespace, [mps, sliced, plain])
    for node, config in ((mps, "mps-x4"), (sliced, "ts-x3"), (plain, None)):
        cluster.core.patch_node(node, {"metadata": {"labels": {
            CONFIG_LABEL: config, "nvidia.com/gpu.deploy.gpu-feature-discovery": "true"}}})
    variables = {"common_namespace": namespace, "common_wait_timeout": 120,
                 "device_plugin_mps": [{"name": "mps-x4", "replicas": 4}],
                 "device_plugin_time_slicing": [{"name": "ts-x3", "replicas": 3}]}

    first = succeeded(run_roles(cluster, variables, roles=(TOOLKIT, DEVICE_PLUGIN, GFD)))
    print("first run: %.1fs" % first.seconds)
    # The deploy waited for the control daemon: the MPS node advertises 4 x 2 GPUs, the others as configured.
    assert {node: gpus(cluster, node) for node in (mps, sliced, plain)} == {mps: 8, sliced: 6, plain: 2}
    daemons = pods_by_node(cluster, namespace, MPS_DAEMON)
    assert sorted(daemons) == [mps] and ready(daemons[mps])
    daemon = cluster.apps.read_namespaced_daemon_set(MPS_DAEMON, namespace).spec.template.spec
    assert daemon.service_account_name == MPS_DAEMON and daemon.host_pid is True
    assert [c.name for c in daemon.init_containers] == [
        "toolkit-validation", "mps-control-daemon-mounts", "config-manager-init"]
    assert [c.name for c in daemon.containers] == ["mps-control-daemon-ctr", "config-manager"]
    assert {v.name: v.host_path.path for v in daemon.volumes if v.host_path and v.name.startswith("mps")} == {
        "mps-root": "/run/nvidia/mps", "mps-shm": "/run/nvidia/mps/shm"}
    plugin = cluster.apps.read_namespaced_daemon_set("nvidia-device-plugin-daemonset", namespace).spec.template.spec
    assert env_of(plugin.containers[0])["MPS_ROOT"] == "/run/nvidia/mps"
    config = cluster.core.read_namespaced_config_map("nvidia-device-plugin-config", namespace).data
    assert "mps:" in config["mps-x4"] and "replicas: 4" in config["mps-x4"]
    # GFD labels each node's sharing as it reads the same configuration.
    labels = {node: cluster.core.read_node(node).metadata.labels for node in (mps, sliced, plain)}
    assert {node: tuple(labels[node].get("nvidia.com/" + key) for key in (
        "gpu.sharing-strategy", "gpu.replicas", "mps.capable", "gpu.product")) for node in labels} == {
        mps: ("mps", "4", "true", "NVIDIA-A100-SXM4-80GB-SHARED"),
        sliced: ("time-slicing", "3", "false", "NVIDIA-A100-SXM4-80GB-SHARED"),
        plain: ("none", "1", "false", "NVIDIA-A100-SXM4-80GB")}
    status = run(cluster, "accelerators.gpu.stack_status", {"namespace": namespace, "columns": ["sharing", "stack"],
                                                            "label_selector": "sim.accelerators.gpu/fleet"})
    rows = {row["node"]: row for row in status["nodes"] if row["node"] in (mps, sliced, plain)}
    assert {node: (row["sharing"], row["sharing_replicas"], row["mps_control_daemon"]) for node, row in rows.items()} \
        == {mps: ("mps", 4, "ready"), sliced: ("time-slicing", 3, "-"), plain: ("none", 1, "-")}
    assert any(" mps x4 " in line and mps in line for line in status["lines"])

    # The control daemon removed: the MPS node withdraws its replicas, the others keep theirs.
    cluster.apps.delete_namespaced_daemon_set(MPS_DAEMON, namespace, propagation_policy="Background")
    wait_for(lambda: gpus(cluster, mps) == 0, message="the MPS node's replicas withdrawn")
    assert not pods_by_node(cluster, namespace, MPS_DAEMON)
    assert ready(pods_by_node(cluster, namespace, "nvidia-device-plugin-daemonset")[mps])
    assert (gpus(cluster, sliced), gpus(cluster, plain)) == (6, 2)

    # The deploy puts the daemon back and waits for it: the replicas come back; then nothing is left to change.
    second = succeeded(run_roles(cluster, variables, roles=(TOOLKIT, DEVICE_PLUGIN)))
    assert stats(second)["changed"] > 0 and gpus(cluster, mps) == 8
    third = succeeded(run_roles(cluster, variables, roles=(TOOLKIT, DEVICE_PLUGIN, GFD)))
    assert stats(third)["changed"] == 0
    checked = succeeded(run_roles(cluster, variables, roles=(TOOLKIT, DEVICE_PLUGIN, GFD), check=True, diff=True))
    assert stats(checked)["changed"] == 0

    # MPS switched off: the daemon, its service account and RBAC go; the node no longer shares.
    cluster.core.patch_node(mps, {"metadata": {"labels": {CONFIG_LABEL: None}}})
    succeeded(run_roles(cluster, dict(variables, device_plugin_mps=[]), roles=(TOOLKIT, DEVICE_PLUGIN)))
    assert not cluster.apps.list_namespaced_daemon_set(namespace, field_selector="metadata.name=" + MPS_DAEMON).items
    assert not cluster.core.list_namespaced_service_account(namespace,
                                                            field_selector="metadata.name=" + MPS_DAEMON).items
    assert not cluster.client.call_api("/apis/rbac.authorization.k8s.io/v1/clusterroles", "GET",
                                       query_params=[("fieldSelector", "metadata.name=" + MPS_DAEMON)],
                                       response_type="object", _return_http_data_only=True,
                                       auth_settings=["BearerToken"])["items"]
    wait_for(lambda: gpus(cluster, mps) == 2, message="the former MPS node's whole GPUs")


def test_standalone_dcgm_feeds_the_exporter_which_serves_nothing_without_it(cluster, namespace, make_fleet):
    spec = fleet([{"name": "gpu", "count": 2, "gpu": {"product": "NVIDIA-L40S", "count": 1},
                   "os": {"rhcos": RHCOS_416}}], registry=REGISTRY)
    name = spec["name"]
    gpu0, gpu1 = make_fleet(spec).node_names
    prepare(cluster, namespace, [gpu0, gpu1])
    for node in (gpu0, gpu1):  # the nfd and driver roles set it when dcgm_enabled (common_deploy_operands)
        cluster.core.patch_node(node, {"metadata": {"labels": {"nvidia.com/gpu.deploy.dcgm": "true"}}})
    variables = {"common_namespace": namespace, "common_wait_timeout": 120, "container_toolkit_validate": False,
                 "dcgm_enabled": True}
    roles = (TOOLKIT, DCGM, DCGM_EXPORTER)

    first = succeeded(run_roles(cluster, variables, roles=roles))
    print("first run: %.1fs" % first.seconds)
    exporter = cluster.apps.read_namespaced_daemon_set("nvidia-dcgm-exporter", namespace).spec.template.spec
    assert env_of(exporter.containers[0])["DCGM_REMOTE_HOSTENGINE_INFO"] == "nvidia-dcgm:5555"
    assert not exporter.host_network
    service = cluster.core.read_namespaced_service("nvidia-dcgm", namespace)
    assert (service.spec.internal_traffic_policy, [(p.name, p.port) for p in service.spec.ports]) == (
        "Local", [("dcgm", 5555)])
    assert sorted(pods_by_node(cluster, namespace, "nvidia-dcgm")) == [gpu0, gpu1]
    # Every exporter serves: ready, an endpoint of its Service (the role's wait checked it).
    assert all(ready(pod) for pod in pods_by_node(cluster, namespace, "nvidia-dcgm-exporter").values())
    second = succeeded(run_roles(cluster, variables, roles=roles))
    assert stats(second)["changed"] == 0
    checked = succeeded(run_roles(cluster, variables, roles=roles, check=True, diff=True))
    assert stats(checked)["changed"] == 0

    # The hostengine gone from one node: its exporter cannot connect and serves nothing there.
    cluster.core.patch_node(gpu1, {"metadata": {"labels": {"nvidia.com/gpu.deploy.dcgm": "false"}}})

    def exporter_down():
        pod = pods_by_node(cluster, namespace, "nvidia-dcgm-exporter").get(gpu1)
        waiting = [c.state.waiting for c in (pod.status.container_statuses or []) if c.state.waiting] if pod else []
        return waiting[0].message if waiting and not ready(pod) else None

    message = wait_for(exporter_down, message="the exporter of %s without its hostengine" % gpu1)
    assert "failed to connect to remote hostengine at nvidia-dcgm:5555 from node %s" % gpu1 in message
    assert ready(pods_by_node(cluster, namespace, "nvidia-dcgm-exporter")[gpu0])
    # The exporter's state fails on it at once, naming the node.
    failed = failed_fast(run_roles(cluster, variables, roles=(DCGM_EXPORTER,)),
                         "then wait until each node serves metrics")
    assert "node %s: pod %s/nvidia-dcgm-exporter-" % (gpu1, namespace) in failed["msg"]
    assert gpu0 not in failed["msg"]

    # Switched off: the hostengine's objects and deploy labels go, the exporters run their embedded hostengine.
    cluster.core.patch_node(gpu1, {"metadata": {"labels": {"nvidia.com/gpu.deploy.dcgm": "true"}}})
    succeeded(run_roles(cluster, dict(variables, dcgm_enabled=False), roles=roles))
    exporter = cluster.apps.read_namespaced_daemon_set("nvidia-dcgm-exporter", namespace).spec.template.spec
    assert "DCGM_REMOTE_HOSTENGINE_INFO" not in env_of(exporter.containers[0])
    assert not cluster.apps.list_namespaced_daemon_set(namespace, field_selector="metadata.name=nvidia-dcgm").items
    assert not cluster.core.list_namespaced_service(namespace, field_selector="metadata.name=nvidia-dcgm").items
    assert all("nvidia.com/gpu.deploy.dcgm" not in cluster.core.read_node(node).metadata.labels
               for node in (gpu0, gpu1))

    # Enabled again, then uninstalled: the hostengine's objects and deploy label go with the rest of the stack.
    for node in (gpu0, gpu1):
        cluster.core.patch_node(node, {"metadata": {"labels": {"nvidia.com/gpu.deploy.dcgm": "true"}}})
    succeeded(run_roles(cluster, variables, roles=(DCGM,)))
    playbook(cluster, "uninstall", {"common_namespace": namespace, "driver_node_selector": {FLEET_LABEL: name}}) \
        .succeeded()
    managed = "app.kubernetes.io/managed-by=accelerators.gpu"
    assert not cluster.apps.list_namespaced_daemon_set(namespace, label_selector=managed).items
    assert not cluster.core.list_namespaced_service(namespace, label_selector=managed).items
    assert not cluster.core.list_namespaced_service_account(namespace, label_selector=managed).items
    assert all(not key.startswith("nvidia.com/gpu.deploy.") or value != "true"
               for node in (gpu0, gpu1) for key, value in cluster.core.read_node(node).metadata.labels.items())
