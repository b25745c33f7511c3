"""Benchmark of nfd_labels and driver_daemonsets on a large simulated fleet, beside the plain kubernetes.core peer.

Starts its own local cluster (heartbeats slowed), creates N nodes on 4 RHCOS versions and 2 kernels, then measures:
- each module run as its own process (what Ansible would execute, without Ansible's start-up): wall time,
  peak RSS and the API requests by verb the module counted at its client;
  the bytes of the API answers per node, as received and decompressed (JSON, or protobuf for node metadata: the
  module's api_response_bytes);
- the whole job through ansible-playbook, ours (bench/ours_driver_daemonsets.yml) and the peer's
  (bench/peer_driver_daemonsets.yml), first run and no-op re-run, then each no-op again through a counting proxy
  (tools/localcluster/apiproxy.py: requests by verb and bytes, the same way for both); then accelerators.gpu.status, with
  the stack's operand pods Running and Ready on every node (written by the benchmark: no simulator runs), and its
  stack_status module alone for its requests and bytes.
Run: make bench  (BENCH_NODES=5000 by default); BENCH_SCALE=1000,5000,10000: the module runs only, on each fleet
size in turn, and a table of how wall time, peak memory and bytes per node grow.
"""

import argparse
import concurrent.futures
import contextlib
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
from localcluster import apiproxy, controlplane, fleet, report  # noqa: E402  (tools/ is not a package on the path by default)

MODULES = ROOT / ".build" / "collections" / "ansible_collections" / "accelerators" / "gpu" / "plugins" / "modules"
VERSIONS = ["416.94.202405081406-0", "418.94.202509100653-0", "9.6.20260217-1", "9.6.20260303-1"]
NAMESPACE = "nvidia-gpu-operator"
READY_TIMEOUT = 1800
# The page size of the runs that read in pages.
PAGE = 500
# Runs of each module that writes nothing, measured one after the other: the table gives the median (median_run).
REPEATS = 3
DRIVER = {"repository": "example.test/nvidia", "version": "550.90.07"}
# The operand pods the stack runs on every GPU node (app.kubernetes.io/component), by image.
OPERAND_PODS = (("nvidia-driver", "driver"), ("nvidia-container-toolkit", "container-toolkit"),
                ("nvidia-device-plugin", "k8s-device-plugin"), ("nvidia-dcgm-exporter", "dcgm-exporter"),
                ("gpu-feature-discovery", "gpu-feature-discovery"), ("nvidia-operator-validator", "gpu-operator-validator"))


def fleet_spec(nodes):
    per_version = nodes // len(VERSIONS)
    groups = [{"name": "gpu-%d" % index, "count": per_version, "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 8},
               "os": {"rhcos": version, "openshift": "4.21"}} for index, version in enumerate(VERSIONS)]
    return {"name": "bench", "openshift": {"version": "4.21.3"}, "nodes": groups}


def prepare_cluster(client, spec):
    """What the modules read beside the nodes: the DTK image stream, the cluster version, the operand namespace."""
    core = kubernetes.client.CoreV1Api(client)
    core.create_namespace({"metadata": {"name": fleet.DTK_STREAM[0]}})
    fleet.ensure_dtk_tags(client, [{"name": v, "from": {"kind": "DockerImage", "name": fleet.dtk_image(v)}}
                                   for v in fleet.rhcos_versions(spec)])
    fleet.ensure_cluster_version(client, spec["openshift"]["version"])
    core.create_namespace({"metadata": {"name": NAMESPACE}})


def ready_nodes(client):
    """How many nodes are Ready: the Status cells of a Node Table (no objects), page by page."""
    ready, token = 0, None
    while True:
        query = [("limit", 2000), ("includeObject", "None")] + ([("continue", token)] if token else [])
        response = client.call_api("/api/v1/nodes", "GET", query_params=query, auth_settings=["BearerToken"],
                                   header_params={"Accept": "application/json;as=Table;g=meta.k8s.io;v=v1"},
                                   _preload_content=False, response_type="object")[0]
        table = json.loads(response.data)
        ready += sum(1 for row in table.get("rows") or [] if row["cells"][1].split(",")[0] == "Ready")
        token = (table.get("metadata") or {}).get("continue")
        if not token:
            return ready


def create_nodes(client, spec, existing=(), workers=8):
    """Creates the fleet's nodes but those named in existing, concurrently, and waits until kwok made every node of
    the fleet Ready. Returns the fleet's node names."""
    core = kubernetes.client.CoreV1Api(client)
    nodes = fleet.expand_groups(spec)
    bodies = [{"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": n["name"], "labels": n["labels"], "annotations": n["annotations"]},
               "status": n["status"]} for n in nodes if n["name"] not in existing]
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(core.create_node, bodies))
    # kwok initialises a few hundred nodes a minute on two busy cores.
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        ready = ready_nodes(client)
        if ready >= len(nodes):
            return set(n["name"] for n in nodes)
        time.sleep(5)
    raise RuntimeError("only %d of %d nodes Ready after %d s" % (ready, len(nodes), READY_TIMEOUT))


def operand_pod(node, component, image, version):
    """A pod of an operand bound to a node, and the status its kubelet would write once it is Ready."""
    app = "nvidia-driver-daemonset-" + version if component == "nvidia-driver" else component
    labels = {"app": app, "app.kubernetes.io/component": component,
              "app.kubernetes.io/managed-by": "accelerators.gpu", "controller-revision-hash": "5d8f7c9b6"}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "%s-%s" % (app, node), "namespace": NAMESPACE, "labels": labels},
           "spec": {"nodeName": node, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                    "containers": [{"name": image, "image": "nvcr.io/nvidia/%s:v1" % image}]}}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {"phase": "Running", "hostIP": "127.0.0.1", "podIP": "127.0.0.1", "startTime": now,
              "conditions": [{"type": kind, "status": "True", "lastTransitionTime": now}
                             for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                          "PodScheduled")],
              "containerStatuses": [{"name": image, "image": "nvcr.io/nvidia/%s:v1" % image, "imageID": "",
                                     "ready": True, "started": True, "restartCount": 0,
                                     "state": {"running": {"startedAt": now}}}]}
    return pod, status


def create_operand_pods(client, nodes, workers=16):
    """The operand pods (OPERAND_PODS) on each node, Running and Ready: created, then their status written as their
    kubelet would (no simulator runs in the benchmark's cluster). Returns how many."""
    core = kubernetes.client.CoreV1Api(client)
    versions = dict((n["name"], n["labels"]["feature.node.kubernetes.io/system-os_release.OSTREE_VERSION"])
                    for n in fleet.expand_groups(fleet_spec(len(nodes))))

    def create(args):
        pod, status = operand_pod(*args)
        # Answers left undecoded: decoding 2 Pods a pod would cost the benchmark more CPU than the API server.
        core.create_namespaced_pod(NAMESPACE, pod, _preload_content=False)
        core.patch_namespaced_pod_status(pod["metadata"]["name"], NAMESPACE, {"status": status}, _preload_content=False)

    work = [(node, component, image, versions[node]) for node in sorted(nodes) for component, image in OPERAND_PODS]
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(create, work))
    return len(work)


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


def process_cpu_seconds(pid):
    """User and system CPU seconds a process has used so far (/proc/<pid>/stat utime and stime)."""
    fields = Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def median_run(measure, repeats=REPEATS):
    """The run of median wall time ("seconds") of repeats calls of measure(), with "range": the least and the most
    seconds of all: runs of the same module differ by up to 2x with what kwok and the API server do meanwhile."""
    runs = sorted((measure() for _repeat in range(repeats)), key=lambda run: run["seconds"])
    return dict(runs[len(runs) // 2], range=(runs[0]["seconds"], runs[-1]["seconds"]))


def measure_module(name, args, env, server_pid):
    """run_module() in a fresh interpreter, with the CPU seconds the API server spent meanwhile ("server_cpu": its
    answers, and whatever else it served at the time)."""
    server_cpu = process_cpu_seconds(server_pid)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, handle)
    try:
        code = "import sys; sys.path.insert(0, %r); import bench_driver_planning as b; b.run_module(%r, %r)" % (
            str(Path(__file__).parent), name, handle.name)
        out = subprocess.run([sys.executable, "-c", code], env=env, check=True, stdout=subprocess.PIPE).stdout
    finally:
        os.unlink(handle.name)
    return dict(json.loads(out), server_cpu=process_cpu_seconds(server_pid) - server_cpu)


def run_playbook(playbook, env):
    """(wall seconds, the no-op recap's counters) of ansible-playbook on a playbook file or name."""
    started = time.monotonic()
    process = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                              str(playbook)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             check=False)
    seconds = time.monotonic() - started
    if process.returncode:
        raise RuntimeError("%s failed:\n%s" % (playbook, process.stdout[-3000:]))
    changed = [line for line in process.stdout.splitlines() if line.startswith("localhost")]
    return seconds, changed[-1].split(":", 1)[1].split() if changed else []


def measure_in_worker(name, args, env, server_pid):
    """The module as a play's task runs it: `ansible -m` on localhost, its action handing the module to the module
    worker (plugins/plugin_utils/worker_action.py). Runs until the worker served one (the first run starts it), then
    REPEATS times more, measured (median_run): the module's own run in the worker (wall seconds and the peak RSS of
    the process that ran it, from the worker's log), the whole ad hoc run's wall time (Ansible's start included) and
    the API server's CPU."""
    with tempfile.TemporaryDirectory(prefix="bench-worker-", dir="/tmp") as directory:
        log = Path(directory) / "worker.log"
        # A worker of its own (its socket directory), which logs each module it runs.
        run_env = dict(env, XDG_RUNTIME_DIR=directory, ACCELERATORS_GPU_WORKER_LOG=str(log),
                       ACCELERATORS_GPU_WORKER_IDLE="30", ANSIBLE_PYTHON_INTERPRETER=sys.executable)
        command = [str(Path(sys.executable).parent / "ansible"), "localhost", "-i", "localhost,", "-c", "local",
                   "-m", "accelerators.gpu." + name] + (["-a", json.dumps(args)] if args else [])
        for _attempt in range(20):
            subprocess.run(command, env=run_env, stdout=subprocess.DEVNULL, check=True)
            if log.exists():
                break
            time.sleep(1)
        else:
            raise RuntimeError("the module worker served no run of %s" % name)

        def measure():
            server_cpu = process_cpu_seconds(server_pid)
            started = time.monotonic()
            subprocess.run(command, env=run_env, stdout=subprocess.DEVNULL, check=True)
            seconds = time.monotonic() - started
            served = dict(field.split("=", 1) for field in log.read_text().splitlines()[-1].split()[1:])
            return {"seconds": float(served["seconds"]), "rss": int(served["maxrss_mib"]), "ad_hoc": seconds,
                    "server_cpu": process_cpu_seconds(server_pid) - server_cpu}
        return median_run(measure)


def measure_modules(count, env, server_pid):
    """[(run, measure_module() answer)]: each module as its own process on the fleet, each run that writes nothing
    REPEATS times (median_run); then the same runs in the module worker, as in a play (printed)."""
    rows = []

    def measure(name, args):
        return median_run(lambda: measure_module(name, args, env, server_pid))
    facts = measure("nfd_labels", {})
    rows.append(("nfd_labels", facts))
    labelled = measure("nfd_labels", {"return_labels": True})
    rows.append(("nfd_labels return_labels", labelled))
    nodes = labelled["result"]["nodes"]
    dtk = measure("dtk_image_lookup", {"versions": facts["result"]["rhcos_versions"]})
    rows.append(("dtk_image_lookup", dtk))
    common = {"namespace": NAMESPACE, "mode": "rhcos", "driver": DRIVER, "dtk_images": dtk["result"]["images"]}
    rows.append(("driver_daemonsets plan_only (lists nodes itself)", measure("driver_daemonsets",
                                                                             dict(common, plan_only=True))))
    rows.append(("driver_daemonsets plan_only (nodes given)", measure("driver_daemonsets",
                                                                      dict(common, plan_only=True, nodes=nodes))))
    first = measure_module("driver_daemonsets", common, env, server_pid)
    rows.append(("driver_daemonsets apply (first)", dict(first, range=(first["seconds"],) * 2)))
    rows.append(("driver_daemonsets apply (no-op)", measure("driver_daemonsets", common)))
    # Pages of 500, as kubernetes.core's k8s_info and kubectl read: the API server answers the first page from its
    # watch cache and each next one from etcd. By default the modules read a first page of 100 nodes, then each kind
    # of answer in one request; a page_size given pages the Node Table with each row's metadata.
    rows.append(("nfd_labels, pages of %d" % PAGE, measure("nfd_labels", {"page_size": PAGE})))
    rows.append(("driver_daemonsets plan_only, pages of %d" % PAGE, measure("driver_daemonsets",
                                                                            dict(common, plan_only=True, page_size=PAGE))))
    print("\nmodule process (%d nodes, %d RHCOS versions); KB/node: bytes of the API answers per node, as received "
          "(gzip where the API server compressed) and decompressed (JSON, or protobuf for node metadata)"
          % (count, len(VERSIONS)))
    print("%-50s %8s %11s %8s %9s %9s %9s %8s %8s  %s" % (
        "run (median of %d)" % REPEATS, "seconds", "range s", "CPU s", "server s", "peak MiB", "result MB", "KB/node",
        "decomp KB", "API requests"))
    for name, row in rows:
        read = row["result"]["api_response_bytes"]
        print("%-50s %8.2f %5.2f-%5.2f %8.2f %9.2f %9.0f %9.1f %8.2f %8.2f  %s" % (
            name, row["seconds"], row["range"][0], row["range"][1], row["cpu"], row["server_cpu"], row["rss"],
            len(json.dumps(row["result"])) / 1e6,
            read["wire"] / 1e3 / count, read["json"] / 1e3 / count,
            json.dumps(row["result"].get("api_requests"), sort_keys=True)))
    in_worker = [("nfd_labels", "nfd_labels", {}),
                 ("driver_daemonsets plan_only (lists nodes itself)", "driver_daemonsets", dict(common, plan_only=True)),
                 ("driver_daemonsets apply (no-op)", "driver_daemonsets", common)]
    print("\nthe same module runs in the module worker, as a play's task runs them (`ansible -m`, the worker already "
          "running): the module's run, and the whole ad hoc run with Ansible's start")
    print("%-50s %8s %11s %9s %9s %12s" % ("run (median of %d)" % REPEATS, "seconds", "range s", "server s",
                                           "peak MiB", "ad hoc s"))
    for label, name, args in in_worker:
        row = measure_in_worker(name, args, env, server_pid)
        print("%-50s %8.2f %5.2f-%5.2f %9.2f %9d %12.2f" % (
            label, row["seconds"], row["range"][0], row["range"][1], row["server_cpu"], row["rss"], row["ad_hoc"]))
    return rows


def settle(limit=1.5, timeout=300):
    """Waits (at most timeout seconds) until the 1-minute load average is under limit: creating thousands of nodes or
    pods leaves kwok and the API server busy for minutes, which would be measured with the next run."""
    started = time.monotonic()
    while os.getloadavg()[0] >= limit and time.monotonic() - started < timeout:
        time.sleep(5)
    print("settled for %.0f s; load average: %.2f %.2f %.2f" % ((time.monotonic() - started,) + os.getloadavg()))


def compare_playbooks(client, names, env, plane, server_pid):
    """The job through ansible-playbook, ours and the peer's, timed; then each no-op once more through the
    counting proxy for its requests and bytes; then the status, with the operand pods on every node."""
    count = len(names)
    # Ours writes into NAMESPACE already: both start from nothing.
    apps = kubernetes.client.AppsV1Api(client)
    apps.delete_collection_namespaced_daemon_set(NAMESPACE)
    time.sleep(2)
    results = {}
    proxy = apiproxy.APIProxy(plane.kubeconfig)
    try:
        for label, playbook in (("ours", ROOT / "bench" / "ours_driver_daemonsets.yml"),
                                ("peer", ROOT / "bench" / "peer_driver_daemonsets.yml")):
            first = run_playbook(playbook, env)
            again = run_playbook(playbook, env)
            proxy.reset()
            run_playbook(playbook, dict(env, K8S_AUTH_KUBECONFIG=proxy.kubeconfig))
            results[label] = (first, again, proxy.counts())
            apps.delete_collection_namespaced_daemon_set(NAMESPACE)
            time.sleep(2)
    finally:
        proxy.close()
    print("\nansible-playbook wall time (seconds); requests and bytes of the no-op run, counted by a proxy")
    print("%-6s %10s %10s %9s  %-30s %s" % ("", "first run", "no-op run", "KB/node", "no-op requests", "no-op recap"))
    for label, (first, again, (requests, body_bytes)) in results.items():
        print("%-6s %10.1f %10.1f %9.2f  %-30s %s" % (
            label, first[0], again[0], body_bytes / 1e3 / count, json.dumps(requests, sort_keys=True),
            " ".join(again[1])))
    print("peer/ours: first run %.1fx, no-op run %.1fx, no-op bytes %.1fx" % (
        results["peer"][0][0] / results["ours"][0][0], results["peer"][1][0] / results["ours"][1][0],
        results["peer"][2][1] / results["ours"][2][1]))
    started = time.monotonic()
    pods = create_operand_pods(client, names)
    print("\n%d operand pods Running and Ready in %.1f s; load average: %.2f %.2f %.2f" % (
        (pods, time.monotonic() - started) + os.getloadavg()))
    settle()
    module = measure_module("stack_status", {"namespace": NAMESPACE}, env, server_pid)
    read = module["result"]["api_response_bytes"]
    print("stack_status module: %.1f s, CPU %.1f s, server %.1f s, peak %.0f MiB, read %.1f MB as received "
          "(%.1f MB JSON), requests %s" % (module["seconds"], module["cpu"], module["server_cpu"], module["rss"],
                                           read["wire"] / 1e6, read["json"] / 1e6,
                                           json.dumps(module["result"]["api_requests"], sort_keys=True)))
    seconds, _recap = run_playbook("accelerators.gpu.status", env)
    print("ansible-playbook accelerators.gpu.status: %.1f s (%d GPU nodes, %d operand pods, no validation Jobs); "
          "load average: %.2f %.2f %.2f" % ((seconds, count, pods) + os.getloadavg()))


@contextlib.contextmanager
def bench_cluster(state):
    """(control plane, API client, environment of the module and playbook runs) of a new local cluster."""
    plane = controlplane.ControlPlane(state)
    plane.down(quiet=True)
    # Heartbeats of thousands of nodes would load two cores; the benchmark measures the modules, not kwok.
    # No simulator: the benchmark writes the operand pods' status itself (create_operand_pods).
    info = plane.up("openshift", heartbeat_seconds=900, simulator=False)
    print("cluster up in %.1fs" % info["startup_seconds"])
    try:
        client = kubernetes.config.new_client_from_config(config_file=str(plane.kubeconfig))
        prepare_cluster(client, fleet_spec(0))
        env = dict(os.environ, K8S_AUTH_KUBECONFIG=str(plane.kubeconfig),
                   ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
                   PYTHONPATH=os.pathsep.join([str(ROOT / ".build" / "collections"), os.environ.get("PYTHONPATH", "")]),
                   ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_LOCALHOST_WARNING="false",
                   ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_NOCOLOR="true")
        yield plane, client, env
    finally:
        plane.down()


def grow_fleet(client, nodes, existing):
    """Creates the nodes of a fleet of that size not in existing; returns (its node names, full Node KB)."""
    started = time.monotonic()
    names = create_nodes(client, fleet_spec(nodes), existing)
    print("\n%d nodes Ready, %d created in %.1fs" % (len(names), len(names - set(existing)), time.monotonic() - started))
    print(report.node_size_line(client))
    print("load average: %.2f %.2f %.2f" % os.getloadavg())
    settle()
    return names, report.node_sizes(client)[1] / 1e3


SCALE_RUNS = ("nfd_labels", "driver_daemonsets plan_only (lists nodes itself)", "driver_daemonsets apply (no-op)")


def print_scale_table(measured):
    """Wall time, CPU (the module's, the API server's), peak memory and bytes read per node of the module runs that
    list nodes, per fleet size."""
    print("\nscale: module process per fleet size (KB/node as received; full Node: the plain list's JSON per node)")
    print("%-50s %7s %8s %8s %9s %9s %8s %10s" % (
        "run", "nodes", "seconds", "CPU s", "server s", "peak MiB", "KB/node", "full Node"))
    for name in SCALE_RUNS:
        for count, full_kb, rows in measured:
            row = dict(rows)[name]
            print("%-50s %7d %8.2f %8.2f %9.2f %9.0f %8.2f %7.1f KB" % (
                name, count, row["seconds"], row["cpu"], row["server_cpu"], row["rss"],
                row["result"]["api_response_bytes"]["wire"] / 1e3 / count, full_kb))


def cpu_yardstick():
    """Seconds of a fixed pure-Python loop (10^7 additions), printed beside the figures: machines of this kind differ
    in speed by up to 2x, and the figures with them."""
    started, total = time.perf_counter(), 0
    for number in range(10 ** 7):
        total += number
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=int(os.environ.get("BENCH_NODES", 5000)))
    parser.add_argument("--scale", default=os.environ.get("BENCH_SCALE", ""),
                        help="fleet sizes, comma-separated: the fleet grows to each in turn, module runs only")
    parser.add_argument("--state", default=str(ROOT / ".build" / "bench-cluster"))
    args = parser.parse_args()
    print("load average before: %.2f %.2f %.2f; CPU yardstick (10^7 additions in Python): %.2f s"
          % (os.getloadavg() + (cpu_yardstick(),)))
    with bench_cluster(args.state) as (plane, client, env):
        server_pid = plane.info()["pids"]["kube-apiserver"]
        if args.scale:
            measured, names = [], set()
            for nodes in sorted(int(size) for size in args.scale.split(",")):
                names, full_kb = grow_fleet(client, nodes, names)
                # Each size's first apply creates the DaemonSets.
                kubernetes.client.AppsV1Api(client).delete_collection_namespaced_daemon_set(NAMESPACE)
                measured.append((len(names), full_kb, measure_modules(len(names), env, server_pid)))
            print_scale_table(measured)
        else:
            names = grow_fleet(client, args.nodes, ())[0]
            measure_modules(len(names), env, server_pid)
            compare_playbooks(client, names, env, plane, server_pid)
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
