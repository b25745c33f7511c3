# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet status filters: a cluster's summary from stack_status rows, the fleet's table and summary lines."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.accelerators.gpu.plugins.filter.fleet_status import (
    FilterModule, fleet_status_lines, fleet_status_summary)
from ansible_collections.accelerators.gpu.plugins.module_utils.status.stack_status import node_rows, table_lines

OPERANDS = ("nvidia-container-toolkit", "nvidia-device-plugin", "nvidia-dcgm-exporter")
CONNECTION_REFUSED = ("Failed to get client due to HTTPSConnectionPool(host='127.0.0.1', port=1): Max retries "
                      "exceeded with url: /version\n(Caused by NewConnectionError: [Errno 111] Connection refused)")


def pod(node, component, ready=True, reason=None):
    return {"metadata": {"name": "%s-%s" % (component, node),
                         "labels": {"app.kubernetes.io/component": component, "app": component}},
            "spec": {"nodeName": node},
            "status": {"phase": "Running" if ready else "Pending",
                       "containerStatuses": [{"ready": ready,
                                              "state": {"waiting": {"reason": reason}} if reason else {}}]}}


def validated(node, result="succeeded"):
    return {"metadata": {"labels": {"accelerators.gpu/validation": "cuda"},
                         "annotations": {"accelerators.gpu/node": node}},
            "status": {result: 1, "completionTime": "2026-01-01T00:00:00Z"}}


def gpu_node(name, driver="true", version=None, upgrade=None, failure=None, gpus=8):
    labels = {"nvidia.com/gpu.deploy.driver": driver}
    if version:
        labels["nvidia.com/cuda.driver-version.full"] = version
    if upgrade:
        labels["nvidia.com/gpu-driver-upgrade-state"] = upgrade
    fact = {"name": name, "gpu_present": True, "gpu_count": gpus, "rhcos_version": "9.6.20260303-1", "kernel": {},
            "deploy_labels": {"driver": driver}}
    obj = {"metadata": {"name": name, "labels": labels,
                        "annotations": {"accelerators.gpu/driver-upgrade-failure": failure} if failure else {}},
           "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}
    return fact, obj


def status(*nodes, pods=(), jobs=()):
    """A stack_status result of these (fact, Node) pairs: every node runs every operand, ready, unless pods says."""
    facts, objects = [node[0] for node in nodes], [node[1] for node in nodes]
    pods = list(pods) or [pod(fact["name"], component) for fact in facts for component in
                          (("nvidia-driver",) if fact["deploy_labels"]["driver"] == "true" else ()) + OPERANDS]
    rows = node_rows(facts, objects, pods, list(jobs) or [validated(fact["name"]) for fact in facts])
    return {"changed": False, "nodes": rows, "ready": bool(rows) and all(row["ready"] for row in rows),
            "lines": table_lines(rows)}


def healthy():
    return status(*[gpu_node("gpu-%d" % index, version="570.172.08") for index in range(4)],
                  gpu_node("gpu-host", driver="pre-installed"))


def test_a_healthy_cluster_counts_ready_nodes_and_driver_versions_with_a_host_driver():
    assert fleet_status_summary(healthy()) == {
        "ready": True, "failed": False, "error": None, "gpu_nodes": 5, "ready_nodes": 5,
        "driver_versions": {"570.172.08": 4, "host": 1}, "mid_upgrade": 0, "problems": []}


def test_upgrades_under_way_and_failed_count_mid_upgrade_and_the_failure_is_a_problem():
    read = status(gpu_node("a", version="570.172.08"),
                  gpu_node("b", version="550.90.07", upgrade="drain-required"),
                  gpu_node("c", version="570.172.08", upgrade="upgrade-failed", failure="validation cuda failed"),
                  gpu_node("d", version="570.172.08", upgrade="upgrade-done"))
    summary = fleet_status_summary(read)
    assert (summary["gpu_nodes"], summary["ready_nodes"], summary["mid_upgrade"]) == (4, 2, 2)
    assert summary["driver_versions"] == {"570.172.08": 3, "550.90.07": 1}
    assert summary["problems"] == ["b not ready: driver upgrade: drain-required",
                                   "c not ready: driver upgrade: upgrade-failed (validation cuda failed)"]
    assert summary["ready"] is False


def test_nodes_without_a_driver_pod_or_an_unlabelled_version_and_not_ready_operands():
    read = status(gpu_node("bare"), gpu_node("crash"),
                  pods=[pod("crash", "nvidia-driver", ready=False, reason="CrashLoopBackOff")],
                  jobs=[validated("crash", "failed")])
    summary = fleet_status_summary(read)
    assert summary["driver_versions"] == {"none": 1, "unknown": 1}
    assert summary["problems"] == [
        "bare not ready: driver no pod, toolkit no pod, device plugin no pod, dcgm exporter no pod, not validated",
        "crash not ready: driver CrashLoopBackOff, toolkit no pod, device plugin no pod, dcgm exporter no pod, "
        "validation cuda failed"]


def test_a_cluster_without_gpu_nodes_is_not_ready_and_says_so():
    assert fleet_status_summary(status()) == {
        "ready": False, "failed": False, "error": None, "gpu_nodes": 0, "ready_nodes": 0, "driver_versions": {},
        "mid_upgrade": 0, "problems": ["no GPU node found"]}


@pytest.mark.parametrize("read, error", [
    ({"failed": True, "msg": CONNECTION_REFUSED}, " ".join(CONNECTION_REFUSED.split())),
    ({"failed": True}, "no status was read"),
    ({}, "no status was read"),
    (None, "no status was read"),
])
def test_a_failed_read_is_a_failed_cluster_with_its_error_on_one_line(read, error):
    assert fleet_status_summary(read) == {
        "ready": False, "failed": True, "error": error, "gpu_nodes": None, "ready_nodes": None, "driver_versions": {},
        "mid_upgrade": None, "problems": []}


def test_the_fleet_table_has_a_cluster_column_then_the_node_columns_and_a_summary_line_per_cluster():
    other = status(gpu_node("node-with-a-long-name", version="550.90.07"))
    lines = fleet_status_lines({"ocp-a": healthy(), "k8s-b": other})
    header, rows = lines[0], lines[1:7]
    assert header.split()[:4] == ["CLUSTER", "NODE", "GPUS", "PRODUCT"]
    assert [line.split()[:2] for line in rows] == [["ocp-a", "gpu-0"], ["ocp-a", "gpu-1"], ["ocp-a", "gpu-2"],
                                                   ["ocp-a", "gpu-3"], ["ocp-a", "gpu-host"],
                                                   ["k8s-b", "node-with-a-long-name"]]
    # Aligned under the header; after the cluster, the cells of the single-cluster table.
    assert {line.index("gpu-") for line in rows[:5]} == {header.index("NODE")} == {len("CLUSTER  ")}
    assert rows[5].index(" 8 ") == header.index(" GPUS")
    assert [line.split()[1:] for line in rows[:5]] == [line.split() for line in healthy()["lines"][1:]]
    assert lines[7:] == [
        "ocp-a: 5 GPU nodes, 5 ready, driver 570.172.08 (4), host (1), 0 mid-upgrade, no problems",
        "k8s-b: 1 GPU node, 1 ready, driver 550.90.07 (1), 0 mid-upgrade, no problems",
        "GPU stack ready on every cluster"]


def test_a_failed_cluster_is_listed_with_its_error_and_the_others_are_shown():
    lines = fleet_status_lines({"ocp-a": healthy(), "ocp-b": {"failed": True, "msg": CONNECTION_REFUSED},
                                "ocp-c": status()})
    assert {line.split()[0] for line in lines[1:6]} == {"ocp-a"}
    assert lines[6:] == [
        "ocp-a: 5 GPU nodes, 5 ready, driver 570.172.08 (4), host (1), 0 mid-upgrade, no problems",
        "ocp-b: status read FAILED: " + " ".join(CONNECTION_REFUSED.split()),
        "ocp-c: 0 GPU nodes, 0 ready, no driver, 0 mid-upgrade, 1 problem: no GPU node found",
        "GPU stack NOT ready on ocp-b (status read failed), ocp-c"]


def test_a_summary_line_names_the_first_three_problems_and_counts_the_others():
    read = status(*[gpu_node("n%d" % index, version="570.172.08") for index in range(5)], pods=[pod("x", "none")])
    line = fleet_status_lines({"big": read})[-2]
    assert line.startswith("big: 5 GPU nodes, 0 ready, driver 570.172.08 (5), 0 mid-upgrade, 5 problems: n0 not ready: ")
    assert line.count(" not ready: ") == 3 and line.endswith("; and 2 more")
    assert len(fleet_status_summary(read)["problems"]) == 5


def test_no_cluster_and_a_wrong_input():
    assert fleet_status_lines({})[-1] == "GPU stack NOT ready on any cluster: no cluster read"
    with pytest.raises(AnsibleFilterError):
        fleet_status_lines([healthy()])


def test_the_plugin_exports_both_filters():
    assert sorted(FilterModule().filters()) == ["fleet_status_lines", "fleet_status_summary"]
