"""A fleet of three clusters in one inventory (localcluster.clusters: three local control planes at once, two OpenShift
on different RHCOS builds and one Kubernetes, two GPU nodes each), every playbook run reaching each cluster with its
own credentials from the inventory alone (no KUBECONFIG, no K8S_AUTH_* in the environment): a deploy of all three in
one run, no-op reconciles over three and one, failing GPUs remediated one cluster after the other, clusters that
cannot be reached failing alone or stopping a fleet rollout, a driver change rolled out canary first, and one stopped
by a driver fault in its second batch's cluster with the third left exactly as it was. Each API server's audit log
records every request: credentials of one cluster never reach another, and no run prints a token. One story, in
order, on one fleet: the clusters are the expensive part.
"""

import json
import os
import subprocess
import sys
import time

import kubernetes
import pytest
import yaml

from conftest import wait_for
from gpu_fleet import RHCOS_416, RHCOS_96
from localcluster import clusters, controlplane, gpu_faults
from playbook import COLLECTIONS, UNREACHABLE_RETRY_SECONDS, assert_tried_within_budget
from test_deploy import Run

# The clusters run the common role's default driver; NEW is newer (a driver NVIDIA builds images of:
# gpu-driver-container's versions.mk), BAD older, and fails on one node.
NEW, BAD = "610.57.04", "575.64.05"
STATE = "nvidia.com/gpu-driver-upgrade-state"
DRIVER_SELECTOR = "app.kubernetes.io/component=nvidia-driver"
REMEDIATION_STATE = "accelerators.gpu/gpu-remediation-state"
REMEDIATION_RECORD = "accelerators.gpu/gpu-remediation"


def specs():
    """ocp-a (RHCOS 4.16), ocp-b (RHCOS 9.6; one node cannot load driver BAD) and k8s-c (Ubuntu)."""
    return [("ocp-a", "openshift", clusters.small_fleet("ocp-a", {"rhcos": RHCOS_416})),
            ("ocp-b", "openshift", clusters.small_fleet("ocp-b", {"rhcos": RHCOS_96, "openshift": "4.21"},
                                                        faulty={"driver_fails_for": BAD})),
            ("k8s-c", "kubernetes", clusters.small_fleet("k8s-c", {"ubuntu": "22.04"}))]


class FleetRun(Run):
    """An ansible-playbook run of a collection playbook over an inventory of clusters: its JSON report by host."""

    def __init__(self, process, seconds, cpu_seconds):
        super().__init__(process, seconds, modules=None)  # a fleet's run records no module reports
        self.cpu_seconds = cpu_seconds

    @property
    def output(self):
        return self.process.stdout + self.process.stderr

    def batches(self):
        """The hosts of each batch, in order (a serial play reports one play per batch)."""
        return [sorted({host for task in play["tasks"] for host in task["hosts"]}) for play in self.report["plays"]]

    def failures(self):
        """{cluster: message of the task that failed it}."""
        found = {}
        for play in self.report["plays"]:
            for task in play["tasks"]:
                for host, result in task["hosts"].items():
                    if result.get("failed") and not result.get("ignore_errors"):
                        found[host] = result.get("msg")
        return found

    def recap(self):
        """{cluster: its recap (ok, changed, failures...)}."""
        return self.report["stats"]


def run(playbook, inventory, tmp_path, variables=None, limit=None, extra_env=None):
    path = tmp_path / ("inventory-%s.yml" % os.urandom(3).hex())
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))  # the order of the hosts is the order of the batches
    # Nothing in the environment names a cluster: each host's credentials come from the inventory.
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("K8S_AUTH_") and name != "KUBECONFIG"}
    env.update(ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_SHOW_CUSTOM_STATS="true", HOME=str(tmp_path), **(extra_env or {}))
    command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(path),
               "accelerators.gpu." + playbook, "-e", json.dumps(variables or {})] + (["--limit", limit] if limit else [])
    before = os.times()
    started = time.monotonic()
    process = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1200, check=False)
    seconds = time.monotonic() - started
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    print("%s over %s%s: %.1fs wall, %.1fs CPU, rc=%d" % (
        playbook, ", ".join(inventory["gpu_clusters"]["hosts"]), " (limit %s)" % limit if limit else "", seconds, cpu,
        process.returncode))
    return FleetRun(process, seconds, cpu)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet-of-clusters")
    members = clusters.start(root, specs())
    outputs = []
    try:
        yield members, outputs
    finally:
        clusters.stop(member.plane.state for member in members)
    # Whatever ran, no token of any cluster was printed.
    secrets = [token for member in members for token in member.tokens()]
    assert not [token for token in secrets if any(token in output for output in outputs)]


def core(member):
    return kubernetes.client.CoreV1Api(member.client)


def driver_images(member):
    pods = core(member).list_namespaced_pod("nvidia-gpu-operator", label_selector=DRIVER_SELECTOR).items
    return {pod.spec.node_name: pod.spec.containers[0].image for pod in pods if not pod.metadata.deletion_timestamp}


def snapshot(member):
    """Everything a driver rollout could change: the driver DaemonSets as stored, the nodes' labels and annotations
    (upgrade states among them), their schedulability, and the driver pods."""
    apps = kubernetes.client.AppsV1Api(member.client)
    daemonsets = apps.list_namespaced_daemon_set("nvidia-gpu-operator", label_selector=DRIVER_SELECTOR).items
    nodes = [core(member).read_node(name) for name in member.node_names]
    return ({ds.metadata.name: (ds.metadata.resource_version, member.client.sanitize_for_serialization(ds.spec))
             for ds in daemonsets},
            {node.metadata.name: (node.metadata.labels, node.metadata.annotations, node.spec.unschedulable)
             for node in nodes},
            sorted(pod.metadata.uid for pod in core(member).list_namespaced_pod(
                "nvidia-gpu-operator", label_selector=DRIVER_SELECTOR).items))


def audit_users(member):
    """{(user, HTTP status class): requests} of the cluster's audit log."""
    counts = {}
    with open(os.path.join(member.plane.state, "logs", "audit.log")) as log:
        for line in log:
            event = json.loads(line)
            key = ((event.get("user") or {}).get("username"), (event.get("responseStatus") or {}).get("code", 0) // 100)
            counts[key] = counts.get(key, 0) + 1
    return counts


def automation_requests(member):
    """audit_users without the control plane's own (its components' admin, the API server's loopback client), which
    go on all the time."""
    return {key: count for key, count in audit_users(member).items() if key[0] not in ("admin", "system:apiserver")}


def test_a_fleet_of_three_clusters_from_one_inventory(fleet, tmp_path):
    members, outputs = fleet
    inventory = clusters.inventory(members)
    names = [member.name for member in members]

    # One run deploys the three clusters, in parallel.
    deployed = run("deploy", inventory, tmp_path)
    outputs.append(deployed.output)
    assert deployed.process.returncode == 0 and deployed.failures() == {}, deployed.output[-3000:]
    for member in members:
        assert set(driver_images(member)) == set(member.node_names), member.name
        for name in member.node_names:
            assert core(member).read_node(name).status.allocatable.get("nvidia.com/gpu") == "2", (member.name, name)

    # A no-op reconcile over the three, then over one.
    fleet_noop = run("reconcile", inventory, tmp_path)
    one_noop = run("reconcile", inventory, tmp_path, limit="ocp-a")
    outputs.extend([fleet_noop.output, one_noop.output])
    assert {host: stats["changed"] for host, stats in fleet_noop.recap().items()} == dict.fromkeys(names, 0)
    assert {host: stats["changed"] for host, stats in one_noop.recap().items()} == {"ocp-a": 0}
    print("no-op reconcile: 3 clusters %.1fs wall %.1fs CPU, 1 cluster %.1fs wall %.1fs CPU" % (
        fleet_noop.seconds, fleet_noop.cpu_seconds, one_noop.seconds, one_noop.cpu_seconds))

    # Each cluster saw its own automation user, its components' admin and the API server's own loopback client, and no
    # one else: credentials of another cluster would have been refused, a request logged without any of these users.
    for member in members:
        users = audit_users(member)
        assert {user for user, _status in users} == {"admin", "system:apiserver", member.automation_user}, (
            member.name, users)
        assert users.get((member.automation_user, 2), 0) > 0, users


def test_remediation_goes_cluster_by_cluster_with_gpu_fleet_serial(fleet, tmp_path):
    """XID 48 on a node of ocp-a and of ocp-b, one cluster after the other ([1, 1]): the first cluster's node is
    returned before the second cluster's is quarantined."""
    members, outputs = fleet
    ocp_a, ocp_b, _k8s_c = members
    inventory = clusters.inventory([ocp_a, ocp_b])
    faulty = {}
    for member in (ocp_a, ocp_b):
        inventory["gpu_clusters"]["hosts"][member.name]["gpu_cluster_prometheus_url"] = gpu_faults.prometheus_url(
            member.plane)
        faulty[member.name] = sorted(member.node_names)[0]
        gpu_faults.inject_xid(member.client, faulty[member.name], 0, 48)
        wait_for(lambda: core(member).read_node(faulty[member.name]).status.allocatable.get("nvidia.com/gpu") == "1",
                 message="GPU 0 of %s out of allocatable" % faulty[member.name])

    remediated = run("remediate", inventory, tmp_path, variables={
        "gpu_fleet_serial": [1, 1], "remediation_poll_interval": 0.5})
    outputs.append(remediated.output)

    assert remediated.process.returncode == 0 and remediated.failures() == {}, remediated.output[-3000:]
    assert remediated.batches() == [["ocp-a"], ["ocp-b"]]
    records = {}
    for member in (ocp_a, ocp_b):
        node = core(member).read_node(faulty[member.name])
        assert node.metadata.labels[REMEDIATION_STATE] == "done" and not node.spec.unschedulable, member.name
        assert node.status.allocatable["nvidia.com/gpu"] == "2", member.name
        records[member.name] = json.loads(node.metadata.annotations[REMEDIATION_RECORD])
        assert [(a["action"], a["result"]) for a in records[member.name]["attempts"]] == [("reset", "succeeded")]
    # ocp-b's batch began once ocp-a's play had ended (the batches); and by the records, ocp-a's node was reset
    # (its record's last update) before ocp-b's was taken.
    assert records["ocp-a"]["updated"] <= records["ocp-b"]["since"], records


def test_unreachable_clusters_fail_alone_and_stop_a_fleet_rollout(fleet, tmp_path):
    members, outputs = fleet
    ocp_a, ocp_b, k8s_c = members
    hosts = clusters.inventory(members)["gpu_clusters"]["hosts"]
    unreachable = {
        "api-down": {"gpu_cluster_api_host": "https://127.0.0.1:%d" % controlplane.free_port(),
                     "gpu_cluster_api_key": ocp_a.automation_token, "gpu_cluster_ca_cert": ocp_a.ca_file,
                     "gpu_cluster_api_retry_seconds": UNREACHABLE_RETRY_SECONDS},
        "wrong-ca": {"gpu_cluster_api_host": ocp_a.server, "gpu_cluster_api_key": ocp_a.automation_token,
                     "gpu_cluster_ca_cert": k8s_c.ca_file},
        "expired-token": {"gpu_cluster_api_host": k8s_c.server, "gpu_cluster_api_key": os.urandom(16).hex(),
                          "gpu_cluster_ca_cert": k8s_c.ca_file},
    }
    causes = {"api-down": "cannot reach the API server", "wrong-ca": "CERTIFICATE_VERIFY_FAILED",
              "expired-token": "401"}

    def inventory(*names):
        return {"gpu_clusters": {"hosts": {name: hosts.get(name) or unreachable[name] for name in names},
                                 "vars": clusters.GROUP_VARS}}

    # Without a fleet setting every cluster runs: the reachable ones complete, each unreachable one fails, named.
    spread = run("reconcile", inventory("ocp-a", "api-down", "wrong-ca", "expired-token", "ocp-b"), tmp_path)
    outputs.append(spread.output)
    failures = spread.failures()
    assert spread.process.returncode != 0 and sorted(failures) == sorted(unreachable), failures
    for name, cause in causes.items():
        assert cause in failures[name], (name, failures[name])
    assert_tried_within_budget(failures["api-down"])
    stats = spread.recap()
    assert stats["ocp-a"]["failures"] == stats["ocp-b"]["failures"] == 0
    assert stats["ocp-a"]["changed"] == stats["ocp-b"]["changed"] == 0

    # Another cluster's token in the environment, or an API host without a token of its own (kubernetes.core would
    # fill it from the environment or the default kubeconfig): refused for each such cluster before any request.
    requests_before = automation_requests(ocp_a)
    mixed = run("status", inventory("ocp-a", "ocp-b"), tmp_path, extra_env={"K8S_AUTH_API_KEY": k8s_c.automation_token})
    no_token = run("status", {"gpu_clusters": {"hosts": {"ocp-a": {
        "gpu_cluster_api_host": ocp_a.server, "gpu_cluster_ca_cert": ocp_a.ca_file}}}}, tmp_path)
    outputs.extend([mixed.output, no_token.output])
    assert sorted(mixed.failures()) == ["ocp-a", "ocp-b"] and "K8S_AUTH_API_KEY" in mixed.failures()["ocp-a"]
    assert "gpu_cluster_api_host needs gpu_cluster_api_key" in no_token.failures()["ocp-a"], no_token.failures()
    assert automation_requests(ocp_a) == requests_before

    # With one, the unreachable cluster of the second batch stops the fleet: the third batch never starts.
    stopped = run("reconcile", inventory("ocp-a", "api-down", "ocp-b"), tmp_path,
                  variables={"gpu_fleet_serial": [1, 1]})
    outputs.append(stopped.output)
    assert stopped.batches() == [["ocp-a"], ["api-down"]], stopped.batches()
    assert stopped.process.returncode != 0 and list(stopped.failures()) == ["api-down"]
    assert_tried_within_budget(stopped.failures()["api-down"])
    assert "ocp-b" not in stopped.recap()


def test_a_driver_change_goes_to_the_canary_first_and_a_fault_stops_the_fleet(fleet, tmp_path):
    members, outputs = fleet
    ocp_a, ocp_b, k8s_c = members
    inventory = clusters.inventory(members)

    # The canary cluster, then the other two together. A simulated driver loads in seconds: a wait far shorter than
    # the default (1500 s, for real builds) ends a stuck rollout with the playbook's own account of it, well within
    # the run's timeout.
    waits = {"driver_wait_timeout": 420}
    canary = run("driver_upgrade", inventory, tmp_path,
                 variables=dict(waits, common_driver_version=NEW, gpu_fleet_serial=[1, 2]))
    outputs.append(canary.output)
    assert canary.process.returncode == 0, canary.output[-3000:]
    assert canary.batches() == [["ocp-a"], ["k8s-c", "ocp-b"]]
    for member in members:
        assert all(NEW in image for image in driver_images(member).values()), driver_images(member)
        assert {core(member).read_node(name).metadata.labels.get(STATE) for name in member.node_names} == {
            "upgrade-done"}, member.name

    # Driver BAD fails on one node of ocp-b, the second batch: the third cluster is exactly as it was. BAD is older
    # than NEW: a rollback, which only goes with driver_allow_downgrade.
    before = snapshot(k8s_c)
    faulty = run("driver_upgrade", inventory, tmp_path,
                 variables=dict(waits, common_driver_version=BAD, gpu_fleet_serial=[1, 1], driver_allow_downgrade=True))
    outputs.append(faulty.output)
    assert faulty.process.returncode != 0
    assert faulty.batches() == [["ocp-a"], ["ocp-b"]], faulty.batches()
    failures = faulty.failures()
    bad_node = [name for name in ocp_b.node_names if "faulty" in name][0]
    assert list(failures) == ["ocp-b"] and bad_node in failures["ocp-b"], failures
    assert "does not load" in failures["ocp-b"], failures["ocp-b"]
    assert "k8s-c" not in faulty.recap()
    assert all(BAD in image for image in driver_images(ocp_a).values())
    assert core(ocp_b).read_node(bad_node).metadata.labels.get(STATE) == "upgrade-failed"
    assert snapshot(k8s_c) == before
