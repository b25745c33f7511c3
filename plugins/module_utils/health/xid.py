# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What to do about an XID: NVIDIA's XID catalog action, one of none < reset < reboot < rma. Pure.

Source: NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors, the Xid-Catalog workbook, column "Resolution Bucket
(Immediate Action)"), which NVIDIA/NVSentinel embeds (health-monitors/syslog-health-monitor). Buckets RESTART_APP,
IGNORE and the workflow of XID 45 (it follows an earlier XID, which is reported on its own) are `none`; RESET_GPU is
`reset`; RESTART_BM is `reboot`; CONTACT_SUPPORT, and any XID the table does not know, `rma`.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

NONE = 'none'
RESET = 'reset'
REBOOT = 'reboot'
RMA = 'rma'
# The actions from the least to the most severe.
SEVERITY = (NONE, RESET, REBOOT, RMA)

ACTIONS = {}
# Restart the application: graphics exception, MMU fault, NVDEC error, class error, contained ECC error.
ACTIONS.update((xid, NONE) for xid in (13, 31, 68, 69, 94))
# Ignore: channel reset, row remap event, excessive SBE interrupts, C2C error; 45: preemptive cleanup after an earlier
# error (its workflow follows that one).
ACTIONS.update((xid, NONE) for xid in (43, 45, 63, 92, 121))
# Reset the GPU: double-bit ECC (48), PMU halt, row remap failure, uncontained ECC, context-switch timeout, GSP RPC
# timeout and GSP error, unrecoverable ECC escape, GPU init error.
ACTIONS.update((xid, RESET) for xid in (48, 62, 64, 95, 109, 119, 120, 140, 143))
# NVLink errors: the catalog's action depends on a subcode no metric carries (a GPU reset or a node reboot): a reset
# first, the remediation's reboot follows a reset that did not help.
ACTIONS.update((xid, RESET) for xid in (74, 144, 145, 146, 147, 148, 149, 150))
# The GPU has fallen off the bus: reboot the node (RESTART_BM).
ACTIONS[79] = REBOOT
# Recovery action changed: the action is in the driver's message (none, GPU reset, drain and reset, node reboot), which
# a metric does not carry: the most severe of them.
ACTIONS[154] = REBOOT


def xid_action(xid):
    """The catalog's action of an XID (int): none, reset, reboot or rma (an XID the table does not know)."""
    return ACTIONS.get(xid, RMA)


def worst(actions):
    """The most severe of actions, 'none' of none."""
    return max([NONE] + list(actions), key=SEVERITY.index)
