"""Where a DCGM exporter finds its hostengine, for the simulator (NVIDIA/dcgm-exporter, gpu-operator assets/state-dcgm).

Without DCGM_REMOTE_HOSTENGINE_INFO the exporter starts its embedded hostengine: nothing to reach. With it
(<host>:<port>), the exporter connects at start and exits when it cannot ("Failed to connect to remote hostengine"),
so its pod crash-loops and serves no metrics until the hostengine answers:

- `localhost` or `127.0.0.1`: the node's own network, so only for an exporter with hostNetwork, reaching a Ready
  hostengine pod (app.kubernetes.io/component=nvidia-dcgm) of the node that listens there (hostNetwork, or a hostPort);
- any other host: a Service of the exporter's namespace (`<name>`, `<name>.<namespace>[.svc[.cluster.local]]`) with
  that port, internalTrafficPolicy Local (the GPU Operator's: a node's exporter must read its own node's GPUs), whose
  selector matches a Ready hostengine pod of the node exposing the target port.
"""

HOSTENGINE = "nvidia-dcgm"
REMOTE_ENV = "DCGM_REMOTE_HOSTENGINE_INFO"


def remote(container):
    for entry in container.get("env") or []:
        if entry.get("name") == REMOTE_ENV:
            return entry.get("value")
    return None


def _ports(pod):
    """{name or number as text: containerPort, and hostPort: hostPort} of the pod's containers."""
    ports = {}
    for container in pod["spec"]["containers"]:
        for port in container.get("ports") or []:
            ports[str(port["containerPort"])] = port["containerPort"]
            if port.get("name"):
                ports[port["name"]] = port["containerPort"]
    return ports


def _host_ports(pod):
    if pod["spec"].get("hostNetwork"):
        return set(_ports(pod).values())
    return {port["hostPort"] for container in pod["spec"]["containers"] for port in container.get("ports") or []
            if port.get("hostPort")}


def problem(exporter, node_name, engines, read_service):
    """Why the exporter cannot reach a hostengine (None when it can, or runs its own).
    engines: the Ready hostengine pods of its node; read_service(namespace, name) -> Service dict or None."""
    target = remote(exporter["spec"]["containers"][0])
    if not target:
        return None
    host, port = target.rpartition(":")[::2]
    if not port.isdigit():
        return "DCGM_REMOTE_HOSTENGINE_INFO=%s is not <host>:<port>" % target
    port = int(port)
    refused = "failed to connect to remote hostengine at %s from node %s: " % (target, node_name)
    if host in ("localhost", "127.0.0.1"):
        if not exporter["spec"].get("hostNetwork"):
            return refused + "localhost is the exporter pod's own network (no hostNetwork)"
        if not any(port in _host_ports(engine) for engine in engines):
            return refused + "no hostengine listens on the node's port %d" % port
        return None
    namespace = exporter["metadata"]["namespace"]
    name, rest = host.partition(".")[::2]
    if rest and rest.split(".")[0] != namespace:
        return refused + "the simulator resolves Services of the exporter's namespace %s only" % namespace
    service = read_service(namespace, name)
    if not service:
        return refused + "no Service %s/%s" % (namespace, name)
    spec = service.get("spec") or {}
    entries = [entry for entry in spec.get("ports") or [] if entry.get("port") == port]
    if not entries:
        return refused + "Service %s/%s has no port %d" % (namespace, name, port)
    if spec.get("internalTrafficPolicy") != "Local":
        return refused + "Service %s/%s routes to any node's hostengine (internalTrafficPolicy is not Local)" % (
            namespace, name)
    selector = spec.get("selector") or {}
    wanted = str(entries[0].get("targetPort") or port)
    for engine in engines:
        labels = engine["metadata"].get("labels") or {}
        if selector and all(labels.get(k) == v for k, v in selector.items()) and wanted in _ports(engine):
            return None
    return refused + "no Ready hostengine pod of node %s behind Service %s/%s port %d" % (
        node_name, namespace, name, port)
