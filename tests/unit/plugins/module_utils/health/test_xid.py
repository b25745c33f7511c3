# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA's XID catalog actions: none < reset < reboot < rma, an XID the table does not know rma."""

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.health.xid import (
    ACTIONS, SEVERITY, worst, xid_action)


@pytest.mark.parametrize("xid, action", [
    # Application errors (restart the application, ignore), reported only.
    (13, "none"), (31, "none"), (43, "none"), (45, "none"), (63, "none"), (68, "none"), (69, "none"), (92, "none"),
    (94, "none"), (121, "none"),
    # Reset the GPU: double-bit ECC, PMU halt, row remap failure, uncontained ECC, GSP timeouts, init error.
    (48, "reset"), (62, "reset"), (64, "reset"), (95, "reset"), (109, "reset"), (119, "reset"), (120, "reset"),
    (140, "reset"), (143, "reset"), (74, "reset"), (144, "reset"), (150, "reset"),
    # Fallen off the bus, and a changed recovery action whose message no metric carries.
    (79, "reboot"), (154, "reboot"),
    # Not in the table: contact support.
    (1, "rma"), (151, "rma"), (999, "rma")])
def test_each_xid_has_the_catalog_action_and_an_unknown_one_is_rma(xid, action):
    assert xid_action(xid) == action


def test_the_table_holds_only_the_four_actions_and_worst_orders_them():
    assert SEVERITY == ("none", "reset", "reboot", "rma")
    assert set(ACTIONS.values()) == {"none", "reset", "reboot"}
    assert worst([]) == "none"
    assert worst(["none", "reset"]) == "reset"
    assert worst(iter(["rma", "reboot", "reset"])) == "rma"
    assert worst(["reset", "reboot", "none"]) == "reboot"
