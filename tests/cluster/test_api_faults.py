"""The API server going away and answering faults while the collection works, against the real local control plane.

- A deploy through a fault-injecting proxy (tools/localcluster/apiproxy.py, HTTPS with a certificate from the
  cluster's CA) that answers 429 with Retry-After, 503 and resets connections, before and after the API server
  acted: the run succeeds, and the modules say what they met. The faults the proxy injected and the retries the
  modules reported are printed (pytest -s, the CI log).
- A driver rollout during which the API server restarts twice (as the kube-apiserver pods of an OpenShift
  control-plane upgrade do), once as it plans and once mid-wave (when a node of the first wave is cordoned): it
  completes, or stops with a clear message and a second run completes it. A sampler checks all along that no node
  is cordoned without an upgrade state, that a node lacks its driver pod only while its upgrade waits for the
  replacement (pod-restart-required), and that every GPU node stays selected by a driver DaemonSet.

Each test leaves the session cluster's API server running and ready (ControlPlane.start waits for /readyz).
"""

import collections
import os
import re
import time

import pytest

from conftest import Cluster, wait_for
import test_rhcos_upgrade_playbook as rhcos
from gpu_fleet import FLEET_LABEL, RHCOS_96, RHCOS_416, selector
from localcluster import apiproxy
from localcluster import fleet as fleets
from sampler import Sampler, at_one_revision
from test_deploy import fleet_variables, gpu_fleet, playbook
from test_rhcos_upgrade_playbook import UpgradeRun

OLD, NEW = "570.172.08", "580.95.05"
STATE = "nvidia.com/gpu-driver-upgrade-state"
DRIVER_SELECTOR = "app.kubernetes.io/component=nvidia-driver"
IN_PROGRESS = ("cordon-required", "wait-for-jobs-required", "pod-deletion-required", "drain-required",
               "pod-restart-required", "validation-required", "uncordon-required", "upgrade-failed")
# The requests of the collection's own modules (nodes, pods, events, the operands' objects), whose results count each
# request retried against what the proxy injected. The roles' kubernetes.core tasks (validation Jobs, MachineConfigPools,
# ClusterVersion: accelerators.gpu.k8s, k8s_info, k8s_drain) run a whole module again instead, which the kubernetes
# client's own retries would blur here: test_api_outage_retries.py restarts the API server under them.
RETRYING = re.compile(r"FAILED - RETRYING: \[[^]]+\]: (.+?) \(\d+ retries left\)")
MODULE_PATHS = (r"^/api/v1/(nodes|pods|namespaces/[^/]+/(pods|events|serviceaccounts|configmaps|services))"
                r"|^/apis/apps/v1/")


def module_faults(run):
    """The api_faults of every module result of a playbook run (localhost tasks), the warnings of those results,
    and ansible-playbook's own (which a clean run has none of)."""
    reported = [result["api_faults"] for _name, result in run.results if result.get("api_faults")]
    warnings = [line for _name, result in run.results for line in result.get("warnings") or []]
    return reported, warnings + [line for line in run.process.stderr.splitlines() if "WARNING]" in line]


def total(reported):
    faults = {}
    for entry in reported:
        for kind, count in entry["faults"].items():
            faults[kind] = faults.get(kind, 0) + count
    return faults


def test_a_deploy_through_429s_503s_and_reset_connections_succeeds_and_says_what_it_met(
        cluster, plane, namespace, make_fleet):
    spec = gpu_fleet({"name": "gpu", "count": 2, "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 2},
                      "os": {"rhcos": RHCOS_416}})
    make_fleet(spec)
    with apiproxy.APIProxy(cluster.kubeconfig, tls=plane.state / "pki") as proxy:
        # In order, each for its count of requests: the first fault that matches a request is the one it meets.
        # urllib3 under the kubernetes client honours a Retry-After three times in a row itself, then gives up:
        # six 429s in a row reach a module once.
        proxy.inject(apiproxy.STATUS, status=429, retry_after=1, count=6, path=MODULE_PATHS)
        proxy.inject(apiproxy.STATUS, status=503, count=3, path=MODULE_PATHS)
        proxy.inject(apiproxy.RESET, count=3, method="GET", path=MODULE_PATHS)
        # Applied, and the answer lost: the server-side apply is sent again and changes nothing more.
        proxy.inject(apiproxy.RESET_AFTER, count=2, method="PATCH", path=r"^/apis/apps/v1/")
        run = playbook(Cluster(proxy.kubeconfig, cluster.flavour), "deploy", fleet_variables(
            namespace, spec, container_toolkit_validate=False, device_plugin_validate_workload=False))
        injected = dict(proxy.injected)
    failed = [(name, result.get("msg")) for name, result in run.results if result.get("failed")]
    assert not failed and run.process.returncode == 0, (failed, run.process.stderr[-3000:])
    reported, warnings = module_faults(run)
    print("\nfault proxy injected: %s" % injected)
    print("modules retried: %s over %d task(s)" % (total(reported), len(reported)))
    for line in warnings:
        print("  " + line.strip())
    assert injected == {"429": 6, "503": 3, "reset": 3, "reset after": 2}, injected
    # What reached the modules, they retried and said, each in one warning; urllib3 retries some itself (a reset
    # GET, a 429 with Retry-After), so the modules saw at most what was injected.
    assert reported and not any(entry["given_up"] for entry in reported), reported
    seen = total(reported)
    assert seen.get("429") and seen.get("503") and seen.get("reset"), seen
    assert all(seen[kind] <= injected[kind] + injected.get("reset after", 0) * (kind == "reset") for kind in seen)
    assert len(warnings) == len(reported), warnings
    assert all("the API server at %s" % proxy.url in line and "retried" in line for line in warnings), warnings
    # The stack is up, as a run without faults leaves it: the deploy's own checks (driver, toolkit, device plugin
    # ready on both nodes) passed; a second run through the API server directly warns of nothing.
    again = playbook(cluster, "deploy", fleet_variables(
        namespace, spec, container_toolkit_validate=False, device_plugin_validate_workload=False))
    again.succeeded()
    assert not any(result.get("api_faults") for _name, result in again.results)


# -- the API server restarting during a driver rollout ---------------------------------------------------------
def observe(cluster, namespace, spec):
    """One sample of the invariants' facts: per GPU node its state label, whether it is cordoned, whether a
    (not terminating) driver pod runs on it, and whether a driver DaemonSet selects it."""
    nodes, pods, daemonsets = at_one_revision(
        lambda: cluster.core.list_node(label_selector=selector(spec)),
        lambda **at: cluster.core.list_namespaced_pod(namespace, label_selector=DRIVER_SELECTOR, **at),
        lambda **at: cluster.apps.list_namespaced_daemon_set(namespace, label_selector=DRIVER_SELECTOR, **at))
    pods = [p for p in pods if not p.metadata.deletion_timestamp]

    def selected(node):
        labels = node.metadata.labels or {}
        return any(all(labels.get(key) == value for key, value in (ds.spec.template.spec.node_selector or {}).items())
                   for ds in daemonsets)
    return {node.metadata.name: {"state": (node.metadata.labels or {}).get(STATE),
                                 "cordoned": bool(node.spec.unschedulable),
                                 "driver_pod": any(p.spec.node_name == node.metadata.name for p in pods),
                                 "selected": selected(node)} for node in nodes}


def violations(sample):
    """What a sample shows that a next run could not resume from."""
    found = []
    for name, node in sorted(sample.items()):
        if node["cordoned"] and node["state"] not in IN_PROGRESS:
            found.append("%s cordoned in state %s" % (name, node["state"]))
        if not node["driver_pod"] and node["state"] != "pod-restart-required":
            found.append("%s without a driver pod in state %s" % (name, node["state"]))
        if not node["selected"]:
            found.append("%s selected by no driver DaemonSet" % name)
    return found


def quietly(read):
    """read(), or None while the API server is away."""
    def attempt():
        try:
            return read()
        except Exception:  # the API server restarting: not yet
            return None
    return attempt


def states(cluster, names):
    return {name: (cluster.core.read_node(name).metadata.labels or {}).get(STATE) for name in names}


@pytest.fixture
def deployed(cluster, namespace):
    """Three GPU nodes running driver OLD, deployed by the deploy playbook; (spec, node names, variables)."""
    spec = gpu_fleet({"name": "gpu", "count": 3, "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 2},
                      "os": {"rhcos": RHCOS_416}, "driver_build_seconds": 2})
    made = fleets.Fleet(cluster.client, spec, prefix="af-%s-" % os.urandom(2).hex()).apply().wait_ready()
    variables = dict(fleet_variables(namespace, spec, common_driver_version=OLD, driver_wait_timeout=300,
                                     driver_upgrade_max_parallel=1, driver_upgrade_poll=1,
                                     container_toolkit_validate=False, device_plugin_validate_workload=False),
                     common_wait_timeout=180)
    playbook(cluster, "deploy", variables).succeeded()
    yield spec, sorted(made.node_names), variables
    made.delete()


def test_a_driver_rollout_through_two_api_server_restarts_completes_and_every_node_stays_resumable(
        cluster, plane, deployed, namespace, tmp_path):
    spec, names, variables = deployed
    values = dict(variables, common_driver_version=NEW)
    _runs, restarts = run_through_restarts(
        cluster, plane, [
            # As it plans: the nodes waiting their turn get upgrade-required.
            ("the rollout planned", lambda: "upgrade-required" in states(cluster, names).values()),
            # Mid-wave: a node of a wave cordoned, its driver not replaced yet.
            ("a node cordoned mid-wave", lambda: any(
                node["cordoned"] and node["state"] in IN_PROGRESS[:5]
                for node in observe(cluster, namespace, spec).values()))],
        lambda workdir: UpgradeRun(cluster, values, workdir, playbook="accelerators.gpu.deploy"), tmp_path,
        lambda: observe(cluster, namespace, spec), violations)
    assert len(restarts) == 2, restarts
    assert set(states(cluster, names).values()) == {"upgrade-done"}
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=DRIVER_SELECTOR).items
    images = {p.spec.node_name: p.spec.containers[0].image for p in pods if not p.metadata.deletion_timestamp}
    assert all(NEW in images.get(name, "") for name in names), images
    assert not any(node.spec.unschedulable for node in cluster.core.list_node(label_selector=selector(spec)).items)


def test_the_api_server_and_etcd_restart_with_their_state_and_the_simulator_goes_on(
        cluster, plane, namespace, make_fleet):
    """restart_apiserver() and restart_etcd() keep ports, certificates and data; kcm, the scheduler, kwok and the
    simulator reconnect on their own: a pod created after both restarts is scheduled, and a driver-less GPU node
    still gets its simulated state written."""
    spec = gpu_fleet({"name": "cpu", "count": 1, "os": {"rhcos": RHCOS_416}})
    made = make_fleet(spec)
    before = cluster.core.read_namespace(namespace).metadata.uid
    server = plane.info()["server"]
    plane.restart_apiserver()
    plane.restart_etcd()
    assert plane.info()["server"] == server and plane.running()
    assert cluster.core.read_namespace(namespace).metadata.uid == before
    node = sorted(made.node_names)[0]
    cluster.core.create_namespaced_pod(namespace, {"metadata": {"name": "after-restarts"}, "spec": {
        "nodeSelector": {FLEET_LABEL: spec["name"]},
        "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})
    wait_for(lambda: (cluster.core.read_namespaced_pod("after-restarts", namespace).status.phase == "Running"
                      and cluster.core.read_namespaced_pod("after-restarts", namespace).spec.node_name == node),
             timeout=120, message="a pod scheduled (kube-scheduler) and running (kwok) after both restarts")
    cluster.core.delete_namespaced_pod("after-restarts", namespace)


# -- the API server restarting during an RHCOS rollout and a first deploy --------------------------------------
def rhcos_observe(cluster, namespace, spec):
    """One sample: per GPU node whether a Ready driver pod of its build serves it (test_rhcos_upgrade_playbook),
    whether a driver DaemonSet selects it, and whether it is cordoned while the machine-config operator is not
    moving it (desired config = current config)."""
    nodes, pods, daemonsets = at_one_revision(
        lambda: cluster.core.list_node(label_selector=selector(spec)),
        lambda **at: cluster.core.list_namespaced_pod(namespace, label_selector=DRIVER_SELECTOR, **at),
        lambda **at: cluster.apps.list_namespaced_daemon_set(namespace, label_selector=DRIVER_SELECTOR, **at))
    served = rhcos.served(nodes, pods)
    unselected = sorted(node.metadata.name for node in nodes if not any(
        all((node.metadata.labels or {}).get(key) == value
            for key, value in (ds.spec.template.spec.node_selector or {}).items()) for ds in daemonsets))
    stray = sorted(node.metadata.name for node in nodes if node.spec.unschedulable and (
        (node.metadata.annotations or {}).get(fleets.DESIRED_CONFIG)
        == (node.metadata.annotations or {}).get(fleets.CURRENT_CONFIG)))
    return {"without_driver": served["without_driver"], "unselected": unselected, "cordoned_idle": stray}


def rhcos_violations(sample, budget):
    found = []
    if len(sample["without_driver"]) > budget:
        found.append("over the budget without a driver: %s" % sample["without_driver"])
    if sample["unselected"]:
        found.append("selected by no driver DaemonSet: %s" % sample["unselected"])
    if sample["cordoned_idle"]:
        found.append("cordoned while the machine-config operator does not move them: %s" % sample["cordoned_idle"])
    return found


def run_through_restarts(cluster, plane, triggers, start_run, tmp_path, observe_fn, violations_fn):
    """start_run(workdir) -> UpgradeRun; the API server restarted once each trigger (what, predicate) holds, in
    order. A run that stops (a task that does not retry met the restart) must leave nothing the next run could not
    resume from; the next run starts, the triggers left apply to it, and the last run must succeed. Returns
    (runs, restarts)."""
    restarts, runs, pending, restarts_before, started = [], [], list(triggers), [], []

    def start():
        workdir = tmp_path / ("run-%d" % (len(runs) + 1))
        workdir.mkdir()
        runs.append(start_run(workdir))
        restarts_before.append(len(restarts))
        started.append(time.monotonic() - origin)

    # What the runs are judged by holds before they start: a violation seen later is theirs. The stack installed just
    # before may still settle (a driver pod Ready a moment after its DaemonSet's wait, on a loaded machine).
    seen = []

    def settled():
        seen[:] = violations_fn(observe_fn())
        return not seen
    try:
        wait_for(settled, timeout=120, interval=0.5, message="the fleet as the invariants want it before the first run")
    except AssertionError as error:
        raise AssertionError("%s: %s" % (error, seen))
    origin = time.monotonic()
    with Sampler(quietly(observe_fn), interval=0.5) as sampler:
        start()
        while True:
            run = runs[-1]
            try:
                while pending:
                    what, predicate = pending[0]
                    wait_for(lambda: quietly(predicate)() or run.process.poll() is not None, timeout=600,
                             interval=0.3, message=what)
                    if run.process.poll() is not None:
                        break
                    away = time.monotonic()
                    plane.restart_apiserver(down_seconds=3)
                    restarts.append("%s (away %.0f s)" % (what, time.monotonic() - away))
                    pending.pop(0)
            except BaseException:
                run.kill()
                raise
            code = run.wait(timeout=1200)
            if code == 0:
                break
            print("\nrun %d stopped (rc=%d):\n%s" % (len(runs), code, "\n".join(
                line for line in run.output.splitlines() if "fatal:" in line or "FAILED" in line)[-2000:]))
            stopped = observe_fn()
            assert not violations_fn(stopped), violations_fn(stopped)
            assert len(restarts) > restarts_before[-1], "run %d failed, no restart during it:\n%s" % (
                len(runs), run.output[-5000:])
            start()
    samples = [value for value in sampler.values if value]
    print("\nAPI server restarted: %s; %d run(s); %d samples (reads failed while it was away: %d)"
          % (", ".join(restarts), len(runs), len(samples), len(sampler.values) - len(samples)))
    for index, run in enumerate(runs):
        # The collection's modules' warnings (the API server at ...) and those of the roles' kubernetes.core tasks
        # (kubernetes.core.k8s_info: the API server ...).
        retried = [line.strip() for line in run.output.splitlines() if re.search(r"WARNING.*the API server ", line)]
        print("run %d: %d task(s) retried through faults%s" % (
            index + 1, len(retried), "".join("\n  " + line for line in retried[:8])))
        # The tasks with until/retries: polls, and the role's reads and pauses tried again while the API server was
        # away.
        tried = collections.Counter(RETRYING.findall(run.output))
        print("  tried again (Ansible's until): %s" % (", ".join(
            "%s x%d" % (task, count) for task, count in sorted(tried.items())) or "none"))
    bad = [(round(seconds, 1), violations_fn(value)) for seconds, value in sampler.samples
           if value and violations_fn(value)]
    assert not bad, "%d of %d samples from %.1f s to %.1f s (run %d started at %s s): %s" % (
        len(bad), len(samples), bad[0][0], bad[-1][0], len(runs), ", ".join("%.1f" % s for s in started), bad[:5])
    assert plane.running()
    cluster.core.list_namespace(limit=1)
    return runs, restarts


# A node's reboot here outlasts an API server restart, as a real one (minutes) outlasts a kube-apiserver restart
# (seconds). A wave's window is open for one API call; the restart mid-wave keeps it open until the API server is
# back (the role then pauses the pool within a second): a reboot shorter than that would let the machine-config
# operator take the next node past the budget, as the real one would. Here a restart keeps the API server away
# for 15-20 s on a loaded machine.
REBOOT_PAST_A_RESTART_SECONDS = 40


def test_an_rhcos_rollout_through_two_api_server_restarts_completes_and_every_node_stays_resumable(
        cluster, plane, namespace, make_fleet, tmp_path):
    spec, _made, pool = rhcos.upgrading(cluster, namespace, make_fleet, rhcos.two_builds(1), rhcos=RHCOS_96,
                                        reboot_seconds=REBOOT_PAST_A_RESTART_SECONDS)
    values = rhcos.variables(namespace, spec, pool, rhcos_upgrade_target=rhcos.TARGET, rhcos_upgrade_budget=1)

    def mid_wave():
        nodes = cluster.core.list_node(label_selector=selector(spec)).items
        return any((n.metadata.annotations or {}).get(fleets.DESIRED_CONFIG)
                   != (n.metadata.annotations or {}).get(fleets.CURRENT_CONFIG) or not rhcos.is_ready(n) for n in nodes)
    _runs, restarts = run_through_restarts(
        cluster, plane, [
            ("the target's driver DaemonSet created",
             lambda: rhcos.TARGET_DAEMONSET in rhcos.driver_daemonsets(cluster, namespace)),
            ("a node of a wave moving to the target", mid_wave)],
        lambda workdir: rhcos.UpgradeRun(cluster, values, workdir), tmp_path,
        lambda: rhcos_observe(cluster, namespace, spec), lambda sample: rhcos_violations(sample, 1))
    assert len(restarts) == 2, restarts
    rhcos.assert_all_validated(cluster, spec)
    assert rhcos.driver_daemonsets(cluster, namespace) == [rhcos.TARGET_DAEMONSET]


def deploy_violations(sample):
    """What a sample of a first deploy shows that a next run could not resume from: a node cordoned (a deploy
    cordons none), a GPU node left out once a driver DaemonSet exists."""
    found = ["%s cordoned" % name for name, node in sorted(sample.items()) if node["cordoned"]]
    if any(node["selected"] for node in sample.values()):
        found.extend("%s selected by no driver DaemonSet" % name for name, node in sorted(sample.items())
                     if not node["selected"])
    return found


def test_a_first_deploy_through_two_api_server_restarts_comes_up(cluster, plane, namespace, make_fleet, tmp_path):
    spec = gpu_fleet({"name": "gpu", "count": 2, "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 2},
                      "os": {"rhcos": RHCOS_416}, "driver_build_seconds": 2})
    make_fleet(spec)
    values = fleet_variables(namespace, spec, container_toolkit_validate=False, device_plugin_validate_workload=False)

    def daemonset(name):
        return lambda: any(ds.metadata.name.startswith(name)
                           for ds in cluster.apps.list_namespaced_daemon_set(namespace).items)
    _runs, restarts = run_through_restarts(
        cluster, plane, [("the driver DaemonSet created", daemonset("nvidia-driver-daemonset")),
                         ("the container toolkit DaemonSet created", daemonset("nvidia-container-toolkit"))],
        lambda workdir: UpgradeRun(cluster, values, workdir, playbook="accelerators.gpu.deploy"), tmp_path,
        lambda: observe(cluster, namespace, spec), deploy_violations)
    assert restarts, "the deploy ended before its driver DaemonSet existed"
    # Up, as a deploy without restarts leaves it: a second run changes nothing and warns of nothing.
    again = playbook(cluster, "deploy", values).succeeded()
    assert again.stats["changed"] == 0, [name for name, result in again.results if result.get("changed")]
