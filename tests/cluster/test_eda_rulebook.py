"""A real ansible-rulebook runs the collection's rulebook (extensions/eda/rulebooks/remediate_gpus.yml) with its event
source (accelerators.gpu.gpu_health) against the local cluster: two simulated GPU nodes with the device plugin and the
DCGM exporter, the XIDs read from the simulator's Prometheus. An XID on one node starts a run for that node only; a
second XID on that node inside the throttle window is an event but no second run; a fault on the other node starts its
own run.

The throttle test's playbook is the rulebook's gpu_eda_playbook: eda_record_run.yml, which records the node it was
asked for, so that runs can be counted. Another test runs the rule with its own playbook, accelerators.gpu.remediate,
against the deployed stack: an XID 48 is taken to done by the rulebook alone. The tests watch the events
ansible-rulebook prints (--print-events), the runs' records and the nodes; they never sleep for them.
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
from test_deploy import fleet_variables, gpu_fleet as stack_fleet, playbook
from test_remediate import RECORD, STATE, annotation
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

    def __init__(self, eda_venv, cluster, workdir, variables, host_variables=None):
        """variables: the rulebook's (--vars); host_variables: the inventory's localhost, the playbook's cluster."""
        self.output_path = os.path.join(workdir, "ansible-rulebook.log")
        self.runs_dir = os.path.join(workdir, "runs")
        os.makedirs(self.runs_dir)
        with open(os.path.join(workdir, "inventory.yml"), "w") as inventory:
            yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local",
                                                            "ansible_python_interpreter": sys.executable,
                                                            **(host_variables or {})}}}}, inventory)
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


def test_an_xid_48_event_runs_the_remediate_playbook_which_returns_the_node(cluster, make_fleet, eda_venv, tmp_path):
    """The rule's own playbook, accelerators.gpu.remediate, on two GPU nodes of a deployed stack: one faulty node of
    two is 50 %, not more than the default remediation_max_faulty_percent. The playbook's variables (the stack's
    namespace, the nodes, Prometheus) are the inventory's for its cluster, localhost, as a site's inventory holds
    them: the rule passes only gpu_clusters and remediation_nodes."""
    spec = stack_fleet({"name": "gpu", "count": 2, "gpu": GPU, "os": {"rhcos": gpu_fleet.RHCOS_416}})
    faulty, other = sorted(make_fleet(spec).node_names)
    namespace = "t-eda-remediate-" + os.urandom(2).hex()
    variables = dict(fleet_variables(namespace, spec, container_toolkit_validate=False,
                                     device_plugin_validate_workload=False), common_wait_timeout=120)
    try:
        playbook(cluster, "deploy", variables).succeeded()
        rulebook = Rulebook(eda_venv, cluster, str(tmp_path), {
            "gpu_eda_cluster": "localhost", "gpu_eda_kubeconfig": cluster.kubeconfig, "gpu_eda_interval": 1,
            "gpu_eda_namespace": namespace, "gpu_eda_label_selector": gpu_fleet.selector(spec),
            "gpu_eda_prometheus_url": gpu_faults.prometheus_url(cluster)},
            dict(variables, remediation_label_selector=gpu_fleet.selector(spec), remediation_poll_interval=0.5,
                 remediation_prometheus_url=gpu_faults.prometheus_url(cluster)))
        try:
            wait_for(lambda: rulebook.running() and "Waiting for events" in rulebook.text(), timeout=120,
                     message="ansible-rulebook waiting for events")
            injected = time.monotonic()
            fault = gpu_faults.inject_xid(cluster.client, faulty, 1, 48)
            first_state = wait_for(lambda: rulebook.running() and remediation_state(cluster, faulty), timeout=120,
                                   message="a remediation state on " + faulty)
            to_first_state = time.monotonic() - injected
            # Done, or held (rma, failed): a run that went wrong ends the wait as soon as it does.
            ended = wait_for(lambda: rulebook.running() and remediation_ended(cluster, faulty), timeout=600,
                             interval=0.5, message="the remediation of %s ended" % faulty)
            to_done = time.monotonic() - injected
        finally:
            rulebook.stop()
        print("\nXID 48 to the first remediation state of its node (%s) %.1f s, to %s %.1f s" % (
            first_state, to_first_state, ended, to_done))
        assert ended == "done", (cluster.core.read_node(faulty).metadata.annotations.get(RECORD),
                                 rulebook.text()[-3000:])
        assert gpus(cluster, faulty) == (2, 2)
        assert [(r["uuid"], r["result"]) for r in annotation(cluster, faulty, gpu_faults.RESETS_ANNOTATION)] == [
            (fault["uuid"], "success")]
        assert annotation(cluster, other, gpu_faults.RESETS_ANNOTATION) == []
        assert remediation_state(cluster, other) is None
        node = cluster.core.read_node(faulty)
        assert not node.spec.unschedulable
        assert [(a["action"], a["result"]) for a in json.loads(node.metadata.annotations[RECORD])["attempts"]] == [
            ("reset", "succeeded")]
        # One run of the real playbook, for that node: its plan and its report name it alone.
        output = " ".join(rulebook.text().split())
        assert output.count("PLAY [Remediate failing GPUs]") == 1, rulebook.text()[-3000:]
        assert "[WARNING]" not in output, rulebook.text()
        assert "cluster localhost, node %s: done; GPUs %s" % (faulty, fault["uuid"]) in output, rulebook.text()[-3000:]
    finally:
        cluster.core.delete_namespace(namespace)


def remediation_state(cluster, node):
    return (cluster.core.read_node(node).metadata.labels or {}).get(STATE)


def remediation_ended(cluster, node):
    """The node's state once its remediation ended: done, or held (rma, failed)."""
    state = remediation_state(cluster, node)
    return state if state in ("done", "rma", "failed") else None
