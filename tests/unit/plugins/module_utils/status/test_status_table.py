# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The status table's views: the default one fits a terminal of 120 columns, wide shows every column, a list the
columns it names; cells, shortening and alignment."""

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.status.table import (
    COLUMNS, WIDTH, aligned, cell, fault_lines, selected_columns, shortened, shown_columns, table)

EVERY_COLUMN = [name for name, _title in COLUMNS]
LONG_PROBLEM = ("driver upgrade: upgrade-failed (the driver pod nvidia-driver-daemonset-9.6.20260303-1-x7k2p was not "
                "ready after 600 s: CrashLoopBackOff)")


def row(name, **fields):
    """A stack_status row of a node where the stack is ready, with fields changed."""
    found = {"node": name, "gpus": 8, "product": "NVIDIA-A100-SXM4-80GB", "memory": 81920, "mig_capable": True,
             "gpu_info": "gfd", "os": "418.94.202509100653-0",
             "driver_daemonset": "nvidia-driver-daemonset-418.94.202509100653-0", "driver": "ready",
             "driver_version": "580.95.05", "kernel_module_type": "auto", "kernel_modules": "open", "toolkit": "ready",
             "device_plugin": "ready", "dra_driver": "-",
             "stack": "device-plugin", "dra_devices": None, "dra_allocated": None, "dcgm_exporter": "ready",
             "gpu_feature_discovery": "ready", "mig_manager": "ready", "mps_control_daemon": "-", "sharing": "none",
             "sharing_replicas": 1, "driver_upgrade": "upgrade-done", "driver_upgrade_failure": None,
             "mig_config": "all-disabled", "mig_config_state": "success", "allocatable": 8,
             "validation": {"cuda": "ok", "driver": "ok", "toolkit": "ok"}, "validated_at": "2026-01-01T00:00:00Z",
             "without_driver_daemonset": False, "ready": True}
    found.update(fields)
    return found


def test_a_selection_is_the_default_view_wide_or_the_columns_it_names_node_first():
    assert selected_columns(None) is None and selected_columns([]) is None and selected_columns("") is None
    assert selected_columns("wide") == selected_columns(["WIDE"]) == EVERY_COLUMN
    assert EVERY_COLUMN[0] == "node" and EVERY_COLUMN[-1] == "stack" and len(set(EVERY_COLUMN)) == 25
    # A list, or a comma-separated string (-e status_columns=...), in any case; NODE first, once.
    assert selected_columns(["stack", "Validation", "node"]) == ["node", "stack", "validation"]
    assert selected_columns("driver, stack,") == ["node", "driver", "stack"]


@pytest.mark.parametrize("selection, unknown", [
    (["node", "drivers"], "column 'drivers'"),
    ("gpu,memory,state", "columns 'gpu', 'state'"),
    (["wide", "stack"], "column 'wide'"),
])
def test_an_unknown_column_is_named_with_every_valid_name(selection, unknown):
    with pytest.raises(ValueError) as error:
        selected_columns(selection)
    assert str(error.value) == "unknown status %s: the columns are %s; or wide alone for all of them" % (
        unknown, ", ".join(EVERY_COLUMN))


def test_the_default_view_shows_the_upgrade_and_mig_columns_only_while_one_is_under_way():
    at_rest = [row("a"), row("b", driver_upgrade="-", mig_config=None, mig_config_state=None)]
    assert shown_columns(None, at_rest) == ["node", "gpus", "product", "driver", "stack"]
    upgrading = at_rest + [row("c", driver_upgrade="drain-required")]
    assert shown_columns(None, upgrading) == ["node", "gpus", "product", "driver", "driver_upgrade", "stack"]
    for state in ("pending", "rebooting", "failed", None):
        assert shown_columns(None, at_rest + [row("d", mig_config="all-1g.10gb", mig_config_state=state)]) == [
            "node", "gpus", "product", "driver", "mig_config", "stack"], state
    both = upgrading + [row("d", mig_config="all-1g.10gb", mig_config_state="pending")]
    lines = table(both, [[]] * len(both))
    assert lines[0].split() == ["NODE", "GPUS", "PRODUCT", "DRIVER", "DRIVER", "UPGRADE", "MIG", "CONFIG", "STACK"]
    assert lines[4].split()[-4:] == ["upgrade-done", "all-1g.10gb", "(pending)", "ready"]
    # A selection shows its columns whatever the rows.
    assert shown_columns(["node", "mig_config"], at_rest) == ["node", "mig_config"]


def test_driver_is_its_version_and_state_and_stack_ready_or_the_first_problem():
    assert cell(row("a"), "driver", []) == "580.95.05 ready"
    assert cell(row("a", driver="host", driver_version="570.172.08"), "driver", []) == "570.172.08 host"
    assert cell(row("a", driver="Init:0/1", driver_version=None), "driver", []) == "Init:0/1"
    assert cell(row("a", driver="-"), "driver", []) == "580.95.05"
    assert cell(row("a", driver="-", driver_version=None), "driver", []) == "-"
    assert cell(row("a"), "stack", []) == "ready"
    assert cell(row("a", ready=False), "stack", ["toolkit no pod", "not validated"]) == "toolkit no pod"
    assert cell(row("a", mig_config="all-1g.10gb", mig_config_state=None), "mig_config", []) == "all-1g.10gb (no state)"
    assert cell(row("a"), "validation", []) == "cuda:ok driver:ok toolkit:ok (2026-01-01T00:00:00Z)"
    assert cell(row("a", dra_devices=2, dra_allocated=1), "dra_devices", []) == "2 (1 allocated)"
    assert (cell(row("a"), "mig_capable", []), cell(row("a", memory=None), "memory", [])) == ("yes", "-")


@pytest.mark.parametrize("setting, modules, shown", [
    ("auto", "open", "open (auto)"), ("auto", "proprietary", "proprietary (auto)"), ("auto", None, "auto"),
    ("open", "open", "open"), ("proprietary", "proprietary", "proprietary"), (None, None, "-")])
def test_kernel_modules_are_the_modules_and_auto_where_the_driver_container_chooses(setting, modules, shown):
    assert cell(row("a", kernel_module_type=setting, kernel_modules=modules), "kernel_modules", []) == shown
    assert "kernel_modules" in selected_columns("wide") and "kernel_modules" not in shown_columns(None, [row("a")])


def test_shortened_keeps_the_start_and_an_ellipsis_within_the_width():
    assert shortened("ready", 5) == "ready"
    assert shortened("driver upgrade: upgrade-failed", 20) == "driver upgrade: upg\u2026"
    # No space before the ellipsis.
    assert shortened("driver upgrade: upgrade-failed", 16) == "driver upgrade:\u2026"
    assert len(shortened(LONG_PROBLEM, 40)) == 40


def test_aligned_pads_every_column_and_with_a_width_shortens_the_last_column_only():
    assert aligned([["A", "BB"], ["ccc", "d"]]) == ["A    BB", "ccc  d"]
    cells = [["NODE", "STACK"], ["a-node-with-a-long-name", "x" * 40], ["b", "ready"]]
    assert aligned(cells, 50) == ["NODE                     STACK", "a-node-with-a-long-name  " + "x" * 24 + "\u2026",
                                  "b                        ready"]
    # Never below SHORTEST (20) characters: the node names stay whole even where the line cannot fit.
    assert aligned(cells, 30)[1] == "a-node-with-a-long-name  " + "x" * 19 + "\u2026"
    assert aligned(cells, 80) == aligned(cells)


def test_the_default_view_fits_the_width_with_a_long_problem_and_wide_has_it_whole():
    rows = [row("gpu-a100-%d" % index) for index in range(2)] + [
        row("gpu-host-driver-0", driver="host", driver_version="570.172.08", product="NVIDIA-L40S"),
        row("gpu-l40s-0", ready=False, driver="Init:CrashLoopBackOff", driver_version=None,
            driver_upgrade="upgrade-failed")]
    problems = [[], [], [], [LONG_PROBLEM, "not validated"]]
    lines = table(rows, problems)
    assert WIDTH == 109 and max(len(line) for line in lines) == WIDTH
    assert lines[0].split() == ["NODE", "GPUS", "PRODUCT", "DRIVER", "DRIVER", "UPGRADE", "STACK"]
    assert lines[4] == ("gpu-l40s-0         8     NVIDIA-A100-SXM4-80GB  Init:CrashLoopBackOff  upgrade-failed  "
                        "driver upgrade: upgra\u2026")
    assert lines[3].endswith("  upgrade-done    ready")
    wide = table(rows, problems, "wide")
    assert wide[0].startswith("NODE ") and wide[0].endswith("  STACK")
    assert [title for _name, title in COLUMNS if title not in wide[0]] == []
    assert wide[4].endswith("  " + LONG_PROBLEM)
    # Chosen columns are shown whole too.
    assert table(rows, problems, ["stack"])[4] == "gpu-l40s-0         " + LONG_PROBLEM


def test_a_fleet_adds_a_cluster_column_first_and_still_fits():
    rows = [row("gpu-0"), row("gpu-1", ready=False)]
    lines = table(rows, [[], [LONG_PROBLEM]], clusters=["ocp-a", "k8s-production-b"])
    assert [line.split()[:2] for line in lines] == [
        ["CLUSTER", "NODE"], ["ocp-a", "gpu-0"], ["k8s-production-b", "gpu-1"]]
    assert max(len(line) for line in lines) == WIDTH
    assert table(rows, [[], []], "stack", clusters=["a", "b"]) == [
        "CLUSTER  NODE   STACK", "a        gpu-0  ready", "b        gpu-1  ready"]


def fault(xid, action, source="exporter", uuid="GPU-5f0c2a8e-1d3b-4c7a-9e21-0b6d4f8a7c13", index=0):
    """A health record's fault."""
    return {"gpu_uuid": uuid, "pci_bus_id": None, "gpu_index": index, "xid": xid, "source": source,
            "action": action, "message": "XID %s" % xid}


def test_health_is_ok_or_the_action_and_each_fault_and_application_errors_are_reported():
    assert cell(row("a"), "health", []) == "ok"
    assert cell(row("a", health="none", gpu_faults=[]), "health", []) == "ok"
    assert cell(row("a", health="none", gpu_faults=[fault(13, "none"), fault(43, "none")]), "health", []) == (
        "reported: XID 13, XID 43")
    assert cell(row("a", health="reboot", gpu_faults=[
        fault(48, "reset"), fault(None, "reset", "allocatable", uuid=None, index=None), fault(79, "reboot")]),
        "health", []) == "reboot: XID 48, allocatable, XID 79"


def test_the_default_view_names_the_unhealthy_gpus_below_the_table_within_the_width_and_wide_has_health():
    rows = [row("gpu-a100-0", health="reset",
                gpu_faults=[fault(48, "reset"), fault(13, "none", uuid="GPU-1", index=1)]),
            row("gpu-a100-1", health="none", gpu_faults=[fault(31, "none")]),
            row("gpu-a100-with-a-long-node-name-2", health="rma", gpu_faults=[
                fault(None, "reset", "allocatable", uuid=None, index=None),
                fault(None, "rma", "condition", uuid=None, index=None)]),
            row("gpu-a100-3")]
    faults = fault_lines(rows)
    assert faults == [
        "Unhealthy GPUs on 2 nodes:",
        "NODE                              GPU                                       XID  ACTION  SOURCE",
        "gpu-a100-0                        GPU-5f0c2a8e-1d3b-4c7a-9e21-0b6d4f8a7c13  48   reset   exporter",
        "gpu-a100-with-a-long-node-name-2  -                                         -    reset   allocatable",
        "gpu-a100-with-a-long-node-name-2  -                                         -    rma     condition"]
    assert max(len(line) for line in faults + table(rows, [[]] * 4)) <= WIDTH
    # Only application errors, or none: no section.
    assert fault_lines(rows[1:2]) == fault_lines(rows[3:]) == []
    wide = table(rows, [[]] * 4, "wide")
    assert wide[0].split()[-2:] == ["HEALTH", "STACK"]
    assert [line[wide[0].index("HEALTH"):].rsplit(None, 1)[0].strip() for line in wide[1:]] == [
        "reset: XID 48, XID 13", "reported: XID 31", "rma: allocatable, condition", "ok"]
    # A GPU known by its index only.
    assert fault_lines([row("n", gpu_faults=[fault(79, "reboot", uuid=None, index=3)])])[2].split() == [
        "n", "gpu", "3", "79", "reboot", "exporter"]
