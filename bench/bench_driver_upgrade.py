"""Benchmark of the driver rollout on 12 GPU nodes (two RHCOS builds, a simulated 20 s driver build), beside a plain
kubernetes.core peer, in the same cluster and run.

Starts its own local cluster with bench/fleets/upgrade.yml, deploys the stack (driver OLD), starts GPU workloads
(one Deployment guarded by a PodDisruptionBudget), then:
- ours: `ansible-playbook accelerators.gpu.deploy -e common_driver_version=NEW` with driver_upgrade_max_parallel=0,
  so waves of the budget (25 %: 3 nodes), each validated;
- the peer: bench/peer_driver_upgrade.yml after the driver DaemonSets' pod template changed again, batches of 3.
A sampler reads the nodes every 0.5 s: a node is out of service from its cordon to its uncordon; the orchestration
overhead of a node is that time less the simulated build. Printed: total wall time, and the median, min and max of
both per node.
Run: make bench-upgrade  (or make bench)
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import kubernetes
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from localcluster import api, controlplane, fleet  # noqa: E402  (tools/ is not a package on the path by default)

FLEET = ROOT / "bench" / "fleets" / "upgrade.yml"
NAMESPACE = "nvidia-gpu-operator"
OLD, NEW = "570.172.08", "580.95.05"
WORKLOADS = "bench-workloads"
GPU = "nvidia.com/gpu"


class Cordons(threading.Thread):
    """When each node was cordoned and uncordoned, sampled every interval seconds."""

    def __init__(self, core, interval=0.5):
        super().__init__(daemon=True)
        self.core, self.interval = core, interval
        self.spans = {}
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            now = time.monotonic()
            for node in self.core.list_node().items:
                name = node.metadata.name
                if node.spec.unschedulable:
                    self.spans.setdefault(name, [now, None])
                elif name in self.spans and self.spans[name][1] is None:
                    self.spans[name][1] = now
            self.halt.wait(self.interval)

    def out_of_service(self):
        return {name: end - start for name, (start, end) in self.spans.items() if end is not None}


def playbook(name, env, variables):
    command = [str(Path(sys.executable).parent / "ansible-playbook"), name]
    for key, value in variables.items():
        command += ["-e", "%s=%s" % (key, value)]
    started = time.monotonic()
    process = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if process.returncode:
        raise RuntimeError("%s failed:\n%s" % (name, process.stdout[-5000:]))
    return time.monotonic() - started, process.stdout


def start_workloads(client):
    core, apps = kubernetes.client.CoreV1Api(client), kubernetes.client.AppsV1Api(client)
    core.create_namespace({"metadata": {"name": WORKLOADS}})
    for name, replicas in (("train", 12), ("serve", 2)):
        labels = {"app": name}
        pod_spec = {"tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{"name": "main", "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                                    "resources": {"limits": {GPU: "1"}}}]}
        apps.create_namespaced_deployment(WORKLOADS, {"metadata": {"name": name}, "spec": {
            "replicas": replicas, "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec}}})
    kubernetes.client.PolicyV1Api(client).create_namespaced_pod_disruption_budget(WORKLOADS, {
        "metadata": {"name": "serve"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "serve"}}}})
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        ready = sum(d.status.ready_replicas or 0 for d in apps.list_namespaced_deployment(WORKLOADS).items)
        if ready == 14:
            return
        time.sleep(1)
    raise RuntimeError("the GPU workloads did not start")


def change_driver_template(client, note):
    """A new pod template for every driver DaemonSet (an annotation): its pods are outdated, as after a change."""
    apps = kubernetes.client.AppsV1Api(client)
    for ds in apps.list_namespaced_daemon_set(NAMESPACE, label_selector="app.kubernetes.io/component=nvidia-driver").items:
        apps.patch_namespaced_daemon_set(ds.metadata.name, NAMESPACE, {"spec": {"template": {"metadata": {
            "annotations": {"bench.accelerators.gpu/round": note}}}}})


def measured(label, core, action, build_seconds):
    cordons = Cordons(core)
    cordons.start()
    try:
        wall = action()
    finally:
        time.sleep(1)
        cordons.halt.set()
        cordons.join()
    spans = sorted(cordons.out_of_service().values())
    overhead = [span - build_seconds for span in spans]
    return {"label": label, "wall": wall, "nodes": len(spans), "span": spans, "overhead": overhead}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", default=str(ROOT / ".build" / "bench-upgrade-cluster"))
    args = parser.parse_args()
    spec = yaml.safe_load(FLEET.read_text())
    build_seconds = max(group.get("driver_build_seconds", 0) for group in spec["nodes"])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    plane = controlplane.ControlPlane(args.state)
    plane.down(quiet=True)
    plane.up("openshift", heartbeat_seconds=60)
    try:
        client = api.client_from_kubeconfig(plane.kubeconfig)
        core = kubernetes.client.CoreV1Api(client)
        fleet.Fleet(client, spec).apply().wait_ready(timeout=300)
        env = dict(os.environ, KUBECONFIG=str(plane.kubeconfig), K8S_AUTH_KUBECONFIG=str(plane.kubeconfig),
                   ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
                   ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_LOCALHOST_WARNING="false",
                   ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_NOCOLOR="true")
        base = {"nfd_install": "never", "driver_upgrade_max_parallel": 0, "driver_upgrade_poll": 1}
        first, _output = playbook("accelerators.gpu.deploy", env, dict(base, common_driver_version=OLD))
        print("deploy with driver %s: %.1fs" % (OLD, first))
        start_workloads(client)
        ours = measured("ours: deploy, rollout validated", core, lambda: playbook(
            "accelerators.gpu.deploy", env, dict(base, common_driver_version=NEW))[0], build_seconds)
        change_driver_template(client, "peer")
        peer = measured("peer: kubernetes.core", core, lambda: playbook(
            str(ROOT / "bench" / "peer_driver_upgrade.yml"), env, {"peer_batch": 3})[0], build_seconds)
        print("\n12 GPU nodes, 2 RHCOS builds, simulated driver build %d s, waves of 3 (25 %%); load average %.1f" % (
            build_seconds, os.getloadavg()[0]))
        print("%-34s %7s %6s %26s %26s" % ("", "wall s", "nodes", "out of service s (med/min/max)",
                                           "overhead s (med/min/max)"))
        for row in (ours, peer):
            print("%-34s %7.2f %6d %26s %26s" % (
                row["label"], row["wall"], row["nodes"],
                "%.1f / %.1f / %.1f" % (statistics.median(row["span"]), min(row["span"]), max(row["span"])),
                "%.1f / %.1f / %.1f" % (statistics.median(row["overhead"]), min(row["overhead"]),
                                        max(row["overhead"]))))
        print("target: our per-node overhead (median) under 10 s")
    finally:
        plane.down()


if __name__ == "__main__":
    main()
