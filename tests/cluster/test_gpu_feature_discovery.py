"""GPU feature discovery through the deploy, status and uninstall playbooks against the local control plane: every GPU
node labelled from its simulated hardware, shown by status, a re-run that changes nothing, GFD switched off, a node
whose GFD cannot start named by the failure, and an uninstall that leaves the nodes' labels as they were.

The checks of a deploy on a fleet of GROUPS are the check_gfd_* functions: they run in the OpenShift deploy that
test_gpu_dashboard_alerts.py shares with the console dashboard and alerts (one deploy and uninstall fewer in CI)."""

import os

import kubernetes
from kubernetes.client.rest import ApiException

from conftest import wait_for
from gpu_fleet import COMMON_DEFAULTS, RHCOS_416, RHCOS_96
from localcluster import fleet as fleets
from test_deploy import fleet_variables, gpu_fleet, node_labels, playbook, status_of

DRIVER_VERSION = tuple(COMMON_DEFAULTS["common_driver_version"].split("."))  # the deploy's driver
GFD_DEPLOY = "nvidia.com/gpu.deploy.gpu-feature-discovery"
VALIDATOR_DEPLOY = "nvidia.com/gpu.deploy.operator-validator"
GFD_TASK = ": GPU feature discovery service account, RBAC and DaemonSet, then wait until every node carries its labels"
GROUPS = [
    {"name": "a100", "count": 2, "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 8}, "os": {"rhcos": RHCOS_416},
     "machine": "PowerEdge-XE8545"},
    {"name": "h100", "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 8}, "os": {"rhcos": RHCOS_416},
     "machine": "DGX-H100"},
    {"name": "l40s", "gpu": {"product": "NVIDIA-L40S", "count": 4}, "os": {"rhcos": RHCOS_96, "openshift": "4.21"},
     "nfd_style": "class-vendor"},
    {"name": "cpu", "os": {"rhcos": RHCOS_416}},
]


def expected_labels(group):
    """The GFD labels a node of this fleet group must carry, from the fleet's GPU model table."""
    model = fleets.GPU_MODELS[group["gpu"]["product"]]
    major, minor = model["compute"].split(".")
    return {
        "nvidia.com/gpu.product": group["gpu"]["product"], "nvidia.com/gpu.memory": str(model["memory"]),
        "nvidia.com/gpu.count": str(group["gpu"]["count"]), "nvidia.com/gpu.family": fleets.gpu_family(model["compute"]),
        "nvidia.com/gpu.compute.major": major, "nvidia.com/gpu.compute.minor": minor,
        "nvidia.com/cuda.driver.major": DRIVER_VERSION[0], "nvidia.com/cuda.driver.minor": DRIVER_VERSION[1],
        "nvidia.com/cuda.driver.rev": DRIVER_VERSION[2],
        "nvidia.com/gpu.machine": group.get("machine", fleets.DEFAULT_MACHINE),
        "nvidia.com/mig.capable": "true" if model["mig_capable"] else "false",
    }


def no_warnings(run):
    warnings = [line for line in run.process.stderr.splitlines() if "WARNING]" in line]
    assert not warnings, warnings
    return run


def gfd_labels_of(labels):
    # Not the stack's own deploy labels, nor the MIG manager's layout and its state (the deploy sets all-disabled on
    # MIG-capable nodes).
    return {key: value for key, value in labels.items()
            if key.startswith(("nvidia.com/gpu.", "nvidia.com/cuda.", "nvidia.com/mig.", "nvidia.com/gfd.",
                               "nvidia.com/mps."))
            and not key.startswith(("nvidia.com/gpu.deploy.", "nvidia.com/gpu.present", "nvidia.com/mig.config"))}


def delete_namespace(cluster, namespace):
    try:
        cluster.core.delete_namespace(namespace)
    except ApiException as error:
        if error.status != 404:
            raise


def fleet_groups(names):
    """{node: its GROUPS entry}, (its GPU nodes, its CPU node): the fleet's nodes come in the order of its groups,
    count by count."""
    groups = dict(zip(names, [group for group in GROUPS for _index in range(group.get("count", 1))]))
    gpu_nodes = sorted(name for name in names if "gpu" in groups[name])
    (cpu,) = [name for name in names if name not in gpu_nodes]
    return groups, gpu_nodes, cpu


def check_gfd_deployed(cluster, namespace, first, names):
    """After the deploy `first` on a fleet of GROUPS: GFD's task ran once, every GPU node carries the labels of its
    hardware (the none MIG strategy), the CPU node none, and GFD's DaemonSet is as the GPU Operator's."""
    groups, gpu_nodes, cpu = fleet_groups(names)
    ran = [name for name, result in first.results if name.endswith(GFD_TASK) and not result.get("skipped")]
    assert len(ran) == 1, ran

    labels = node_labels(cluster, names)
    for name in gpu_nodes:
        carried = gfd_labels_of(labels[name])
        assert {key: carried.get(key) for key in expected_labels(groups[name])} == expected_labels(groups[name])
        # The none MIG strategy: GFD writes no nvidia.com/mig.strategy.
        assert "nvidia.com/mig.strategy" not in carried
    assert gfd_labels_of(labels[cpu]) == {}
    # A deploy label per state deployed: GFD's and the validator DaemonSet's among them.
    assert all(labels[name].get(GFD_DEPLOY) == "true" and labels[name].get(VALIDATOR_DEPLOY) == "true"
               for name in gpu_nodes)

    daemonset = cluster.apps.read_namespaced_daemon_set("gpu-feature-discovery", namespace)
    pod_spec = daemonset.spec.template.spec
    env = {entry.name: entry.value for entry in pod_spec.containers[0].env}
    assert (env["GFD_SLEEP_INTERVAL"], env["GFD_FAIL_ON_INIT_ERROR"], env["MIG_STRATEGY"]) == ("60s", "true", "none")
    # The session cluster has NFD's NodeFeature CRD only when some test deployed upstream NFD: GFD uses it from the
    # deploy that installed it on.
    crds = kubernetes.client.ApiextensionsV1Api(cluster.client).list_custom_resource_definition().items
    node_feature_api = any(crd.metadata.name == "nodefeatures.nfd.k8s-sigs.io" for crd in crds)
    assert env["GFD_USE_NODE_FEATURE_API"] == str(node_feature_api).lower()
    assert pod_spec.node_selector == {"nvidia.com/gpu.deploy.gpu-feature-discovery": "true"}
    assert pod_spec.service_account_name == "nvidia-gpu-feature-discovery"
    assert daemonset.status.number_ready == len(gpu_nodes)


def check_gfd_status(cluster, variables, names):
    """The status playbook shows each GPU node's hardware as GFD labelled it, in its report and in the table of the
    columns chosen."""
    groups, gpu_nodes, _cpu = fleet_groups(names)
    status_run = no_warnings(playbook(cluster, "status", dict(
        variables, status_columns=["gpus", "product", "memory", "mig_capable"])).succeeded())
    status = status_run.report["global_custom_stats"]["gpu_stack_status"]
    assert status["ready"] is True
    rows = {row["node"]: row for row in status["nodes"]}
    assert sorted(rows) == gpu_nodes
    for name in gpu_nodes:
        model = fleets.GPU_MODELS[groups[name]["gpu"]["product"]]
        row = rows[name]
        assert (row["product"], row["memory"], row["mig_capable"], row["gpu_info"], row["gpu_feature_discovery"],
                row["gpus"]) == (groups[name]["gpu"]["product"], model["memory"], model["mig_capable"], "gfd",
                                 "ready", groups[name]["gpu"]["count"])
    (table,) = [result["msg"] for name, result in status_run.results if name == "Print the status table"]
    assert table[0].split() == ["NODE", "GPUS", "PRODUCT", "MEMORY", "MiB", "MIG"]
    for line in table[1:1 + len(gpu_nodes)]:
        node, _gpus, product, memory, mig = line.split()
        assert (product, memory, mig) == (rows[node]["product"], str(rows[node]["memory"]),
                                          "yes" if rows[node]["mig_capable"] else "no")


def check_gfd_switched_off(cluster, namespace, variables, names):
    """Switched off: its objects go, and with its pods its labels (in the simulator at once); status falls back to
    NFD's PCI labels, which carry no device id here, and counts the nodes ready without GFD."""
    off = dict(variables, gpu_feature_discovery_enabled=False)
    no_warnings(playbook(cluster, "deploy", off, tags="gpu_feature_discovery").succeeded())
    assert not cluster.apps.list_namespaced_daemon_set(
        namespace, field_selector="metadata.name=gpu-feature-discovery").items
    assert not cluster.core.list_namespaced_service_account(
        namespace, field_selector="metadata.name=nvidia-gpu-feature-discovery").items
    wait_for(lambda: not cluster.core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/component=gpu-feature-discovery").items,
        timeout=60, message="GFD pods gone")
    wait_for(lambda: not any(gfd_labels_of(labels) for labels in node_labels(cluster, names).values()),
             timeout=60, message="GFD labels gone with its pods")
    # Nothing is deployed behind its deploy label any more.
    assert not [name for name, labels in node_labels(cluster, names).items() if GFD_DEPLOY in labels]
    status = status_of(cluster, off)
    assert status["ready"] is True
    assert {(row["product"], row["gpu_info"], row["gpu_feature_discovery"]) for row in status["nodes"]} == {
        (None, None, "-")}


def check_gfd_uninstalled(cluster, namespace):
    """After the uninstall: GFD's DaemonSet and ClusterRole are gone (the nodes' labels are compared by the caller)."""
    assert not cluster.apps.list_namespaced_daemon_set(
        namespace, field_selector="metadata.name=gpu-feature-discovery").items
    rbac = kubernetes.client.RbacAuthorizationV1Api(cluster.client)
    assert "nvidia-gpu-feature-discovery" not in [r.metadata.name for r in rbac.list_cluster_role().items]


def test_a_node_whose_gfd_cannot_initialise_fails_the_deploy_naming_it_and_gfd_follows_the_device_plugin(
        cluster, make_fleet):
    spec = gpu_fleet({"name": "good", "gpu": {"product": "Tesla-T4", "count": 1}, "os": {"rhcos": RHCOS_416}},
                     {"name": "bad", "gpu": {"product": "Tesla-T4", "count": 1}, "os": {"rhcos": RHCOS_416},
                      "faults": {"gfd_init_fails": True}})
    good, bad = make_fleet(spec).node_names
    namespace = "t-gfd-fault-" + os.urandom(2).hex()
    try:
        run = playbook(cluster, "deploy", fleet_variables(
            namespace, spec, common_mig_strategy="single",
            device_plugin_time_slicing=[{"name": "t4-x2", "replicas": 2}]))
        task, failed = run.failure()
        assert task.endswith(GFD_TASK)
        assert failed["outcome"] == "failed"
        assert "node %s: pod %s/gpu-feature-discovery-" % (bad, namespace) in failed["msg"]
        assert "failed to initialize NVML" in failed["msg"]
        assert {(problem["kind"], problem["node"]) for problem in failed["problems"]} == {("crash", bad)}
        # The crash ends the wait at once: the good node's pod may still be starting then, and is named as such,
        # never with a problem or a warning.
        starting = "node %s: pod %s/gpu-feature-discovery-" % (good, namespace)
        assert all(line.startswith(starting) and "warning" not in line
                   for line in failed["msg"].splitlines() if good in line), failed["msg"]
        # GFD's labels came to the good node only, under the device plugin's MIG strategy.

        def labelled():
            found = node_labels(cluster, [good, bad])
            return found if "nvidia.com/gpu.product" in found[good] else None

        labels = wait_for(labelled, timeout=30, message="GFD labels on " + good)
        assert (labels[good]["nvidia.com/gpu.product"], labels[good]["nvidia.com/mig.strategy"],
                labels[good]["nvidia.com/mig.capable"]) == ("Tesla-T4", "single", "false")
        assert gfd_labels_of(labels[bad]) == {}
        daemonset = cluster.apps.read_namespaced_daemon_set("gpu-feature-discovery", namespace)
        pod_spec = daemonset.spec.template.spec
        env = {e.name: e.value for e in pod_spec.containers[0].env}
        assert (env["MIG_STRATEGY"], env["CONFIG_FILE"]) == ("single", "/config/config.yaml")
        # The device plugin's time-slicing configuration reaches GFD through the config manager.
        assert [c.name for c in pod_spec.containers] == ["gpu-feature-discovery", "config-manager"]
        assert [c.name for c in pod_spec.init_containers] == ["toolkit-validation", "config-manager-init"]
        assert pod_spec.share_process_namespace is True
        assert [v.config_map.name for v in pod_spec.volumes if v.config_map] == ["nvidia-device-plugin-config"]
    finally:
        delete_namespace(cluster, namespace)
