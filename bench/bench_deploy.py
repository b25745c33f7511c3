"""Benchmark of `ansible-playbook accelerators.gpu.deploy` on a 100-GPU-node OpenShift fleet, beside a plain peer.

Starts its own local cluster with bench/fleets/deploy.yml (100 GPU nodes on two RHCOS builds, CPU-only nodes, a
simulated driver build of driver_build_seconds on every GPU node), then measures, side by side in the same run:
- ours: the deploy playbook from an empty cluster to a validated stack, then its no-op re-runs (the module worker
  that the first run started serves their modules), no-op re-runs that find no module worker running (the
  first module of each starts one), no-op runs of the reconcile playbook (what each tick of a schedule costs), and
  no-op runs of the remediate playbook on the healthy fleet (a tick of the remediation schedule: every GPU node's
  health read from the simulated Prometheus, the plan, nothing to do), with its ratio to the deploy's no-op;
- the peer: bench/peer_deploy.yml (kubernetes.core and Jinja only, until: waits), applying the same manifests,
  rendered from the objects our deploy created (after our uninstall, so that it also starts from nothing), first
  run and no-op re-runs.
Per run: wall time, the time spent in wait tasks (profile_tasks) and the rest, the orchestration, CPU seconds, the
load average at its end; the recap. Each no-op is run NOOP_RUNS times (--noop-runs): the table shows the median run
and the range of wall times. Each row is printed as soon as it is measured.
Run: make bench-deploy  (or make bench, which runs both benchmarks)
"""

import argparse
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kubernetes
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from localcluster import api, controlplane, fleet, gpu_faults, report  # noqa: E402  (tools/ is not a package on the path by default)

FLEET = ROOT / "bench" / "fleets" / "deploy.yml"
NAMESPACE = "nvidia-gpu-operator"
NFD_NAMESPACE = "openshift-nfd"
MANAGED = "app.kubernetes.io/managed-by=accelerators.gpu"
PROFILE_LINE = re.compile(r"^(.*?) -{3,} +(\d+\.\d+)s$")
RECAP = re.compile(r"^localhost +: (.*)$")
# Server-set fields a manifest does not carry.
SERVER_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration", "deprecated.daemonset.template.generation")
SERVICE_FIELDS = ("clusterIP", "clusterIPs")
# The kinds of the deploy's objects other than DaemonSets, NFD's and the validation Jobs.
BASE_KINDS = (("v1", "ServiceAccount"), ("v1", "ConfigMap"), ("v1", "Service"),
              ("rbac.authorization.k8s.io/v1", "Role"), ("rbac.authorization.k8s.io/v1", "RoleBinding"),
              ("rbac.authorization.k8s.io/v1", "ClusterRole"), ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
              ("node.k8s.io/v1", "RuntimeClass"), ("monitoring.coreos.com/v1", "ServiceMonitor"),
              ("monitoring.coreos.com/v1", "PrometheusRule"))
# No-op runs per playbook: one run's wall time moves with what else the machine does, the median less.
NOOP_RUNS = 3


def run_playbook(playbook, env, variables=None):
    """(wall seconds, seconds in wait tasks, recap {ok: n, changed: n, ...}, output, CPU seconds) of one
    ansible-playbook run. The CPU seconds (user and system, of ansible-playbook, its workers and the modules) do not
    depend on what else loads the machine, as the wall time does."""
    command = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", playbook]
    for name, value in (variables or {}).items():
        command += ["-e", "%s=%s" % (name, value)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    process = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             check=False)
    seconds = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if process.returncode:
        raise RuntimeError("%s failed:\n%s" % (playbook, process.stdout[-5000:]))
    lines = process.stdout.splitlines()
    waits = sum(float(match.group(2)) for match in map(PROFILE_LINE.match, lines)
                if match and "wait" in match.group(1).lower())
    recaps = [match.group(1) for match in map(RECAP.match, lines) if match]
    recap = dict((key, int(value)) for key, value in (item.split("=") for item in recaps[-1].split()))
    return seconds, waits, recap, process.stdout, cpu


def repeat_noop(runs, playbook, env, variables=None):
    """runs runs of a playbook that has nothing left to change."""
    return [run_playbook(playbook, env, variables) for _run in range(runs)]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", default=str(ROOT / ".build" / "bench-deploy-cluster"))
    parser.add_argument("--fleet", default=str(FLEET), help="fleet file (a smaller one to try the benchmark out)")
    parser.add_argument("--noop-runs", type=int, default=NOOP_RUNS, help="runs of each no-op")
    parser.add_argument("--no-peer", action="store_true", help="our runs only (to measure a change of ours)")
    return parser.parse_args()


def median_run(runs):
    """The run of median wall time (the recap shown for it; the changed count of the table is the worst run's)."""
    return sorted(runs, key=lambda run: run[0])[len(runs) // 2]


def measure(label, name, runs):
    """Prints the row of runs (the median one, the range of wall times, the worst changed count) and returns the
    median run."""
    seconds, waits, recap, _output, cpu = run = median_run(runs)
    spread = "%.1f-%.1f" % (min(r[0] for r in runs), max(r[0] for r in runs)) if len(runs) > 1 else ""
    print("%-26s %-6s %8.1f %13s %9.1f %14.1f %8.1f %6.1f  ok=%d changed=%d" % (
        label, name, seconds, spread, waits, seconds - waits, cpu, os.getloadavg()[0], recap.get("ok", 0),
        max(r[2].get("changed", 0) for r in runs)), flush=True)
    return run


def manifest(obj):
    """An object as read from the API server, as a manifest: no status, no server-set metadata."""
    meta = obj["metadata"]
    clean = {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
             "metadata": dict((key, meta[key]) for key in ("name", "namespace", "labels") if key in meta)}
    annotations = dict((k, v) for k, v in (meta.get("annotations") or {}).items() if k not in SERVER_ANNOTATIONS)
    if annotations:
        clean["metadata"]["annotations"] = annotations
    clean.update((key, value) for key, value in obj.items() if key not in ("apiVersion", "kind", "metadata", "status"))
    if obj["kind"] == "Service":
        clean["spec"] = dict((k, v) for k, v in obj["spec"].items() if k not in SERVICE_FIELDS)
    return clean


def read(client, group_version, kind, namespace=None, selector=None, name=None):
    dynamic = kubernetes.dynamic.DynamicClient(client)
    try:
        resource = dynamic.resources.get(api_version=group_version, kind=kind)
    except kubernetes.dynamic.exceptions.ResourceNotFoundError:
        return []
    found = resource.get(namespace=namespace, label_selector=selector).to_dict()["items"]
    return [dict(item, apiVersion=group_version, kind=kind) for item in found
            if name is None or item["metadata"]["name"] == name]


def write_manifests(client, directory):
    """The objects accelerators.gpu.deploy created, one file per state of the peer playbook."""
    daemonsets = read(client, "apps/v1", "DaemonSet", NAMESPACE)

    def component(*names):
        return [d for d in daemonsets if d["metadata"]["labels"].get("app.kubernetes.io/component") in names]

    # Every other object the deploy labels as its own, in any namespace (the console dashboard lives in
    # openshift-config-managed), but the validation Jobs, which the peer creates per node itself.
    managed = [obj for group_version, kind in BASE_KINDS for obj in read(client, group_version, kind, None, MANAGED)]
    states = {
        "nfd_olm": read(client, "v1", "Namespace", name=NFD_NAMESPACE)
        + read(client, "operators.coreos.com/v1", "OperatorGroup", NFD_NAMESPACE)
        + read(client, "operators.coreos.com/v1alpha1", "Subscription", NFD_NAMESPACE),
        "nfd": read(client, "nfd.openshift.io/v1", "NodeFeatureDiscovery", NFD_NAMESPACE),
        "base": read(client, "v1", "Namespace", name=NAMESPACE) + managed,
        "driver": component("nvidia-driver"),
        "container_toolkit": component("nvidia-container-toolkit", "nvidia-operator-validator"),
        "device_plugin": component("nvidia-device-plugin"),
        "gpu_feature_discovery": component("gpu-feature-discovery"),
        "mig_manager": component("nvidia-mig-manager"),
        "dcgm_exporter": component("nvidia-dcgm-exporter"),
    }
    for state, objects in states.items():
        if not objects:
            raise RuntimeError("the deploy created no object of state %s to give the peer" % state)
        (directory / (state + ".yml")).write_text(yaml.safe_dump_all([manifest(obj) for obj in objects]))
    return dict((state, len(objects)) for state, objects in states.items())


def main():
    args = parse_args()
    spec = yaml.safe_load(Path(args.fleet).read_text())
    gpu_nodes = sum(group.get("count", 1) for group in spec["nodes"] if group.get("gpu"))
    build_seconds = max(group.get("driver_build_seconds", 0) for group in spec["nodes"])
    # Stopped by SIGTERM, it still stops its cluster (finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    plane = controlplane.ControlPlane(args.state)
    plane.down(quiet=True)
    info = plane.up("openshift", heartbeat_seconds=300)
    try:
        client = api.client_from_kubeconfig(plane.kubeconfig)
        started = time.monotonic()
        nodes = fleet.Fleet(client, spec).apply().wait_ready(timeout=600).node_names
        print("cluster up in %.1fs; %d nodes (%d with GPUs) Ready in %.1fs; simulated driver build %ds per node" % (
            info["startup_seconds"], len(nodes), gpu_nodes, time.monotonic() - started, build_seconds))
        print(report.node_size_line(client))
        env = dict(os.environ, KUBECONFIG=str(plane.kubeconfig), K8S_AUTH_KUBECONFIG=str(plane.kubeconfig),
                   ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
                   ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_NOCOLOR="true",
                   ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks", PROFILE_TASKS_TASK_OUTPUT_LIMIT="all")
        print("\nansible-playbook, %d GPU nodes on 2 RHCOS builds + %d CPU nodes; each row printed as measured" % (
            gpu_nodes, len(nodes) - gpu_nodes))
        print("no-op rows: the median of %d runs, and their range" % args.noop_runs)
        print("%-26s %-6s %8s %13s %9s %14s %8s %6s  %s" % (
            "", "run", "wall s", "wall range", "in waits", "orchestration", "CPU s", "load", "recap"), flush=True)
        first = measure("ours", "first", [run_playbook("accelerators.gpu.deploy", env)])
        (ROOT / ".build" / "bench-deploy-ours-first.log").write_text(first[3])
        noop = measure("ours", "no-op", repeat_noop(args.noop_runs, "accelerators.gpu.deploy", env))
        (ROOT / ".build" / "bench-deploy-ours-noop.log").write_text(noop[3])
        cold = []
        for _run in range(args.noop_runs):
            with tempfile.TemporaryDirectory(prefix="bench-no-worker-") as runtime:
                # A socket directory of its own: no module worker is running there yet.
                cold.append(run_playbook("accelerators.gpu.deploy", dict(env, XDG_RUNTIME_DIR=runtime)))
        cold = measure("ours, no worker at start", "no-op", cold)
        # The entry point a schedule runs between deploys (the deploy itself): its no-op is what each tick costs.
        measure("ours, reconcile", "no-op", repeat_noop(args.noop_runs, "accelerators.gpu.reconcile", env))
        remediate = measure("ours, remediate", "no-op", repeat_noop(
            args.noop_runs, "accelerators.gpu.remediate", env,
            {"remediation_prometheus_url": gpu_faults.prometheus_url(plane)}))
        (ROOT / ".build" / "bench-deploy-ours-remediate.log").write_text(remediate[3])
        print("remediate no-op / deploy no-op: wall %.2f, CPU %.2f (target: under 1/3)" % (
            remediate[0] / noop[0], remediate[4] / noop[4]), flush=True)
        if args.no_peer:
            return
        with tempfile.TemporaryDirectory(prefix="bench-peer-") as directory:
            counts = write_manifests(client, Path(directory))
            run_playbook("accelerators.gpu.uninstall", env)
            peer = str(ROOT / "bench" / "peer_deploy.yml")
            variables = {"peer_manifests": directory, "peer_gpu_nodes": gpu_nodes}
            peer_first = measure("peer", "first", [run_playbook(peer, env, variables)])
            peer_noop = measure("peer", "no-op", repeat_noop(args.noop_runs, peer, env, variables))
        print("peer manifests from our objects: %s" % ", ".join("%s %d" % item for item in counts.items()))
        for column, index in (("wall", 0), ("CPU", 4)):
            print("peer/ours %s: first run %.1fx, no-op run %.1fx (%.1fx with no module worker running)" % (
                column, peer_first[index] / first[index], peer_noop[index] / noop[index], peer_noop[index] / cold[index]))
        print("targets: our no-op under 30 s and the peer's no-op >= 3x ours; the reconcile no-op under 10 s")
        print("our runs' profiles: .build/bench-deploy-ours-first.log, .build/bench-deploy-ours-noop.log")
    finally:
        plane.down()


if __name__ == "__main__":
    main()
