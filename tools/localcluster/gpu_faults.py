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
- A GPU reset: a pod running `nvidia-smi -r` (--gpu-reset; -i by UUID, index or bus ID, else every GPU) through
  `chroot` into the node's driver root (/run/nvidia/driver for a driver container, /host for a pre-installed driver),
  privileged, with the driver Ready, in a command or a `sh -c` script of several lines (-pm and -q lines succeed, the
  script stops at the first that fails). It fails "in use by another process" while anything holds the node's GPUs
  (the simulator says what: pods requesting GPUs or holding claims, running GPU operands); a GPU lost (XID 79) or a
  permanent fault fails too and nothing clears; otherwise the GPU's faults clear. Each attempt on a GPU is recorded
  in RESETS_ANNOTATION ({uuid, time, result}).
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

from . import api, dra, fleet

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
HOST_ROOT = "/host"
# nvidia-smi's return values (nvidia-smi(1)).
EXIT_NO_PERMISSION, EXIT_NOT_FOUND, EXIT_NO_DRIVER, EXIT_GPU_LOST, EXIT_OTHER = 4, 6, 9, 15, 255
IN_USE = ("GPU %s is currently in use by another process.\n\n1 device is currently being used by one or more other "
          "processes (e.g., Fabric Manager, CUDA application, graphics application such as an X server, or a "
          "monitoring application such as another instance of nvidia-smi). Please first kill all processes using "
          "this device and all compute applications running in the system.")
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
             "NVIDIA driver is installed and running.")
SHELLS = ("sh", "bash", "ash", "dash")
REBOOT_COMMANDS = (("systemctl", "reboot"), ("reboot",), ("shutdown", "-r"))


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
def _commands(container):
    """The simple commands a container runs: its argv, or the lines of a `sh -c` script (split at ;, && and ||)."""
    argv = (container.get("command") or []) + (container.get("args") or [])
    if len(argv) >= 3 and argv[0].rsplit("/", 1)[-1] in SHELLS and argv[1].startswith("-") and "c" in argv[1]:
        commands = []
        for part in re.split(r"\n|;|&&|\|\|", argv[2]):
            try:
                tokens = shlex.split(part, comments=True)
            except ValueError:
                continue
            if tokens:
                commands.append(tokens)
        return commands
    return [argv] if argv else []


def _step(tokens):
    """("nvidia-smi", chroot directory or None, arguments), ("reboot", chroot directory or None), or None."""
    tokens = [token for token in tokens if token != "exec"]
    root = None
    if tokens and tokens[0].rsplit("/", 1)[-1] == "chroot" and len(tokens) > 2:
        root, tokens = tokens[1].rstrip("/") or "/", tokens[2:]
    if not tokens:
        return None
    name = tokens[0].rsplit("/", 1)[-1]
    if name == "nvidia-smi":
        return ("nvidia-smi", root, tokens[1:])
    if any((name,) + tuple(tokens[1:len(command)]) == command for command in REBOOT_COMMANDS):
        return ("reboot", root)
    return None


def maintenance_steps(pod):
    """The nvidia-smi and reboot steps of a pod's containers, in order; none for a pod that neither resets a GPU nor
    reboots (nvidia-smi queries alone, as the validations run, are no maintenance)."""
    steps = []
    for container in pod["spec"].get("containers") or []:
        steps.extend(step for step in map(_step, _commands(container)) if step)
    if any(step[0] == "reboot" or _is_reset(step[2]) for step in steps):
        return steps
    return []


def _is_reset(arguments):
    return any(argument in ("-r", "--gpu-reset") for argument in arguments)


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


class Outcome:
    """What a maintenance pod did: its exit code and output, the GPUs whose faults cleared, the reset records, and
    whether it rebooted the node."""

    def __init__(self):
        self.exit_code, self.output, self.cleared, self.resets, self.reboot = 0, [], set(), [], False

    def fail(self, code, message):
        self.exit_code = code
        self.output.append(message)
        return self


def run_maintenance(pod, node_name, count, faults, holders, driver_root, driver_ready, now):
    """Runs the pod's steps (maintenance_steps) on the node: count GPUs with these faults; holders: what holds its
    GPUs ("namespace/name" of pods); driver_root: where the node's driver is as the pod must chroot into it
    (DRIVER_CONTAINER_ROOT, or HOST_ROOT for a pre-installed driver); driver_ready: whether the driver answers."""
    outcome = Outcome()
    privileged = all(((c.get("securityContext") or {}).get("privileged")) for c in pod["spec"]["containers"])
    host_mounted = _mounts_host_root(pod)
    for step in maintenance_steps(pod):
        if step[0] == "reboot":
            if step[1] != HOST_ROOT or not host_mounted or not privileged:
                return outcome.fail(1, "System has not been booted with systemd as init system (PID 1). Can't operate."
                                    if step[1] is None else "chroot: cannot change root directory to '%s': "
                                    "No such file or directory" % step[1])
            outcome.output.append("rebooting node %s" % node_name)
            outcome.reboot = True
            return outcome
        _kind, root, arguments = step
        if root != driver_root:
            return outcome.fail(127, "chroot: failed to run command 'nvidia-smi': No such file or directory"
                                if root else "nvidia-smi: command not found (the driver is under %s)" % driver_root)
        if not driver_ready:
            return outcome.fail(EXIT_NO_DRIVER, NO_DRIVER)
        if not _is_reset(arguments):
            continue  # a query or persistence mode: nothing the simulation changes
        targets = _targets(arguments)
        indices = list(range(count)) if targets is None else [_gpu_index(node_name, count, t) for t in targets]
        if None in indices or not indices:
            return outcome.fail(EXIT_NOT_FOUND, "No devices were found")
        if not privileged:
            return outcome.fail(EXIT_NO_PERMISSION, "Unable to reset GPU %s: Insufficient Permissions"
                                % pci_bus_id(indices[0]))
        if _reset(outcome, node_name, indices, faults, holders, now):
            return outcome
    return outcome


def _reset(outcome, node_name, indices, faults, holders, now):
    """One `nvidia-smi -r`: True when it failed (the script stops)."""
    failed = False
    for index in indices:
        record = {"uuid": gpu_uuid(node_name, index), "time": stamp(now)}
        kinds = {clears_with(fault) for fault in faults if fault["gpu"] == index}
        if "reboot" in kinds:
            outcome.resets.append(dict(record, result="gpu_lost"))
            outcome.output.append("Unable to determine the device handle for GPU %s: GPU is lost.  Reboot the "
                                  "system to recover this GPU" % pci_bus_id(index))
            outcome.exit_code, failed = EXIT_GPU_LOST, True
        elif holders:
            outcome.resets.append(dict(record, result="in_use"))
            outcome.output.append(IN_USE % pci_bus_id(index))
            outcome.exit_code, failed = EXIT_OTHER, True
        elif "never" in kinds:
            outcome.resets.append(dict(record, result="unknown_error"))
            outcome.output.append("Unable to reset GPU %s: Unknown Error" % pci_bus_id(index))
            outcome.exit_code, failed = EXIT_OTHER, True
        else:
            outcome.resets.append(dict(record, result="success"))
            outcome.cleared.add(index)
            outcome.output.append("GPU %s was successfully reset." % pci_bus_id(index))
    if holders and failed:
        # Not nvidia-smi's: what the simulation found holding the GPUs.
        outcome.output.append("(simulator: held by %s)" % ", ".join(sorted(holders)))
    if not failed:
        outcome.output.append("All done.")
    return failed


def _mounts_host_root(pod):
    host_root = {volume["name"] for volume in pod["spec"].get("volumes") or []
                 if (volume.get("hostPath") or {}).get("path") == "/"}
    return any(mount.get("name") in host_root and mount.get("mountPath", "").rstrip("/") == HOST_ROOT
               for container in pod["spec"]["containers"] for mount in container.get("volumeMounts") or [])


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
