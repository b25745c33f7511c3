"""The remediate playbook against the local control plane and the simulator's failing GPUs (gpu_faults.py): XID 48
on one GPU of a node running a GPU workload under a PodDisruptionBudget is taken through quarantine, drain (the
budget holding the eviction until it allows it), reset, validation and back, the other node untouched; XID 79 on
the other node through a reboot (a new boot ID); a permanent fault held for RMA; --check prints the plan and writes
nothing. Then XID 79 again, the node rebooted by the site's reboot task file (remediation_reboot_tasks) instead of
the reboot Job: the file asks the simulated host to reboot in place (kernel.py's REBOOT_REQUEST_ANNOTATION), as a
BMC's power cycle would. Then the policies, on the three nodes as the stories leave them (the first held for RMA):
application XIDs reported only, the circuit breaker, and nodes opted out or managed by NVSentinel reported only."""

import json
import os
import time

import kubernetes
import pytest

from conftest import wait_for
from gpu_fleet import RHCOS_416, selector
from localcluster import api, gpu_faults, kernel, mco, stages
from test_deploy import fleet_variables, gpu_fleet, playbook
from test_driver_rollout import audit_events
from test_rhcos_upgrade_playbook import UpgradeRun

GPU = "nvidia.com/gpu"
STATE = "accelerators.gpu/gpu-remediation-state"
RECORD = "accelerators.gpu/gpu-remediation"
TAINT = "accelerators.gpu/gpu-remediation"
PLUGIN = "app.kubernetes.io/component=nvidia-device-plugin"
REBOOT_JOBS = "accelerators.gpu/remediation=reboot"
# The site's reboot: each run notes the node in a file the test reads, then asks the simulated host to go down a
# second later, and returns before the node is back.
SITE_REBOOT_TASKS = """---
- name: Note that the site's reboot ran for {{ remediation_reboot_node }}
  ansible.builtin.lineinfile:
    path: %(marker)s
    line: "{{ remediation_reboot_node }} {{ now().timestamp() }}"
    create: true

- name: Power-cycle {{ remediation_reboot_node }} (the simulated host reboots in place)
  kubernetes.core.k8s:
    state: patched
    kind: Node
    name: "{{ remediation_reboot_node }}"
    definition:
      metadata:
        annotations:
          %(request)s: "{{ (now().timestamp() + 1) | string }}"
"""


@pytest.fixture(scope="module")
def stack(cluster):
    """(faulty node, other node, namespace, variables, workloads namespace, fault): three GPU nodes with the stack
    deployed (the third, spare(), for the policies), a GPU workload under a PodDisruptionBudget on the first, and
    XID 48 on its GPU 1."""
    from localcluster import fleet as fleets
    gpu = {"gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 2}}
    spec = gpu_fleet(dict(gpu, name="gpu", count=3, os={"rhcos": RHCOS_416}))
    made = fleets.Fleet(cluster.client, spec, prefix="rem-%s-" % os.urandom(2).hex()).apply().wait_ready()
    faulty, other, _spare = sorted(made.node_names)
    namespace = "t-remediate-" + os.urandom(2).hex()
    variables = dict(fleet_variables(namespace, spec, container_toolkit_validate=False,
                                     device_plugin_validate_workload=False), common_wait_timeout=120)
    # The health as accelerators.gpu.gpu_health reads it: the simulated DCGM exporters' fields through Prometheus.
    remediation = dict(variables, remediation_label_selector=selector(spec), remediation_poll_interval=0.5,
                       remediation_prometheus_url=gpu_faults.prometheus_url(cluster))
    playbook(cluster, "deploy", variables).succeeded()
    workloads = "t-rem-workloads-" + os.urandom(2).hex()
    cluster.core.create_namespace({"metadata": {"name": workloads}})
    start_workload(cluster, workloads, faulty)
    fault = gpu_faults.inject_xid(cluster.client, faulty, 1, 48)
    wait_for(lambda: gpus(cluster, faulty) == (2, 1), message="GPU 1 of %s out of allocatable" % faulty)
    yield faulty, other, namespace, remediation, workloads, fault
    cluster.core.delete_namespace(workloads)
    cluster.core.delete_namespace(namespace)
    made.delete()


def start_workload(cluster, workloads, node):
    """A Deployment of one GPU pod on the node, guarded by a PodDisruptionBudget that allows no disruption."""
    labels = {"app": "train"}
    cluster.apps.create_namespaced_deployment(workloads, {"metadata": {"name": "train"}, "spec": {
        "replicas": 1, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "train", "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                            "resources": {"limits": {GPU: "1"}}}]}}}})
    kubernetes.client.PolicyV1Api(cluster.client).create_namespaced_pod_disruption_budget(workloads, {
        "metadata": {"name": "train"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}})
    wait_for(lambda: running(cluster, workloads), timeout=120, message="the GPU workload running on " + node)


def running(cluster, workloads):
    return [p for p in cluster.core.list_namespaced_pod(workloads).items
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp]


def gpus(cluster, node):
    """(capacity, allocatable) nvidia.com/gpu of the node."""
    status = cluster.core.read_node(node).status
    return tuple(int((resources or {}).get(GPU, 0)) for resources in (status.capacity, status.allocatable))


def node_view(cluster, name):
    """What must not change on a node left alone: labels, annotations, taints, schedulability, its pods (uid ->
    namespace)."""
    node = cluster.core.read_node(name)
    pods = {p.metadata.uid: p.metadata.namespace for p in cluster.core.list_pod_for_all_namespaces(
        field_selector="spec.nodeName=" + name).items}
    taints = sorted((t.key, t.value, t.effect) for t in node.spec.taints or [])
    return node.metadata.labels, node.metadata.annotations, taints, bool(node.spec.unschedulable), pods


def assert_left_alone(cluster, name, before, namespaces):
    """The node as it was: labels, annotations, taints and schedulability equal, every pod it had still there. A
    pod may arrive: the scheduler places other tests' pods, and pods a drain of another node evicted, on any node
    of the shared cluster; none of the remediation's own (namespaces) may."""
    *node, pods = node_view(cluster, name)
    *node_before, pods_before = before
    assert node == node_before
    assert set(pods_before) <= set(pods), "pods gone from %s: %s" % (name, sorted(set(pods_before) - set(pods)))
    assert not [uid for uid, namespace in pods.items() if uid not in pods_before and namespace in namespaces]


def wait_for_settled(cluster, name):
    """Until the simulator is done with the node's last boot: up again, and the simulated nfd-worker's pass after it
    made (mco.py, nfd_lag_seconds later). Until then the simulator itself changes the node's labels and annotations:
    a view of the node taken before would differ from one after."""
    def settled():
        annotations = cluster.core.read_node(name).metadata.annotations or {}
        return not {mco.NFD_RELABEL_ANNOTATION, kernel.REBOOT_REQUEST_ANNOTATION, stages.REBOOTING_ANNOTATION} & set(
            annotations)
    wait_for(settled, message="the simulator done with the boot of " + name)


def refused_evictions(cluster, namespace):
    """Evictions of pods in namespace the API server refused with 429 (a PodDisruptionBudget), from its audit log."""
    with open(cluster.audit_log) as log:
        events = [json.loads(line) for line in log]
    return [e["objectRef"]["name"] for e in events if (e.get("objectRef") or {}).get("namespace") == namespace
            and e["objectRef"].get("subresource") == "eviction" and e["verb"] == "create"
            and (e.get("responseStatus") or {}).get("code") == 429]


def annotation(cluster, node, key):
    return json.loads((cluster.core.read_node(node).metadata.annotations or {}).get(key) or "[]")


def test_check_mode_prints_the_plan_and_writes_nothing(cluster, stack):
    faulty, other, namespace, variables, _workloads, fault = stack
    before = api.object_names(cluster.client), node_view(cluster, faulty), node_view(cluster, other)
    checked = playbook(cluster, "remediate", variables, check=True).succeeded()
    [shown] = [result["msg"] for name, result in checked.results if name.endswith("Show the plan")]
    assert shown[0] == "Check mode, nothing changes."
    assert shown[1].startswith("cluster localhost, node %s: no state -> quarantine, then drain-required; GPUs %s "
                               "(PCI %s); XIDs 48" % (faulty, fault["uuid"], fault["pci_bus_id"])), shown
    assert (api.object_names(cluster.client), node_view(cluster, faulty), node_view(cluster, other)) == before


def test_xid_48_is_quarantined_drained_reset_validated_and_returned_the_other_node_untouched(
        cluster, stack, tmp_path):
    faulty, other, namespace, variables, workloads, fault = stack
    other_before = node_view(cluster, other)
    [workload] = running(cluster, workloads)
    plugin_before = [p.metadata.uid for p in cluster.core.list_namespaced_pod(namespace, label_selector=PLUGIN).items
                     if p.spec.node_name == faulty]

    run = UpgradeRun(cluster, variables, tmp_path, playbook="accelerators.gpu.remediate")
    try:
        # Quarantined, and the PodDisruptionBudget holds the eviction back: the workload keeps running.
        wait_for(lambda: refused_evictions(cluster, workloads), timeout=120, message="an eviction refused (429)")
        node = cluster.core.read_node(faulty)
        assert node.metadata.labels[STATE] == "drain-required" and node.spec.unschedulable
        assert (TAINT, "reset", "NoSchedule") in [(t.key, t.value, t.effect) for t in node.spec.taints]
        assert [p.metadata.uid for p in running(cluster, workloads)] == [workload.metadata.uid]
        # The budget allows it now: the drain goes on.
        kubernetes.client.PolicyV1Api(cluster.client).patch_namespaced_pod_disruption_budget(
            "train", workloads, {"spec": {"minAvailable": 0}})
        allowed = time.monotonic()
        assert run.wait(timeout=600) == 0, run.output[-4000:]
    finally:
        if run.process.poll() is None:
            run.kill()
    print("remediate: %.1f s; the budget allowing the eviction to the node back (reset path): %.1f s" % (
        run.seconds, time.monotonic() - allowed))
    assert "[WARNING]" not in run.output

    node = cluster.core.read_node(faulty)
    record = json.loads(node.metadata.annotations[RECORD])
    # Returned: done, uncordoned, the taint off, its GPUs all allocatable.
    assert node.metadata.labels[STATE] == "done"
    assert not node.spec.unschedulable
    assert TAINT not in [t.key for t in node.spec.taints or []]
    assert gpus(cluster, faulty) == (2, 2)
    assert record["gpu_uuids"] == [fault["uuid"]]
    assert (record["pci_bus_ids"], record["xids"]) == ([fault["pci_bus_id"]], [48])
    assert [(a["action"], a["result"]) for a in record["attempts"]] == [("reset", "succeeded")]
    # One reset, on that GPU only; its fault cleared.
    assert [(r["uuid"], r["result"]) for r in annotation(cluster, faulty, gpu_faults.RESETS_ANNOTATION)] == [
        (fault["uuid"], "success")]
    assert annotation(cluster, faulty, gpu_faults.FAULTS_ANNOTATION) == []
    # The workload left through the Eviction API only (kwok removes an evicted pod once it terminated).
    deleted, evicted = audit_events(cluster, workloads)
    assert evicted == {workload.metadata.name: 1}
    assert list(deleted) == [(workload.metadata.name, "kwok")], deleted
    # The operands were stopped and came back: a new device plugin pod, and the deploy labels back to true.
    plugin_after = [p.metadata.uid for p in cluster.core.list_namespaced_pod(namespace, label_selector=PLUGIN).items
                    if p.spec.node_name == faulty]
    assert plugin_after and set(plugin_after).isdisjoint(plugin_before)
    assert "paused-for-gpu-reset" not in node.metadata.labels.values()
    # The CUDA validation of this attempt passed on that node.
    jobs = cluster.batch.list_namespaced_job(namespace, label_selector="accelerators.gpu/validation=gpu-remediation-cuda")
    assert [(j.metadata.annotations["accelerators.gpu/node"], j.status.succeeded) for j in jobs.items] == [
        (faulty, 1)]
    # The report names the cluster, the node, the GPU, its PCI bus ID and the XID.
    assert "cluster localhost, node %s: done; GPUs %s (PCI %s); XIDs 48." % (
        faulty, fault["uuid"], fault["pci_bus_id"]) in " ".join(run.output.split()), run.output[-3000:]
    # The other node is as it was.
    assert_left_alone(cluster, other, other_before, (namespace, workloads))
    # The workload comes back on the returned node.
    wait_for(lambda: [p for p in running(cluster, workloads) if p.spec.node_name == faulty], timeout=60,
             message="the workload back on " + faulty)


def test_xid_79_is_rebooted_to_a_new_boot_id_validated_and_returned(cluster, stack):
    returned, node_name, namespace, variables, workloads, _fault = stack
    wait_for(lambda: [p for p in running(cluster, workloads) if p.spec.node_name == returned], timeout=60,
             message="the workload on " + returned)
    returned_before = node_view(cluster, returned)
    started = time.monotonic()
    gpu_faults.inject_xid(cluster.client, node_name, 0, 79)
    wait_for(lambda: gpus(cluster, node_name) == (2, 1), message="GPU 0 of %s out of allocatable" % node_name)
    boot = cluster.core.read_node(node_name).status.node_info.boot_id

    run = playbook(cluster, "remediate", variables).succeeded()
    print("remediate (reboot): %.1f s; XID 79 to the node back (a run started at once): %.1f s" % (
        run.seconds, time.monotonic() - started))

    node = cluster.core.read_node(node_name)
    record = json.loads(node.metadata.annotations[RECORD])
    assert node.metadata.labels[STATE] == "done" and not node.spec.unschedulable
    assert TAINT not in [t.key for t in node.spec.taints or []]
    assert gpus(cluster, node_name) == (2, 2)
    assert [(a["action"], a["result"], a["boot_id"]) for a in record["attempts"]] == [("reboot", "succeeded", boot)]
    # One reboot, to a new boot ID; no reset; the fault cleared by the boot.
    assert node.status.node_info.boot_id != boot
    assert [r["boot_id"] for r in annotation(cluster, node_name, gpu_faults.REBOOTS_ANNOTATION)] == [
        node.status.node_info.boot_id]
    assert annotation(cluster, node_name, gpu_faults.RESETS_ANNOTATION) == []
    assert annotation(cluster, node_name, gpu_faults.FAULTS_ANNOTATION) == []
    assert_left_alone(cluster, returned, returned_before, (namespace, workloads))


def test_a_permanent_fault_goes_for_rma_after_the_attempts_and_a_rerun_leaves_it_alone(cluster, stack):
    node_name, _other, _namespace, variables, _workloads, _fault = stack
    permanent = gpu_faults.inject_xid(cluster.client, node_name, 0, 48, permanent=True)
    wait_for(lambda: gpus(cluster, node_name) == (2, 1), message="GPU 0 of %s out of allocatable" % node_name)
    held = dict(variables, remediation_max_attempts=2)

    run = playbook(cluster, "remediate", held)
    name, result = run.failure()
    assert name.endswith("Fail when a node of the wave failed or went for RMA")
    words = " ".join(result["msg"].split())
    assert "node %s is rma" % node_name in words and permanent["uuid"] in words and "XID 48" in words, words
    # Faulty again after the reset of the first story: rebooted this time, and still faulty after it, the
    # second attempt within the window: held for RMA, cordoned and tainted.
    [shown] = [r["msg"] for n, r in run.results if n.endswith("Show the plan")]
    assert "faulty again after the reset of" in " ".join(shown), shown
    node = cluster.core.read_node(node_name)
    record = json.loads(node.metadata.annotations[RECORD])
    assert node.metadata.labels[STATE] == "rma" and node.spec.unschedulable
    assert (TAINT, "rma", "NoSchedule") in [(t.key, t.value, t.effect) for t in node.spec.taints]
    assert [(a["action"], a["result"]) for a in record["attempts"]] == [("reset", "succeeded"), ("reboot", "failed")]
    assert "allocatable nvidia.com/gpu 1 of capacity 2" in record["attempts"][-1]["message"]
    assert gpus(cluster, node_name) == (2, 1)

    # A run after it reports the node and does nothing to it.
    wait_for_settled(cluster, node_name)
    before = node_view(cluster, node_name)
    again = playbook(cluster, "remediate", held).succeeded()
    [shown] = [r["msg"] for n, r in again.results if n.endswith("Show the plan")]
    assert [line for line in shown if "node %s: quarantined for RMA since" % node_name in line
            and permanent["uuid"] in line], shown
    assert node_view(cluster, node_name) == before


def test_xid_79_is_rebooted_by_the_site_s_reboot_tasks_instead_of_the_job(cluster, stack, tmp_path):
    _faulty, node_name, namespace, variables, _workloads, _fault = stack
    marker = tmp_path / "site-reboots"
    tasks = tmp_path / "site-reboot.yml"
    tasks.write_text(SITE_REBOOT_TASKS % {"marker": marker, "request": kernel.REBOOT_REQUEST_ANNOTATION})
    site = dict(variables, remediation_reboot_tasks=str(tasks))
    gpu_faults.inject_xid(cluster.client, node_name, 0, 79)
    wait_for(lambda: gpus(cluster, node_name) == (2, 1), message="GPU 0 of %s out of allocatable" % node_name)
    boot = cluster.core.read_node(node_name).status.node_info.boot_id
    attempts_before = json.loads((cluster.core.read_node(node_name).metadata.annotations or {}).get(RECORD) or "{}")
    reboot_jobs = sorted(j.metadata.uid for j in cluster.batch.list_namespaced_job(
        namespace, label_selector=REBOOT_JOBS).items)
    reboots_before = annotation(cluster, node_name, gpu_faults.REBOOTS_ANNOTATION)

    # --check: the plan, and neither the site's tasks nor any write.
    wait_for_settled(cluster, node_name)
    before = node_view(cluster, node_name)
    checked = playbook(cluster, "remediate", site, check=True).succeeded()
    [shown] = [result["msg"] for name, result in checked.results if name.endswith("Show the plan")]
    assert [line for line in shown if "node %s: no state -> quarantine" % node_name in line
            or "node %s: done -> quarantine" % node_name in line], shown
    assert not marker.exists() and node_view(cluster, node_name) == before

    run = playbook(cluster, "remediate", site).succeeded()
    print("remediate (the site's reboot): %.1f s" % run.seconds)

    # The site's tasks ran once, for that node; no reboot Job was created.
    assert [line.split()[0] for line in marker.read_text().splitlines()] == [node_name]
    assert sorted(j.metadata.uid for j in cluster.batch.list_namespaced_job(
        namespace, label_selector=REBOOT_JOBS).items) == reboot_jobs
    # Back with a new boot ID (one more boot of the simulated host), validated and returned.
    node = cluster.core.read_node(node_name)
    record = json.loads(node.metadata.annotations[RECORD])
    assert node.metadata.labels[STATE] == "done" and not node.spec.unschedulable
    assert TAINT not in [t.key for t in node.spec.taints or []]
    assert gpus(cluster, node_name) == (2, 2)
    assert node.status.node_info.boot_id != boot
    reboots = annotation(cluster, node_name, gpu_faults.REBOOTS_ANNOTATION)
    assert [r["boot_id"] for r in reboots[len(reboots_before):]] == [node.status.node_info.boot_id]
    assert annotation(cluster, node_name, gpu_faults.FAULTS_ANNOTATION) == []
    # The attempt recorded as the Job's is, asked of the node by the site's tasks.
    assert len(record["attempts"]) == len(attempts_before.get("attempts") or []) + 1
    attempt = record["attempts"][-1]
    assert (attempt["action"], attempt["result"], attempt["boot_id"], attempt["by"]) == (
        "reboot", "succeeded", boot, "tasks")
    assert attempt["started"] <= attempt["requested"] <= attempt["finished"]
    jobs = cluster.batch.list_namespaced_job(
        namespace, label_selector="accelerators.gpu/validation=gpu-remediation-cuda")
    assert [j.status.succeeded for j in jobs.items if j.metadata.annotations["accelerators.gpu/node"] == node_name
            and j.metadata.annotations["accelerators.gpu/validated-pods"] == "reboot-%s" % attempt["started"]] == [1]


def spare(cluster, variables):
    """The third node of the stack: no story touched it."""
    return sorted(n.metadata.name for n in cluster.core.list_node(
        label_selector=variables["remediation_label_selector"]).items)[2]


def plan_shown(run):
    [shown] = [result["msg"] for name, result in run.results if name.endswith("Show the plan")]
    return [" ".join(line.split()) for line in shown]


def test_application_xids_13_31_43_are_reported_and_nothing_is_touched(cluster, stack):
    held, other, namespace, variables, workloads, _fault = stack
    node_name = spare(cluster, variables)
    wait_for_settled(cluster, other)  # rebooted by the story before
    # One XID per GPU: the exporter's DCGM_FI_DEV_XID_ERRORS holds a GPU's last XID only.
    injected = {node_name: ((0, 13), (1, 31)), other: ((0, 43),)}
    for name, faults in injected.items():
        for gpu, xid in faults:
            gpu_faults.inject_xid(cluster.client, name, gpu, xid)
    before = {name: node_view(cluster, name) for name in (node_name, other)}
    objects = api.object_names(cluster.client)

    run = playbook(cluster, "remediate", variables).succeeded()

    shown = plan_shown(run)
    for name, faults in injected.items():
        [line] = [line for line in shown if "node %s:" % name in line]
        assert "application XIDs only, reported" in line and "nothing done" in line, shown
        assert all("XID %d" % xid in line for _gpu, xid in faults), line
        # The device plugin keeps such a GPU Healthy: every GPU stays allocatable.
        assert gpus(cluster, name) == (2, 2)
    for name, view in before.items():
        assert_left_alone(cluster, name, view, (namespace, workloads))
    assert api.object_names(cluster.client) == objects
    assert not [name for name, result in run.results if name.endswith("Quarantine the wave's nodes (cordon and taint)")
                and not result.get("skipped")]


def test_faults_on_more_than_the_percent_of_nodes_trip_the_breaker_and_nothing_is_cordoned(cluster, stack):
    held, other, namespace, variables, workloads, _fault = stack
    node_name = spare(cluster, variables)
    for name in (other, node_name):
        gpu_faults.inject_xid(cluster.client, name, 0, 48)
        wait_for(lambda: gpus(cluster, name) == (2, 1), message="GPU 0 of %s out of allocatable" % name)
    before = {name: node_view(cluster, name) for name in (held, other, node_name)}
    objects = api.object_names(cluster.client)

    # Two of the three GPU nodes faulty (the one held for RMA counts no more), more than 50 %.
    name, result = playbook(cluster, "remediate", variables).failure()

    assert name.endswith("Stop when too many GPU nodes are faulty at once"), (name, result)
    words = " ".join(result["msg"].split())
    assert "2 of 3 GPU nodes (66 %) have GPU faults at once, more than max_faulty_percent 50 %" in words, words
    assert "no node is remediated" in words and "XID 48 on 2 of them (%s, %s)" % (other, node_name) in words, words
    for name, view in before.items():
        assert node_view(cluster, name) == view
    assert api.object_names(cluster.client) == objects


def test_a_node_opted_out_and_one_nvsentinel_manages_are_reported_only(cluster, stack):
    held, other, namespace, variables, workloads, _fault = stack
    node_name = spare(cluster, variables)
    assert gpus(cluster, other) == gpus(cluster, node_name) == (2, 1)  # XID 48 on each, from the breaker's test
    cluster.core.patch_node(other, {"metadata": {"labels": {"accelerators.gpu/gpu-remediation.skip": "true"}}})
    cluster.core.patch_node(node_name, {"metadata": {"labels": {"dgxc.nvidia.com/nvsentinel-state": "quarantined"}}})
    before = {name: node_view(cluster, name) for name in (other, node_name)}
    objects = api.object_names(cluster.client)

    # The breaker out of the way: both nodes are faulty still.
    run = playbook(cluster, "remediate", dict(variables, remediation_max_faulty_percent=100)).succeeded()

    shown = plan_shown(run)
    [opted] = [line for line in shown if "node %s:" % other in line]
    [managed] = [line for line in shown if "node %s:" % node_name in line]
    assert "opted out (label accelerators.gpu/gpu-remediation.skip=true)" in opted and "XID 48" in opted, shown
    assert "managed by NVIDIA NVSentinel" in managed and "XID 48" in managed, shown
    for name, view in before.items():
        assert node_view(cluster, name) == view
    assert api.object_names(cluster.client) == objects
