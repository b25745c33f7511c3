"""The node files in /run/nvidia/validations and what NVIDIA's images do with them, for the simulator.

The contract, as the GPU Operator's images keep it (NVIDIA/gpu-operator cmd/nvidia-validator, assets/state-*):
- An init container running the validator image (`nvidia-validator`, env COMPONENT) writes <component>-ready once
  its check passes: driver (the driver answers, from the host's root or a driver container's /run/nvidia/driver;
  the file says which: IS_HOST_DRIVER, NVIDIA_DRIVER_ROOT, DRIVER_ROOT_CTR_PATH, NVIDIA_DEV_ROOT, DEV_ROOT_CTR_PATH),
  toolkit (nvidia-smi through the toolkit), cuda (a CUDA workload), plugin (the node advertises GPUs).
- A container whose script has `until [ -f /run/nvidia/validations/<file> ]` waits until the file exists.
- A container whose script sources /run/nvidia/validations/driver-ready takes its driver root from it; any other
  container has its env's NVIDIA_DRIVER_ROOT, else the images' default, /.
- The files live in the node's /run (gone when it boots) and a container sees them only through a hostPath
  mount of /run/nvidia/validations (or of /run/nvidia at /run/nvidia).
- The validator pod's preStop hook removes every *-ready file.

Not played: the pods the validator's cuda and plugin checks create (their outcome is decided here), the
.driver-ctr-ready file of the driver container (its pod's readiness stands for it), /dev/char symlinks.
"""

import re

VALIDATIONS_DIR = "/run/nvidia/validations"
HOST_DRIVER_ROOT = "/"
CONTAINER_DRIVER_ROOT = "/run/nvidia/driver"
DRIVER_READY = "driver-ready"
FILE_WAIT = re.compile(r"until \[ -f %s/([\w.-]+) \]" % re.escape(VALIDATIONS_DIR))
SOURCED = re.compile(r"(?:^|[\s;])(?:\.|source) %s/([\w.-]+)" % re.escape(VALIDATIONS_DIR))


def script(container):
    return " ".join((container.get("command") or []) + (container.get("args") or []))


def env_value(container, name):
    for entry in container.get("env") or []:
        if entry.get("name") == name:
            return entry.get("value")
    return None


def sees_validations(pod, container):
    """Whether the container sees the node's /run/nvidia/validations at that path."""
    host_paths = {volume["name"]: (volume.get("hostPath") or {}).get("path") or ""
                  for volume in pod["spec"].get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        path = mount.get("mountPath", "").rstrip("/")
        if path and host_paths.get(mount.get("name"), "").rstrip("/") == path \
                and (VALIDATIONS_DIR + "/").startswith(path + "/"):
            return True
    return False


def validator_component(container):
    """The component an nvidia-validator container checks, or None for any other container."""
    return env_value(container, "COMPONENT") if "nvidia-validator" in script(container) else None


def driver_ready_content(host_driver):
    """driver-ready as the validator writes it (cmd/nvidia-validator: getDriverInfo, createStatusFile)."""
    if host_driver:
        values = (("IS_HOST_DRIVER", "true"), ("NVIDIA_DRIVER_ROOT", HOST_DRIVER_ROOT),
                  ("DRIVER_ROOT_CTR_PATH", "/host"), ("NVIDIA_DEV_ROOT", HOST_DRIVER_ROOT),
                  ("DEV_ROOT_CTR_PATH", "/host"))
    else:
        values = (("IS_HOST_DRIVER", "false"), ("NVIDIA_DRIVER_ROOT", CONTAINER_DRIVER_ROOT),
                  ("DRIVER_ROOT_CTR_PATH", "/driver-root"), ("NVIDIA_DEV_ROOT", HOST_DRIVER_ROOT),
                  ("DEV_ROOT_CTR_PATH", "/host"))
    return "".join("%s=%s\n" % pair for pair in values)


def parse_env_file(content):
    return dict(line.split("=", 1) for line in content.splitlines() if "=" in line)


def missing_files(pod, container, files):
    """The files the container waits for that it cannot see on the node (all of them without the mount)."""
    waited = FILE_WAIT.findall(script(container))
    if waited and not sees_validations(pod, container):
        return waited
    return [name for name in waited if name not in files]


def driver_root(pod, container, files):
    """The NVIDIA_DRIVER_ROOT the container runs with."""
    if DRIVER_READY in SOURCED.findall(script(container)) and sees_validations(pod, container) \
            and DRIVER_READY in files:
        return parse_env_file(files[DRIVER_READY]).get("NVIDIA_DRIVER_ROOT", HOST_DRIVER_ROOT)
    return env_value(container, "NVIDIA_DRIVER_ROOT") or HOST_DRIVER_ROOT


def node_driver_root(host_driver):
    return HOST_DRIVER_ROOT if host_driver else CONTAINER_DRIVER_ROOT


def run_init_containers(pod, node_name, files, checks):
    """Runs the pod's init containers in order against the node's files.

    checks: {component: (why the validator's check of it fails, or None; the content of the file it writes)}.
    Returns (writes, problem): the files written by the containers that passed (even when a
    later one is stuck) and why the pod is still initialising, or None when every init container completed."""
    writes = {}
    for container in pod["spec"].get("initContainers") or []:
        missing = missing_files(pod, container, dict(files, **writes))
        if missing:
            return writes, "init container %s waits on node %s for %s" % (
                container["name"], node_name, ", ".join("%s/%s" % (VALIDATIONS_DIR, name) for name in missing))
        component = validator_component(container)
        if component is None:
            continue
        if component not in checks:
            return writes, "init container %s: the simulator does not play validator component %r" % (
                container["name"], component)
        problem, content = checks[component]
        if problem:
            return writes, "init container %s on node %s: %s" % (container["name"], node_name, problem)
        if sees_validations(pod, container):
            writes["%s-ready" % component] = content
    return writes, None
