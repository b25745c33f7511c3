"""The simulated kernel reboot (tools/localcluster/kernel.py) on the vanilla cluster: a node asked to reboot into a
kernel goes NotReady, loses its pods (a DaemonSet's come back), boots the kernel, and NFD relabels it after a lag."""

import os
import time

import kubernetes

import gpu_fleet
from conftest import wait_for
from localcluster import api, controlplane, fleet
from localcluster import kernel as reboots
from localcluster.stages import REBOOTING_ANNOTATION

OLD, NEW = "5.15.0-100-generic", "5.15.0-105+rt"  # the new one as NFD cannot label it: "+" becomes "_"
KERNEL_LABEL = "feature.node.kubernetes.io/kernel-version.full"
REBOOT_SECONDS, NFD_LAG_SECONDS = 3, 2


def is_ready(node):
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def test_node_reboots_into_the_kernel_asked_for(kubernetes_cluster, make_fleet):
    cluster = kubernetes_cluster
    spec = gpu_fleet.fleet([{"name": "n", "count": 2, "os": {"ubuntu": "22.04"}, "kernel": OLD,
                             "reboot_seconds": REBOOT_SECONDS, "nfd_lag_seconds": NFD_LAG_SECONDS},
                            {"name": "z-never", "os": {"ubuntu": "22.04"}, "kernel": OLD,
                             "faults": {"never_returns": True}}], openshift=None)
    node, other, never = make_fleet(spec, on=cluster).node_names
    namespace = "t-reboot-" + os.urandom(2).hex()
    cluster.core.create_namespace({"metadata": {"name": namespace}})
    try:
        wait_for(lambda: cluster.core.list_namespaced_service_account(namespace).items, message="service account")
        labels = {"app": "sleeper"}
        cluster.apps.create_namespaced_daemon_set(namespace, {
            "metadata": {"name": "sleeper"},
            "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
                "nodeSelector": {gpu_fleet.FLEET_LABEL: spec["name"]},
                "containers": [{"name": "sleep", "image": "example.test/sim/sleep:1"}]}}}})

        def pods_on(name):
            return [p.metadata.uid for p in cluster.core.list_namespaced_pod(namespace).items
                    if p.spec.node_name == name and not p.metadata.deletion_timestamp]
        before = wait_for(lambda: pods_on(node), message="the DaemonSet's pod on " + node)

        for name in (node, never):
            cluster.core.patch_node(name, {"metadata": {"annotations": {reboots.REBOOT_ANNOTATION: NEW}}})
        wait_for(lambda: not is_ready(cluster.core.read_node(node)), timeout=10, message=node + " NotReady")
        assert cluster.core.read_node(node).status.node_info.kernel_version == OLD
        wait_for(lambda: not set(before) & set(pods_on(node)), timeout=10, message="its pods gone")

        # Ready (the kubelet's status) and the request's annotation gone (the reboot step's) are two writes, as on a
        # real node: wait for both.
        booted = wait_for(lambda: [n for n in [cluster.core.read_node(node)]
                                   if is_ready(n) and reboots.REBOOT_ANNOTATION not in n.metadata.annotations],
                          timeout=30, message=node + " back")[0]
        assert booted.status.node_info.kernel_version == NEW
        assert booted.metadata.labels[KERNEL_LABEL] == OLD  # NFD has not relabelled it yet
        wait_for(lambda: cluster.core.read_node(node).metadata.labels[KERNEL_LABEL] == "5.15.0-105_rt", timeout=20,
                 message="NFD's kernel label")
        wait_for(lambda: pods_on(node), message="the DaemonSet's pod back on " + node)
        # The node asked for nothing and the one that never returns are as they were, the latter down for good.
        assert cluster.core.read_node(other).status.node_info.kernel_version == OLD
        time.sleep(REBOOT_SECONDS)
        down = cluster.core.read_node(never)
        assert not is_ready(down) and down.metadata.annotations[REBOOTING_ANNOTATION] == "never"
        assert down.status.node_info.kernel_version == OLD
    finally:
        cluster.core.delete_namespace(namespace)


def test_kwoks_heartbeat_never_marks_a_rebooting_node_ready(tmp_path):
    # kwok queues a Ready node's next heartbeat (Ready=True) and writes it when its delay is over, unless it has seen
    # the node change first. One written during the reboot marked the node Ready (an RHCOS rollout's node that never
    # returns was "Ready" at the rollout's deadline): once one left queued, as the rebooting node matched no stage of
    # kwok's; in a CI run one that came due before kwok, short of CPU, had read that the reboot had started. A plane of
    # its own, whose heartbeat comes every 1 to 2.5 s instead of 30 to 75; its kwok is frozen while the reboot starts,
    # until the heartbeat it queued is overdue.
    plane = controlplane.ControlPlane(tmp_path / "state")
    plane.up("kubernetes", heartbeat_seconds=1)
    try:
        core = kubernetes.client.CoreV1Api(api.client_from_kubeconfig(plane.kubeconfig))
        spec = gpu_fleet.fleet([{"name": "z-never", "os": {"ubuntu": "22.04"}, "kernel": OLD,
                                 "faults": {"never_returns": True}}], openshift=None)
        [never] = fleet.Fleet(core.api_client, spec, prefix="hb-").apply().wait_ready().node_names
        with plane.frozen("kwok"):
            core.patch_node(never, {"metadata": {"annotations": {reboots.REBOOT_ANNOTATION: NEW}}})
            down = wait_for(lambda: [n for n in [core.read_node(never)] if not is_ready(n)], timeout=10,
                            message=never + " NotReady")[0]
            time.sleep(2.5)  # the longest heartbeat delay
        # From the NotReady node on, for four heartbeat periods at their longest.
        readiness = [is_ready(down)] + [is_ready(event["object"]) for event in kubernetes.watch.Watch().stream(
            core.list_node, field_selector="metadata.name=" + never, resource_version=down.metadata.resource_version,
            timeout_seconds=10)]
        assert not any(readiness), readiness
        assert core.read_node(never).metadata.annotations[REBOOTING_ANNOTATION] == "never"
    finally:
        plane.down()
