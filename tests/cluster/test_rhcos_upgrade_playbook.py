"""The rhcos_upgrade playbook against the simulated machine-config operator (tools/localcluster/mco.py).

Each test installs the GPU stack (driver DaemonSets per RHCOS build, container toolkit, device plugin) on a fleet
whose GPU nodes form one paused MachineConfigPool, starts an upgrade as the cluster-version operator would
(localcluster.upgrade), and runs playbooks/rhcos_upgrade.yml with ansible-playbook. The capacity invariant is
checked here, by sampling the cluster every second, not taken from the playbook's word.
"""

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

import gpu_fleet
from conftest import wait_for
from gpu_fleet import create_driver_service_account, driver, selector
from localcluster import fleet as fleets
from localcluster import mco, upgrade
from playbook import COLLECTIONS, ROOT, play
from sampler import Sampler, at_one_revision

PLAYBOOK = os.path.join(ROOT, "playbooks", "rhcos_upgrade.yml")
TARGET, TARGET_OCP = "9.6.20260401-0", "4.21.5"
TARGET_DAEMONSET = "nvidia-driver-daemonset-" + TARGET
RECORD = "accelerators.gpu/rhcos-upgrade"
DTK_RHCOS = "openshift.driver-toolkit.rhcos"
DRIVER_SELECTOR = "app.kubernetes.io/component=nvidia-driver"
# Simulated delays. The reboot is longer than a wave's window stays open (one API call, or until the machine-config
# operator took a node), as real reboots (minutes) are; each wave waits for it, so it is kept no longer than that.
REBOOT_SECONDS, NFD_LAG_SECONDS, BUILD_SECONDS = 8, 1, 3
REGISTRY = gpu_fleet.REGISTRY + ["nvcr.io/nvidia/*"]
RHCOS_IN_OS_IMAGE = re.compile(r"\d+\.\d+\.\d+-\d+")


def upgrade_fleet(groups, **pool):
    """GPU nodes [(name, overrides)] of role gpu-worker in one paused pool, before the upgrade."""
    nodes = []
    for name, extra in groups:
        group = {"name": name, "count": 1, "role": "gpu-worker", "gpu": {"count": 2}, "os": {"rhcos": gpu_fleet.RHCOS_418},
                 "driver_build_seconds": BUILD_SECONDS}
        group.update(extra)
        nodes.append(group)
    return gpu_fleet.fleet(nodes, registry=REGISTRY, pools=[dict(
        {"name": "gpu-worker", "paused": True, "reboot_seconds": REBOOT_SECONDS, "nfd_lag_seconds": NFD_LAG_SECONDS},
        **pool)])


def two_builds(count):
    """Node groups of `count` GPU nodes on each of two builds, the pool's target being the newer."""
    return [("a", {"count": count}), ("b", {"count": count, "os": {"rhcos": gpu_fleet.RHCOS_96, "openshift": "4.21"}})]


def upgrading(cluster, namespace, make_fleet, groups, dtk_tag=True, **pool):
    """A fleet with the stack installed, its upgrade to TARGET started; returns (fleet spec, fleet, pool name)."""
    spec = upgrade_fleet(groups, **pool)
    made = make_fleet(spec)
    pool_name = made.pools[0]["metadata"]["name"]
    install_stack(cluster, namespace, spec)
    upgrade.start_upgrade(made, pool_name, TARGET, TARGET_OCP, dtk_tag=dtk_tag)
    return spec, made, pool_name


def install_stack(cluster, namespace, spec):
    """The stack as the collection installs it: deploy labels, driver DaemonSets, toolkit and device plugin."""
    create_driver_service_account(cluster, namespace)
    installed = play(cluster, [
        ("accelerators.gpu.nfd_labels", {"label_selector": selector(spec), "manage_labels": True}),
        ("accelerators.gpu.driver_daemonsets", {"namespace": namespace, "label_selector": selector(spec),
                                                # As the common role's common_driver_spec: the same pod template.
                                                "driver": driver(spec, manager=gpu_fleet.DRIVER_MANAGER,
                                                                 kernel_module_type="auto")}),
        ("accelerators.gpu.operand_status", {"wait_for": "daemonsets", "namespace": namespace, "timeout": 120,
                                             "label_selectors": [DRIVER_SELECTOR]}),
        # Their validations are left out: the upgrade validates every node it moves, and time counts here.
        ("ansible.builtin.set_fact", {"common_namespace": namespace, "common_wait_timeout": 120,
                                      "container_toolkit_validate": False, "device_plugin_validate_workload": False}),
        ("ansible.builtin.include_role", {"name": "accelerators.gpu.container_toolkit"}),
        ("ansible.builtin.include_role", {"name": "accelerators.gpu.device_plugin"}),
    ], timeout=600)
    failed = [result.get("msg") for result in installed if result.get("failed")]
    assert not failed and installed.process.returncode == 0, failed or installed.process.stdout[-2000:]


def variables(namespace, spec, pool, **extra):
    # The driver images from the common role's variables; the upgrade adds the node selector the stack has.
    values = {"common_namespace": namespace, "rhcos_upgrade_pool": pool,
              "common_driver_repository": gpu_fleet.DRIVER["repository"],
              "common_driver_version": gpu_fleet.DRIVER["version"],
              "rhcos_upgrade_driver": {"node_selector": driver(spec)["node_selector"]},
              "rhcos_upgrade_driver_label_selector": selector(spec), "rhcos_upgrade_poll": 1,
              "rhcos_upgrade_node_timeout": 120, "rhcos_upgrade_stack_timeout": 120, "common_wait_timeout": 120}
    values.update(extra)
    return values


class UpgradeRun:
    """ansible-playbook playbooks/rhcos_upgrade.yml, or another playbook, in the background (its own process group,
    so that a test can kill it and its workers), its output in a file."""

    def __init__(self, cluster, values, workdir, path=None, playbook=PLAYBOOK):
        vars_file = os.path.join(str(workdir), "vars.json")
        with open(vars_file, "w") as handle:
            json.dump(values, handle)
        self.output_file = os.path.join(str(workdir), "ansible.log")
        env = dict(cluster.env, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="true",
                   ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks", PATH=path or os.environ["PATH"])
        command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", playbook,
                   "-e", "@" + vars_file]
        self.started = time.monotonic()
        with open(self.output_file, "w") as output:
            self.process = subprocess.Popen(command, env=env, cwd=str(workdir), stdout=output,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        self.seconds = None

    def wait(self, timeout=900):
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("the playbook ran over %ds:\n%s" % (timeout, self.output[-4000:]))
        self.seconds = time.monotonic() - self.started
        return code

    def kill(self):
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    @property
    def output(self):
        with open(self.output_file) as handle:
            return handle.read()


def rhcos_of(node):
    found = RHCOS_IN_OS_IMAGE.search(node.status.node_info.os_image or "")
    return found.group(0) if found else None


def is_ready(node):
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def record_of(node):
    return json.loads((node.metadata.annotations or {}).get(RECORD) or "{}")


def observe(cluster, namespace, spec):
    """One sample: per GPU node, what it runs and whether a Ready driver pod built for that build serves it."""
    nodes, pods = at_one_revision(
        lambda: cluster.core.list_node(label_selector=selector(spec)),
        lambda **at: cluster.core.list_namespaced_pod(namespace, label_selector=DRIVER_SELECTOR, **at))
    return served(nodes, pods)


def served(nodes, pods):
    builds = {node.metadata.name: rhcos_of(node) for node in nodes}
    serving = {pod.spec.node_name for pod in pods if gpu_fleet.ready(pod) and
               (pod.metadata.labels or {}).get(DTK_RHCOS) == builds.get(pod.spec.node_name)}
    return {"time": time.time(), "rhcos": builds,
            "without_driver": sorted(node.metadata.name for node in nodes
                                     if not (is_ready(node) and node.metadata.name in serving))}


def pool_of(cluster, pool):
    return cluster.custom.get_cluster_custom_object(*mco.POOLS, pool)


def driver_daemonsets(cluster, namespace):
    return sorted(ds.metadata.name for ds in cluster.apps.list_namespaced_daemon_set(
        namespace, label_selector=DRIVER_SELECTOR).items)


def assert_all_validated(cluster, spec):
    for node in cluster.core.list_node(label_selector=selector(spec)).items:
        record = record_of(node)
        assert rhcos_of(node) == TARGET, node.metadata.name
        assert (record.get("to"), record.get("result")) == (TARGET, "validated"), (node.metadata.name, record)
        assert int((node.status.allocatable or {}).get("nvidia.com/gpu", "0")) > 0, node.metadata.name


def test_six_gpu_nodes_on_two_builds_roll_within_a_budget_of_two(cluster, namespace, make_fleet, tmp_path):
    # Three nodes per build: more than the budget on each build and in all, so that the budget holds waves back; each
    # further wave of two would only add a reboot and a build to the run.
    spec, _made, pool = upgrading(cluster, namespace, make_fleet, two_builds(3), rhcos=gpu_fleet.RHCOS_96)
    assert driver_daemonsets(cluster, namespace) == sorted(
        "nvidia-driver-daemonset-" + build for build in (gpu_fleet.RHCOS_418, gpu_fleet.RHCOS_96))

    # No rhcos_upgrade_target: the playbook reads it from the driver-toolkit stream, as after a real upgrade.
    with Sampler(lambda: observe(cluster, namespace, spec), interval=1.0) as sampler:
        run = UpgradeRun(cluster, variables(namespace, spec, pool, rhcos_upgrade_budget=2), tmp_path)
        code = run.wait()
    output = run.output
    assert code == 0, output[-6000:]
    assert not sampler.errors, sampler.errors[:3]
    worst = max(sampler.values, key=lambda sample: len(sample["without_driver"]))
    print("\nmost GPU nodes without a driver for their build at one time: %d %s" % (
        len(worst["without_driver"]), worst["without_driver"]))
    assert len(worst["without_driver"]) <= 2, worst
    assert sampler.values[0]["without_driver"] == [] and sampler.values[-1]["without_driver"] == []

    assert driver_daemonsets(cluster, namespace) == [TARGET_DAEMONSET]
    assert_all_validated(cluster, spec)
    settings = pool_of(cluster, pool)
    assert (settings["spec"]["paused"], settings["spec"]["maxUnavailable"]) == (True, 1)  # as before the upgrade
    assert "accelerators.gpu/rhcos-upgrade-pool" not in settings["metadata"].get("annotations", {})
    assert "Back on RHCOS %s" % TARGET in output  # progress lines while it runs
    report_figures(cluster, spec, sampler, run)


def report_figures(cluster, spec, sampler, run):
    """Per node: orchestration overhead, the time from its RHCOS change to its stack validated minus the simulated
    delay after the change (the driver build; the NFD lag is not waited for: the playbook labels from osImage);
    and time out of service. Printed (pytest -s)."""
    overheads, out_of_service = {}, {}
    for node in cluster.core.list_node(label_selector=selector(spec)).items:
        name, record = node.metadata.name, record_of(node)
        before = [s["time"] for s in sampler.values if s["rhcos"].get(name) != TARGET]
        after = [s["time"] for s in sampler.values if s["rhcos"].get(name) == TARGET]
        changed = (max(before) + min(after)) / 2  # between the last sample before and the first after: +-0.5 s
        overheads[name] = record["validated"] - changed - BUILD_SECONDS
        out_of_service[name] = record["validated"] - record["started"]
    print("total: %.0f s for %d nodes; orchestration overhead per node (s): min %.1f median %.1f max %.1f; "
          "out of service per node (s): median %.1f max %.1f (reboot %d s, NFD lag %d s, build %d s)" % (
              run.seconds, len(overheads), min(overheads.values()), statistics.median(overheads.values()),
              max(overheads.values()), statistics.median(out_of_service.values()), max(out_of_service.values()),
              REBOOT_SECONDS, NFD_LAG_SECONDS, BUILD_SECONDS))
    # Printed, not compared: timings are the benchmark's (make bench-upgrade), a test that compares them is flaky.


def taken_before_the_run(cluster, pool, spec):
    """Unpauses the pool until the machine-config operator takes a node (maxUnavailable 1: one), as a user letting
    the pool go for a moment would, and pauses it again; returns the node's name."""
    config = pool_of(cluster, pool)["spec"]["configuration"]["name"]
    cluster.custom.patch_cluster_custom_object(*mco.POOLS, pool, {"spec": {"paused": False}})
    try:
        taken = wait_for(lambda: [n.metadata.name for n in cluster.core.list_node(label_selector=selector(spec)).items
                                  if (n.metadata.annotations or {}).get(fleets.DESIRED_CONFIG) == config],
                         message="the machine-config operator to take a node")
    finally:
        cluster.custom.patch_cluster_custom_object(*mco.POOLS, pool, {"spec": {"paused": True}})
    assert len(taken) == 1, taken
    return taken[0]


def test_missing_target_dtk_tag_is_refused_before_anything_changes_and_a_release_gives_it(cluster, namespace, make_fleet, tmp_path):
    spec, made, pool = upgrading(cluster, namespace, make_fleet, [("a", {"count": 2})], dtk_tag=False)

    def snapshot():
        nodes = cluster.core.list_node(label_selector=selector(spec)).items
        return ({n.metadata.name: (n.metadata.labels, n.metadata.annotations, n.spec.unschedulable) for n in nodes},
                pool_of(cluster, pool)["spec"], pool_of(cluster, pool)["metadata"].get("annotations"),
                {d.metadata.name: d.metadata.resource_version for d in
                 cluster.apps.list_namespaced_daemon_set(namespace).items})
    before = snapshot()
    run = UpgradeRun(cluster, variables(namespace, spec, pool, rhcos_upgrade_target=TARGET), tmp_path)
    assert run.wait() != 0
    assert "Preflight refuses RHCOS %s" % TARGET in run.output and "Nothing was changed" in run.output, \
        run.output[-3000:]
    time.sleep(REBOOT_SECONDS)  # a pool wrongly opened would have moved a node by now
    assert snapshot() == before
    assert pool_of(cluster, pool)["spec"]["paused"] is True
    assert TARGET_DAEMONSET not in driver_daemonsets(cluster, namespace)

    # The release to upgrade to, whose DTK image the stream lacks: without oc, preflight says so and changes nothing.
    (tmp_path / "no-oc").mkdir()
    without_oc = os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin", "/bin"])
    if not shutil.which("oc", path=without_oc):
        run = UpgradeRun(cluster, variables(namespace, spec, pool, rhcos_upgrade_release=TARGET_OCP),
                         tmp_path / "no-oc", path=without_oc)
        assert run.wait() != 0
        assert ("release %s was given, and finding its DTK image and RHCOS build needs the oc client" % TARGET_OCP
                in run.output), run.output[-3000:]
        assert snapshot() == before

    # The nodes carry the records of an earlier upgrade, which stay; one of them the machine-config operator takes
    # before the run notes it: the run notes it for this upgrade and validates it once, as the others.
    earlier = {"from": gpu_fleet.RHCOS_416, "to": gpu_fleet.RHCOS_418, "started": 1.0, "validated": 2.0,
               "result": "validated"}
    for name in made.node_names:
        cluster.core.patch_node(name, {"metadata": {"annotations": {RECORD: json.dumps(earlier)}}})
    early = taken_before_the_run(cluster, pool, spec)
    # Let it finish its update and NFD relabel it first: a node that boots while prepare reads the nodes' labels is
    # another case.
    wait_for(lambda: cluster.core.read_node(early).metadata.labels.get(gpu_fleet.OSTREE) == TARGET, timeout=120,
             message="%s back on %s, relabelled" % (early, TARGET))

    # With oc, the release names the target build and its DTK image: the upgrade goes through.
    (tmp_path / "oc").mkdir()
    oc = gpu_fleet.fake_oc(tmp_path / "oc", fleets.dtk_image(TARGET), TARGET)
    run = UpgradeRun(cluster, variables(namespace, spec, pool, rhcos_upgrade_release=TARGET_OCP),
                     tmp_path / "oc", path=os.pathsep.join([os.path.dirname(oc), without_oc]))
    # A node never noted for this upgrade would be settled (and validated) round after round until this timeout.
    assert run.wait(timeout=300) == 0, run.output[-6000:]
    assert run.output.count("%s: RHCOS " % early) == 2, run.output[-6000:]  # validated once, reported once
    with open(oc + ".args") as recorded:
        assert recorded.read().split() == ["adm", "release", "info", TARGET_OCP, "--output=json"]
    assert driver_daemonsets(cluster, namespace) == [TARGET_DAEMONSET]
    containers = {c.name: c.image for c in cluster.apps.read_namespaced_daemon_set(
        TARGET_DAEMONSET, namespace).spec.template.spec.containers}
    # The driver image from common_driver_repository and common_driver_version, the DTK image from the release.
    common_driver_image = "%s/driver:%s-rhel9.6" % (gpu_fleet.DRIVER["repository"], gpu_fleet.DRIVER["version"])
    assert containers == {"nvidia-driver-ctr": common_driver_image,
                          "openshift-driver-toolkit-ctr": fleets.dtk_image(TARGET)}
    assert_all_validated(cluster, spec)


def test_node_that_never_returns_stops_the_line(cluster, namespace, make_fleet, tmp_path):
    spec, made, pool = upgrading(cluster, namespace, make_fleet,
                                 [("bad", {"faults": {"never_returns": True}}), ("gpu", {"count": 2})])
    bad = [name for name in made.node_names if name.endswith("bad")][0]
    others = sorted(set(made.node_names) - {bad})

    run = UpgradeRun(cluster, variables(namespace, spec, pool, rhcos_upgrade_target=TARGET, rhcos_upgrade_budget=1,
                                        rhcos_upgrade_node_timeout=20), tmp_path)
    assert run.wait() != 0
    output = run.output
    assert "Node %s did not come back on RHCOS %s within 20 s: NotReady" % (bad, TARGET) in output, output[-4000:]
    assert "Pool %s is paused" % pool in output
    settings = pool_of(cluster, pool)
    assert settings["spec"]["paused"] is True
    time.sleep(REBOOT_SECONDS)  # a pool wrongly left open would take the next node meanwhile
    nodes = {n.metadata.name: n for n in cluster.core.list_node(label_selector=selector(spec)).items}
    assert not is_ready(nodes[bad])
    for name in others:
        assert nodes[name].metadata.annotations[fleets.DESIRED_CONFIG] != settings["spec"]["configuration"]["name"]
        assert is_ready(nodes[name]) and rhcos_of(nodes[name]) == gpu_fleet.RHCOS_418
        assert int(nodes[name].status.allocatable["nvidia.com/gpu"]) > 0
        assert name not in observe(cluster, namespace, spec)["without_driver"]


def test_interrupted_run_resumes_on_a_second_run(cluster, namespace, make_fleet, tmp_path):
    # Two nodes per build, a budget of two: the run is killed after its first node is validated, with nodes left.
    spec, _made, pool = upgrading(cluster, namespace, make_fleet, two_builds(2), rhcos=gpu_fleet.RHCOS_96)
    values = variables(namespace, spec, pool, rhcos_upgrade_target=TARGET, rhcos_upgrade_budget=2)

    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    first = UpgradeRun(cluster, values, tmp_path / "first")

    def validated():
        return [n.metadata.name for n in cluster.core.list_node(label_selector=selector(spec)).items
                if record_of(n).get("result") == "validated"]
    wait_for(lambda: validated() or first.process.poll() is not None, timeout=300, interval=0.5,
             message="a first node validated")
    first.kill()
    done = validated()
    assert 0 < len(done) < 4, "killed mid-rollout: %s validated" % done

    with Sampler(lambda: observe(cluster, namespace, spec), interval=1.0) as sampler:
        second = UpgradeRun(cluster, values, tmp_path / "second")
        code = second.wait()
    assert code == 0, second.output[-6000:]
    assert max(len(sample["without_driver"]) for sample in sampler.values) <= 2
    assert driver_daemonsets(cluster, namespace) == [TARGET_DAEMONSET]
    names = [ds.metadata.name for ds in cluster.apps.list_namespaced_daemon_set(namespace).items]
    assert sorted(names) == sorted({TARGET_DAEMONSET, "nvidia-container-toolkit-daemonset",
                                    "nvidia-operator-validator", "nvidia-device-plugin-daemonset"})
    assert_all_validated(cluster, spec)
    print("\nresumed after %s were validated; second run %.0f s" % (", ".join(done), second.seconds))
