"""GPU sharing (time-slicing, MPS) as NVIDIA's device plugin, GPU feature discovery and MPS control daemon play it,
for the simulator (NVIDIA/k8s-device-plugin: api/config/v1, internal/plugin/mps.go, internal/lm, cmd/mps-control-daemon).

- A reader of the sharing configuration (the plugin, GFD, the MPS control daemon) is a pod with a container whose env
  has CONFIG_FILE and the ConfigMap of configurations mounted as its volume `available-configs`: its config manager
  copies the ConfigMap's key that the node label nvidia.com/device-plugin.config names, else the config manager's
  DEFAULT_CONFIG. A pod without them runs unshared.
- Time-slicing: the plugin advertises replicas x the node's GPUs (as nvidia.com/gpu.shared with renameByDefault).
- MPS: the plugin advertises replicas x the node's GPUs only while an MPS control daemon is ready for nvidia.com/gpu on
  the node: a Ready daemon pod whose own configuration is MPS and that mounts at /mps the host directory the plugin
  mounts there (the daemon's .ready file and control pipe live there). Otherwise the plugin waits for the daemon
  (internal/plugin/mps.go: waitForDaemon) and advertises nothing; a daemon that goes takes the replicas with it.
- GFD labels the node from its configuration: nvidia.com/gpu.replicas, nvidia.com/gpu.sharing-strategy, the product
  with -SHARED, nvidia.com/mps.capable=true under MPS (internal/lm/resource.go, nvml.go).

Not played: a label naming a configuration the ConfigMap lacks (the real config manager fails), MPS on MIG devices
(the real plugin refuses it), the daemon's per-client memory and thread limits.
"""

import yaml

CONFIG_LABEL = "nvidia.com/device-plugin.config"
MPS_CONTROL_DAEMON = "nvidia-mps-control-daemon"
GPU = "nvidia.com/gpu"
NONE = ("none", 1, False)


def _env(container, name):
    for entry in container.get("env") or []:
        if entry.get("name") == name:
            return entry.get("value")
    return None


def config_source(pod):
    """(ConfigMap name, default configuration) of a pod reading the sharing configuration, or None."""
    spec = pod["spec"]
    if not any(_env(container, "CONFIG_FILE") for container in spec["containers"]):
        return None
    maps = [volume["configMap"]["name"] for volume in spec.get("volumes") or []
            if volume.get("name") == "available-configs" and volume.get("configMap")]
    defaults = [_env(container, "DEFAULT_CONFIG") for container in
                (spec.get("initContainers") or []) + spec["containers"] if container["name"].startswith("config-manager")]
    return (maps[0], next((value for value in defaults if value), "")) if maps else None


def parse(text):
    """(strategy, replicas of nvidia.com/gpu, renamed) of one configuration's YAML."""
    sharing = (yaml.safe_load(text or "") or {}).get("sharing") or {}
    for strategy, key in (("time-slicing", "timeSlicing"), ("mps", "mps")):
        section = sharing.get(key) or {}
        for resource in section.get("resources") or []:
            if resource.get("name") == GPU and int(resource.get("replicas") or 1) > 1:
                renamed = bool(resource.get("rename")) or bool(section.get("renameByDefault"))
                return strategy, int(resource["replicas"]), renamed
    return NONE


def pod_sharing(pod, node, read_config_map):
    """(strategy, replicas, renamed) the pod runs with on the node; read_config_map(namespace, name) -> data or None."""
    source = config_source(pod)
    if not source:
        return NONE
    data = read_config_map(pod["metadata"]["namespace"], source[0]) or {}
    key = (node["metadata"].get("labels") or {}).get(CONFIG_LABEL) or source[1]
    return parse(data.get(key)) if key else NONE


def mps_root(pod):
    """The host directory a pod mounts at /mps, or None."""
    paths = {volume["name"]: (volume.get("hostPath") or {}).get("path") for volume in pod["spec"].get("volumes") or []}
    for container in pod["spec"]["containers"]:
        for mount in container.get("volumeMounts") or []:
            if mount.get("mountPath") == "/mps" and paths.get(mount.get("name")):
                return paths[mount["name"]]
    return None


def mps_daemon_problem(plugin, daemons, node, read_config_map):
    """Why the plugin, configured for MPS, finds no ready control daemon on its node (None when it does).
    daemons: the node's Ready MPS control daemon pods."""
    if not daemons:
        return "no MPS control daemon is ready on node %s" % node["metadata"]["name"]
    root = mps_root(plugin)
    for daemon in daemons:
        if pod_sharing(daemon, node, read_config_map)[0] != "mps":
            return "the MPS control daemon %s runs without an MPS configuration" % daemon["metadata"]["name"]
        if root is None or mps_root(daemon) != root:
            return "the MPS control daemon %s uses MPS root %s, the plugin %s" % (
                daemon["metadata"]["name"], mps_root(daemon), root)
    return None


def advertised(resources, sharing, daemon_problem):
    """The plugin's resources once shared: {resource: count}. daemon_problem: why MPS is not ready (MPS only)."""
    strategy, replicas, renamed = sharing
    if strategy == "none" or GPU not in resources:
        return resources
    shared = dict(resources)
    count = int(shared.pop(GPU)) * replicas
    if strategy == "mps" and daemon_problem:
        count = 0
    shared[GPU + ".shared" if renamed else GPU] = count
    if renamed:
        shared[GPU] = 0
    return shared


def gfd_labels(labels, sharing):
    """GFD's labels of a node (simulator.gfd_node_labels) under its sharing configuration."""
    strategy, replicas, renamed = sharing
    if not labels:
        return labels
    labels = dict(labels, **{"nvidia.com/gpu.sharing-strategy": strategy, "nvidia.com/gpu.replicas": str(replicas),
                             "nvidia.com/mps.capable": "true" if strategy == "mps" else "false"})
    if strategy != "none" and not renamed:
        labels["nvidia.com/gpu.product"] += "-SHARED"
    return labels
