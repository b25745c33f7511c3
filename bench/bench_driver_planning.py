"""Benchmark of nfd_labels and driver_daemonsets on a large simulated fleet, beside the plain kubernetes.core peer.

Starts its own local cluster (heartbeats slowed), creates N nodes on 4 RHCOS versions and 2 kernels, then measures:
- each module run as its own process (what Ansible would execute, without Ansible's start-up): wall time,
  peak RSS and the API requests by verb the module counted at its client;
- the whole job through ansible-playbook, ours (bench/ours_driver_daemonsets.yml) and the peer's
  (bench/peer_driver_daemonsets.yml), first run and no-op re-run.
Run: make bench  (BENCH_NODES=5000 by default)
"""

import argparse
import concurrent.futures
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kubernetes

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from localcluster import controlplane, fleet, report  # noqa: E402  (tools/ is not a package on the path by default)

MODULES = ROOT / ".build" / "collections" / "ansible_collections" / "accelerators" / "gpu" / "plugins" / "modules"
VERSIONS = ["416.94.202405081406-0", "418.94.202509100653-0", "9.6.20260217-1", "9.6.20260303-1"]
NAMESPACE = "nvidia-gpu-operator"
READY_TIMEOUT = 1800


def fleet_spec(nodes):
    per_version = nodes // len(VERSIONS)
    groups = [{"name": "gpu-%d" % index, "count": per_version, "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 8},
               "os": {"rhcos": version, "openshift": "4.21"}} for index, version in enumerate(VERSIONS)]
    return {"name": "bench", "openshift": {"version": "4.21.3"}, "nodes": groups}


def create_nodes(client, spec, workers=8):
    """Creates the fleet's nodes concurrently and waits (one paginated list a poll) until kwok made them Ready."""
    core = kubernetes.client.CoreV1Api(client)
    core.create_namespace({"metadata": {"name": fleet.DTK_STREAM[0]}})
    fleet.ensure_dtk_tags(client, [{"name": v, "from": {"kind": "DockerImage", "name": fleet.dtk_image(v)}}
                                   for v in fleet.rhcos_versions(spec)])
    fleet.ensure_cluster_version(client, spec["openshift"]["version"])
    bodies = [{"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": n["name"], "labels": n["labels"], "annotations": n["annotations"]},
               "status": n["status"]} for n in fleet.expand_groups(spec)]
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(core.create_node, bodies))
    # kwok initialises a few hundred nodes a minute on two busy cores.
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        ready, token = 0, None
        while True:
            page = core.list_node(limit=1000, _continue=token)
            ready += sum(1 for n in page.items if any(c.type == "Ready" and c.status == "True"
                                                      for c in n.status.conditions or []))
            token = page.metadata._continue
            if not token:
                break
        if ready >= len(bodies):
            return len(bodies)
        time.sleep(2)
    raise RuntimeError("only %d of %d nodes Ready after %d s" % (ready, len(bodies), READY_TIMEOUT))


def run_module(name, args_file):
    """Runs one module file as Ansible would execute it; prints its result, wall and CPU seconds and peak RSS (MiB).

    Called in a fresh interpreter per module (see measure_module): RUSAGE_CHILDREN then covers that module only."""
    started = time.monotonic()
    process = subprocess.run([sys.executable, str(MODULES / (name + ".py")), args_file],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    seconds = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        result = json.loads(process.stdout)
    except ValueError:
        raise RuntimeError("%s printed no JSON: %s %s" % (name, process.stdout[-2000:], process.stderr[-2000:]))
    if result.get("failed"):
        raise RuntimeError("%s failed: %s" % (name, result.get("msg")))
    print(json.dumps({"result": result, "seconds": seconds, "cpu": usage.ru_utime + usage.ru_stime,
                      "rss": usage.ru_maxrss / 1024}))


def measure_module(name, args, env):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, handle)
    try:
        code = "import sys; sys.path.insert(0, %r); import bench_driver_planning as b; b.run_module(%r, %r)" % (
            str(Path(__file__).parent), name, handle.name)
        out = subprocess.run([sys.executable, "-c", code], env=env, check=True, stdout=subprocess.PIPE).stdout
    finally:
        os.unlink(handle.name)
    return json.loads(out)


def run_playbook(path, env):
    started = time.monotonic()
    process = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                              str(path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             check=False)
    seconds = time.monotonic() - started
    if process.returncode:
        raise RuntimeError("%s failed:\n%s" % (path.name, process.stdout[-3000:]))
    changed = [line for line in process.stdout.splitlines() if line.startswith("localhost")]
    return seconds, changed[-1].split(":", 1)[1].split() if changed else []


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=int(os.environ.get("BENCH_NODES", 5000)))
    parser.add_argument("--state", default=str(ROOT / ".build" / "bench-cluster"))
    args = parser.parse_args()
    plane = controlplane.ControlPlane(args.state)
    plane.down(quiet=True)
    # Heartbeats of thousands of nodes would load two cores; the benchmark measures the modules, not kwok.
    info = plane.up("openshift", heartbeat_seconds=900)
    try:
        client = kubernetes.config.new_client_from_config(config_file=str(plane.kubeconfig))
        spec = fleet_spec(args.nodes)
        started = time.monotonic()
        count = create_nodes(client, spec)
        print("cluster up in %.1fs; %d nodes created and Ready in %.1fs" % (
            info["startup_seconds"], count, time.monotonic() - started))
        print(report.node_size_line(client))
        kubernetes.client.CoreV1Api(client).create_namespace({"metadata": {"name": NAMESPACE}})
        env = dict(os.environ, K8S_AUTH_KUBECONFIG=str(plane.kubeconfig),
                   ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
                   PYTHONPATH=os.pathsep.join([str(ROOT / ".build" / "collections"), os.environ.get("PYTHONPATH", "")]),
                   ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_LOCALHOST_WARNING="false",
                   ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_NOCOLOR="true")
        rows = []
        facts = measure_module("nfd_labels", {}, env)
        rows.append(("nfd_labels", facts))
        labelled = measure_module("nfd_labels", {"return_labels": True}, env)
        rows.append(("nfd_labels return_labels", labelled))
        nodes = labelled["result"]["nodes"]
        dtk = measure_module("dtk_image_lookup", {"versions": facts["result"]["rhcos_versions"]}, env)
        rows.append(("dtk_image_lookup", dtk))
        driver = {"repository": "example.test/nvidia", "version": "550.90.07"}
        common = {"namespace": NAMESPACE, "mode": "rhcos", "driver": driver, "dtk_images": dtk["result"]["images"]}
        rows.append(("driver_daemonsets plan_only (lists nodes itself)", measure_module(
            "driver_daemonsets", dict(common, plan_only=True), env)))
        rows.append(("driver_daemonsets plan_only (nodes given)", measure_module(
            "driver_daemonsets", dict(common, plan_only=True, nodes=nodes), env)))
        rows.append(("driver_daemonsets apply (first)", measure_module("driver_daemonsets", common, env)))
        rows.append(("driver_daemonsets apply (no-op)", measure_module("driver_daemonsets", common, env)))
        print("\nmodule process (%d nodes, %d RHCOS versions)" % (count, len(VERSIONS)))
        print("%-50s %8s %8s %9s %9s  %s" % ("run", "seconds", "CPU s", "peak MiB", "result MB", "API requests"))
        for name, row in rows:
            print("%-50s %8.2f %8.2f %9.0f %9.1f  %s" % (
                name, row["seconds"], row["cpu"], row["rss"], len(json.dumps(row["result"])) / 1e6,
                json.dumps(row["result"].get("api_requests"), sort_keys=True)))
        # The whole job through ansible-playbook, both ways, in the same cluster: ours writes into NAMESPACE
        # already; the peer gets its own namespace so that both start from nothing.
        kubernetes.client.AppsV1Api(client).delete_collection_namespaced_daemon_set(NAMESPACE)
        time.sleep(2)
        results = {}
        for label, playbook in (("ours", ROOT / "bench" / "ours_driver_daemonsets.yml"),
                                ("peer", ROOT / "bench" / "peer_driver_daemonsets.yml")):
            first = run_playbook(playbook, env)
            again = run_playbook(playbook, env)
            results[label] = (first, again)
            kubernetes.client.AppsV1Api(client).delete_collection_namespaced_daemon_set(NAMESPACE)
            time.sleep(2)
        print("\nansible-playbook wall time (seconds)")
        print("%-6s %10s %10s  %s" % ("", "first run", "no-op run", "no-op recap"))
        for label, (first, again) in results.items():
            print("%-6s %10.1f %10.1f  %s" % (label, first[0], again[0], " ".join(again[1])))
        print("peer/ours: first run %.1fx, no-op run %.1fx" % (results["peer"][0][0] / results["ours"][0][0],
                                                               results["peer"][1][0] / results["ours"][1][0]))
    finally:
        plane.down()


if __name__ == "__main__":
    main()
