"""The support matrix (tools/matrix): for each combination of ansible-core, Python and kubernetes client that MATRIX
selects (`ci`, the default: the oldest and the newest; `all`; or names), the unit tests run with that environment's
Python, and a smoke on the demo fleet runs that environment's ansible-playbook: deploy, the same deploy again with the
module worker off, a driver version rolled out to every GPU node, status, uninstall. One control plane serves every
combination, one after the other: each smoke ends with an uninstall that must leave the cluster as it found it.

The module worker serves every module of the deploy, the first included, or the smoke fails: a supported
ansible-core on which the worker fell back to modules in their own processes would otherwise only be slower. Each
module result says what ran it (accelerators_gpu_worker), which tests/callback_plugins/module_reports.py records.

A combination whose Python this machine lacks is skipped, naming the version and where it was looked for.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import kubernetes
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "tools") not in sys.path:
    sys.path.insert(0, str(ROOT / "tools"))

import matrix  # noqa: E402  (tools/, which the Makefile puts on PYTHONPATH)
from localcluster import api  # noqa: E402

pytestmark = pytest.mark.matrix

COLLECTIONS = ROOT / ".build" / "collections"
CALLBACKS = ROOT / "tests" / "callback_plugins"
DEMO = ROOT / "tools" / "localcluster" / "fleets" / "demo.yml"
NAMESPACE = "nvidia-gpu-operator"
DRIVER_PODS = "app.kubernetes.io/component=nvidia-driver"
UPGRADE_STATE = "nvidia.com/gpu-driver-upgrade-state"
# The deploy's driver is common_driver_version's default (roles/common/defaults/main.yml); the smoke rolls out this one,
# a newer driver NVIDIA builds images of (gpu-driver-container's versions.mk).
NEW_DRIVER = "610.57.04"
PLAYBOOK_TIMEOUT = 1200
COMBINATIONS = matrix.selected()


_VENVS = {}


def venv_of(combination):
    """The combination's virtual environment (made on demand, cached), or a skip naming the missing Python."""
    if combination.name not in _VENVS:
        try:
            _VENVS[combination.name] = matrix.ensure_venv(combination)
        except matrix.NoInterpreter as missing:
            _VENVS[combination.name] = missing
    venv = _VENVS[combination.name]
    if isinstance(venv, matrix.NoInterpreter):
        pytest.skip("%s (%s): %s" % (combination.name, combination.description, venv))
    versions = matrix.installed(venv)
    # What the environment runs is what the combination says: a stale or mixed environment would test something else.
    expected = matrix.pins(combination)
    assert {p: versions[p] for p in ("ansible-core", "kubernetes", "pytest")} == {
        p: expected[p] for p in ("ansible-core", "kubernetes", "pytest")}, versions
    assert versions["python"].startswith(combination.python + "."), versions
    assert versions["kubernetes.core"] == combination.kubernetes_core, versions
    print("\n%s: %s" % (combination.name, ", ".join("%s %s" % item for item in sorted(versions.items()))))
    return venv


def environment(venv, **extra):
    """The environment of a process of the combination: its bin first on PATH, nothing of the default environment's
    Python on the import path, the checkout as accelerators.gpu."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME") and not key.startswith("ANSIBLE_")}
    env.update(PATH="%s%s%s" % (venv / "bin", os.pathsep, env.get("PATH", "")),
               ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_NOCOLOR="true", ANSIBLE_FORCE_COLOR="false")
    env.update(extra)
    return env


@pytest.mark.parametrize("combination", COMBINATIONS, ids=[c.name for c in COMBINATIONS])
def test_unit_tests_pass(combination):
    venv = venv_of(combination)
    started = time.monotonic()
    # The checkout importable as the Makefile makes it (not through tests/unit/conftest.py's symlink in a new temporary
    # directory each run, whose bytecode would pile up in the shared cache), and tools/ (the golden render's fleets).
    result = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "tests/unit", "-q", "-p", "no:cacheprovider",
                             "--durations=0", "--no-header"], cwd=ROOT,
                            env=environment(venv, PYTHONPATH=os.pathsep.join([str(COLLECTIONS), str(ROOT / "tools")])),
                            capture_output=True, text=True, timeout=900, check=False)
    summary = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
    print("%s unit tests: %s (%.1fs)" % (combination.name, summary, time.monotonic() - started))
    assert result.returncode == 0, "%s\n%s" % (result.stdout[-6000:], result.stderr[-3000:])
    # A warning is a defect too: a clean run prints none.
    assert re.search(r"\d+ passed", summary) and not re.search(r"failed|error|warning", summary), summary


class Demo:
    """The control plane with the demo fleet, and what the fleet file says its GPU nodes are."""

    def __init__(self, plane, spec):
        self.plane = plane
        self.kubeconfig = str(plane.kubeconfig)
        self.client = api.client_from_kubeconfig(self.kubeconfig)
        self.core = kubernetes.client.CoreV1Api(self.client)
        self.apps = kubernetes.client.AppsV1Api(self.client)
        self.gpus = {}        # GPU node: its GPU count
        self.driven = {}      # GPU node that gets a driver pod: its RHCOS build
        from localcluster import fleet
        for node, group in zip(fleet.expand_groups(spec), _groups(spec)):
            if group.get("gpu"):
                self.gpus[node["name"]] = group["gpu"].get("count", 1)
                if not group.get("host_driver"):
                    self.driven[node["name"]] = group["os"]["rhcos"]


def _groups(spec):
    for group in spec["nodes"]:
        yield from [group] * int(group.get("count", 1))


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from localcluster import controlplane, fleet
    plane = controlplane.ControlPlane(tmp_path_factory.mktemp("cluster-matrix"))
    info = plane.up("openshift")
    print("\nopenshift cluster up in %.1fs" % info["startup_seconds"])
    try:
        spec = yaml.safe_load(DEMO.read_text())
        made = Demo(plane, spec)
        fleet.Fleet(made.client, spec).apply().wait_ready()
        yield made
    finally:
        plane.down()


# The labels NFD's worker sets. The demo fleet is labelled by an NFD the deploy installs, and NFD's labels stay on the
# nodes when NFD goes, as with a real NFD (the uninstall playbook removes the labels the collection and GPU feature
# discovery set, not NFD's).
NFD_LABELS = "feature.node.kubernetes.io/"


def node_labels(demo):
    """{node: its labels} of every node of the fleet, NFD's apart."""
    return {node.metadata.name: {key: value for key, value in (node.metadata.labels or {}).items()
                                 if not key.startswith(NFD_LABELS)}
            for node in demo.core.list_node().items}


def driver_pods(demo):
    """{node: (pod uid, image, ready)} of the driver pods not being deleted."""
    pods = demo.core.list_namespaced_pod(NAMESPACE, label_selector=DRIVER_PODS).items
    return {p.spec.node_name: (p.metadata.uid, p.spec.containers[0].image,
                               p.status.phase == "Running" and bool(p.status.container_statuses)
                               and all(c.ready for c in p.status.container_statuses))
            for p in pods if not p.metadata.deletion_timestamp}


def driver_daemonsets(demo):
    return sorted(d.metadata.name for d in demo.apps.list_namespaced_daemon_set(
        NAMESPACE, label_selector=DRIVER_PODS).items) if _namespace_exists(demo) else []


def _namespace_exists(demo):
    return any(n.metadata.name == NAMESPACE for n in demo.core.list_namespace().items)


def allocatable(demo):
    return {name: int((demo.core.read_node(name).status.allocatable or {}).get("nvidia.com/gpu", "0"))
            for name in demo.gpus}


class Playbooks:
    """Runs the collection's playbooks with a combination's ansible-playbook, as the README's commands do (-i
    localhost, the default output), and keeps each run's output, time and warnings. Each run's output goes to a log
    in logs, every line stamped with the seconds since the run started, and its slowest tasks are printed. The module
    worker has a socket directory of its own (runtime): the deploy starts it."""

    def __init__(self, combination, venv, demo, logs, runtime):
        self.combination = combination
        self.env = {key: value for key, value in environment(
            venv, KUBECONFIG=demo.kubeconfig, K8S_AUTH_KUBECONFIG=demo.kubeconfig, XDG_RUNTIME_DIR=runtime,
            ACCELERATORS_GPU_WORKER_IDLE="60", ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS),
            ANSIBLE_CALLBACKS_ENABLED="module_reports", ANSIBLE_INJECT_INVOCATION="true").items()
            if key not in ("ACCELERATORS_GPU_WORKER", "ACCELERATORS_GPU_WORKER_LOG")}
        self.ansible_playbook = str(venv / "bin" / "ansible-playbook")
        self.logs = logs
        self.warnings = []
        self.timings = []
        self.modules = []  # the last run's module results: {task, action, report}
        self.served = []   # the last run's lines of the worker's log, a line per module the worker ran

    def run(self, name, *extra, check=True, env=None):
        """The run's output (stdout and stderr as one stream); with check, asserts its return code is 0. env: what
        the run's environment has besides."""
        log = self.logs / ("%s-%d-%s.log" % (self.combination.name, len(self.timings) + 1, name))
        modules, served = log.with_suffix(".modules.jsonl"), log.with_suffix(".worker.log")
        started = time.monotonic()
        stamped = []
        run_env = dict(self.env, ACCELERATORS_GPU_TEST_MODULE_REPORTS=str(modules),
                       ACCELERATORS_GPU_WORKER_LOG=str(served), **(env or {}))
        with subprocess.Popen([self.ansible_playbook, "-i", "localhost,", "accelerators.gpu." + name] + list(extra),
                              env=run_env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) as process, open(log, "w", encoding="utf-8") as out:
            watchdog = threading.Timer(PLAYBOOK_TIMEOUT, process.kill)
            watchdog.start()
            try:
                for line in process.stdout:
                    stamped.append((time.monotonic() - started, line))
                    out.write("%7.1f %s" % stamped[-1])
                returncode = process.wait()
            finally:
                watchdog.cancel()
        seconds = time.monotonic() - started
        self.modules = [json.loads(line) for line in modules.read_text().splitlines()] if modules.exists() else []
        self.served = served.read_text().splitlines() if served.exists() else []
        output = "".join(line for _stamp, line in stamped)
        warnings = [line.strip() for line in output.splitlines()
                    if "[WARNING]" in line or "[DEPRECATION WARNING]" in line]
        self.warnings += ["%s: %s" % (name, line) for line in warnings]
        self.timings.append("%s %.1fs rc=%d" % (" ".join([name] + list(extra)), seconds, returncode))
        print("%s: %s (%s); slowest tasks: %s" % (self.combination.name, self.timings[-1], log, "; ".join(
            "%.1fs %s" % task for task in slowest_tasks(stamped, seconds))))
        for line in warnings:
            print("    " + line)
        assert not check or returncode == 0, "%s %s failed (rc=%d, log %s)\n%s" % (
            self.combination.name, name, returncode, log, output[-8000:])
        return output


def slowest_tasks(stamped, seconds, count=3):
    """[(seconds, task name)] of the count slowest tasks of a run's stamped output lines: from a task's header line to
    the next header (or the end of the run)."""
    starts = [(stamp, line.strip().split("TASK [", 1)[1].split("]", 1)[0]) for stamp, line in stamped
              if line.startswith("TASK [")]
    ends = [stamp for stamp, _name in starts[1:]] + [seconds]
    return sorted(((end - start, name) for (start, name), end in zip(starts, ends)), reverse=True)[:count]


@pytest.fixture
def worker_runtime():
    """A socket directory for the module worker of one smoke (short: a socket path must fit in an AF_UNIX address).
    Its worker exits when idle; the directory goes at the end."""
    runtime = tempfile.mkdtemp(prefix="agw-", dir="/tmp")
    yield runtime
    shutil.rmtree(runtime, ignore_errors=True)


WORKER_OFF = "ACCELERATORS_GPU_WORKER=off"
SAID = "accelerators.gpu: modules run in their own processes, not in the module worker: "


def assert_every_module_served_by_the_worker(playbooks):
    """Every module of the last run ran in the worker: each result says so, and the worker's log has a line for each.
    The results of no_log tasks are censored, and such a task may run no module (set_fact): the log has a line for
    each of those at most."""
    reports = [module["report"] for module in playbooks.modules]
    censored = reports.count("censored")
    not_served = ["%s (%s): %s" % (module["task"], module["action"], module["report"]) for module in playbooks.modules
                  if module["report"] not in ("censored", {"served_by": "worker", "handed_by": "connection"})]
    print("%s: %d module results, %d more of no_log tasks; the worker ran %d modules" % (
        playbooks.combination.name, len(reports) - censored, censored, len(playbooks.served)))
    assert len(reports) > censored and not not_served, "not served by the module worker:\n" + "\n".join(not_served)
    assert len(reports) - censored <= len(playbooks.served) <= len(reports), "\n".join(
        ["results: %s" % [module["action"] for module in playbooks.modules], "the worker's log:"] + playbooks.served)


@pytest.mark.parametrize("combination", COMBINATIONS, ids=[c.name for c in COMBINATIONS])
def test_smoke_deploy_driver_rollout_status_uninstall(combination, demo, tmp_path, worker_runtime):
    venv = venv_of(combination)
    before_objects, before_labels = api.object_names(demo.client), node_labels(demo)
    assert driver_daemonsets(demo) == [], "a previous smoke left the stack installed"
    playbooks = Playbooks(combination, venv, demo, tmp_path, worker_runtime)
    uninstalled = False
    try:
        # Deploy: one driver DaemonSet per RHCOS build of the GPU nodes that take a driver pod, the driver Ready on
        # each of them, and every GPU node's GPUs allocatable (the host-driver node's through its own driver).
        playbooks.run("deploy")
        assert_every_module_served_by_the_worker(playbooks)
        builds = sorted({"nvidia-driver-daemonset-" + rhcos for rhcos in demo.driven.values()})
        assert driver_daemonsets(demo) == builds
        deployed = driver_pods(demo)
        assert sorted(deployed) == sorted(demo.driven), deployed
        assert all(ready for _uid, _image, ready in deployed.values()), deployed
        assert allocatable(demo) == demo.gpus

        # The same deploy with the worker off: every module in its own process, each result and -v saying so once,
        # and nothing to change.
        output = playbooks.run("deploy", "-v", env={"ACCELERATORS_GPU_WORKER": "off"})
        assert [line for line in output.splitlines() if line.startswith(SAID)] == [SAID + WORKER_OFF], output[-3000:]
        assert playbooks.modules and playbooks.served == []
        assert {json.dumps(module["report"]) for module in playbooks.modules} <= {
            '"censored"', json.dumps({"served_by": "module", "reason": WORKER_OFF})}, playbooks.modules
        assert re.search(r"^localhost +: ok=\d+ +changed=0 ", output, re.M), output[-2000:]

        # A driver version change rolled out: every driven node gets a new driver pod, of the new version, Ready,
        # and its upgrade state done; the GPUs are back.
        playbooks.run("driver_upgrade", "-e", "common_driver_version=" + NEW_DRIVER)
        upgraded = driver_pods(demo)
        assert sorted(upgraded) == sorted(demo.driven), upgraded
        for node, (uid, image, ready) in upgraded.items():
            assert uid != deployed[node][0], "the driver pod on %s was not replaced" % node
            assert NEW_DRIVER in image and NEW_DRIVER not in deployed[node][1], (node, deployed[node][1], image)
            assert ready, "the new driver pod on %s is not ready" % node
        states = {node: (demo.core.read_node(node).metadata.labels or {}).get(UPGRADE_STATE) for node in demo.driven}
        assert set(states.values()) == {"upgrade-done"}, states
        assert allocatable(demo) == demo.gpus
        assert not any(demo.core.read_node(node).spec.unschedulable for node in demo.gpus)

        # Status: the table (every column) has a row for every GPU node, with its GPU count, and the driven ones'
        # upgrade done.
        status = playbooks.run("status", "-e", "status_columns=wide")
        table = status[status.index("Print the status table"):]
        for node, count in demo.gpus.items():
            rows = [line for line in table.splitlines() if re.match(r'\W*%s\s+%d\s' % (re.escape(node), count), line)]
            assert len(rows) == 1, "status has no row for %s with %d GPUs:\n%s" % (node, count, table[-4000:])
            assert (" upgrade-done " in rows[0]) == (node in demo.driven), rows[0]
            print("    " + rows[0].strip())

        # Uninstall: the driver DaemonSets gone, and the cluster as it was before the deploy.
        playbooks.run("uninstall")
        uninstalled = True
        assert driver_daemonsets(demo) == []
        assert api.object_names(demo.client) == before_objects
        after_labels = node_labels(demo)
        assert after_labels == before_labels, {
            node: {key: (before_labels.get(node, {}).get(key), labels.get(key))
                   for key in set(labels) ^ set(before_labels.get(node, {})) | {
                       k for k in labels if labels[k] != before_labels.get(node, {}).get(k, labels[k])}}
            for node, labels in after_labels.items() if labels != before_labels.get(node)}
    finally:
        if not uninstalled:
            # Leave the shared cluster clean for the next combination, whatever failed above.
            playbooks.run("uninstall", check=False)
        print("%s smoke: %s" % (combination.name, "; ".join(playbooks.timings)))
    # A clean run carries no warning, deprecations included: they reach the user's terminal.
    assert not playbooks.warnings, "\n".join(playbooks.warnings)
