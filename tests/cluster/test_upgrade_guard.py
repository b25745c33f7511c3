"""Keeping the cluster in line between playbook runs, on the OpenShift flavour with the simulated machine-config
operator: the deploy keeps the GPU nodes' pool paused (driver_paused_pools), so a cluster upgrade moves none of them;
an admin who resumes it sends them to a build without driver DaemonSet, which status names and one reconcile run
mends (the pool paused again); the uninstall resumes the pool."""

import time

from gpu_fleet import RHCOS_418
from localcluster import upgrade
from test_deploy import fleet_variables, gpu_fleet, playbook, status_of
from test_rhcos_upgrade_playbook import TARGET, TARGET_OCP, is_ready, pool_of, rhcos_of
from conftest import wait_for

PAUSED_BY_DEPLOY = "accelerators.gpu/paused-by-deploy"
OSTREE = "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION"
REBOOT_SECONDS = 2


def builds(cluster, names):
    """{node: (RHCOS build it runs, its OSTREE_VERSION label, Ready)}."""
    nodes = [cluster.core.read_node(name) for name in names]
    return {node.metadata.name: (rhcos_of(node), node.metadata.labels.get(OSTREE), is_ready(node)) for node in nodes}


def status_notes(run):
    lines = [result["msg"] for name, result in run.results if name == "Print the status table"][0]
    return [line for line in lines if "no driver DaemonSet" in line]


def test_paused_pool_holds_gpu_nodes_status_names_those_moved_anyway_and_reconcile_mends_them(
        cluster, namespace, make_fleet):
    spec = gpu_fleet({"name": "gpu", "count": 2, "role": "gpu-worker", "gpu": {"count": 2},
                      "os": {"rhcos": RHCOS_418}, "driver_build_seconds": 2},
                     pools=[{"name": "gpu-worker", "paused": False, "reboot_seconds": REBOOT_SECONDS,
                             "nfd_lag_seconds": 1}])
    made = make_fleet(spec)
    names, pool = made.node_names, made.pools[0]["metadata"]["name"]
    variables = fleet_variables(namespace, spec, driver_paused_pools=[pool])

    playbook(cluster, "deploy", variables).succeeded()
    settings = pool_of(cluster, pool)
    assert settings["spec"]["paused"] is True and settings["metadata"]["annotations"][PAUSED_BY_DEPLOY] == "true"

    # The cluster moves to a new release: the pool renders the new build, and its nodes stay where they are.
    upgrade.start_upgrade(made, pool, TARGET, TARGET_OCP)
    time.sleep(4 * REBOOT_SECONDS)  # an open pool would have rebooted a node into the new build by now
    assert builds(cluster, names) == {name: (RHCOS_418, RHCOS_418, True) for name in names}
    assert playbook(cluster, "reconcile", variables).succeeded().stats["changed"] == 0

    # An admin resumes the pool: its nodes reboot into a build no driver DaemonSet is for.
    cluster.custom.patch_cluster_custom_object(
        "machineconfiguration.openshift.io", "v1", "machineconfigpools", pool, {"spec": {"paused": False}})
    wait_for(lambda: builds(cluster, names) == {name: (TARGET, TARGET, True) for name in names}, timeout=120,
             interval=1, message="the pool's nodes on %s" % TARGET)
    status = playbook(cluster, "status", variables).succeeded()
    rows = {row["node"]: row for row in status.report["global_custom_stats"]["gpu_stack_status"]["nodes"]}
    assert sorted(name for name, row in rows.items() if row["without_driver_daemonset"]) == sorted(names)
    assert not any(row["ready"] for row in rows.values())
    assert sorted(status_notes(status)) == sorted(
        "%s: no driver DaemonSet is for %s, which it runs (an upgrade outside accelerators.gpu.rhcos_upgrade?): "
        "run accelerators.gpu.reconcile" % (name, TARGET) for name in names)

    # One reconcile run: the new build's DaemonSet, the nodes' drivers and operands validated, the pool paused again.
    assert playbook(cluster, "reconcile", variables).succeeded().stats["changed"] > 0
    assert pool_of(cluster, pool)["spec"]["paused"] is True
    rows = status_of(cluster, variables)["nodes"]
    assert sorted(row["node"] for row in rows) == sorted(names)
    assert all(row["ready"] and not row["without_driver_daemonset"] for row in rows), rows
    assert {row["driver_daemonset"] for row in rows} == {"nvidia-driver-daemonset-" + TARGET}

    playbook(cluster, "uninstall", variables).succeeded()
    settings = pool_of(cluster, pool)
    assert settings["spec"]["paused"] is False and PAUSED_BY_DEPLOY not in settings["metadata"]["annotations"]
