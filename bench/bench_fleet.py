"""Benchmark of a fleet of clusters in one inventory: the no-op reconcile (what each tick of a schedule costs) over one
cluster and over three, beside today's way of three clusters, one ansible-playbook run each (three job templates).

Starts three local control planes at once (localcluster.clusters: two OpenShift on different RHCOS builds, one
Kubernetes, two GPU nodes each), deploys the stack on the three in one run, then measures each way NOOP_RUNS times:
wall seconds (the median run and the range) and CPU seconds (user and system of ansible-playbook, its workers and the
modules, which the machine's other load does not change). Each row is printed as soon as it is measured.
Run: make bench-fleet
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from localcluster import clusters  # noqa: E402  (tools/ is not a package on the path by default)

RHCOS_416, RHCOS_96 = "416.94.202405081406-0", "9.6.20260303-1"
SPECS = [("ocp-a", "openshift", clusters.small_fleet("ocp-a", {"rhcos": RHCOS_416})),
         ("ocp-b", "openshift", clusters.small_fleet("ocp-b", {"rhcos": RHCOS_96, "openshift": "4.21"})),
         ("k8s-c", "kubernetes", clusters.small_fleet("k8s-c", {"ubuntu": "22.04"}))]
NOOP_RUNS = 3


def run_playbook(inventory, playbook, limit=None):
    """(wall seconds, CPU seconds, recap by host) of one ansible-playbook run over the inventory file."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("K8S_AUTH_") and name != "KUBECONFIG"}
    env.update(ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    command = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
               "accelerators.gpu." + playbook] + (["--limit", limit] if limit else [])
    before, started = os.times(), time.monotonic()
    process = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    seconds, after = time.monotonic() - started, os.times()
    if process.returncode != 0:
        raise SystemExit("%s failed (rc=%d):\n%s%s" % (
            playbook, process.returncode, process.stdout[-3000:], process.stderr[-3000:]))
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return seconds, cpu, json.loads(process.stdout)["stats"]


def measure(label, runs):
    """Print and return (median wall, min, max, median CPU) of runs, each a list of (wall, CPU) of its runs."""
    walls = [sum(wall for wall, _cpu in parts) for parts in runs]
    cpus = [sum(cpu for _wall, cpu in parts) for parts in runs]
    row = (statistics.median(walls), min(walls), max(walls), statistics.median(cpus))
    print("%-44s %8.1f  %5.1f-%-5.1f %8.1f" % ((label,) + row), flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noop-runs", type=int, default=NOOP_RUNS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="accelerators-gpu-bench-fleet-") as root:
        started = time.monotonic()
        members = clusters.start(root, SPECS)
        try:
            print("%d clusters up with their nodes in %.1fs: %s" % (len(members), time.monotonic() - started, ", ".join(
                "%s (%s, %d GPU nodes)" % (member.name, flavour, len(member.node_names))
                for member, (_name, flavour, _spec) in zip(members, SPECS))))
            inventory = Path(root) / "inventory.yml"
            inventory.write_text(yaml.safe_dump(clusters.inventory(members), sort_keys=False))
            wall, cpu, _stats = run_playbook(inventory, "deploy")
            print("deploy of the three in one run: %.1fs wall, %.1fs CPU" % (wall, cpu))
            print("\nno-op reconcile, median of %d runs; CPU: ansible-playbook, its workers and the modules" %
                  args.noop_runs)
            print("%-44s %8s  %-11s %8s" % ("run", "wall s", "range s", "CPU s"))
            runs = {"one cluster": [], "three clusters, one run": [], "three clusters, a run each": []}
            for _attempt in range(args.noop_runs):
                for label, limits in (("one cluster", ["ocp-a"]), ("three clusters, one run", [None]),
                                      ("three clusters, a run each", [member.name for member in members])):
                    parts = []
                    for limit in limits:
                        wall, cpu, stats = run_playbook(inventory, "reconcile", limit=limit)
                        assert all(host_stats["changed"] == 0 for host_stats in stats.values()), stats
                        parts.append((wall, cpu))
                    runs[label].append(parts)
            rows = {label: measure(label, label_runs) for label, label_runs in runs.items()}
            print("\nthree clusters in one run: %.1fx the wall time of one cluster, %.1fx faster than a run each" % (
                rows["three clusters, one run"][0] / rows["one cluster"][0],
                rows["three clusters, a run each"][0] / rows["three clusters, one run"][0]))
        finally:
            clusters.stop(member.plane.state for member in members)


if __name__ == "__main__":
    main()
