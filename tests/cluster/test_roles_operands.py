"""The operand roles (container_toolkit, device_plugin, dcgm_exporter, with common) and operand_status, run by
ansible-playbook against the local control plane, on a fleet whose driver is a stand-in DaemonSet."""

import datetime
import json
import os

from kubernetes.client.rest import ApiException

from conftest import wait_for
from gpu_fleet import COMMON_DEFAULTS, FLEET_LABEL, RHCOS_416, fleet, ready
from playbook import play, run

ROLES = ("accelerators.gpu.container_toolkit", "accelerators.gpu.device_plugin", "accelerators.gpu.dcgm_exporter")
OPERAND_STATUS = "accelerators.gpu.operand_status"
# The simulated registry: NVIDIA's images (the collection's defaults) and the stand-in driver.
REGISTRY = ["nvcr.io/nvidia/*", "example.test/sim/*"]
DRIVER_IMAGE = "example.test/sim/driver:550.90.07"
OPERANDS = ("driver", "container-toolkit", "device-plugin", "dcgm-exporter", "operator-validator")
# Every kind the roles create, (API path, namespaced), for before/after comparisons.
KINDS = (("/api/v1/namespaces", False), ("/apis/node.k8s.io/v1/runtimeclasses", False),
         ("/apis/rbac.authorization.k8s.io/v1/clusterroles", False),
         ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", False),
         ("/api/v1/serviceaccounts", True), ("/apis/rbac.authorization.k8s.io/v1/roles", True),
         ("/apis/rbac.authorization.k8s.io/v1/rolebindings", True), ("/api/v1/configmaps", True),
         ("/api/v1/services", True), ("/apis/apps/v1/daemonsets", True), ("/apis/batch/v1/jobs", True),
         ("/apis/monitoring.coreos.com/v1/servicemonitors", True))


def gpu_fleet(*groups):
    return fleet(list(groups) or [
        {"name": "gpu", "count": 2, "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 8},
         "os": {"rhcos": RHCOS_416}},
        {"name": "cpu", "os": {"rhcos": RHCOS_416}},
    ], registry=REGISTRY)


def prepare(cluster, namespace, gpu_nodes):
    """What the NFD and driver states leave behind: deploy labels on the GPU nodes and a ready driver
    (a stand-in OnDelete DaemonSet) on each, waited for with operand_status."""
    for node in gpu_nodes:
        cluster.core.patch_node(node, {"metadata": {"labels": dict(
            {"nvidia.com/gpu.present": "true"}, **{"nvidia.com/gpu.deploy." + o: "true" for o in OPERANDS})}})
    labels = {"app": "nvidia-driver-daemonset-test", "app.kubernetes.io/component": "nvidia-driver"}
    cluster.apps.create_namespaced_daemon_set(namespace, {
        "metadata": {"name": "nvidia-driver-daemonset-test", "labels": labels},
        "spec": {"selector": {"matchLabels": {"app": labels["app"]}}, "updateStrategy": {"type": "OnDelete"},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "nodeSelector": {"nvidia.com/gpu.deploy.driver": "true"},
                     "containers": [{"name": "nvidia-driver-ctr", "image": DRIVER_IMAGE}]}}}})
    driver = run(cluster, OPERAND_STATUS, {"wait_for": "daemonsets", "namespace": namespace, "timeout": 60,
                                           "label_selectors": ["app.kubernetes.io/component=nvidia-driver"]})
    assert driver["ready"], driver["msg"]
    assert driver["ready_nodes"] == sorted(gpu_nodes)
    assert driver["daemonsets"][0]["update_strategy"] == "OnDelete"


def run_roles(cluster, variables, roles=ROLES, **options):
    """One play: set the variables (as a user's play or inventory would), then the roles in order."""
    tasks = [("ansible.builtin.set_fact", variables)]
    tasks += [("ansible.builtin.include_role", {"name": role}) for role in roles]
    return play(cluster, tasks, **options)


def stats(playbook_run):
    return json.loads(playbook_run.process.stdout)["stats"]["localhost"]


def failure(playbook_run):
    """The result of the task that failed the play."""
    failed = [result for result in playbook_run if result.get("failed")]
    assert failed, "the play did not fail: %s" % playbook_run.process.stdout[-2000:]
    return failed[-1]


def failed_fast(playbook_run, cause_task):
    """The failure of a play whose wait (timeout 300s) must have ended on a visible cause: its outcome is "failed",
    which a wait gives only for a cause that waiting cannot mend ("timed out" otherwise). The times are printed,
    not compared: a loaded machine slows ansible-playbook down."""
    failed = failure(playbook_run)
    seconds = seconds_from(playbook_run, cause_task)
    print("failed %.1fs after %r started; the wait itself took %.1fs" % (seconds, cause_task, failed["elapsed"]))
    assert failed["outcome"] == "failed"
    return failed


def succeeded(playbook_run):
    failed = [result.get("msg") for result in playbook_run if result.get("failed")]
    assert not failed and playbook_run.process.returncode == 0, (failed, playbook_run.process.stdout[-3000:])
    return playbook_run


def snapshot(cluster, namespace):
    """(kind path, namespace, name) -> resourceVersion of every object the roles could have written: those in the
    namespace, the namespace itself, and the cluster-scoped ones they label as theirs."""
    found = {}
    for path, namespaced in KINDS:
        url = path
        if namespaced:
            prefix, plural = path.rsplit("/", 1)
            url = "%s/namespaces/%s/%s" % (prefix, namespace, plural)
        try:
            body = cluster.client.call_api(url, "GET", response_type="object", _return_http_data_only=True,
                                           auth_settings=["BearerToken"])
        except ApiException as error:
            if error.status == 404:
                continue
            raise
        for item in body.get("items") or []:
            meta = item["metadata"]
            ours = (meta.get("labels") or {}).get("app.kubernetes.io/managed-by") == "accelerators.gpu"
            if namespaced or (ours and path != "/api/v1/namespaces") or meta["name"] == namespace:
                found[(path, meta.get("namespace"), meta["name"])] = meta["resourceVersion"]
    return found


def seconds_from(playbook_run, task_name):
    """Seconds from the start of the (last) task named task_name, role prefix aside, to the end of the play."""
    tasks = json.loads(playbook_run.process.stdout)["plays"][0]["tasks"]
    stamps = [(task["task"]["name"], task["task"]["duration"]) for task in tasks]
    starts = [duration["start"] for name, duration in stamps if name.endswith(task_name)]
    assert starts, "no task named %r ran; the play ran: %s" % (task_name, [stamp[0] for stamp in stamps])
    start = starts[-1]
    return (datetime.datetime.fromisoformat(stamps[-1][1]["end"].replace("Z", "+00:00"))
            - datetime.datetime.fromisoformat(start.replace("Z", "+00:00"))).total_seconds()


def jobs_by_check(cluster, namespace):
    jobs = cluster.batch.list_namespaced_job(namespace, label_selector="app.kubernetes.io/component=gpu-validation")
    return {(job.metadata.labels["accelerators.gpu/validation"], job.metadata.annotations["accelerators.gpu/node"]):
            job.status.succeeded for job in jobs.items}


def env_of(container):
    return {entry.name: entry.value for entry in container.env or []}


def test_openshift_stack_validated_configured_and_rerun_changes_nothing(cluster, namespace, make_fleet):
    gpu0, gpu1, cpu = make_fleet(gpu_fleet()).node_names
    prepare(cluster, namespace, [gpu0, gpu1])
    # CDI off: CRI-O through the OCI hook (the golden OpenShift fleet has CDI on, the default).
    variables = {"common_namespace": namespace, "common_wait_timeout": 120, "common_cdi_enabled": False,
                 "device_plugin_time_slicing": [{"name": "a100-x4", "replicas": 4}],
                 "dcgm_exporter_metrics_csv": "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"}

    first = succeeded(run_roles(cluster, variables))
    print("first run: %.1fs" % first.seconds)
    assert stats(first)["changed"] > 0
    # Ready and validated on both GPU nodes, not on the CPU node.
    for node in (gpu0, gpu1):
        assert cluster.core.read_node(node).status.allocatable["nvidia.com/gpu"] == "8"
    assert jobs_by_check(cluster, namespace) == {(check, node): 1 for check in ("toolkit", "cuda")
                                                 for node in (gpu0, gpu1)}
    pods = cluster.core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/managed-by=accelerators.gpu,"
                                            "app.kubernetes.io/component!=gpu-validation").items
    assert sorted((p.metadata.labels["app"], p.spec.node_name) for p in pods) == sorted(
        (app, node) for app in ("nvidia-container-toolkit-daemonset", "nvidia-operator-validator",
                                "nvidia-device-plugin-daemonset", "nvidia-dcgm-exporter") for node in (gpu0, gpu1))

    # OpenShift with CDI off: CRI-O through the OCI hook (no RuntimeClass on the pods), privileged SCC for each service
    # account.
    toolkit = cluster.apps.read_namespaced_daemon_set("nvidia-container-toolkit-daemonset", namespace)
    toolkit_env = env_of(toolkit.spec.template.spec.containers[0])
    assert (toolkit_env["RUNTIME"], toolkit_env["CRIO_CONFIG_MODE"]) == ("crio", "hook")
    assert toolkit_env["RUNTIME_DROP_IN_CONFIG_HOST_PATH"] == "/etc/crio/crio.conf.d/99-nvidia.conf"
    assert toolkit.spec.template.spec.node_selector == {"nvidia.com/gpu.deploy.container-toolkit": "true"}
    assert toolkit.metadata.labels["app.kubernetes.io/managed-by"] == "accelerators.gpu"
    assert cluster.custom.get_cluster_custom_object("node.k8s.io", "v1", "runtimeclasses", "nvidia")["handler"] \
        == "nvidia"
    scc = {"apiGroups": ["security.openshift.io"], "resources": ["securitycontextconstraints"],
           "resourceNames": ["privileged"], "verbs": ["use"]}
    for account in ("nvidia-container-toolkit", "nvidia-device-plugin", "nvidia-dcgm-exporter",
                    "nvidia-operator-validator"):
        role = cluster.client.call_api(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/roles/%s" % (namespace, account), "GET",
            response_type="object", _return_http_data_only=True, auth_settings=["BearerToken"])
        assert role["rules"][0] == scc
        # The validator's checks create their workload pods and read its DaemonSet.
        assert len(role["rules"]) == (3 if account == "nvidia-operator-validator" else 1)
    namespace_labels = cluster.core.read_namespace(namespace).metadata.labels
    assert namespace_labels["openshift.io/cluster-monitoring"] == "true"
    assert "pod-security.kubernetes.io/enforce" not in namespace_labels

    # Time-slicing: the ConfigMap, the config manager, and node read access for it alone.
    config = cluster.core.read_namespaced_config_map("nvidia-device-plugin-config", namespace).data
    assert "replicas: 4" in config["a100-x4"] and "version: v1" in config["a100-x4"]
    plugin = cluster.apps.read_namespaced_daemon_set("nvidia-device-plugin-daemonset", namespace).spec.template.spec
    assert plugin.runtime_class_name is None
    assert [c.name for c in plugin.containers] == ["nvidia-device-plugin", "config-manager"]
    assert env_of(plugin.containers[1])["NODE_LABEL"] == "nvidia.com/device-plugin.config"
    assert [c.name for c in plugin.init_containers] == ["toolkit-validation", "config-manager-init"]

    # DCGM exporter: custom metrics, a Service whose scrape annotations name the port, a ServiceMonitor.
    exporter = cluster.apps.read_namespaced_daemon_set("nvidia-dcgm-exporter", namespace).spec.template.spec
    assert env_of(exporter.containers[0])["DCGM_EXPORTER_COLLECTORS"] == "/etc/dcgm-exporter/dcgm-metrics.csv"
    assert exporter.containers[0].volume_mounts[-1].mount_path == "/etc/dcgm-exporter/dcgm-metrics.csv"
    service = cluster.core.read_namespaced_service("nvidia-dcgm-exporter", namespace)
    assert service.metadata.annotations["prometheus.io/port"] == "9400"
    assert [(p.name, p.port) for p in service.spec.ports] == [("gpu-metrics", 9400)]
    monitor = cluster.custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", namespace,
                                                          "servicemonitors", "nvidia-dcgm-exporter")
    assert monitor["spec"]["endpoints"][0]["port"] == "gpu-metrics"

    before = snapshot(cluster, namespace)
    second = succeeded(run_roles(cluster, variables))
    print("second run: %.1fs" % second.seconds)
    assert stats(second)["changed"] == 0
    checked = succeeded(run_roles(cluster, variables, check=True, diff=True))
    assert stats(checked)["changed"] == 0
    after = snapshot(cluster, namespace)
    # Only the validation Jobs were replaced (a run validates anew); nothing the roles declare was written.
    assert {k: v for k, v in after.items() if "/jobs" not in k[0]} == \
        {k: v for k, v in before.items() if "/jobs" not in k[0]}


def validation_files(cluster, node):
    """The simulated node's /run/nvidia/validations: {file: content} (localcluster.simulator)."""
    annotations = cluster.core.read_node(node).metadata.annotations or {}
    return json.loads(annotations.get("sim.accelerators.gpu/validations", "{}"))


def upstream_operand(selector):
    """A DaemonSet whose pods wait as the GPU Operator's operands (MIG manager, GFD, ...) do: an init container
    polling /run/nvidia/validations/toolkit-ready, which only the validator writes."""
    labels = {"app": "upstream-operand", "app.kubernetes.io/component": "upstream-operand"}
    volume = {"name": "run-nvidia-validations",
              "hostPath": {"path": "/run/nvidia/validations", "type": "DirectoryOrCreate"}}
    wait = {"name": "toolkit-validation", "image": COMMON_DEFAULTS["common_validator_image"],
            "command": ["sh", "-c"],
            "args": ["until [ -f /run/nvidia/validations/toolkit-ready ]; do echo waiting for nvidia container stack "
                     "to be setup; sleep 5; done"],
            "volumeMounts": [{"name": volume["name"], "mountPath": "/run/nvidia/validations",
                              "mountPropagation": "HostToContainer"}]}
    operand = {"name": "operand", "image": "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.12.1"}
    return {"metadata": {"name": "upstream-operand", "labels": labels},
            "spec": {"selector": {"matchLabels": {"app": labels["app"]}}, "template": {
                "metadata": {"labels": labels},
                "spec": {"nodeSelector": selector, "initContainers": [wait], "containers": [operand],
                         "volumes": [volume]}}}}


def test_validator_files_set_driver_roots_and_hold_upstream_operands(cluster, namespace, make_fleet):
    spec = gpu_fleet({"name": "ctr", "gpu": {"count": 2}, "os": {"rhcos": RHCOS_416}},
                     {"name": "host", "gpu": {"count": 2}, "os": {"rhcos": RHCOS_416}, "host_driver": "570.172.08"},
                     {"name": "bare", "gpu": {"count": 2}, "os": {"rhcos": RHCOS_416}})
    ctr, host, bare = make_fleet(spec).node_names
    assert cluster.core.read_node(host).metadata.labels["nvidia.com/gpu.deploy.driver"] == "pre-installed"
    prepare(cluster, namespace, [ctr, bare])
    cluster.core.patch_node(host, {"metadata": {"labels": dict(
        {"nvidia.com/gpu.present": "true"}, **{"nvidia.com/gpu.deploy." + o: "true" for o in OPERANDS[1:]})}})
    # No validator on this node, so no toolkit-ready: nothing there may wait for it.
    cluster.core.patch_node(bare, {"metadata": {"labels": {"nvidia.com/gpu.deploy.operator-validator": "false",
                                                           "nvidia.com/gpu.deploy.device-plugin": "false"}}})
    # With CDI the device plugin's driver root matters too (the simulator crash-loops a wrong one).
    result = succeeded(run_roles(cluster, {"common_namespace": namespace, "common_wait_timeout": 120,
                                           "common_cdi_enabled": True}, roles=ROLES[:2]))
    print("toolkit and device plugin: %.1fs" % result.seconds)
    # The host's driver: the toolkit and the device plugin run (so with the root /) and the node has its GPUs.
    assert cluster.core.read_node(host).status.allocatable["nvidia.com/gpu"] == "2"
    driver_ready = {node: dict(line.split("=", 1) for line in validation_files(cluster, node)["driver-ready"].split())
                    for node in (ctr, host, bare)}
    assert driver_ready[host]["IS_HOST_DRIVER"] == "true" and driver_ready[host]["NVIDIA_DRIVER_ROOT"] == "/"
    for node in (ctr, bare):
        assert (driver_ready[node]["IS_HOST_DRIVER"], driver_ready[node]["NVIDIA_DRIVER_ROOT"]) == (
            "false", "/run/nvidia/driver")
    # The validator's four files on its nodes (plugin-ready once the device plugin advertises the GPUs).
    for node in (ctr, host):
        wait_for(lambda node=node: set(validation_files(cluster, node)) == {
            "driver-ready", "toolkit-ready", "cuda-ready", "plugin-ready"}, message="validation files on " + node)
    assert set(validation_files(cluster, bare)) == {"driver-ready"}  # the toolkit's own driver validation

    # An upstream operand starts where toolkit-ready is, and stays in Init where it is not.
    cluster.apps.create_namespaced_daemon_set(namespace, upstream_operand({FLEET_LABEL: spec["name"]}))

    def init_waiting(pod):
        statuses = pod.status.init_container_statuses or []
        return statuses[0].state.waiting.message if statuses and statuses[0].state.waiting else None

    def started_where_the_file_is():
        # Every pod is Pending from its creation: the bare node's counts once its init container says what it waits on.
        pods = cluster.core.list_namespaced_pod(namespace, label_selector="app=upstream-operand").items
        found = {pod.spec.node_name: pod for pod in pods}
        return found if len(found) == 3 and ready(found[ctr]) and ready(found[host]) and init_waiting(found[bare]) \
            else None

    waiting = wait_for(started_where_the_file_is, message="upstream operand pods")[bare]
    assert waiting.status.phase == "Pending" and not ready(waiting)
    assert "/run/nvidia/validations/toolkit-ready" in init_waiting(waiting)


def test_dcgm_exporter_serves_every_node_through_its_service(cluster, namespace, make_fleet):
    gpu0, gpu1, _cpu = make_fleet(gpu_fleet()).node_names
    prepare(cluster, namespace, [gpu0, gpu1])
    result = run_roles(cluster, {"common_namespace": namespace, "common_wait_timeout": 120,
                                 "container_toolkit_validate": False},
                       roles=("accelerators.gpu.container_toolkit", "accelerators.gpu.dcgm_exporter"))
    message = (failure(result)["msg"] if result.process.returncode else "")
    assert not message, message


def test_check_mode_on_a_fresh_cluster_writes_nothing(cluster, make_fleet):
    gpu0, gpu1, _cpu = make_fleet(gpu_fleet()).node_names
    for node in (gpu0, gpu1):
        cluster.core.patch_node(node, {"metadata": {"labels": {"nvidia.com/gpu.deploy.container-toolkit": "true"}}})
    namespace = "t-check-%s" % os.urandom(3).hex()
    before = snapshot(cluster, namespace)
    checked = succeeded(run_roles(cluster, {"common_namespace": namespace}, check=True, diff=True))
    assert stats(checked)["changed"] >= 1  # the namespace would be created
    assert snapshot(cluster, namespace) == before
    try:
        cluster.core.read_namespace(namespace)
        raise AssertionError("check mode created namespace %s" % namespace)
    except ApiException as error:
        assert error.status == 404


def test_kubernetes_with_containerd_gets_pod_security_labels_and_the_runtime_class(cluster, namespace, make_fleet):
    gpu0, cpu = make_fleet(gpu_fleet(
        {"name": "gpu", "gpu": {"count": 2}, "os": {"ubuntu": "22.04"}, "nfd_style": "class-vendor"},
        {"name": "cpu", "os": {"ubuntu": "22.04"}})).node_names
    prepare(cluster, namespace, [gpu0])
    # driver_gds: the device plugin hands GPU containers the GDS devices (the driver is the stand-in's).
    succeeded(run_roles(cluster, {"common_namespace": namespace, "common_platform": "kubernetes",
                                  "common_wait_timeout": 120, "container_toolkit_containerd_distribution": "rke2",
                                  "driver_gds": True}))
    labels = cluster.core.read_namespace(namespace).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    toolkit = cluster.apps.read_namespaced_daemon_set("nvidia-container-toolkit-daemonset", namespace).spec.template
    env = env_of(toolkit.spec.containers[0])
    assert (env["RUNTIME"], env["CONTAINERD_RUNTIME_CLASS"]) == ("containerd", "nvidia")
    assert env["CONTAINERD_CONFIG"] == "/runtime/config-dir/config.toml.tmpl"
    assert env["CONTAINERD_SOCKET"] == "/runtime/sock-dir/containerd.sock"
    volumes = {v.name: v.host_path.path for v in toolkit.spec.volumes if v.host_path}
    assert volumes["containerd-config"] == "/var/lib/rancher/rke2/agent/etc/containerd"
    assert volumes["containerd-socket"] == "/run/k3s/containerd"
    plugin = cluster.apps.read_namespaced_daemon_set("nvidia-device-plugin-daemonset", namespace).spec.template.spec
    assert plugin.runtime_class_name == "nvidia"
    assert [c.name for c in plugin.containers] == ["nvidia-device-plugin"]  # no time-slicing, no config manager
    plugin_env = env_of(plugin.containers[0])
    assert (plugin_env["GDS_ENABLED"], plugin_env["MOFED_ENABLED"]) == ("true", "true")
    assert "GDRCOPY_ENABLED" not in plugin_env
    # No OpenShift SCC Role on Kubernetes (only the validator's rights to run its workload pods), and no
    # cluster-wide rights for the plugin without time-slicing.
    roles = cluster.client.call_api("/apis/rbac.authorization.k8s.io/v1/namespaces/%s/roles" % namespace, "GET",
                                    response_type="object", _return_http_data_only=True, auth_settings=["BearerToken"])
    assert [role["metadata"]["name"] for role in roles["items"]] == ["nvidia-operator-validator"]
    assert jobs_by_check(cluster, namespace) == {("toolkit", gpu0): 1, ("cuda", gpu0): 1}


def test_unpullable_operand_image_fails_fast_naming_node_and_image(cluster, namespace, make_fleet):
    gpu0, gpu1, _cpu = make_fleet(gpu_fleet()).node_names
    prepare(cluster, namespace, [gpu0, gpu1])
    missing = COMMON_DEFAULTS["common_device_plugin_image"].replace("nvcr.io/", "nvcr.io.mirror.example/", 1)
    result = run_roles(cluster, {"common_namespace": namespace, "common_wait_timeout": 300,
                                 "common_device_plugin_image": missing})
    failed = failed_fast(result, "Device plugin service account, DaemonSet and configuration, the MPS control daemon, "
                                 "then wait until each node advertises its GPUs")
    for node in (gpu0, gpu1):
        assert "node %s: pod %s/nvidia-device-plugin-daemonset-" % (node, namespace) in failed["msg"]
    assert "cannot pull image %s (ImagePullBackOff" % missing in failed["msg"]
    # The wait ends on the first node whose kubelet reports the image unpullable (each kubelet reports on its own
    # time); the other node is named in the diagnosis of the pods not ready.
    problem_nodes = {p["node"] for p in failed["problems"]}
    assert problem_nodes and problem_nodes <= {gpu0, gpu1}
    assert {p["kind"] for p in failed["problems"]} == {"image"}
    diagnosed = {entry["node"]: entry for entry in failed["nodes"]}
    assert set(diagnosed) == {gpu0, gpu1}
    for node in problem_nodes:
        assert diagnosed[node]["phase"] == "Pending"
        assert {c["reason"] for c in diagnosed[node]["containers"]} == {"ImagePullBackOff"}
    # The toolkit before it is ready and validated; the DCGM exporter after it was never reached.
    assert jobs_by_check(cluster, namespace) == {("toolkit", gpu0): 1, ("toolkit", gpu1): 1}
    assert not cluster.apps.list_namespaced_daemon_set(
        namespace, field_selector="metadata.name=nvidia-dcgm-exporter").items


def test_operands_on_a_node_opted_out_of_the_driver_fail_naming_it_long_before_the_timeout(
        cluster, namespace, make_fleet):
    served, opted_out, _cpu = make_fleet(gpu_fleet()).node_names
    prepare(cluster, namespace, [served])
    # An admin opted the other node out of the driver, and it has none on the host (that would be pre-installed).
    cluster.core.patch_node(opted_out, {"metadata": {"labels": dict(
        {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.driver": "false"},
        **{"nvidia.com/gpu.deploy." + o: "true" for o in OPERANDS if o != "driver"})}})
    result = run_roles(cluster, {"common_namespace": namespace, "common_wait_timeout": 300}, roles=ROLES[:1])
    failed = failed_fast(result, "Container toolkit service account, RuntimeClass and DaemonSet, the validator "
                                 "DaemonSet, then wait for the toolkit on every node")
    # Once the pod had waited in Init for the grace period (20 s): the wait's own figure against its timeout.
    timeout = failed["invocation"]["module_args"]["timeout"]
    assert timeout == 300 and failed["elapsed"] < timeout, (failed["elapsed"], timeout)
    assert [(p["kind"], p["node"]) for p in failed["problems"]] == [("driver-opted-out", opted_out)]
    assert ("node %s: pod %s/nvidia-container-toolkit-daemonset-" % (opted_out, namespace)) in failed["msg"]
    assert ("waits in Init for a driver, but the node is opted out of the driver (nvidia.com/gpu.deploy.driver=false)"
            in failed["msg"]), failed["msg"]
    assert "install a driver on the host and label the node nvidia.com/gpu.deploy.driver=pre-installed" in failed["msg"]
    assert failed["ready_nodes"] == [served]


def test_validation_failure_on_one_node_is_named(cluster, namespace, make_fleet):
    spec = gpu_fleet({"name": "good", "gpu": {"count": 4}, "os": {"rhcos": RHCOS_416}},
                     {"name": "bad", "gpu": {"count": 4}, "os": {"rhcos": RHCOS_416},
                      "faults": {"validation_fails": "ECC errors on GPU 2"}})
    good, bad = make_fleet(spec).node_names
    prepare(cluster, namespace, [good, bad])
    result = run_roles(cluster, {"common_namespace": namespace, "common_wait_timeout": 300})
    failed = failed_fast(result, "Start a validation Job on every node to validate, check toolkit")
    assert "Job %s/nvidia-toolkit-validation-%s failed on node %s: " % (namespace, bad, bad) in failed["msg"]
    assert "ECC errors on GPU 2" in failed["msg"]
    states = {job["node"]: job["result"] for job in failed["jobs"]}
    assert states[bad] == "failed" and states[good] in ("succeeded", "running")
    assert good not in failed["msg"].split("\n")[1]


def test_operand_status_on_delete_waits_for_the_newest_revision(cluster, namespace, make_fleet):
    gpu0, gpu1, _cpu = make_fleet(gpu_fleet()).node_names
    prepare(cluster, namespace, [gpu0, gpu1])
    # A new driver template: OnDelete keeps the old pods until they are deleted.
    cluster.apps.patch_namespaced_daemon_set("nvidia-driver-daemonset-test", namespace, {"spec": {"template": {
        "metadata": {"annotations": {"accelerators.gpu/test": "2"}}}}})
    args = {"wait_for": "daemonsets", "namespace": namespace, "names": ["nvidia-driver-daemonset-test"],
            "timeout": 3, "poll_interval": 0.5}
    stale = run(cluster, OPERAND_STATUS, args)
    assert stale["failed"] and stale["outcome"] == "timed out"
    assert "2 of 2 pods run an older revision than" in stale["msg"]
    assert stale["msg"].startswith("DaemonSets nvidia-driver-daemonset-test in namespace %s not ready after 3s:"
                                   % namespace)
    pods = cluster.core.list_namespaced_pod(namespace, label_selector="app=nvidia-driver-daemonset-test").items
    for pod in pods:
        cluster.core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
    updated = run(cluster, OPERAND_STATUS, dict(args, timeout=60))
    assert updated["ready"], updated["msg"]
    assert updated["ready_nodes"] == sorted([gpu0, gpu1])


def test_operand_status_names_what_is_missing(cluster, namespace):
    missing = run(cluster, OPERAND_STATUS, {"wait_for": "daemonsets", "namespace": namespace, "names": ["nope"],
                                            "timeout": 60})
    assert missing["failed"] and missing["outcome"] == "failed"
    assert "DaemonSet %s/nope does not exist" % namespace in missing["msg"]
    unknown_node = run(cluster, OPERAND_STATUS, {"wait_for": "allocatable", "nodes": ["no-such-node"], "timeout": 1,
                                                 "poll_interval": 0.5})
    assert unknown_node["missing"] == ["no-such-node"]
    assert unknown_node["msg"].endswith("nodes without it: no-such-node")


def test_common_refuses_unpinned_images_and_mixed_runtimes(cluster, namespace, make_fleet):
    unpinned = run_roles(cluster, {"common_namespace": namespace, "common_dcgm_exporter_image": "dcgm-exporter"},
                         roles=("accelerators.gpu.common",))
    assert failure(unpinned)["msg"] == ("Set these images as repository/image:tag or repository/image@sha256:<digest>: "
                                        "dcgm-exporter")
    rhcos, ubuntu = make_fleet(gpu_fleet({"name": "rhcos", "gpu": {"count": 1}, "os": {"rhcos": RHCOS_416}},
                                         {"name": "ubuntu", "gpu": {"count": 1}, "os": {"ubuntu": "22.04"}})).node_names
    for node in (rhcos, ubuntu):
        cluster.core.patch_node(node, {"metadata": {"labels": {"nvidia.com/gpu.deploy.container-toolkit": "true"}}})
    mixed = failure(run_roles(cluster, {"common_namespace": namespace}, roles=("accelerators.gpu.common",)))
    assert "cannot serve nodes with different container runtimes: containerd on %s; crio on %s." % (ubuntu, rhcos) \
        in mixed["msg"]
