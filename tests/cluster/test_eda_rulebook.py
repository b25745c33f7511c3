"""A real ansible-rulebook runs the collection's rulebook (extensions/eda/rulebooks/remediate_gpus.yml) with its event
source (accelerators.gpu.gpu_health) against the local cluster: two simulated GPU nodes with the device plugin and the
DCGM exporter, the XIDs read from the simulator's Prometheus. An XID on one node starts a run for that node only; a
second XID on that node inside the throttle window is an event but no second run; a fault on the other node starts its
own run.

The rule's playbook is the rulebook's gpu_eda_playbook: here eda_record_run.yml, which records the node it was asked
for (the remediate playbook is not in the collection yet). The test watches the events ansible-rulebook prints
(--print-events) and the runs' records; it never sleeps for them.
"""

import ast
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

import gpu_fleet
from conftest import wait_for
from localcluster import gpu_faults
from test_sim_gpu_faults import gpu_stack, gpus, set_deploy_labels, xid_errors

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORD_PLAYBOOK = os.path.join(ROOT, "tests", "cluster", "eda_record_run.yml")
GPU = {"product": "NVIDIA-A100-SXM4-80GB", "count": 2}
# The banner line that ends each event ansible-rulebook prints.
BANNER_END = "*" * 20


@pytest.fixture(scope="module")
def eda_venv():
    """ansible-rulebook's environment (tools/ensure-eda.sh; `make eda` makes it beforehand)."""
    return subprocess.run([os.path.join(ROOT, "tools", "ensure-eda.sh")], check=True, capture_output=True,
                          text=True).stdout.strip()


class Rulebook:
    """An ansible-rulebook process running the collection's rulebook, its output in a file."""

    def __init__(self, eda_venv, cluster, workdir, variables):
        self.output_path = os.path.join(workdir, "ansible-rulebook.log")
        self.runs_dir = os.path.join(workdir, "runs")
        os.makedirs(self.runs_dir)
        with open(os.path.join(workdir, "inventory.yml"), "w") as inventory:
            yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local",
                                                            "ansible_python_interpreter": sys.executable}}}}, inventory)
        with open(os.path.join(workdir, "vars.yml"), "w") as handle:
            yaml.safe_dump(variables, handle)
        env = dict(cluster.env, JAVA_HOME=os.path.join(eda_venv, "java-home"), EDA_RUNS_DIR=self.runs_dir,
                   PATH=os.pathsep.join([os.path.join(eda_venv, "bin"), os.path.dirname(sys.executable),
                                         os.environ["PATH"]]))
        self.output = open(self.output_path, "w")
        self.process = subprocess.Popen(
            [os.path.join(eda_venv, "bin", "ansible-rulebook"), "-r", "accelerators.gpu.remediate_gpus",
             "-i", "inventory.yml", "--vars", "vars.yml", "--print-events", "-v"],
            cwd=workdir, env=env, stdout=self.output, stderr=subprocess.STDOUT)

    def text(self):
        with open(self.output_path) as handle:
            return handle.read()

    def running(self):
        assert self.process.poll() is None, "ansible-rulebook ended (rc %s):\n%s" % (
            self.process.returncode, self.text())
        return True

    def events(self):
        """The events ansible-rulebook received, as it printed them."""
        found, lines = [], self.text().splitlines()
        for index, line in enumerate(lines):
            if line.strip() == "Event:":
                end = next((i for i in range(index + 1, len(lines)) if lines[i].startswith(BANNER_END)), None)
                if end is not None:
                    found.append(ast.literal_eval("\n".join(lines[index + 1:end])))
        return found

    def started(self, node):
        """The runs of the rule's playbook started for node: each names its file after the node first."""
        return glob.glob(os.path.join(self.runs_dir, "run-%s-*.json" % node))

    def runs(self):
        """The runs of the rule's playbook done, by the records they left (a record still empty: a run not done)."""
        records = []
        for path in sorted(glob.glob(os.path.join(self.runs_dir, "run-*.json"))):
            with open(path) as handle:
                text = handle.read()
            if text:
                records.append(json.loads(text))
        return records

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.output.close()


def node_events(rulebook, node):
    return [e["gpu_health"] for e in rulebook.events() if e.get("gpu_health", {}).get("node") == node]


def node_runs(rulebook, node):
    return [run for run in rulebook.runs() if run["remediation_nodes"] == [node]]


def test_an_xid_starts_the_remediation_of_its_node_once_within_the_throttle_window(
        cluster, namespace, make_fleet, eda_venv, tmp_path):
    spec = gpu_fleet.fleet([{"name": "eda", "count": 2, "gpu": GPU, "os": {"ubuntu": "22.04"}}])
    first, second = make_fleet(spec).node_names
    set_deploy_labels(cluster, second, "true")
    gpu_stack(cluster, namespace, spec, first)
    wait_for(lambda: gpus(cluster, second) == (2, 2), message="2 GPUs advertised on " + second)
    wait_for(lambda: len(xid_errors(cluster, second)) == 2, message="the exporter's series of " + second)

    rulebook = Rulebook(eda_venv, cluster, str(tmp_path), {
        "gpu_eda_cluster": "localhost", "gpu_eda_kubeconfig": cluster.kubeconfig, "gpu_eda_interval": 1,
        "gpu_eda_namespace": namespace, "gpu_eda_label_selector": gpu_fleet.selector(spec),
        "gpu_eda_prometheus_url": gpu_faults.prometheus_url(cluster), "gpu_eda_playbook": RECORD_PLAYBOOK})
    try:
        wait_for(lambda: rulebook.running() and "Waiting for events" in rulebook.text(), timeout=120,
                 message="ansible-rulebook waiting for events")

        # XID 48 on a GPU of the first node: an event, then one run for that node.
        injected = time.monotonic()
        failing = gpu_faults.inject_xid(cluster.client, first, 1, 48)
        wait_for(lambda: rulebook.running() and node_events(rulebook, first), timeout=120,
                 message="the event of " + first)
        to_event = time.monotonic() - injected
        [run] = wait_for(lambda: rulebook.running() and node_runs(rulebook, first), timeout=120,
                         message="the remediation run of " + first)
        to_run = time.monotonic() - injected
        print("\nXID 48 to its event %.1f s, to the remediation run of its node %.1f s" % (to_event, to_run))
        assert run["cluster"] == "localhost"
        assert run["event"]["node"] == first and run["event"]["action"] == "reset"
        assert (failing["uuid"], 48) in [(f["gpu_uuid"], f["xid"]) for f in run["event"]["faults"]]

        # XID 79 on its other GPU, inside the throttle window: the event comes, no run follows.
        lost = gpu_faults.inject_xid(cluster.client, first, 0, 79)
        wait_for(lambda: rulebook.running() and [e for e in node_events(rulebook, first) if (lost["uuid"], 79) in [
            (f["gpu_uuid"], f["xid"]) for f in e["faults"]]], timeout=120, message="the event of XID 79 on " + first)

        # A fault on the other node: its own run. The XID 79 event was matched before it (the rules take the events
        # in order), so a second run of the first node would have started by the time this one is done.
        other = gpu_faults.inject_xid(cluster.client, second, 0, 119)
        [other_run] = wait_for(lambda: rulebook.running() and node_runs(rulebook, second), timeout=120,
                               message="the remediation run of " + second)
        assert (other["uuid"], 119) in [(f["gpu_uuid"], f["xid"]) for f in other_run["event"]["faults"]]
        assert len(rulebook.started(first)) == 1 and len(node_runs(rulebook, first)) == 1, rulebook.runs()
        assert sorted(r["remediation_nodes"][0] for r in rulebook.runs()) == sorted([first, second])
    finally:
        rulebook.stop()
    print(rulebook.text()[-3000:])
