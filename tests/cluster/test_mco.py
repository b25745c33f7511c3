"""The simulated machine-config operator (tools/localcluster/mco.py) rolls pools as the real one does."""

import time

import kubernetes
import pytest

import gpu_fleet
from conftest import wait_for
from localcluster import fleet as fleets
from localcluster import mco, upgrade
from localcluster.stages import REBOOTING_ANNOTATION
from sampler import Sampler

OLD, TARGET, TARGET_OCP = gpu_fleet.RHCOS_418, "9.6.20260401-0", "4.19.10"
TARGET_KERNEL = fleets.KERNEL_OF_RHEL["9.6"]
NFD = fleets.NFD
REBOOT_SECONDS, NFD_LAG_SECONDS = 2, 1


def pool_fleet(groups, **pool):
    """A fleet of GPU nodes on OLD whose groups, [(name, overrides)], form one pool `gpu-worker`."""
    nodes = []
    for name, extra in groups:
        group = {"name": name, "count": 1, "role": "gpu-worker", "gpu": {"count": 2}, "os": {"rhcos": OLD}}
        group.update(extra)
        nodes.append(group)
    return gpu_fleet.fleet(nodes, pools=[dict({"name": "gpu-worker", "reboot_seconds": REBOOT_SECONDS,
                                               "nfd_lag_seconds": NFD_LAG_SECONDS}, **pool)])


def make_pool(make_fleet, groups, **pool):
    made = make_fleet(pool_fleet(groups, **pool))
    return made, made.pools[0]["metadata"]["name"]


def nodes_of(cluster, made):
    return {n.metadata.name: n for n in cluster.core.list_node(
        label_selector=gpu_fleet.selector(made.spec)).items}


def read_pool(cluster, name):
    return cluster.custom.get_cluster_custom_object(*mco.POOLS, name)


def is_ready(node):
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def is_done(node, config=None):
    annotations = node.metadata.annotations
    return annotations.get(fleets.CURRENT_CONFIG) == annotations.get(fleets.DESIRED_CONFIG) and \
        annotations.get(fleets.MCD_STATE) == "Done" and config in (None, annotations.get(fleets.CURRENT_CONFIG))


def unavailable(node):
    """The MCO's own measure: NotReady, cordoned, or not done."""
    return not is_ready(node) or bool(node.spec.unschedulable) or not is_done(node)


def waiting_reason(pod):
    statuses = pod.status.container_statuses or []
    return statuses and statuses[0].state.waiting and statuses[0].state.waiting.reason


def condition(status, kind):
    return [c for c in status["conditions"] if c["type"] == kind][0]


def settled(cluster, made, config):
    """Every node of the fleet done at the config, Ready, uncordoned and relabelled by nfd-worker."""
    nodes = nodes_of(cluster, made).values()
    return all(is_done(n, config) and is_ready(n) and not n.spec.unschedulable
               and mco.NFD_RELABEL_ANNOTATION not in n.metadata.annotations for n in nodes)


def test_pool_rolls_at_most_max_unavailable_nodes_at_a_time(cluster, namespace, make_fleet):
    made, pool = make_pool(make_fleet, [("gpu", {"count": 5})], max_unavailable=2)
    boot_ids = {name: n.status.node_info.boot_id for name, n in nodes_of(cluster, made).items()}
    # A driver DaemonSet of the old build: never evicted (DaemonSet pod), crash-looping once its node runs TARGET.
    cluster.apps.create_namespaced_daemon_set(namespace, {"metadata": {"name": "driver-old"}, "spec": {
        "selector": {"matchLabels": {"app": "driver-old"}},
        "template": {"metadata": {"labels": {"app": "driver-old", "app.kubernetes.io/component": "nvidia-driver"}},
                     "spec": {"nodeSelector": {gpu_fleet.FLEET_LABEL: made.spec["name"]}, "containers": [{
                         "name": "driver", "image": gpu_fleet.DRIVER_REPOSITORY + "/driver:1",
                         "env": [{"name": "RHCOS_VERSION", "value": OLD}]}]}}}})

    def driver_pods():
        return cluster.core.list_namespaced_pod(namespace, label_selector="app=driver-old").items
    before = wait_for(lambda: len([p for p in driver_pods() if gpu_fleet.ready(p)]) == 5 and driver_pods(),
                      message="old driver pods ready")

    config = upgrade.start_upgrade(made, pool, TARGET, TARGET_OCP)
    with Sampler(lambda: ([n for n in nodes_of(cluster, made).values() if unavailable(n)],
                          read_pool(cluster, pool)["status"]), interval=0.2) as sampler:
        wait_for(lambda: settled(cluster, made, config), timeout=90, message="the pool rolled")
    assert not sampler.errors
    most = max(len(out) for out, _status in sampler.values)
    assert most == 2, "at most maxUnavailable=2 nodes out at once, and the pool used both: saw %d" % most
    assert all(status["unavailableMachineCount"] <= 2 for _out, status in sampler.values)
    assert any(condition(status, "Updating")["status"] == "True" for _out, status in sampler.values)

    for name, node in nodes_of(cluster, made).items():
        labels = node.metadata.labels
        assert TARGET in node.status.node_info.os_image
        assert node.status.node_info.kernel_version == TARGET_KERNEL
        assert node.status.node_info.boot_id != boot_ids[name]
        assert labels[NFD + "system-os_release.OSTREE_VERSION"] == TARGET
        assert labels[NFD + "kernel-version.full"] == TARGET_KERNEL
        assert labels[NFD + "system-os_release.ID"] == "rhel"
        assert NFD + "system-os_release.RHEL_VERSION" not in labels  # layered RHCOS has none
        assert REBOOTING_ANNOTATION not in node.metadata.annotations
    status = read_pool(cluster, pool)["status"]
    assert {k: status[k] for k in ("machineCount", "updatedMachineCount", "readyMachineCount",
                                   "unavailableMachineCount", "degradedMachineCount")} == {
        "machineCount": 5, "updatedMachineCount": 5, "readyMachineCount": 5, "unavailableMachineCount": 0,
        "degradedMachineCount": 0}
    assert condition(status, "Updated")["status"] == "True" and condition(status, "Updating")["status"] == "False"
    assert status["configuration"]["name"] == config

    # The DaemonSet's pods were not evicted; their driver, built for OLD, now crash-loops as a real one would.
    def crash_looping():
        pods = driver_pods()
        return {p.metadata.uid for p in pods} == {p.metadata.uid for p in before} and all(
            waiting_reason(p) == "CrashLoopBackOff" for p in pods) and pods
    pods = wait_for(crash_looping, message="old driver pods crash-looping on TARGET")
    assert "RHCOS %s cannot build for node" % OLD in pods[0].status.container_statuses[0].state.waiting.message

    version = cluster.custom.get_cluster_custom_object("config.openshift.io", "v1", "clusterversions", "version")
    assert version["status"]["desired"]["version"] == TARGET_OCP
    assert version["status"]["history"][0]["version"] == TARGET_OCP
    assert TARGET in dtk_tags(cluster)


def dtk_tags(cluster):
    namespace, name = fleets.DTK_STREAM
    stream = cluster.custom.get_namespaced_custom_object("image.openshift.io", "v1", namespace, "imagestreams", name)
    return [t["name"] for t in stream["spec"]["tags"]]


def test_paused_pool_does_not_move_until_unpaused(cluster, make_fleet):
    made, pool = make_pool(make_fleet, [("gpu", {"count": 3})], paused=True, max_unavailable=3)
    before = {name: dict(n.metadata.annotations) for name, n in nodes_of(cluster, made).items()}
    config = upgrade.start_upgrade(made, pool, TARGET, TARGET_OCP, dtk_tag=False)
    assert TARGET not in dtk_tags(cluster)

    def paused_status():
        status = read_pool(cluster, pool).get("status") or {}
        return status.get("observedGeneration") == 2 and status
    wait_for(paused_status, message="pool status of the new target")
    with Sampler(lambda: nodes_of(cluster, made), interval=0.2) as sampler:
        time.sleep(3 * (REBOOT_SECONDS + NFD_LAG_SECONDS))
    assert not sampler.errors
    for nodes in sampler.values:
        for name, node in nodes.items():
            assert node.metadata.annotations[fleets.DESIRED_CONFIG] == before[name][fleets.DESIRED_CONFIG]
            assert is_ready(node) and not node.spec.unschedulable and OLD in node.status.node_info.os_image
    status = read_pool(cluster, pool)["status"]
    assert (status["machineCount"], status["updatedMachineCount"], status["unavailableMachineCount"]) == (3, 0, 0)
    assert condition(status, "Updated")["status"] == "False"
    updating = condition(status, "Updating")
    assert (updating["status"], updating["message"]) == (
        "False", "Pool is paused; will not update to MachineConfig " + config)

    cluster.custom.patch_cluster_custom_object(*mco.POOLS, pool, {"spec": {"paused": False}})
    wait_for(lambda: settled(cluster, made, config), timeout=60, message="the unpaused pool rolled")


def test_drain_waits_for_a_disruption_budget(cluster, namespace, make_fleet):
    made, pool = make_pool(make_fleet, [("gpu", {"count": 2})], max_unavailable=1)
    first, second = sorted(made.node_names)  # the oldest is picked first; same age: by name
    cluster.core.create_namespaced_pod(namespace, {
        "metadata": {"name": "guarded", "labels": {"app": "guarded"}},
        "spec": {"nodeName": first, "containers": [{"name": "main", "image": "example.test/sim/workload:1"}]}})
    policy = kubernetes.client.PolicyV1Api(cluster.client)
    policy.create_namespaced_pod_disruption_budget(namespace, {
        "metadata": {"name": "guarded"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})
    wait_for(lambda: (policy.read_namespaced_pod_disruption_budget("guarded", namespace).status
                      .current_healthy or 0) == 1, message="the budget counts the pod healthy")
    config = upgrade.start_upgrade(made, pool, TARGET, TARGET_OCP)

    wait_for(lambda: nodes_of(cluster, made)[first].spec.unschedulable, message=first + " cordoned")
    time.sleep(REBOOT_SECONDS + 2)
    nodes = nodes_of(cluster, made)
    blocked = nodes[first]
    assert blocked.metadata.annotations[fleets.MCD_STATE] == "Working"
    assert is_ready(blocked) and OLD in blocked.status.node_info.os_image
    assert REBOOTING_ANNOTATION not in blocked.metadata.annotations
    assert cluster.core.read_namespaced_pod("guarded", namespace).metadata.deletion_timestamp is None
    assert nodes[second].metadata.annotations[fleets.DESIRED_CONFIG] != config  # maxUnavailable 1: it waits

    policy.delete_namespaced_pod_disruption_budget("guarded", namespace)
    wait_for(lambda: settled(cluster, made, config), timeout=60, message="the pool rolled once the budget went")
    assert not cluster.core.list_namespaced_pod(namespace, field_selector="metadata.name=guarded").items


def test_node_that_never_returns_stays_not_ready_and_holds_the_pool(cluster, make_fleet):
    made, pool = make_pool(make_fleet, [("bad", {"faults": {"never_returns": True}}), ("gpu", {"count": 2})],
                           max_unavailable=1)
    bad = [n for n in made.node_names if n.endswith("bad")][0]
    config = upgrade.start_upgrade(made, pool, TARGET, TARGET_OCP)
    wait_for(lambda: not is_ready(nodes_of(cluster, made)[bad]), message=bad + " rebooting")
    time.sleep(3 * REBOOT_SECONDS)
    for name, node in nodes_of(cluster, made).items():
        annotations = node.metadata.annotations
        if name == bad:
            assert not is_ready(node) and annotations[fleets.MCD_STATE] == "Working"
            assert annotations[fleets.CURRENT_CONFIG] != config and OLD in node.status.node_info.os_image
            assert annotations[REBOOTING_ANNOTATION] == mco.NEVER
        else:
            assert annotations[fleets.DESIRED_CONFIG] != config and is_ready(node)
    status = read_pool(cluster, pool)["status"]
    assert (status["updatedMachineCount"], status["unavailableMachineCount"]) == (0, 1)
    assert condition(status, "Updating")["status"] == "True"


def test_stale_nfd_label_after_upgrade(cluster, make_fleet):
    made, pool = make_pool(make_fleet, [("stale", {"faults": {"stale_nfd_after_upgrade": True}}), ("gpu", {})],
                           max_unavailable=2)
    config = upgrade.start_upgrade(made, pool, TARGET, TARGET_OCP)
    wait_for(lambda: settled(cluster, made, config), timeout=60, message="the pool rolled")
    for name, node in nodes_of(cluster, made).items():
        labels = node.metadata.labels
        assert TARGET in node.status.node_info.os_image
        assert labels[NFD + "kernel-version.full"] == TARGET_KERNEL
        assert labels[NFD + "system-os_release.OSTREE_VERSION"] == (OLD if name.endswith("stale") else TARGET)


def test_cordoned_node_is_left_alone(cluster, make_fleet):
    made, pool = make_pool(make_fleet, [("gpu", {"count": 2})], max_unavailable=2)
    first, cordoned = sorted(made.node_names)
    cluster.core.patch_node(cordoned, {"spec": {"unschedulable": True}})
    wait_for(lambda: read_pool(cluster, pool).get("status", {}).get("unavailableMachineCount") == 1,
             message="the cordoned node counted unavailable")
    config = upgrade.start_upgrade(made, pool, TARGET, TARGET_OCP)
    wait_for(lambda: is_done(nodes_of(cluster, made)[first], config) and
             mco.NFD_RELABEL_ANNOTATION not in nodes_of(cluster, made)[first].metadata.annotations,
             timeout=60, message=first + " updated")
    time.sleep(1)
    node = nodes_of(cluster, made)[cordoned]
    assert node.spec.unschedulable and node.metadata.annotations[fleets.DESIRED_CONFIG] != config
    status = read_pool(cluster, pool)["status"]
    assert (status["updatedMachineCount"], status["unavailableMachineCount"]) == (1, 1)


# -- the model, without a cluster ----------------------------------------------------------------

def test_pool_members_start_at_their_own_build_and_need_a_target_when_mixed():
    spec = pool_fleet([("a", {}), ("b", {"os": {"rhcos": gpu_fleet.RHCOS_96, "openshift": "4.21"}})])
    with pytest.raises(fleets.FleetError, match="say which is its target"):
        fleets.expand_pools(spec, fleets.expand_groups(spec))
    spec["pools"][0]["rhcos"] = TARGET
    nodes = fleets.expand_groups(spec, "p-")
    pools, configs = fleets.expand_pools(spec, nodes, "p-")
    assert pools[0]["metadata"]["name"] == "p-gpu-worker"
    assert pools[0]["spec"]["configuration"]["name"] == fleets.rendered_config_name("p-gpu-worker", TARGET)
    assert pools[0]["metadata"]["annotations"] == {fleets.REBOOT_SECONDS: "2", fleets.NFD_LAG_SECONDS: "1"}
    assert {n["annotations"][fleets.CURRENT_CONFIG] for n in nodes} == {
        fleets.rendered_config_name("p-gpu-worker", v) for v in (OLD, gpu_fleet.RHCOS_96)}
    assert {c["metadata"]["annotations"][fleets.RHCOS_OF_CONFIG] for c in configs} == {
        OLD, gpu_fleet.RHCOS_96, TARGET}


def test_relabelling_replaces_os_labels_and_keeps_a_stale_one():
    before = fleets.expand_groups(pool_fleet([("a", {})]))[0]["labels"]
    release, _os_image, kernel = fleets.booted_os(TARGET, TARGET_OCP)
    stale = NFD + "system-os_release.OSTREE_VERSION"
    after = fleets.relabelled_for_os(before, release, kernel, keep=(stale,))
    assert after[stale] == OLD and after[NFD + "kernel-version.full"] == TARGET_KERNEL
    assert after[NFD + "system-os_release.OPENSHIFT_VERSION"] == "4.19"
    assert NFD + "system-os_release.RHEL_VERSION" not in after
    assert after[NFD + "pci-10de.present"] == "true"


@pytest.mark.parametrize("value, machines, expected", [(None, 10, 1), (3, 10, 3), ("25%", 10, 2), ("5%", 10, 1)])
def test_max_unavailable_scales_down_but_never_to_zero(value, machines, expected):
    assert mco.max_unavailable({"spec": {"maxUnavailable": value}}, machines) == expected
