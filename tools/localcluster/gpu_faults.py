"""Failing GPUs, for the simulator: XIDs injected on a node's GPUs, what the device plugin and the DCGM exporter make
of them, and what a GPU reset and a reboot do to them.

- A fault is injected (inject_xid, or `python -m tools.localcluster xid`) into the node annotation FAULTS_ANNOTATION:
  a JSON list of {gpu, uuid, pci_bus_id, xid, permanent, since}. The GPU's UUID and PCI bus ID are those the DRA
  kubelet plugin publishes (dra.py); the bus ID in NVML's form (00000000:18:00.0), as nvidia-smi and dcgm-exporter
  print it.
- How it clears (clears_with): a permanent fault never; XID 79 (the GPU fell off the bus) only with a boot of the node
  (a new bootID); any other with a GPU reset.
- The device plugin (k8s-device-plugin internal/rm/health.go) marks a GPU Unhealthy on an XID it does not skip: the
  application XIDs 13, 31, 43, 45, 68 and 109, and those its pod's DP_DISABLE_HEALTHCHECKS names (`all` or `xids`:
  every XID), unless DP_ENABLE_HEALTHCHECKS names them. An Unhealthy GPU stays so until the plugin restarts (its pod
  replaced or its node booted) with the fault cleared. The node's allocatable nvidia.com/gpu drops by the GPU's share
  (capacity / GPUs), capacity stays.
- The DCGM exporter's fields, served by the simulator as a Prometheus query API on 127.0.0.1 (PrometheusAPI;
  prometheus_url finds it): per GPU of a node whose exporter pod is Ready, DCGM_FI_DEV_XID_ERRORS (the GPU's last XID,
  0 without a fault), DCGM_FI_DEV_ROW_REMAP_FAILURE (1 while it has an XID 64 fault) and
  DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS (its faults of XID 48 or 63), labelled as dcgm-exporter labels them and as
  a scrape adds the exporter pod's namespace, pod and container.
- A GPU reset: a pod whose script (shell.py plays it: functions, loops, variables, && and ||) runs `nvidia-smi -r`
  (--gpu-reset; -i by UUID, index or bus ID, else every GPU) through `chroot` into a directory the pod mounts from
  the host's driver root (/run/nvidia/driver for a driver container, / for a pre-installed driver), privileged, with
  the driver Ready; -pm and -q succeed but on a GPU lost. It fails "in use by another process" while anything holds
  the node's GPUs (the simulator says what: pods requesting GPUs or holding claims, running GPU operands); a GPU lost
  (XID 79) or a permanent fault fails too and nothing clears; otherwise the GPU's faults clear. Each attempt on a GPU
  is recorded in RESETS_ANNOTATION ({uuid, time, result}).
- A reboot: a privileged pod running `chroot /host systemctl reboot` (or reboot, shutdown -r) with the host's / at
  /host, as `oc debug node/<name>` does, completes; the node then reboots in place (kernel.py). Every boot of a node
  (kernel.py, mco.py) clears its faults but the permanent ones and is recorded in REBOOTS_ANNOTATION ({time, boot_id}).
"""

import datetime
import json
import re
import shlex
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import kubernetes
from kubernetes.client.rest import ApiException

from . import api, dra, fleet, shell

FAULTS_ANNOTATION = "sim.accelerators.gpu/gpu-faults"
RESETS_ANNOTATION = "sim.accelerators.gpu/gpu-resets"
REBOOTS_ANNOTATION = "sim.accelerators.gpu/reboots"
# The XIDs k8s-device-plugin always treats as application errors: the GPU stays Healthy.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
FALLEN_OFF_THE_BUS = 79
ROW_REMAP_FAILURE_XIDS = frozenset({64})
REMAPPED_ROW_XIDS = frozenset({48, 63})
METRICS = ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")
DRIVER_CONTAINER_ROOT = "/run/nvidia/driver"
# nvidia-smi's return values (nvidia-smi(1)).
EXIT_NO_PERMISSION, EXIT_NOT_FOUND, EXIT_NO_DRIVER, EXIT_GPU_LOST, EXIT_OTHER = 4, 6, 9, 15, 255
IN_USE = ("GPU %s is currently in use by another process.\n\n1 device is currently being used by one or more other "
          "processes (e.g., Fabric Manager, CUDA application, graphics application such as an X server, or a "
          "monitoring application such as another instance of nvidia-smi). Please first kill all processes using "
          "this device and all compute applications running in the system.")
GPU_LOST = "Unable to determine the device handle for GPU %s: GPU is lost.  Reboot the system to recover this GPU"
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
             "NVIDIA driver is installed and running.")
SHELLS = ("sh", "bash", "ash", "dash")


class FaultError(ValueError):
    pass


def stamp(epoch=None):
    return datetime.datetime.fromtimestamp(time.time() if epoch is None else epoch,
                                           datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- the GPUs and their faults -------------------------------------------------------------------
def gpu_uuid(node_name, index):
    return dra.gpu_uuid(node_name, index)


def pci_bus_id(index):
    """The GPU's PCI bus ID as NVML gives it (nvidia-smi, dcgm-exporter): an 8-digit domain, upper-case hex."""
    return "0000" + dra.pcie_bus_id(index).upper()


def faults_of(annotations):
    return json.loads((annotations or {}).get(FAULTS_ANNOTATION) or "[]")


def records(annotations, key):
    return json.loads((annotations or {}).get(key) or "[]")


def clears_with(fault):
    """What clears a fault: never, a reboot, or a reset."""
    if fault.get("permanent"):
        return "never"
    return "reboot" if fault["xid"] == FALLEN_OFF_THE_BUS else "reset"


def new_fault(node_name, gpu_count, index, xid, permanent=False, now=None):
    if not 0 <= index < gpu_count:
        raise FaultError("node %s has %d GPUs: no GPU %d" % (node_name, gpu_count, index))
    if xid <= 0:
        raise FaultError("an XID is a positive number, not %d" % xid)
    return {"gpu": index, "uuid": gpu_uuid(node_name, index), "pci_bus_id": pci_bus_id(index), "xid": xid,
            "permanent": bool(permanent), "since": stamp(now)}


def update_node_annotations(core, node_name, change, attempts=10):
    """Applies change(annotations) -> {key: new value} to the node's current annotations, with its resourceVersion so
    that a concurrent writer (the simulator, a test injecting) is never overwritten; returns what was written."""
    for _attempt in range(attempts):
        try:
            node = core.read_node(node_name)
        except ApiException as error:
            if error.status == 404:
                raise FaultError("no node %s" % node_name)
            raise
        values = change(node.metadata.annotations or {})
        if not values:
            return values
        try:
            core.patch_node(node_name, {"metadata": {"resourceVersion": node.metadata.resource_version,
                                                     "annotations": values}})
            return values
        except ApiException as error:
            if error.status != 409:
                raise
    raise FaultError("node %s: annotations changed under every one of %d attempts" % (node_name, attempts))


def inject_xid(client, node, gpu_index, xid, permanent=False):
    """Injects XID xid on GPU gpu_index of node; client: an ApiClient or a kubeconfig path. Returns the fault."""
    if isinstance(client, (str, Path)):
        client = api.client_from_kubeconfig(client)
    core = kubernetes.client.CoreV1Api(client)
    injected = []

    def add(annotations):
        hw = json.loads(annotations.get(fleet.HARDWARE_ANNOTATION) or "{}")
        fault = new_fault(node, int((hw.get("gpu") or {}).get("count") or 0), int(gpu_index), int(xid), permanent)
        injected[:] = [fault]
        return {FAULTS_ANNOTATION: json.dumps(faults_of(annotations) + [fault])}
    update_node_annotations(core, node, add)
    return injected[0]


def after_boot(annotations, boot_id, now):
    """The annotations a boot writes: the faults it clears (all but the permanent ones) and its record."""
    values = {REBOOTS_ANNOTATION: json.dumps(records(annotations, REBOOTS_ANNOTATION)
                                             + [{"time": stamp(now), "boot_id": boot_id}])}
    faults = faults_of(annotations)
    kept = [fault for fault in faults if clears_with(fault) == "never"]
    if kept != faults:
        values[FAULTS_ANNOTATION] = json.dumps(kept)
    return values


# -- the device plugin -----------------------------------------------------------------------------
def _xid_list(value):
    """A DP_*_HEALTHCHECKS value: "all" (all or xids named), else the set of XIDs it names."""
    items = [item.strip().lower() for item in (value or "").split(",") if item.strip()]
    if {"all", "xids"} & set(items):
        return "all"
    return {int(item) for item in items if item.isdigit()}


def marks_unhealthy(xid, disable=None, enable=None):
    """Whether the device plugin marks a GPU Unhealthy on this XID, given its DP_DISABLE_HEALTHCHECKS and
    DP_ENABLE_HEALTHCHECKS."""
    enabled = _xid_list(enable)
    if enabled == "all" or xid in enabled:
        return True
    disabled = _xid_list(disable)
    return disabled != "all" and xid not in disabled and xid not in APPLICATION_XIDS


def unhealthy_gpus(faults, disable=None, enable=None):
    return {fault["gpu"] for fault in faults if marks_unhealthy(fault["xid"], disable, enable)}


def allocatable(advertised, resource, gpu_count, unhealthy):
    """The device plugin's advertised resources less the share of the Unhealthy GPUs in `resource`."""
    result = dict(advertised)
    if unhealthy and gpu_count and result.get(resource):
        share = int(result[resource]) // gpu_count
        result[resource] = max(0, int(result[resource]) - share * len(unhealthy))
    return result


# -- the DCGM exporter's fields ----------------------------------------------------------------------
def exporter_series(node_name, gpu, faults, exporter):
    """[(labels with __name__, value)] of the node's GPUs, as its Ready exporter pod exports them."""
    series = []
    model = dra.NVML_NAMES.get(gpu.get("product"), str(gpu.get("product", "")).replace("-", " "))
    for index in range(int(gpu.get("count") or 0)):
        mine = [fault for fault in faults if fault["gpu"] == index]
        labels = {"gpu": str(index), "UUID": gpu_uuid(node_name, index), "pci_bus_id": pci_bus_id(index),
                  "device": "nvidia%d" % index, "modelName": model, "Hostname": node_name,
                  "namespace": exporter["metadata"]["namespace"], "pod": exporter["metadata"]["name"],
                  "container": exporter["spec"]["containers"][0]["name"]}
        values = (mine[-1]["xid"] if mine else 0,
                  int(any(fault["xid"] in ROW_REMAP_FAILURE_XIDS for fault in mine)),
                  sum(1 for fault in mine if fault["xid"] in REMAPPED_ROW_XIDS))
        series.extend((dict(labels, __name__=name), value) for name, value in zip(METRICS, values))
    return series


# -- a Prometheus query API over them ---------------------------------------------------------------
class QueryError(ValueError):
    pass


_SELECTOR = re.compile(r"\s*([A-Za-z_:][A-Za-z0-9_:]*)?\s*(?:\{(.*)\})?\s*", re.S)
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(,|$)', re.S)


def parse_selector(expr):
    """An instant vector selector, `name{label="v", label!="v", label=~"re", label!~"re"}` (name or matchers
    optional, not both), as [(label, operator, value)]; anything else of PromQL is refused."""
    match = _SELECTOR.fullmatch(expr or "")
    if not match or not (match.group(1) or match.group(2) is not None):
        raise QueryError("the simulated Prometheus answers instant vector selectors only, not %r" % expr)
    matchers = [("__name__", "=", match.group(1))] if match.group(1) else []
    body, position = match.group(2) or "", 0
    while position < len(body.strip()):
        found = _MATCHER.match(body, position)
        if not found:
            raise QueryError("bad label matchers in %r" % expr)
        matchers.append((found.group(1), found.group(2), re.sub(r"\\(.)", r"\1", found.group(3))))
        position = found.end()
    if not any(not _matches("", operator, value) for _label, operator, value in matchers):
        raise QueryError("vector selector must contain at least one non-empty matcher")
    return matchers


def _matches(actual, operator, value):
    if operator in ("=", "!="):
        return (actual == value) == (operator == "=")
    try:
        return bool(re.fullmatch(value, actual)) == (operator == "=~")
    except re.error as error:
        raise QueryError("bad regular expression %r: %s" % (value, error))


def query(expr, series, now):
    """Prometheus' answer to an instant query over series [(labels, value)]."""
    matchers = parse_selector(expr)
    result = [{"metric": labels, "value": [now, str(value)]} for labels, value in series
              if all(_matches(labels.get(label, ""), operator, value) for label, operator, value in matchers)]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


class PrometheusAPI:
    """GET or POST /api/v1/query on 127.0.0.1:port, answered from series() -> [(labels, value)]."""

    def __init__(self, port, series):
        def answer(handler, params):
            expr = (params.get("query") or [""])[0]
            try:
                code, body = 200, query(expr, series(), round(time.time(), 3))
            except QueryError as error:
                code, body = 400, {"status": "error", "errorType": "bad_data", "error": str(error)}
            data = json.dumps(body).encode()
            handler.send_response(code)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                url = urllib.parse.urlsplit(self.path)
                if url.path != "/api/v1/query":
                    self.send_error(404)
                    return
                answer(self, urllib.parse.parse_qs(url.query))

            def do_POST(self):  # noqa: N802
                if urllib.parse.urlsplit(self.path).path != "/api/v1/query":
                    self.send_error(404)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                answer(self, urllib.parse.parse_qs(self.rfile.read(length).decode()))

            def log_message(self, *_args):
                pass  # the simulator's log is for the cluster's state

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def start(self):
        threading.Thread(target=self.server.serve_forever, name="prometheus", daemon=True).start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def prometheus_url(cluster):
    """The URL of the simulated Prometheus of a local cluster: cluster is its kubeconfig's path, or anything with a
    kubeconfig attribute (the tests' Cluster, a ControlPlane); the port is in its state directory's cluster.json."""
    state = Path(str(getattr(cluster, "kubeconfig", cluster))).parent
    info = json.loads((state / "cluster.json").read_text())
    port = info["ports"].get("prometheus")
    if not port:
        raise FaultError("the cluster of %s was started without the simulated Prometheus: restart it" % state)
    return "http://127.0.0.1:%d" % port


# -- GPU resets and reboots by pods ---------------------------------------------------------------------
def _argv(container):
    return (container.get("command") or []) + (container.get("args") or [])


def _is_shell(argv):
    return len(argv) >= 3 and argv[0].rsplit("/", 1)[-1] in SHELLS and argv[1].startswith("-") and "c" in argv[1]


def is_maintenance(pod):
    """Whether a pod's containers reset a GPU (nvidia-smi -r) or reboot the host, by the words they run; a pod
    running only nvidia-smi queries, as the validations do, is none."""
    for container in pod["spec"].get("containers") or []:
        argv = _argv(container)
        words = set(shell.tokens(argv[2]) if _is_shell(argv) else argv)
        names = {word.rsplit("/", 1)[-1] for word in words}
        if ("nvidia-smi" in names and words & {"-r", "--gpu-reset"}) or "reboot" in names \
                or {"shutdown", "-r"} <= names:
            return True
    return False


def _targets(arguments):
    """The -i/--id values of nvidia-smi's arguments (None: every GPU)."""
    for position, argument in enumerate(arguments):
        for flag in ("-i", "--id"):
            if argument == flag and position + 1 < len(arguments):
                return arguments[position + 1].split(",")
            if argument.startswith(flag + "="):
                return argument.split("=", 1)[1].split(",")
    return None


def _gpu_index(node_name, count, target):
    for index in range(count):
        if target.lower() in (str(index), gpu_uuid(node_name, index).lower(), pci_bus_id(index).lower(),
                              pci_bus_id(index)[4:].lower()):
            return index
    return None


class Maintenance:
    """A pod resetting GPUs or rebooting its node, played on one node: run() gives its exit code and output, and
    leaves the GPUs whose faults cleared, the reset records and whether the node reboots.

    count: the node's GPUs, with these faults; holders: what holds its GPUs ("namespace/name" of pods); driver_root:
    where the node's driver is on the host (/run/nvidia/driver for a driver container, / for a pre-installed one);
    driver_ready: whether it answers."""

    def __init__(self, pod, node_name, count, faults, holders, driver_root, driver_ready, now):
        self.pod, self.node_name, self.count, self.faults = pod, node_name, count, faults
        self.holders, self.driver_root, self.driver_ready, self.now = holders, driver_root, driver_ready, now
        self.privileged = all((c.get("securityContext") or {}).get("privileged") for c in pod["spec"]["containers"])
        self.cleared, self.resets, self.reboot = set(), [], False

    def run(self):
        """(exit code, output lines) of the pod's containers, run in turn until one fails."""
        output = []
        for container in self.pod["spec"]["containers"]:
            argv = _argv(container)
            script = shell.Shell(lambda sh, words, c=container: self.command(sh, words, c), argv[3:])
            code = script.run(argv[2] if _is_shell(argv) else shlex.join(argv))
            output.extend(script.output)
            if code or self.reboot:
                return code, output
        return 0, output

    def command(self, sh, argv, container, root=None):
        """One command of the pod, under root: the host's directory it chrooted into (None: its own image)."""
        name = argv[0].rsplit("/", 1)[-1]
        if name == "chroot" and len(argv) > 2:
            host = _host_path(self.pod, container, argv[1])
            if host is None:
                sh.output.append("chroot: cannot change root directory to '%s': No such file or directory" % argv[1])
                return 125
            return self.command(sh, argv[2:], container, host)
        if name == "nvidia-smi":
            if root != self.driver_root:
                sh.output.append("chroot: failed to run command 'nvidia-smi': No such file or directory" if root
                                 else "sh: nvidia-smi: not found")
                return 127
            return self.nvidia_smi(sh, argv[1:])
        if (name == "systemctl" and argv[1:2] == ["reboot"]) or name == "reboot" or (
                name == "shutdown" and "-r" in argv):
            if root != "/" or not self.privileged:
                sh.output.append("System has not been booted with systemd as init system (PID 1). Can't operate.")
                return 1
            sh.output.append("rebooting node %s" % self.node_name)
            self.reboot = True
            return 0
        return 0  # anything else (sleep, cat...) changes nothing the simulation plays

    def nvidia_smi(self, sh, arguments):
        if not self.driver_ready:
            sh.output.append(NO_DRIVER)
            return EXIT_NO_DRIVER
        targets = _targets(arguments)
        indices = list(range(self.count)) if targets is None else [
            _gpu_index(self.node_name, self.count, target) for target in targets]
        if None in indices or not indices:
            sh.output.append("No devices were found")
            return EXIT_NOT_FOUND
        if not {"-r", "--gpu-reset"} & set(arguments):
            # A query or persistence mode: it fails only on a GPU lost.
            lost = [index for index in indices if "reboot" in self._clearing(index)]
            for index in lost:
                sh.output.append(GPU_LOST % pci_bus_id(index))
            return EXIT_GPU_LOST if lost else 0
        if not self.privileged:
            sh.output.append("Unable to reset GPU %s: Insufficient Permissions" % pci_bus_id(indices[0]))
            return EXIT_NO_PERMISSION
        return self._reset(sh, indices)

    def _clearing(self, index):
        return {clears_with(fault) for fault in self.faults if fault["gpu"] == index and index not in self.cleared}

    def _reset(self, sh, indices):
        code = 0
        for index in indices:
            record = {"uuid": gpu_uuid(self.node_name, index), "time": stamp(self.now)}
            kinds = self._clearing(index)
            if "reboot" in kinds:
                self.resets.append(dict(record, result="gpu_lost"))
                sh.output.append(GPU_LOST % pci_bus_id(index))
                code = EXIT_GPU_LOST
            elif self.holders:
                self.resets.append(dict(record, result="in_use"))
                sh.output.append(IN_USE % pci_bus_id(index))
                code = EXIT_OTHER
            elif "never" in kinds:
                self.resets.append(dict(record, result="unknown_error"))
                sh.output.append("Unable to reset GPU %s: Unknown Error" % pci_bus_id(index))
                code = EXIT_OTHER
            else:
                self.resets.append(dict(record, result="success"))
                self.cleared.add(index)
                sh.output.append("GPU %s was successfully reset." % pci_bus_id(index))
        if code and self.holders:
            # Not nvidia-smi's: what the simulation found holding the GPUs.
            sh.output.append("(simulator: held by %s)" % ", ".join(sorted(self.holders)))
        elif not code:
            sh.output.append("All done.")
        return code


def _host_path(pod, container, directory):
    """The host's directory a container sees at directory (through a hostPath mount of it or of a parent), or
    None."""
    volumes = {volume["name"]: (volume.get("hostPath") or {}).get("path")
               for volume in pod["spec"].get("volumes") or []}
    wanted = directory.rstrip("/") or "/"
    for mount in container.get("volumeMounts") or []:
        host, at = volumes.get(mount.get("name")), (mount.get("mountPath") or "").rstrip("/") or "/"
        if host and (wanted == at or wanted.startswith(at + "/")):
            return (host.rstrip("/") + wanted[len(at):]) or "/"
    return None


def after_maintenance(annotations, outcome):
    """The node annotations a maintenance pod's outcome writes: faults cleared, resets recorded."""
    values = {}
    if outcome.resets:
        values[RESETS_ANNOTATION] = json.dumps(records(annotations, RESETS_ANNOTATION) + outcome.resets)
    faults = faults_of(annotations)
    kept = [fault for fault in faults if not (fault["gpu"] in outcome.cleared and clears_with(fault) == "reset")]
    if kept != faults:
        values[FAULTS_ANNOTATION] = json.dumps(kept)
    return values
