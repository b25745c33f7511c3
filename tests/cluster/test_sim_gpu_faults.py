"""The simulator's failing GPUs (tools/localcluster/gpu_faults.py) against the real control plane: an injected XID
takes the GPU out of allocatable and shows in the DCGM exporter's field; a reset clears it only once the operands
that hold the GPUs are stopped; XID 79 needs a reboot; a permanent fault never clears; resets and reboots are
recorded on the node. The resets and reboots are the remediation's own Jobs (module_utils/remediation/jobs.py)."""

import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request

import gpu_fleet
from ansible_collections.accelerators.gpu.plugins.module_utils.remediation import jobs
from conftest import wait_for
from localcluster import gpu_faults
from playbook import run

DRIVER_ROOT = "/run/nvidia/driver"
# The GPU Operator's deploy labels that keep the operands on a node; setting them false stops them, as a remediation
# (NVSentinel's janitor) does before a reset.
DEPLOY = {"device-plugin": "nvidia-device-plugin", "dcgm-exporter": "nvidia-dcgm-exporter"}


def gpu_node(make_fleet):
    spec = gpu_fleet.fleet([{"name": "xid", "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 2},
                             "os": {"ubuntu": "22.04"}, "reboot_seconds": 2, "nfd_lag_seconds": 1}])
    [node] = make_fleet(spec).node_names
    return spec, node


def daemon_set(cluster, namespace, spec, component, node_selector=None, env=None):
    labels = {"app": component, "app.kubernetes.io/component": component}
    container = {"name": component, "image": "example.test/sim/%s:1" % component, "env": env or []}
    cluster.apps.create_namespaced_daemon_set(namespace, {"metadata": {"name": component}, "spec": {
        "selector": {"matchLabels": {"app": component}}, "template": {"metadata": {"labels": labels}, "spec": {
            "nodeSelector": dict(node_selector or {}, **{gpu_fleet.FLEET_LABEL: spec["name"]}),
            "containers": [container]}}}})


def gpu_stack(cluster, namespace, spec, node):
    """A driver container, the toolkit, and the device plugin and DCGM exporter kept by their deploy labels."""
    set_deploy_labels(cluster, node, "true")
    daemon_set(cluster, namespace, spec, "nvidia-driver")
    daemon_set(cluster, namespace, spec, "nvidia-container-toolkit",
               env=[{"name": "NVIDIA_DRIVER_ROOT", "value": DRIVER_ROOT}])
    for operand, component in DEPLOY.items():
        daemon_set(cluster, namespace, spec, component, {"nvidia.com/gpu.deploy." + operand: "true"})
    wait_for(lambda: gpus(cluster, node) == (2, 2), message="2 GPUs advertised on " + node)
    wait_for(lambda: len(xid_errors(cluster, node)) == 2, message="the exporter's series of " + node)


def set_deploy_labels(cluster, node, value):
    cluster.core.patch_node(node, {"metadata": {"labels": {"nvidia.com/gpu.deploy." + o: value for o in DEPLOY}}})


def operands_gone(cluster, namespace, node):
    return not [p for p in cluster.core.list_namespaced_pod(namespace).items if p.spec.node_name == node
                and (p.metadata.labels or {}).get("app") in DEPLOY.values()]


def gpus(cluster, node):
    """(capacity, allocatable) nvidia.com/gpu of the node."""
    status = cluster.core.read_node(node).status
    return tuple(int((resources or {}).get("nvidia.com/gpu", 0)) for resources in (status.capacity,
                                                                                   status.allocatable))


def xid_errors(cluster, node):
    """{gpu index: DCGM_FI_DEV_XID_ERRORS} of the node, from the simulated Prometheus."""
    expr = 'DCGM_FI_DEV_XID_ERRORS{Hostname="%s"}' % node
    url = gpu_faults.prometheus_url(cluster) + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as answer:
        body = json.load(answer)
    assert body["status"] == "success", body
    return {int(r["metric"]["gpu"]): int(r["value"][1]) for r in body["data"]["result"]}


def annotation(cluster, node, key):
    return json.loads((cluster.core.read_node(node).metadata.annotations or {}).get(key) or "[]")


def ended(cluster, namespace, selector):
    """(phase, exit code, termination message) of the pod the selector finds, once it ended."""
    pod = wait_for(lambda: [p for p in cluster.core.list_namespaced_pod(namespace, label_selector=selector).items
                            if p.status.phase in ("Succeeded", "Failed")], message="the pod of %s ended" % selector)[0]
    state = pod.status.container_statuses[0].state.terminated
    return pod.status.phase, state.exit_code, state.message or ""


def run_job(cluster, namespace, job, name):
    """Runs the remediation's Job under name (each attempt its own); returns how its pod ended."""
    job["metadata"]["name"] = name
    cluster.batch.create_namespaced_job(namespace, job)
    return ended(cluster, namespace, "job-name=" + name)


def reset(cluster, namespace, node, name, *uuids):
    """Runs the remediation's reset Job of these GPUs; returns how its pod ended."""
    return run_job(cluster, namespace, jobs.reset_job(node, list(uuids), namespace, "example.test/sim/tools:1",
                                                      "default"), name)


def reboot_job(namespace, node):
    return jobs.reboot_job(node, namespace, "example.test/sim/tools:1", "default")


def test_an_xid_takes_the_gpu_out_and_a_reset_clears_it_once_nothing_holds_it(cluster, make_fleet, namespace):
    spec, node = gpu_node(make_fleet)
    gpu_stack(cluster, namespace, spec, node)
    assert xid_errors(cluster, node) == {0: 0, 1: 0}

    failing = gpu_faults.inject_xid(cluster.client, node, 1, 48)
    # An application's XID, from the command line: the GPU stays healthy.
    injected = subprocess.run([sys.executable, "-m", "localcluster", "--state", os.path.dirname(cluster.kubeconfig),
                               "xid", node, "--gpu", "0", "--xid", "13"], stdout=subprocess.PIPE, text=True,
                              check=True).stdout
    application = annotation(cluster, node, gpu_faults.FAULTS_ANNOTATION)[-1]
    assert injected.strip() == "node %s: GPU 0 (%s, 00000000:18:00.0) XID 13, cleared by a GPU reset" % (
        node, application["uuid"])
    assert failing["uuid"] == gpu_faults.gpu_uuid(node, 1) and failing["pci_bus_id"] == "00000000:29:00.0"
    wait_for(lambda: gpus(cluster, node) == (2, 1), message="GPU 1 out of allocatable")
    assert xid_errors(cluster, node) == {0: 13, 1: 48}
    # The collection's reader of GPU health finds both through the simulated Prometheus.
    health = run(cluster, "accelerators.gpu.gpu_health", {
        "label_selector": gpu_fleet.selector(spec), "prometheus_url": gpu_faults.prometheus_url(cluster)})
    assert not health.get("failed"), health
    [record] = health["gpu_health"]
    assert [(f["gpu_uuid"], f["xid"], f["source"], f["action"]) for f in record["faults"]
            if f["source"] == "prometheus"] == [(application["uuid"], 13, "prometheus", "none"),
                                                (failing["uuid"], 48, "prometheus", "reset")]
    assert record["action"] == "reset"

    # The device plugin and the exporter hold the GPUs: the reset fails as nvidia-smi does, nothing clears.
    phase, code, message = reset(cluster, namespace, node, "reset-in-use", failing["uuid"])
    assert (phase, code) == ("Failed", 1)
    assert "GPU 00000000:29:00.0 is currently in use by another process" in message
    assert jobs.reset_outcome(False, message)[0] == "refused"
    assert [r["result"] for r in annotation(cluster, node, gpu_faults.RESETS_ANNOTATION)] == ["in_use"]
    assert annotation(cluster, node, gpu_faults.FAULTS_ANNOTATION) == [failing, application]

    set_deploy_labels(cluster, node, "false")
    wait_for(lambda: operands_gone(cluster, namespace, node), message="the operands stopped on " + node)
    phase, code, message = reset(cluster, namespace, node, "reset", failing["uuid"])
    assert (phase, code) == ("Succeeded", 0), message
    resets = annotation(cluster, node, gpu_faults.RESETS_ANNOTATION)
    assert [(r["uuid"], r["result"]) for r in resets] == [(failing["uuid"], "in_use"), (failing["uuid"], "success")]
    assert annotation(cluster, node, gpu_faults.FAULTS_ANNOTATION) == [application]  # that GPU's only

    set_deploy_labels(cluster, node, "true")  # the device plugin restarts: GPU 1 is healthy again
    wait_for(lambda: gpus(cluster, node) == (2, 2), message="allocatable back to capacity")
    wait_for(lambda: xid_errors(cluster, node) == {0: 13, 1: 0}, message="the exporter's fields after the reset")


def test_xid_79_needs_a_reboot_and_a_permanent_fault_never_clears(cluster, make_fleet, namespace):
    spec, node = gpu_node(make_fleet)
    gpu_stack(cluster, namespace, spec, node)
    lost = gpu_faults.inject_xid(cluster.client, node, 0, 79)
    permanent = gpu_faults.inject_xid(cluster.client, node, 1, 48, permanent=True)
    wait_for(lambda: gpus(cluster, node) == (2, 0), message="both GPUs out of allocatable")
    assert xid_errors(cluster, node) == {0: 79, 1: 48}

    set_deploy_labels(cluster, node, "false")
    wait_for(lambda: operands_gone(cluster, namespace, node), message="the operands stopped on " + node)
    phase, code, message = reset(cluster, namespace, node, "reset-lost", lost["uuid"])
    assert (phase, code) == ("Failed", 1)
    assert "GPU is lost.  Reboot the system to recover this GPU" in message
    assert jobs.reset_outcome(False, message)[0] == "failed"
    phase, code, message = reset(cluster, namespace, node, "reset-permanent", permanent["uuid"])
    assert (phase, code) == ("Failed", 1)
    assert "Unable to reset GPU 00000000:29:00.0: Unknown Error" in message
    assert len(annotation(cluster, node, gpu_faults.FAULTS_ANNOTATION)) == 2

    # A reboot without the host's root mounted is refused by chroot; with it, as `oc debug node` runs it, it reboots.
    boot = cluster.core.read_node(node).status.node_info.boot_id
    unmounted = reboot_job(namespace, node)
    unmounted["spec"]["template"]["spec"]["volumes"] = []
    unmounted["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = []
    assert run_job(cluster, namespace, unmounted, "reboot-unmounted")[:2] == ("Failed", 125)
    assert run_job(cluster, namespace, reboot_job(namespace, node), "reboot")[:2] == ("Succeeded", 0)
    set_deploy_labels(cluster, node, "true")
    booted = wait_for(lambda: [n for n in [cluster.core.read_node(node)] if n.status.node_info.boot_id != boot
                               and any(c.type == "Ready" and c.status == "True" for c in n.status.conditions)],
                      timeout=60, message=node + " back with a new boot ID")[0]
    # The boot's status (the kubelet's) and its record are two writes: wait for the second.
    reboots = wait_for(lambda: annotation(cluster, node, gpu_faults.REBOOTS_ANNOTATION), timeout=10,
                       message="the reboot recorded")
    assert [r["boot_id"] for r in reboots] == [booted.status.node_info.boot_id]
    assert annotation(cluster, node, gpu_faults.FAULTS_ANNOTATION) == [permanent]
    # The operands come back after the boot: GPU 0 healthy, the permanent fault still takes GPU 1 out.
    wait_for(lambda: gpus(cluster, node) == (2, 1), message="GPU 0 back after the reboot")
    wait_for(lambda: xid_errors(cluster, node) == {0: 0, 1: 48}, message="the exporter's fields after the reboot")

    set_deploy_labels(cluster, node, "false")
    wait_for(lambda: operands_gone(cluster, namespace, node), message="the operands stopped again")
    assert reset(cluster, namespace, node, "reset-again", permanent["uuid"])[0] == "Failed"
    assert [(r["uuid"], r["result"]) for r in annotation(cluster, node, gpu_faults.RESETS_ANNOTATION)] == [
        (lost["uuid"], "gpu_lost"), (permanent["uuid"], "unknown_error"), (permanent["uuid"], "unknown_error")]
    assert annotation(cluster, node, gpu_faults.FAULTS_ANNOTATION) == [permanent]
