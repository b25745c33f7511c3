"""Simulated kernel reboots of nodes no machine-config operator manages (the rhcos_upgrade role's drain method).

What a site's reboot step does on a real node (install a kernel package, reboot) cannot happen here; a test's
reboot step asks for it instead by annotating the node with REBOOT_ANNOTATION = the kernel to boot. The node then,
with the machine-config daemon's mechanics (mco.py: go_down, come_up, relabel_when_due):
- goes NotReady (kwok's heartbeat held off) for its hardware's `reboot_seconds` (fleet node group; default
  DEFAULT_REBOOT_SECONDS), for ever with the `never_returns` fault; its pods are deleted, as their containers die
  (DaemonSet pods come back through the DaemonSet controller; while the node is down the simulator reports none of
  its pods), and it advertises no GPU;
- boots: status.nodeInfo.kernelVersion and bootID change, Ready, the annotation goes; cordoned or not as before;
- nfd-worker relabels its kernel-version labels (as NFD sanitises them) `nfd_lag_seconds` later.
Nothing happens for a node whose kernelVersion already is the one asked for.

A pod that runs `systemctl reboot` on the host (gpu_faults: a reset's escalation, as `oc debug node` runs it) asks for
a reboot in place: the simulator annotates the node with REBOOT_REQUEST_ANNOTATION = when the host goes down (a moment
after the command returned, so that the pod completes first), and the node reboots as above into the kernel it runs.
Pods that completed stay, as on a real node.
"""

import logging
import time

from kubernetes.client.rest import ApiException

from .mco import MachineConfigOperator, NFD_RELABEL_ANNOTATION, annotations, hardware
from .stages import REBOOTING_ANNOTATION

LOG = logging.getLogger("kernel")
REBOOT_ANNOTATION = "sim.accelerators.gpu/reboot-into-kernel"
REBOOT_REQUEST_ANNOTATION = "sim.accelerators.gpu/reboot-requested"
SHUTDOWN_SECONDS = 1.0
DEFAULT_REBOOT_SECONDS = 10.0
DEFAULT_NFD_LAG_SECONDS = 5.0
OS_RELEASE_PREFIX = "feature.node.kubernetes.io/system-os_release."


class KernelReboots(MachineConfigOperator):
    """Driven by the simulator's loop like the machine-config operator, for nodes annotated REBOOT_ANNOTATION."""

    def start(self):
        pass  # no API of its own: it reads the simulator's nodes and pods

    def reconcile(self):
        now = time.time()
        for node in self.fake_nodes().values():
            if REBOOT_ANNOTATION in annotations(node):
                self.sim._guard(self.reboot_node, node, now)
            elif REBOOT_REQUEST_ANNOTATION in annotations(node):
                self.sim._guard(self.reboot_node, node, now, REBOOT_REQUEST_ANNOTATION)
            # The machine-config operator, where there is one, relabels every node due.
            elif NFD_RELABEL_ANNOTATION in annotations(node) and self.sim.mco is None:
                self.sim._guard(self.relabel_when_due, node, now)

    def reboot_node(self, node, now, request=REBOOT_ANNOTATION):
        """The reboot the annotation `request` asks for: into the kernel REBOOT_ANNOTATION names, or in place at the
        time REBOOT_REQUEST_ANNOTATION gives."""
        name = node["metadata"]["name"]
        running = node["status"].get("nodeInfo", {}).get("kernelVersion")
        kernel = annotations(node)[REBOOT_ANNOTATION] if request == REBOOT_ANNOTATION else running
        hw = hardware(node)
        if annotations(node).get(REBOOTING_ANNOTATION) is None:
            if request == REBOOT_ANNOTATION and running == kernel:
                self.annotate(name, {REBOOT_ANNOTATION: None})
                return
            if request == REBOOT_REQUEST_ANNOTATION and now < float(annotations(node)[request]):
                self.wake(name, float(annotations(node)[request]), now)
                return
            self.go_down(node, float(hw.get("reboot_seconds") or DEFAULT_REBOOT_SECONDS), now, "kernel " + kernel)
            if (hw.get("gpu") or {}).get("count"):
                self.core.patch_node_status(name, {"status": {"allocatable": {"nvidia.com/gpu": "0"},
                                                              "capacity": {"nvidia.com/gpu": "0"}}})
            self.delete_pods(name)
        elif self.boot_due(node, now, "kernel " + kernel):
            release = {key[len(OS_RELEASE_PREFIX):]: value for key, value in (hw.get("nfd_labels") or {}).items()
                       if key.startswith(OS_RELEASE_PREFIX) and not key.endswith((".major", ".minor"))}
            self.come_up(node, now, float(hw.get("nfd_lag_seconds") or DEFAULT_NFD_LAG_SECONDS), release, kernel, {},
                         {request: None})
            LOG.info("node %s: booted kernel %s", name, kernel)

    def delete_pods(self, name):
        for pod in list(self.sim.pods.values()):
            if pod["spec"].get("nodeName") != name or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            try:
                self.core.delete_namespaced_pod(pod["metadata"]["name"], pod["metadata"]["namespace"],
                                                grace_period_seconds=0)
            except ApiException as error:
                if error.status != 404:
                    raise
        LOG.info("node %s: its running pods are gone with the reboot", name)
