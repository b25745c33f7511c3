"""gpu_health and the status against the local cluster: a node whose allocatable GPUs the test lowers below capacity
with a status patch, as the device plugin's kubelet does when it marks a GPU Unhealthy, and a node with NVSentinel's
condition of a GPU fallen off the bus (XID 79), each read as the fault it is, with the catalog's action; the status
names them below its table and in its HEALTH column. No stack is deployed: no DCGM exporter pod, which the module says.

The device plugin's node is one the simulator plays no GPUs for (its fleet group has no gpu), labelled by the test as
NFD labels a GPU node: on a simulated GPU node the simulator plays the device plugin and would set allocatable back.
"""

from gpu_fleet import FLEET_LABEL, RHCOS_418, fleet, selector
from playbook import run, warm_up
from test_deploy import playbook

GPU = {"product": "NVIDIA-A100-SXM4-80GB", "count": 2}
UUID = "GPU-0c3f9a7e-55aa-4b7d-8f12-3e4d5c6b7a81"
# As NVSentinel's syslog health monitor writes it (its message: the codes, the line, the recommended action).
FALLEN_OFF = {"type": "SysLogsGPUFallenOff", "status": "True", "reason": "SysLogsGPUFallenOffIsNotHealthy",
              "message": "[79] ErrorCode:79 PCI:0000:b5:00.0 GPU_UUID:%s kernel: NVRM: Xid (PCI:0000:b5:00): 79, "
                         "GPU has fallen off the bus. - RecommendedAction: RESTART_BM" % UUID}
# What NFD and GPU feature discovery label a node with 2 A100s with, for the node the simulator has no GPUs on.
GPU_LABELS = {"feature.node.kubernetes.io/pci-10de.present": "true", "nvidia.com/gpu.count": "2",
              "nvidia.com/gpu.product": GPU["product"]}


def health_records(result):
    return {record["node"]: record for record in result["gpu_health"]}


def test_a_gpu_marked_unhealthy_and_a_gpu_fallen_off_the_bus_are_read_classified_and_shown(
        cluster, namespace, make_fleet):
    spec = fleet([{"name": "gpu", "count": 2, "gpu": GPU, "os": {"rhcos": RHCOS_418}},
                  {"name": "plugin", "os": {"rhcos": RHCOS_418}}])
    healthy, fallen, plugin = make_fleet(spec).node_names
    cluster.core.patch_node(plugin, {"metadata": {"labels": GPU_LABELS}})
    cluster.core.patch_node_status(plugin, {"status": {"capacity": {"nvidia.com/gpu": "2"},
                                                       "allocatable": {"nvidia.com/gpu": "1"}}})
    cluster.core.patch_node_status(fallen, {"status": {"conditions": [FALLEN_OFF]}})
    warm_up(cluster)

    arguments = {"namespace": namespace, "label_selector": selector(spec)}
    result = run(cluster, "accelerators.gpu.gpu_health", arguments)
    assert not result.get("failed"), result
    records = health_records(result)
    assert sorted(records) == sorted([healthy, fallen, plugin])
    assert (records[healthy]["healthy"], records[healthy]["action"], records[healthy]["faults"]) == (True, "none", [])
    assert records[fallen]["faults"] == [
        {"gpu_uuid": UUID, "pci_bus_id": "0000:b5:00.0", "gpu_index": None, "xid": 79, "source": "condition",
         "action": "reboot", "message": ("SysLogsGPUFallenOff: " + FALLEN_OFF["message"])[:157] + "..."}]
    assert (records[fallen]["healthy"], records[fallen]["action"], records[fallen]["unschedulable"]) == (
        False, "reboot", False)
    assert records[fallen]["labels"][FLEET_LABEL] == spec["name"]
    assert (records[plugin]["action"], records[plugin]["gpus"]) == ("reset", {"capacity": 2, "allocatable": 1})
    assert records[plugin]["faults"] == [
        {"gpu_uuid": None, "pci_bus_id": None, "gpu_index": None, "xid": None, "source": "allocatable",
         "action": "reset", "message": "allocatable 1 of 2 nvidia.com/gpu and no XID seen for 1 GPU: the device "
                                       "plugin marked them Unhealthy"}]
    assert sorted(result["unhealthy"]) == sorted([fallen, plugin])
    assert result["summary"] == {
        "gpu_nodes": 3, "healthy": 1, "nodes_by_action": {"none": 1, "reset": 1, "reboot": 1, "rma": 0},
        "faults_by_source": {"exporter": 0, "prometheus": 0, "allocatable": 1, "condition": 1, "row_remap": 0},
        "metrics_source": "exporter",
        "metrics_unread": {name: "no DCGM exporter pod" for name in (healthy, fallen, plugin)}}
    # The nodes, and the exporter pods of the namespace (none).
    assert (result["changed"], result["api_requests"]) == (False, {"GET": 2})
    # Check mode reads the same.
    checked = run(cluster, "accelerators.gpu.gpu_health", arguments, check=True)
    assert (checked["changed"], checked["gpu_health"]) == (False, result["gpu_health"])

    # The status playbook: the faults asking for an action below the table, the HEALTH column in the wide view.
    variables = {"common_namespace": namespace, "driver_node_selector": {FLEET_LABEL: spec["name"]}}
    status = playbook(cluster, "status", variables).succeeded()
    lines = dict(status.results)["Print the status table"]["msg"]
    print("\n".join(lines))
    section = lines[lines.index("Unhealthy GPUs on 2 nodes:"):]
    assert [line.split() for line in section[1:3]] == [
        ["NODE", "GPU", "XID", "ACTION", "SOURCE"], [fallen, UUID, "79", "reboot", "condition"]]
    assert section[3].split() == [plugin, "-", "-", "reset", "allocatable"]
    assert section[4].startswith("GPU stack NOT ready on ") and len(section) == 5
    assert max(len(line) for line in lines) <= 109
    stats = status.report["global_custom_stats"]["gpu_stack_status"]
    assert health_records(stats) == records
    assert {row["node"]: row["health"] for row in stats["nodes"]} == {healthy: "none", fallen: "reboot",
                                                                      plugin: "reset"}
    wide = playbook(cluster, "status", dict(variables, status_columns="wide")).succeeded()
    table = dict(wide.results)["Print the status table"]["msg"]
    at = table[0].index("HEALTH")
    assert {line.split()[0]: line[at:].split("  ")[0] for line in table[1:4]} == {
        healthy: "ok", fallen: "reboot: XID 79", plugin: "reset: allocatable"}
