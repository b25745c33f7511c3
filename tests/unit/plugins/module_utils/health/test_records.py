# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health records of GPU nodes: faults from the DCGM exporter's fields, node conditions of GPU health monitors
(NVSentinel's) and allocatable below capacity, each with its catalog action; the node's worst."""

from ansible_collections.accelerators.gpu.plugins.module_utils.health.metrics import parse_text
from ansible_collections.accelerators.gpu.plugins.module_utils.health.records import (
    condition_faults, dra_gpus, gpu_counts, health_parts, records, summary, unhealthy)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.health.test_metrics import EXPORTER_PAGE

UUID_1 = "GPU-a1b2c3d4-0000-4c7a-9e21-0b6d4f8a7c14"


def node(name, capacity=8, allocatable=8, labels=None, conditions=(), unschedulable=False, taints=()):
    labels = dict(labels or {}, **{"feature.node.kubernetes.io/pci-10de.present": "true"})
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"unschedulable": unschedulable, "taints": list(taints)},
            "status": {"capacity": {"nvidia.com/gpu": str(capacity), "cpu": "64"},
                       "allocatable": {"nvidia.com/gpu": str(allocatable), "cpu": "63"},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
                       + list(conditions)}}


def condition(kind, message, status="True"):
    return {"type": kind, "status": status, "reason": kind + "IsNotHealthy", "message": message}


def xid_page(node_name, *xids):
    return "".join('DCGM_FI_DEV_XID_ERRORS{gpu="%d",UUID="GPU-%d",pci_bus_id="00000000:%02X:00.0",Hostname="%s"} %d\n'
                   % (index, index, index + 7, node_name, xid) for index, xid in enumerate(xids))


def test_a_healthy_node_and_one_whose_exporter_shows_xid_48_and_a_row_remap_failure():
    health = records([node("a"), node("b", allocatable=7)],
                     {"a": parse_text(xid_page("a", 0, 0)), "b": parse_text(EXPORTER_PAGE)})
    assert health[0] == {"node": "a", "healthy": True, "action": "none", "gpus": {"capacity": 8, "allocatable": 8},
                         "faults": [], "unschedulable": False,
                         "labels": {"feature.node.kubernetes.io/pci-10de.present": "true"}, "taints": []}
    record = health[1]
    assert (record["healthy"], record["action"], record["gpus"]) == (
        False, "reset", {"capacity": 8, "allocatable": 7})
    assert record["faults"] == [
        {"gpu_uuid": UUID_1, "pci_bus_id": "00000000:0F:00.0", "gpu_index": 1, "xid": 48, "source": "exporter",
         "action": "reset", "message": "XID 48 on GPU 1 (%s): reset the GPU" % UUID_1},
        {"gpu_uuid": UUID_1, "pci_bus_id": "00000000:0F:00.0", "gpu_index": 1, "xid": None, "source": "row_remap",
         "action": "reset",
         "message": "row remapping failed on GPU 1 (%s), 3 uncorrectable remapped rows: reset the GPU" % UUID_1}]
    # One GPU missing from allocatable, and the XID on that GPU explains it: no allocatable fault.
    assert unhealthy(health) == {"b": record["faults"]}


def test_application_xids_are_reported_and_the_node_stays_healthy_an_unknown_xid_is_rma():
    [apps, unknown] = records([node("a"), node("b")], {"a": parse_text(xid_page("a", 13, 31, 43)),
                                                       "b": parse_text(xid_page("b", 0, 201))}, source="prometheus")
    assert (apps["healthy"], apps["action"]) == (True, "none")
    assert [(fault["xid"], fault["action"], fault["source"]) for fault in apps["faults"]] == [
        (13, "none", "prometheus"), (31, "none", "prometheus"), (43, "none", "prometheus")]
    assert apps["faults"][0]["message"] == "XID 13 on GPU 0 (GPU-0): application error, reported only"
    assert (unknown["action"], unknown["faults"][0]["message"]) == (
        "rma", "XID 201 on GPU 1 (GPU-1): contact support (an XID the catalog table does not know)")
    assert unhealthy([apps, unknown]) == {"b": unknown["faults"]}


def test_allocatable_below_capacity_with_no_xid_seen_is_a_reset_without_xid():
    [record] = records([node("a", capacity=8, allocatable=6)], {"a": parse_text(xid_page("a", 48))})
    # Two GPUs gone, one explained by XID 48: one fault for the other.
    assert [(fault["source"], fault["xid"], fault["action"]) for fault in record["faults"]] == [
        ("exporter", 48, "reset"), ("allocatable", None, "reset")]
    assert record["faults"][1]["message"] == (
        "allocatable 6 of 8 nvidia.com/gpu and no XID seen for 1 GPU: the device plugin marked them Unhealthy")
    # An application XID explains nothing; shared GPUs (time-slicing x4) drop by 4 a GPU.
    [shared] = records([node("a", capacity=32, allocatable=24, labels={"nvidia.com/gpu.replicas": "4"})],
                       {"a": parse_text(xid_page("a", 13))})
    assert [(fault["source"], fault["action"]) for fault in shared["faults"]] == [
        ("exporter", "none"), ("allocatable", "reset")]
    assert "no XID seen for 2 GPUs" in shared["faults"][1]["message"]
    # The stack not deployed (no GPUs advertised): nothing missing.
    assert records([node("c", capacity=0, allocatable=0)])[0]["healthy"]


def test_nvsentinel_conditions_give_their_recommended_action_else_their_xids_else_fallen_off_reboots_else_rma():
    fallen = condition("SysLogsGPUFallenOff", "[79] ErrorCode:79 PCI:0000:b5:00.0 GPU_UUID:GPU-0c3f9a7e-55aa-4b7d-8f12-"
                       "3e4d5c6b7a81 kernel: NVRM: Xid (PCI:0000:b5:00): 79, GPU has fallen off the bus. - "
                       "RecommendedAction: RESTART_BM")
    [fault] = condition_faults(fallen)
    assert (fault["xid"], fault["action"], fault["source"], fault["gpu_uuid"], fault["pci_bus_id"]) == (
        79, "reboot", "condition", "GPU-0c3f9a7e-55aa-4b7d-8f12-3e4d5c6b7a81", "0000:b5:00.0")
    assert fault["message"].startswith("SysLogsGPUFallenOff: [79] ErrorCode:79") and len(fault["message"]) == 160
    # Several XIDs, no recommended action: the catalog's of each.
    assert [(fault["xid"], fault["action"]) for fault in condition_faults(
        condition("SysLogsXIDError", "[48, 13] Xid errors"))] == [(48, "reset"), (13, "none")]
    assert [fault["action"] for fault in condition_faults(
        condition("GpuMemWatch", "[] DBE count high - RecommendedAction: COMPONENT_RESET"))] == ["reset"]
    assert [fault["action"] for fault in condition_faults(
        condition("GpuPcieWatch", "PCIe link degraded - RecommendedAction: RUN_FIELDDIAG"))] == ["rma"]
    assert [fault["action"] for fault in condition_faults(condition("SysLogsGPUFallenOff", "gone"))] == ["reboot"]
    # Another monitor's GPU condition with neither XID nor action: the monitor judged the GPU faulty.
    assert [(fault["xid"], fault["action"]) for fault in condition_faults(
        condition("GPUHealthy", "", status="True"))] == [(None, "rma")]


def test_only_true_gpu_conditions_count_and_a_node_is_as_bad_as_its_worst_fault():
    conditions = [condition("SysLogsXIDError", "[48] - RecommendedAction: COMPONENT_RESET"),
                  condition("GpuThermalWatch", "[] thermal - RecommendedAction: RESTART_VM", status="False"),
                  condition("SysLogsGPUFallenOff", "[79]"),
                  # Kubelet's own conditions are no GPU monitor's, whatever their status.
                  {"type": "MemoryPressure", "status": "True", "message": "XID-free"}]
    taint = {"key": "nvidia.com/gpu-error", "value": "fatal", "effect": "NoSchedule"}
    [record] = records([node("a", allocatable=6, conditions=conditions, unschedulable=True, taints=[taint])])
    assert [(fault["source"], fault["xid"], fault["action"]) for fault in record["faults"]] == [
        ("condition", 48, "reset"), ("condition", 79, "reboot")]
    assert (record["action"], record["unschedulable"], record["taints"]) == ("reboot", True, [taint])
    # What a reader keeps of the Node: the GPU conditions only.
    assert [entry["type"] for entry in health_parts(node("a", conditions=conditions))["status"]["conditions"]] == [
        "SysLogsXIDError", "GpuThermalWatch", "SysLogsGPUFallenOff"]


def test_a_dra_node_compares_the_gpus_published_with_gfds_count():
    def device(name, kind, uuid, parent=None):
        attributes = {"type": {"string": kind}, ("parentUUID" if parent else "uuid"): {"string": parent or uuid}}
        return {"name": name, "attributes": attributes}
    slices = [{"spec": {"driver": "gpu.nvidia.com", "nodeName": "d", "devices": [
        device("gpu-0", "gpu", "GPU-0"), device("gpu-1-mig-0", "mig", None, parent="GPU-1"),
        device("gpu-1-mig-1", "mig", None, parent="GPU-1")]}}]
    assert dra_gpus(slices) == {"d": 2}
    labels = {"nvidia.com/gpu.deploy.dra-driver": "true", "nvidia.com/gpu.count": "4"}
    dra_node = node("d", capacity=0, allocatable=0, labels=labels)
    assert gpu_counts(dra_node, dra_gpus(slices)) == {"capacity": 4, "allocatable": 2}
    [record] = records([dra_node], dra_gpu_counts=dra_gpus(slices))
    assert [(fault["source"], fault["action"], fault["message"]) for fault in record["faults"]] == [
        ("allocatable", "reset", "published 2 of 4 GPUs and no XID seen for 2 GPUs: the DRA driver does not publish "
         "them")]
    # MIG devices of the mixed strategy count on a device-plugin node.
    mixed = node("m", capacity=0, allocatable=0)
    mixed["status"]["capacity"].update({"nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "2"})
    mixed["status"]["allocatable"].update({"nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "2"})
    assert gpu_counts(mixed) == {"capacity": 9, "allocatable": 9}


def test_the_summary_counts_nodes_by_action_and_faults_by_source():
    health = records([node("a"), node("b", allocatable=7), node("c")],
                     {"a": parse_text(xid_page("a", 79)), "c": parse_text(xid_page("c", 13))})
    assert summary(health) == {"gpu_nodes": 3, "healthy": 1,
                               "nodes_by_action": {"none": 1, "reset": 1, "reboot": 1, "rma": 0},
                               "faults_by_source": {"exporter": 2, "prometheus": 0, "allocatable": 1, "condition": 0,
                                                    "row_remap": 0}}
