"""The simulator: plays, against the real API server, only what cannot exist on this machine.

- kubelet pod status on kwok nodes: a pod whose image the simulated registry lacks stays in
  ImagePullBackOff; operand pods become Ready only when the operand they depend on is ready on
  their node (driver -> container toolkit -> device plugin / DCGM exporter), as the GPU Operator's
  init containers enforce; a driver pod built for another RHCOS version or kernel crash-loops.
- The files in /run/nvidia/validations (validations.py): per node, written by the init containers running NVIDIA's
  validator (the toolkit's driver-validation, the validator DaemonSet's driver, toolkit, cuda and plugin checks),
  emptied by a boot and by the validator pod's preStop, shown in the node annotation sim.accelerators.gpu/validations.
  A pod whose init container waits for a file stays in Init while the file is missing on its node (or is not mounted);
  a container waiting for one stays not Ready. The toolkit (and with CDI the device plugin) crash-loops unless its
  driver root (from driver-ready when its entrypoint sources it, else its env, else /) is where the node's driver is:
  / for a pre-installed driver (fleet `host_driver`), /run/nvidia/driver for a driver container.
- GPU hardware: a node advertises `nvidia.com/gpu` only while its driver (a Ready driver pod, or the host's) and
  device-plugin pods are Ready.
- GPU feature discovery: a node carries GFD's labels (nvidia.com/gpu.product, gpu.memory, gpu.count, gpu.family,
  gpu.compute.*, cuda.driver.*, cuda.runtime.*, gpu.machine, mig.capable, mig.strategy under the single and mixed
  strategies, ...) only while a GFD pod is Ready on it, with values from the node's simulated GPUs (fleet.GPU_MODELS),
  its machine and the version in its driver pod's image tag (a precompiled image names only the branch: <branch>.0.0);
  they go when no GFD pod is Ready there. Real GFD publishes through NFD (a feature file or a NodeFeature object), which
  keeps the labels for a while after the pod is gone; the simulator drops them at once, except while the MIG
  manager has stopped GFD for a change (its deploy label paused-for-mig-change). A GFD pod waits for driver and
  toolkit like the other operands; the fault `gfd_init_fails` makes it crash-loop (NVML cannot be initialised).
- MIG manager (mig.py): a MIG manager pod, Ready once driver and toolkit are, applies the layout the node label
  nvidia.com/mig.config names (from the ConfigMap it mounts) and reports nvidia.com/mig.config.state: success only on
  MIG-capable GPUs once no pod holds the node's GPUs (pending until then), failed for a GPU without MIG, an unknown
  layout or the fault `mig_reconfig_fails`. The node then advertises the layout's devices under the device plugin's
  MIG_STRATEGY (mixed: nvidia.com/mig-<profile>; single: nvidia.com/gpu per MIG device).
- The NVIDIA DRA driver's kubelet plugin (dra.py): a kubelet plugin pod is Ready once driver and toolkit are; while it
  is, its node has a ResourceSlice of gpu.nvidia.com with the node's GPUs (or MIG devices), written with the plugin pod's
  own service account token. The real kube-scheduler allocates claims from it. A pod whose claims were allocated
  GPUs of gpu.nvidia.com starts only while the plugin is Ready (it prepares them), and once finished or deleted goes
  only when the plugin is Ready again to unprepare them (Terminating until then).
- Package repositories (packages.py): on a node of an offline group the Ubuntu driver build crash-loops as apt does
  without a reachable repository ("Unable to locate package linux-headers-<kernel>") unless its pod mounts a
  repository file naming the fleet's mirror (and, for an https mirror with a CA, that CA); a loaded driver's module
  parameters, from its /drivers/<module>.conf, show in the node annotation sim.accelerators.gpu/module-parameters.
- Open or proprietary kernel modules: a driver pod whose driver container builds the proprietary modules
  (KERNEL_MODULE_TYPE=proprietary, or auto, or unset, on a branch below 560) crash-loops on a node whose GPUs run only
  on the open ones (fleet.GPU_MODELS open_modules_only: Grace Hopper, Blackwell) with NVIDIA's message, "NVRM: ...
  requires use of the NVIDIA open kernel modules".
- Kernel modules: once a driver loaded on a node, they stay loaded until the node boots again (its bootID changes).
  A driver pod that is not yet Ready cannot then load its driver while pods still hold the node's GPUs (running pods
  requesting nvidia.com/gpu* or nvidia.com/mig-*, or holding claims allocated GPUs of gpu.nvidia.com): it crash-loops,
  "module nvidia is in use", until they are gone.
  After a boot nothing is loaded, so the first driver loads whatever pods are bound there. The k8s-driver-manager init
  container's own eviction of those pods is not played: the rollout must evict them first.
- Driver reuse (DRIVER_CONFIG_DIGEST, as k8s-driver-manager and NVIDIA's driver containers compare it with
  /run/nvidia/nvidia-driver.state): a driver pod whose digest is that of the driver loaded on its node since the node
  booted is Ready at once, without driver_build_seconds, and whatever pods hold the GPUs (nothing is unloaded); a
  pod of another digest, or none, builds and loads as above. Each driver pod that came up is recorded, with
  `install` build or reuse and the seconds from its creation to Ready, in the node annotation
  sim.accelerators.gpu/driver-installs (a JSON list, the last INSTALL_RECORDS).
- GPUDirect RDMA (gpudirect.py): a driver pod's nvidia-peermem-ctr crash-loops, naming what is missing, on a node
  without its network driver (the NVIDIA Network Operator's driver container, read from the node label
  network.nvidia.com/operator.mofed.wait=false, or MOFED on the host with USE_HOST_MOFED=true): the driver loads (the
  node keeps its GPUs), the pod is not Ready, and the validator's driver check finds no nvidia_peermem.
- NFD: nodes of a `nfd: worker` fleet get their labels once an nfd-worker pod is Ready on them.
- Validation workloads (Job pods labelled `app.kubernetes.io/component=gpu-validation`, or requesting
  `nvidia.com/gpu`) succeed only where driver and toolkit are Ready and no fault is injected.
- OLM: a Subscription yields a ClusterServiceVersion in phase Succeeded and the operator's Deployment.
- Machine-config: MachineConfigPools roll their nodes into new RHCOS builds (mco.py).
- Kernel reboots: a node annotated sim.accelerators.gpu/reboot-into-kernel reboots into that kernel (kernel.py).
- Failing GPUs (gpu_faults.py): XIDs injected on a node's GPUs (node annotation sim.accelerators.gpu/gpu-faults); the
  device plugin's Unhealthy GPUs leave allocatable nvidia.com/gpu; the DCGM exporter's XID and row-remap fields,
  served as a Prometheus query API on 127.0.0.1 (--prometheus-port); a pod running `nvidia-smi -r` from the driver's
  root resets GPUs nothing holds (GPU_OPENERS, pods requesting GPUs), one running `systemctl reboot` on the host
  reboots the node in place (kernel.py); resets and boots recorded on the node.

Pods are recognised by the label `app.kubernetes.io/component` (values in COMPONENTS), which the
collection's manifests set as the GPU Operator's do. All hardware truth comes from each node's
`sim.accelerators.gpu/hardware` annotation, written from the fleet file.
"""

import argparse
import datetime
import fnmatch
import hashlib
import heapq
import json
import logging
import queue
import re
import threading
import time

import kubernetes
import urllib3
from kubernetes.client.rest import ApiException

from .fleet import HARDWARE_ANNOTATION, MCO_API, REGISTRY_CONFIGMAP
from . import dra, gpu_faults, gpudirect, hostengine, mig, packages, sharing
from .kernel import REBOOT_REQUEST_ANNOTATION, SHUTDOWN_SECONDS, KernelReboots
from .mco import MachineConfigOperator
from .stages import REBOOTING_ANNOTATION
from . import validations

LOG = logging.getLogger("simulator")
COMPONENT = "app.kubernetes.io/component"
DRIVER, TOOLKIT, DEVICE_PLUGIN, DCGM_EXPORTER, VALIDATION, NFD_WORKER, GFD, VALIDATOR = (
    "nvidia-driver", "nvidia-container-toolkit", "nvidia-device-plugin", "nvidia-dcgm-exporter",
    "gpu-validation", "nfd-worker", "gpu-feature-discovery", "nvidia-operator-validator")
# The operands the MIG manager stops, through their deploy labels, while it changes a node's GPUs.
MIG_CLIENTS = (DEVICE_PLUGIN, GFD, DCGM_EXPORTER)
# The operands that open the node's GPUs while they run, which a GPU reset therefore finds in use (nvidia-smi(1); the
# GPU Operator's deploy labels nvidia.com/gpu.deploy.<operand> stop them).
GPU_OPENERS = (DEVICE_PLUGIN, DCGM_EXPORTER, hostengine.HOSTENGINE, GFD, mig.MIG_MANAGER)
# What each operand waits for on its node before it can become Ready.
DEPENDS_ON = {TOOLKIT: (DRIVER,), DEVICE_PLUGIN: (DRIVER, TOOLKIT), DCGM_EXPORTER: (DRIVER, TOOLKIT),
              GFD: (DRIVER, TOOLKIT), mig.MIG_MANAGER: (DRIVER, TOOLKIT), dra.KUBELET_PLUGIN: (DRIVER, TOOLKIT),
              sharing.MPS_CONTROL_DAEMON: (DRIVER, TOOLKIT), hostengine.HOSTENGINE: (DRIVER, TOOLKIT)}
# The CUDA version each driver branch brings (nvidia.com/cuda.runtime.*).
CUDA_OF_BRANCH = {"535": (12, 2), "550": (12, 4), "560": (12, 6), "565": (12, 7), "570": (12, 8), "575": (12, 9),
                  "580": (13, 0)}
GPU = "nvidia.com/gpu"
VALIDATION_CHECK_LABEL = "accelerators.gpu/validation"
VALIDATIONS_ANNOTATION = "sim.accelerators.gpu/validations"
INSTALLS_ANNOTATION = "sim.accelerators.gpu/driver-installs"
INSTALL_RECORDS = 20
DIGEST_ENV = "DRIVER_CONFIG_DIGEST"
RHCOS_IN_OS_IMAGE = re.compile(r"\d+\.\d+\.\d+-\d+")
# Operators the simulated catalog offers: package -> (CSV name, operator Deployment name).
CATALOG = {
    "nfd": ("nfd.4.18.0-202510011135", "nfd-controller-manager"),
    "gpu-operator-certified": ("gpu-operator-certified.v25.3.4", "gpu-operator"),
}
SUBSCRIPTIONS = ("operators.coreos.com", "v1alpha1", "subscriptions")
FEATURE_DISCOVERIES = ("nfd.openshift.io", "v1", "nodefeaturediscoveries")
NFD_OPERAND_IMAGE = "registry.redhat.io/openshift4/ose-node-feature-discovery-rhel9:v4.18"
OPERATOR_IMAGE = "registry.redhat.io/openshift4/ose-cluster-nfd-operator@sha256:" + "0" * 64


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def labels_of(pod):
    return pod["metadata"].get("labels") or {}


def component(pod):
    labels = labels_of(pod)
    if labels.get(COMPONENT):
        return labels[COMPONENT]
    if labels.get("openshift.driver-toolkit") == "true":
        return DRIVER
    return None


def is_job_pod(pod):
    return any(ref.get("kind") == "Job" for ref in pod["metadata"].get("ownerReferences") or [])


def is_validation_pod(pod):
    if component(pod) == VALIDATION:
        return True
    return is_job_pod(pod) and any(
        GPU in ((c.get("resources") or {}).get("limits") or {}) for c in pod["spec"].get("containers") or [])


def pod_ready(pod):
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def hardware(node):
    return json.loads((node["metadata"].get("annotations") or {}).get(HARDWARE_ANNOTATION) or "{}")


def node_rhcos(node):
    match = RHCOS_IN_OS_IMAGE.search(node["status"].get("nodeInfo", {}).get("osImage", ""))
    return match.group(0) if match else None


def container_env(container, name):
    for env in container.get("env") or []:
        if env.get("name") == name:
            return env.get("value")
    return None


class Registry:
    def __init__(self):
        self.patterns = []

    def has(self, image):
        return any(fnmatch.fnmatchcase(image, pattern) for pattern in self.patterns)


def holds_gpus(pod):
    """A pod that keeps the nvidia modules in use: running (or about to), not leaving, and requesting GPUs."""
    if pod["metadata"].get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    return any(name.startswith((GPU, "nvidia.com/mig-")) and str(value) not in ("0", "")
               for c in pod["spec"].get("containers") or []
               for kind in ("requests", "limits") for name, value in ((c.get("resources") or {}).get(kind) or {}).items())


def config_digest(pod):
    """The DRIVER_CONFIG_DIGEST of a driver pod (its driver container's), or None."""
    return next((container_env(c, DIGEST_ENV) for c in pod["spec"]["containers"] if container_env(c, DIGEST_ENV)),
                None)


def outcome(pod, node, ready_components, registry, clock, holders=(), loaded=False, reuse=False, read_config_map=None):
    """What the node agent would report for this pod: (state, reason, message, retry_at). read_config_map(namespace,
    name): the data of a ConfigMap the pod mounts, None when it does not exist.

    state is one of: ready, waiting (Running but not Ready), pending (not started: Init or image pull),
    succeeded, failed. reuse: a driver pod that finds its driver loaded with its digest, which it neither unloads nor
    builds.
    """
    node_name = node["metadata"]["name"]
    hw = hardware(node)
    faults = hw.get("faults") or {}
    containers = (pod["spec"].get("initContainers") or []) + pod["spec"]["containers"]
    for container in containers:
        if not registry.has(container["image"]):
            return ("pending", "ImagePullBackOff",
                    'Back-off pulling image "%s": manifest unknown (not in the simulated registry)' % container["image"],
                    None)
    kind = component(pod)
    for needed in DEPENDS_ON.get(kind, ()):
        if needed not in ready_components:
            return ("pending", "PodInitializing",
                    "waiting for %s to be ready on node %s" % (needed, node_name), None)
    if kind == GFD and faults.get("gfd_init_fails"):
        return ("waiting", "CrashLoopBackOff", "gpu-feature-discovery on node %s: failed to initialize NVML: "
                "ERROR_UNKNOWN, GFD_FAIL_ON_INIT_ERROR is set (injected fault)" % node_name, None)
    if kind == DRIVER:
        problem = driver_problem(pod, node, hw, read_config_map or (lambda namespace, name: None))
        # Only loading needs the old modules gone: a driver that loaded keeps running under its GPU pods.
        if not problem and holders and not loaded and not reuse:
            problem = ("cannot unload the old driver on node %s: module nvidia is in use by %s" % (
                node_name, ", ".join(sorted("%s/%s" % (p["metadata"]["namespace"], p["metadata"]["name"])
                                            for p in holders))))
        if problem:
            return ("waiting", "CrashLoopBackOff", problem, None)
        started = pod["metadata"].get("creationTimestamp")
        build = 0 if reuse else hw.get("driver_build_seconds") or 0
        if build and started:
            done = _epoch(started) + build
            if clock < done:
                return ("waiting", "DriverBuilding", "building the driver on node %s" % node_name, done)
    if is_validation_pod(pod):
        # The driver check (nvidia-smi in the driver's root) needs the driver only; workloads need the toolkit too.
        checked = (DRIVER,) if labels_of(pod).get(VALIDATION_CHECK_LABEL) == "driver" else (DRIVER, TOOLKIT)
        missing = [c for c in checked if c not in ready_components]
        if missing:
            return ("failed", "Error", "validation failed on node %s: %s not ready" % (node_name, ", ".join(missing)),
                    None)
        if faults.get("validation_fails"):
            return ("failed", "Error", "validation failed on node %s: %s (injected fault)" % (
                node_name, faults["validation_fails"]), None)
        return ("succeeded", "Completed", "validation passed on node %s" % node_name, None)
    if is_job_pod(pod):
        return ("succeeded", "Completed", "", None)
    return ("ready", "", "", None)


def kernel_module_type(driver_container):
    """The kernel modules a driver container builds, as its script resolves KERNEL_MODULE_TYPE (auto when unset):
    open or proprietary as set; auto by branch, as nvidia-driver falls back without nvidia-installer's recommendation:
    proprietary below 560, open from 560."""
    setting = container_env(driver_container, "KERNEL_MODULE_TYPE") or "auto"
    if setting != "auto":
        return setting
    return "open" if int(driver_version(driver_container["image"]).split(".")[0]) >= 560 else "proprietary"


def driver_problem(pod, node, hw, read_config_map):
    """Why this driver pod cannot load a driver on this node, or None."""
    node_name = node["metadata"]["name"]
    faults = hw.get("faults") or {}
    if faults.get("driver_build_fails"):
        return "driver build failed on node %s (injected fault)" % node_name
    headers = packages.headers_problem(pod, node_name, hw, read_config_map)
    if headers:
        return headers
    failing = faults.get("driver_fails_for")
    if failing and any(failing in c["image"] for c in pod["spec"]["containers"]):
        return "driver %s does not load on node %s: NVRM: RmInitAdapter failed (injected fault for %s)" % (
            pod["spec"]["containers"][0]["image"], node_name, failing)
    gpu = hw.get("gpu") or {}
    modules = kernel_module_type(pod["spec"]["containers"][0])
    if gpu.get("open_modules_only") and modules != "open":
        # What the proprietary nvidia.ko prints on a GPU only the open modules support; the driver container fails.
        return ("driver %s does not load on node %s (%s kernel modules): NVRM: The NVIDIA GPU 0000:18:00.0 (PCI ID: "
                "10de:%s) installed in this system requires use of the NVIDIA open kernel modules. NVRM: GPU "
                "0000:18:00.0: RmInitAdapter failed! (0x22:0x56:884)" % (
                    pod["spec"]["containers"][0]["image"], node_name, modules, gpu.get("pci_device", "0000")))
    actual = node_rhcos(node)
    kernel = node["status"].get("nodeInfo", {}).get("kernelVersion", "")
    for container in pod["spec"]["containers"]:
        wanted = container_env(container, "RHCOS_VERSION")
        if wanted and actual and wanted != actual:
            return ("the Driver Toolkit of RHCOS %s cannot build for node %s, which runs RHCOS %s (kernel %s)"
                    % (wanted, node_name, actual, kernel))
    if (pod["metadata"].get("labels") or {}).get("nvidia.com/precompiled") == "true":
        image = pod["spec"]["containers"][0]["image"]
        if "-%s-" % kernel not in image:
            return "precompiled driver %s does not match kernel %s of node %s" % (image, kernel, node_name)
    return None


def validator_checks(node, ready, driver_modules=None):
    """What each check of NVIDIA's validator finds on a node: {component: (why it fails or None, file content)}.
    driver_modules: why a GPUDirect module of the node's driver pod is not loaded (the driver check validates those
    its .driver-ctr-ready enables, as validateAdditionalDriverComponents does), or None."""
    hw = hardware(node)
    host_driver = bool(hw.get("host_driver"))
    fault = (hw.get("faults") or {}).get("validation_fails")
    driver = host_driver or DRIVER in ready
    # As the plugin check reads it: GPU resources in the node's capacity.
    advertised = any(name.startswith(GPU) and str(value) not in ("0", "")
                     for name, value in ((node.get("status") or {}).get("capacity") or {}).items())
    return {
        "driver": ("no driver answers nvidia-smi (no Ready driver pod, no host driver)" if not driver
                   else driver_modules, validations.driver_ready_content(host_driver)),
        "toolkit": (None if driver and TOOLKIT in ready else "nvidia-smi fails: the container toolkit is not ready", ""),
        "cuda": ("the CUDA workload failed: %s (injected fault)" % fault if fault
                 else None if driver and TOOLKIT in ready else "the CUDA workload cannot run: the toolkit is not ready",
                 ""),
        "plugin": ("the device plugin workload failed: %s (injected fault)" % fault if fault
                   else None if advertised else "the node advertises no GPUs", ""),
    }


def container_problem(pod, node_name, hw, files):
    """Why a started pod is not Ready by the contract of its images: (reason, message), or None."""
    for container in pod["spec"]["containers"]:
        missing = validations.missing_files(pod, container, files)
        if missing:
            return ("ContainersNotReady", "container %s waits on node %s for %s" % (
                container["name"], node_name, ", ".join("%s/%s" % (validations.VALIDATIONS_DIR, name)
                                                        for name in missing)))
    kind = component(pod)
    main = pod["spec"]["containers"][0]
    # The toolkit configures the runtime from the driver root; the device plugin reads it for CDI specs, and so does
    # the DRA kubelet plugin, which gives containers their GPUs through CDI only.
    if kind in (TOOLKIT, dra.KUBELET_PLUGIN) or (kind == DEVICE_PLUGIN and container_env(main, "CDI_ENABLED") == "true"):
        actual = validations.driver_root(pod, main, files)
        wanted = validations.node_driver_root(hw.get("host_driver"))
        if actual != wanted:
            return ("CrashLoopBackOff", "%s on node %s: no NVIDIA driver under driver root %s (the driver is at %s)"
                    % (main["name"], node_name, actual, wanted))
    return None


def driver_version(image):
    """The driver version of a driver image: its tag up to the OS part (570.172.08-rhcos4.18); a precompiled image
    names only the branch (570-5.15.0-100-generic-ubuntu22.04), which stands for <branch>.0.0."""
    tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
    version = tag.split("-", 1)[0]
    return version if "." in version else "%s.0.0" % (version or "0")


def gfd_node_labels(hw, version, mig_strategy, timestamp):
    """The labels GPU feature discovery writes for a node's simulated GPUs, machine and driver version."""
    gpu = hw.get("gpu") or {}
    if not gpu:
        return {}
    major, minor, rev = (version.split(".") + ["", ""])[:3]
    compute_major, compute_minor = str(gpu["compute"]).split(".")
    cuda = CUDA_OF_BRANCH.get(major, (12, 0))
    labels = {
        "nvidia.com/gpu.product": gpu["product"], "nvidia.com/gpu.memory": str(gpu["memory"]),
        "nvidia.com/gpu.count": str(gpu["count"]), "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.family": gpu["family"], "nvidia.com/gpu.compute.major": compute_major,
        "nvidia.com/gpu.compute.minor": compute_minor, "nvidia.com/gpu.machine": hw.get("machine") or "unknown",
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/cuda.driver.major": major, "nvidia.com/cuda.driver.minor": minor, "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.driver-version.major": major, "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev, "nvidia.com/cuda.driver-version.full": version,
        "nvidia.com/cuda.runtime.major": str(cuda[0]), "nvidia.com/cuda.runtime.minor": str(cuda[1]),
        "nvidia.com/cuda.runtime-version.major": str(cuda[0]), "nvidia.com/cuda.runtime-version.minor": str(cuda[1]),
        "nvidia.com/cuda.runtime-version.full": "%d.%d" % cuda,
        "nvidia.com/mig.capable": "true" if gpu["mig_capable"] else "false", "nvidia.com/mps.capable": "false",
        "nvidia.com/gfd.timestamp": timestamp,
    }
    # GFD writes the strategy only with its MIG labeler, which the none strategy skips.
    if mig_strategy in ("single", "mixed"):
        labels["nvidia.com/mig.strategy"] = mig_strategy
    return labels


# Every label gfd_node_labels and the sharing can write: what goes when no GFD pod is Ready on the node.
_ANY_GPU = {"gpu": {"product": "p", "memory": 1, "count": 1, "family": "f", "compute": "8.0", "mig_capable": True}}
GFD_LABEL_KEYS = tuple(sharing.gfd_labels(gfd_node_labels(_ANY_GPU, "1.2.3", "single", "0"), sharing.NONE))


def _epoch(timestamp):
    return datetime.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def pod_ip(pod, node):
    if pod["spec"].get("hostNetwork"):
        return node_ip(node)
    # Nothing ever connects to a simulated pod. EndpointSlices refuse loopback addresses, so pods get
    # addresses from 198.18.0.0/15, the range reserved for benchmarking and never routed.
    digest = hashlib.sha256(pod["metadata"]["uid"].encode()).digest()
    return "198.%d.%d.%d" % (18 + digest[0] % 2, digest[1], digest[2] % 254 + 1)


def node_ip(node):
    for address in node["status"].get("addresses") or []:
        if address.get("type") == "InternalIP":
            return address["address"]
    return "127.0.0.1"


def status_for(pod, node, state, reason, message, failing=None, exit_code=1):
    """A pod status as a kubelet would write it for that state; failing: {container: message} of the containers of a
    started pod that crash-loop while the others run (the pod is then not Ready); exit_code: its containers' in state
    failed."""
    stamp = now()
    started = (pod.get("status") or {}).get("startTime") or stamp
    failing = failing or {}
    ready = state == "ready" and not failing
    if state == "ready" and failing:
        reason, message = "ContainersNotReady", "containers with unready status: [%s]" % " ".join(sorted(failing))

    def container_status(container, init=False):
        base = {"name": container["name"], "image": container["image"], "imageID": "", "restartCount": 0}
        if not init and container["name"] in failing:
            base.update(ready=False, started=False, restartCount=1, state={"waiting": {
                "reason": "CrashLoopBackOff", "message": failing[container["name"]]}})
        elif state in ("succeeded", "failed") or (init and state in ("ready", "waiting")):
            code = exit_code if state == "failed" and not init else 0
            base.update(ready=False, started=False, state={"terminated": {
                "exitCode": code, "reason": "Error" if code else "Completed", "message": message if code else "",
                "startedAt": started, "finishedAt": stamp}})
        elif state == "ready":
            base.update(ready=True, started=True, state={"running": {"startedAt": started}})
        elif state == "waiting":
            base.update(ready=False, started=True, restartCount=1 if reason == "CrashLoopBackOff" else 0,
                        state={"waiting": {"reason": reason, "message": message}}
                        if reason == "CrashLoopBackOff" else {"running": {"startedAt": started}})
        else:
            base.update(ready=False, started=False, state={"waiting": {"reason": reason, "message": message}})
        return base

    phase = {"ready": "Running", "waiting": "Running", "pending": "Pending",
             "succeeded": "Succeeded", "failed": "Failed"}[state]
    condition = "True" if ready else "False"
    conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": started},
                  {"type": "Initialized", "status": "False" if state == "pending" else "True",
                   "lastTransitionTime": stamp},
                  {"type": "ContainersReady", "status": condition, "lastTransitionTime": stamp},
                  {"type": "Ready", "status": condition, "lastTransitionTime": stamp}]
    if not ready and reason:
        for c in conditions[2:]:
            c.update(reason=reason, message=message)
    status = {"phase": phase, "conditions": conditions, "hostIP": node_ip(node), "startTime": started,
              "containerStatuses": [container_status(c) for c in pod["spec"]["containers"]]}
    if pod["spec"].get("initContainers"):
        status["initContainerStatuses"] = [container_status(c, init=True) for c in pod["spec"]["initContainers"]]
    if state != "pending":
        ip = pod_ip(pod, node)
        status.update(podIP=ip, podIPs=[{"ip": ip}])
    if state == "failed":
        status.update(reason="Error", message=message)
    return status


class Simulator:
    def __init__(self, client):
        self.client = client
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.nodes = {}
        self.pods = {}
        self.registry = Registry()
        self.events = queue.Queue()
        self.timers = []  # heap of (time, node name) at which a node must be looked at again
        self.timer_keys = set()
        self.drivers_loaded = set()  # uids of driver pods whose driver loaded (it stays so while the pod lives)
        self.modules_loaded = {}  # node name -> the bootID in which a driver loaded there
        self.loaded_digests = {}  # node name -> the DRIVER_CONFIG_DIGEST of the driver loaded in that boot
        self.install_records = {}  # node name -> the records of INSTALLS_ANNOTATION
        self.mig_layouts = {}  # node name -> the MIG layout its GPUs have (mig.gpu_layouts), when MIG was applied
        self.mig_decided = {}  # node name -> (layout asked, final state written): nothing more to do for it
        self.mps_waiting = {}  # node name -> why its device plugin waits for the MPS control daemon (logged once)
        self.written = {}  # pod uid -> the (state, reason, message) last written
        self.initialized = set()  # uids of pods whose init containers completed since their node booted
        self.files = {}  # node name -> {file name in /run/nvidia/validations: content}
        self.files_boot = {}  # node name -> the bootID its files were written in
        self.validators = {}  # node name -> uids of the validator pods on it
        self.reconciled = set()  # (uid, generation) of operator resources already acted on
        # node name -> ((device plugin pod uid, bootID), the GPUs that plugin marked Unhealthy): until it restarts
        self.unhealthy = {}
        self.maintained = {}  # uid of a pod resetting GPUs or rebooting its node -> (state, reason, message, exit code)
        self.mco = None
        self.kernel_reboots = KernelReboots(self)
        self.dra = dra.KubeletPlugin(self)

    # -- watching ------------------------------------------------------------------------------
    def informer(self, name, list_fn, key_fn, store, **kwargs):
        def run():
            while True:
                try:
                    listing = list_fn(_preload_content=False, **kwargs)
                    data = json.loads(listing.data)
                    # Swapped in without an empty moment: a reconciler reading the store meanwhile must not take
                    # a half-listed pool of nodes for the whole one.
                    listed = {key_fn(item): item for item in data["items"]}
                    for key in set(store) - set(listed):
                        store.pop(key, None)
                    store.update(listed)
                    self.events.put(("resync", name, None))
                    version = data["metadata"]["resourceVersion"]
                    watch = kubernetes.watch.Watch()
                    for event in watch.stream(list_fn, resource_version=version, timeout_seconds=300,
                                              allow_watch_bookmarks=True, _preload_content=False, **kwargs):
                        obj = event["raw_object"]
                        if event["type"] == "BOOKMARK":
                            continue
                        if event["type"] == "ERROR":
                            break
                        key = key_fn(obj)
                        if event["type"] == "DELETED":
                            store.pop(key, None)
                            self.written.pop(obj["metadata"].get("uid"), None)
                            self.maintained.pop(obj["metadata"].get("uid"), None)
                            self.initialized.discard(obj["metadata"].get("uid"))
                        else:
                            store[key] = obj
                        self.events.put((event["type"], name, obj))
                except Exception as error:  # the API server restarts or a watch expires: relist
                    LOG.warning("%s watch: %s; relisting", name, error)
                    time.sleep(1)
        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()

    def start(self):
        self.informer("nodes", self.core.list_node, lambda o: o["metadata"]["name"], self.nodes)
        self.informer("pods", self.core.list_pod_for_all_namespaces, _namespaced_key, self.pods)
        namespace, name = REGISTRY_CONFIGMAP
        self.registry_store = {}
        self.informer("registry", self.core.list_namespaced_config_map, lambda o: "registry", self.registry_store,
                      namespace=namespace, field_selector="metadata.name=" + name)
        self.subscriptions, self.feature_discoveries = {}, {}
        if self._has_api("operators.coreos.com", "v1alpha1"):
            self.informer("subscriptions", self._lister(*SUBSCRIPTIONS), _namespaced_key, self.subscriptions)
        if self._has_api("nfd.openshift.io", "v1"):
            self.informer("nodefeaturediscoveries", self._lister(*FEATURE_DISCOVERIES), _namespaced_key,
                          self.feature_discoveries)
        if self._has_api(*MCO_API):
            self.mco = MachineConfigOperator(self)
            self.mco.start()
        self.dra.start()

    def _has_api(self, group, version):
        """Whether a CRD serves group/version, read from the CRDs themselves: the API server's discovery of a CRD
        lags behind it after a start."""
        crds = self._asked("CRDs", lambda: kubernetes.client.ApiextensionsV1Api(self.client)
                           .list_custom_resource_definition().items)
        return any(crd.spec.group == group and any(v.name == version and v.served for v in crd.spec.versions)
                   for crd in crds)

    def serves(self, group, version):
        """Whether the API server serves a built-in group/version (resource.k8s.io/v1 from Kubernetes 1.34 on): its
        discovery, which has the built-in groups from the start."""
        groups = self._asked("API groups", lambda: kubernetes.client.ApisApi(self.client).get_api_versions().groups)
        return any(g.name == group and version in [v.version for v in g.versions] for g in groups)

    @staticmethod
    def _asked(what, read):
        """read()'s answer, asked again until the API server answers: the simulator may start while it restarts."""
        deadline = time.monotonic() + 300
        while True:
            try:
                return read()
            except (ApiException, urllib3.exceptions.HTTPError) as error:
                if time.monotonic() > deadline or getattr(error, "status", None) in (401, 403, 404):
                    raise
                LOG.warning("%s: %s; asking again", what, getattr(error, "reason", None) or error)
                time.sleep(1)

    def _lister(self, group, version, plural):
        def list_all(**kwargs):
            return self.custom.list_cluster_custom_object(group, version, plural, **kwargs)
        return list_all

    # -- reconciling ---------------------------------------------------------------------------
    def run(self):
        self.start()
        while True:
            timeout = max(0.0, self.timers[0][0] - time.time()) if self.timers else 1.0
            dirty_nodes, dirty_operators = set(), False
            try:
                event = self.events.get(timeout=min(timeout, 1.0))
                batch = [event]
                while True:  # drain what has piled up so a burst is handled in one pass
                    try:
                        batch.append(self.events.get_nowait())
                    except queue.Empty:
                        break
            except queue.Empty:
                batch = []
            while self.timers and self.timers[0][0] <= time.time():
                entry = heapq.heappop(self.timers)
                self.timer_keys.discard(entry)
                dirty_nodes.add(entry[1])
            for kind, name, obj in batch:
                if name == "registry" or kind == "resync":
                    self.registry.patterns = [line for line in
                                              ((self.registry_store.get("registry") or {}).get("data") or {})
                                              .get("images", "").splitlines() if line]
                    dirty_nodes.update(self.nodes)
                    dirty_operators = True
                elif name == "nodes":
                    dirty_nodes.add(obj["metadata"]["name"])
                elif name == "resourceclaims":
                    # A claim allocated or released: the nodes of its pods hold GPUs, or no longer.
                    dirty_nodes.update(self.dra.nodes_of_claim(obj))
                elif name == "resourceslices":
                    # A slice changed or went by someone else's hand: its node's plugin publishes it again.
                    if obj["spec"].get("nodeName"):
                        dirty_nodes.add(obj["spec"]["nodeName"])
                elif name == "pods" and obj["spec"].get("nodeName"):
                    dirty_nodes.add(obj["spec"]["nodeName"])
                    # An operator acts once its own pod is ready.
                    dirty_operators = dirty_operators or bool(self.feature_discoveries)
                elif name in ("subscriptions", "nodefeaturediscoveries"):
                    dirty_operators = True
            pods_by_node = {}
            if dirty_nodes:
                for pod in list(self.pods.values()):
                    # Of the pods being deleted, only those whose DRA claims wait to be unprepared (dra.py).
                    if pod["spec"].get("nodeName") and (not pod["metadata"].get("deletionTimestamp")
                                                        or dra.PREPARED in (pod["metadata"].get("annotations") or {})):
                        pods_by_node.setdefault(pod["spec"]["nodeName"], []).append(pod)
            for node_name in dirty_nodes:
                node = self.nodes.get(node_name)
                if node and (node["metadata"].get("annotations") or {}).get("kwok.x-k8s.io/node") == "fake":
                    self._guard(self.reconcile_node, node, pods_by_node.get(node_name, []))
            if dirty_operators:
                for subscription in list(self.subscriptions.values()):
                    self._guard(self.reconcile_subscription, subscription)
                for discovery in list(self.feature_discoveries.values()):
                    self._guard(self.reconcile_feature_discovery, discovery)
            if self.mco and (batch or dirty_nodes):
                self.mco.reconcile()
            if batch or dirty_nodes:
                self.kernel_reboots.reconcile()

    def wake_at(self, when, node_name):
        """Looks at the node again at that time (epoch seconds)."""
        if (when, node_name) not in self.timer_keys:
            self.timer_keys.add((when, node_name))
            heapq.heappush(self.timers, (when, node_name))

    def _guard(self, fn, obj, *args):
        try:
            fn(obj, *args)
        except (ApiException, urllib3.exceptions.HTTPError) as error:
            status = getattr(error, "status", None)
            if status in (404, 409):
                return
            LOG.warning("%s %s: %s %s", fn.__name__, obj["metadata"].get("name"), status or "",
                        getattr(error, "reason", None) or error)
            if status is None or status == 429 or status >= 500:
                # The API server away (restarting) or overloaded: looked at again in a second, as a real controller
                # requeues (a node by its name; any name wakes the machine-config operator's and reboots' pass).
                self.wake_at(time.time() + 1, obj["metadata"]["name"])
        except Exception:  # pylint: disable=broad-exception-caught
            # A bug seen on one object must not stop every node of a shared test cluster: logged, and a node is
            # looked at again (an operator object is, with the next event).
            LOG.exception("%s %s failed", fn.__name__, obj["metadata"].get("name"))
            if fn == self.reconcile_node:
                self.wake_at(time.time() + 1, obj["metadata"]["name"])

    def reconcile_node(self, node, pods):
        node_name = node["metadata"]["name"]
        if (node["metadata"].get("annotations") or {}).get(REBOOTING_ANNOTATION):
            return  # the kubelet is down: nothing it runs is reported until the node is back
        leaving = [pod for pod in pods if pod["metadata"].get("deletionTimestamp")]
        pods = [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")]
        clock = time.time()
        # Operands in dependency order, so that one pass settles a node (the validator's last check, plugin, passes
        # on the next one).
        order = {DRIVER: 0, TOOLKIT: 1, VALIDATOR: 1.5, sharing.MPS_CONTROL_DAEMON: 1.8, hostengine.HOSTENGINE: 1.8,
                 DEVICE_PLUGIN: 2, DCGM_EXPORTER: 2, GFD: 2, mig.MIG_MANAGER: 2, dra.KUBELET_PLUGIN: 2}
        # A pod holding claims after the kubelet plugin, which prepares them (the node agents of the DRA stack).
        pods.sort(key=lambda p: order.get(component(p), 3) + (1 if p["spec"].get("resourceClaims") else 0))
        hw = hardware(node)
        # A pre-installed driver is there from the start.
        ready = {DRIVER} if hw.get("host_driver") else set()
        boot = ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID")
        files = self.validation_files(node_name, boot, pods)
        # Why the GPUDirect modules of the node's driver pod are not loaded (gpudirect.py), once it has run.
        driver_modules = None
        # Pods can hold modules only if a driver loaded them since the node booted.
        holders = [pod for pod in pods if self.holds_gpus(pod)] if self.modules_loaded.get(node_name) == boot else []
        reusable = self.loaded_digests.get(node_name) if self.modules_loaded.get(node_name) == boot else None
        for pod in pods:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                self.dra.unprepare(pod, dra.KUBELET_PLUGIN in ready)
                continue
            uid = pod["metadata"]["uid"]
            reuse = component(pod) == DRIVER and bool(reusable) and config_digest(pod) == reusable
            state, reason, message, retry_at = outcome(pod, node, ready, self.registry, clock, holders,
                                                       loaded=uid in self.drivers_loaded, reuse=reuse,
                                                       read_config_map=self.config_map_data)
            # The kubelet starts a pod once the DRA drivers prepared its claims (the kubelet plugin, after the
            # operands in this pass).
            unprepared = self.dra.prepare_problem(pod, dra.KUBELET_PLUGIN in ready) if state != "pending" else None
            if unprepared:
                state, reason, message, retry_at = "pending", "ContainerCreating", unprepared, None
            if state in ("ready", "waiting") and uid not in self.initialized:
                # The kubelet runs the init containers once a pod starts (again after a boot).
                writes, problem = validations.run_init_containers(pod, node_name, files,
                                                                  validator_checks(node, ready, driver_modules))
                files.update(writes)
                if problem:
                    state, reason, message, retry_at = "pending", "PodInitializing", problem, None
                else:
                    self.initialized.add(uid)
            if state == "ready":
                problem = container_problem(pod, node_name, hw, files) or self.hostengine_problem(pod, node_name, pods)
                if problem:
                    state, (reason, message) = "waiting", problem
            exit_code = 1
            if state in ("ready", "succeeded") and gpu_faults.is_maintenance(pod):
                state, reason, message, exit_code = self.maintain(pod, node, ready)
            failing = {}
            if state == "ready" and component(pod) == DRIVER:
                if uid not in self.drivers_loaded and not reuse:
                    # The modules take their parameters when they load; a reused driver keeps them.
                    self.publish_module_parameters(node, packages.module_parameters(pod, self.config_map_data))
                # Not a pod already Ready before this simulator started.
                if uid not in self.drivers_loaded and not pod_ready(pod):
                    self.record_install(node, pod, "reuse" if reuse else "build", clock)
                self.drivers_loaded.add(uid)
                self.modules_loaded[node_name] = boot
                self.loaded_digests[node_name] = config_digest(pod)
                # The driver loaded (the node keeps its GPUs); a GPUDirect container may still fail beside it.
                failing = gpudirect.failures(pod, node, hw.get("network") or {})
                driver_modules = ("nvidia-peermem driver is not ready (lsmod shows no nvidia_peermem): %s"
                                  % "; ".join(sorted(failing.values())) if failing else None)
            if retry_at:
                self.wake_at(retry_at, node_name)
            if state == "ready" and component(pod):
                ready.add(component(pod))
            signature = [state, reason, message, failing]
            if self.written.get(pod["metadata"]["uid"]) == signature:
                continue
            status = status_for(pod, node, state, reason, message, failing, exit_code)
            self.core.patch_namespaced_pod_status(pod["metadata"]["name"], pod["metadata"]["namespace"],
                                                  {"status": status})
            self.written[pod["metadata"]["uid"]] = signature
            LOG.info("pod %s/%s on %s: %s %s", pod["metadata"]["namespace"], pod["metadata"]["name"], node_name,
                     state, message)
        for pod in leaving:
            self.dra.unprepare(pod, dra.KUBELET_PLUGIN in ready)
        self.reconcile_mig(node, ready, pods)
        self.reconcile_node_status(node, ready, pods)
        self.reconcile_gfd_labels(node, ready, pods)
        self.reconcile_resource_slice(node, ready, pods)
        self.publish_validation_files(node, files)

    def maintain(self, pod, node, ready):
        """A pod resetting GPUs with nvidia-smi or rebooting the node (gpu_faults.Maintenance), run once: its
        (state, reason, message, exit code). Its effects on the node are written at once: faults cleared, resets
        recorded, a reboot requested."""
        uid = pod["metadata"]["uid"]
        if uid in self.maintained:
            return self.maintained[uid]
        node_name, hw = node["metadata"]["name"], hardware(node)
        # The node's pods as the API server has them now: the informer may still hold operand pods that the
        # remediation saw go before it created this one (nvidia-smi sees the processes of now).
        current = [self.core.api_client.sanitize_for_serialization(p) for p in self.core.list_pod_for_all_namespaces(
            field_selector="spec.nodeName=" + node_name).items]
        holders = ["%s/%s" % (p["metadata"]["namespace"], p["metadata"]["name"]) for p in current
                   if p["metadata"]["uid"] != uid and (self.holds_gpus(p) or (
                       component(p) in GPU_OPENERS and self.written.get(p["metadata"]["uid"], [""])[0] == "ready"))]
        now = time.time()
        # The node as it is now: a fault injected a moment ago may not have reached the informer.
        faults = gpu_faults.faults_of(self.core.read_node(node_name).metadata.annotations)
        done = gpu_faults.Maintenance(
            pod, node_name, int((hw.get("gpu") or {}).get("count") or 0), faults, holders,
            "/" if hw.get("host_driver") else gpu_faults.DRIVER_CONTAINER_ROOT, DRIVER in ready, now)
        exit_code, output = done.run()

        def change(annotations):
            values = gpu_faults.after_maintenance(annotations, done)
            if done.reboot:
                values[REBOOT_REQUEST_ANNOTATION] = "%.3f" % (now + SHUTDOWN_SECONDS)
            return values
        gpu_faults.update_node_annotations(self.core, node_name, change)
        message = "\n".join(output)
        result = ("failed", "Error", message, exit_code) if exit_code else ("succeeded", "Completed", message, 0)
        self.maintained[uid] = result
        LOG.info("node %s: pod %s/%s %s (exit %d): %s", node_name, pod["metadata"]["namespace"],
                 pod["metadata"]["name"], result[0], exit_code, message.replace("\n", " "))
        return result

    def gpu_series(self):
        """The DCGM exporter's series of every node whose exporter pod is Ready (gpu_faults.exporter_series)."""
        exporters = {pod["spec"]["nodeName"]: pod for pod in list(self.pods.values())
                     if component(pod) == DCGM_EXPORTER and pod["spec"].get("nodeName")
                     and not pod["metadata"].get("deletionTimestamp")
                     and self.written.get(pod["metadata"]["uid"], [""])[0] == "ready"}
        series = []
        for node_name, exporter in sorted(exporters.items()):
            node = self.nodes.get(node_name)
            annotations = (node or {}).get("metadata", {}).get("annotations") or {}
            gpu = hardware(node).get("gpu") if node else None
            if gpu and not annotations.get(REBOOTING_ANNOTATION):
                series.extend(gpu_faults.exporter_series(node_name, gpu, gpu_faults.faults_of(annotations), exporter))
        return series

    def record_install(self, node, pod, install, clock):
        """Adds the driver pod that came up to the node's INSTALLS_ANNOTATION: build or reuse, and how long it took."""
        node_name = node["metadata"]["name"]
        records = self.install_records.setdefault(node_name, json.loads(
            (node["metadata"].get("annotations") or {}).get(INSTALLS_ANNOTATION) or "[]"))
        records.append({"pod": pod["metadata"]["name"], "install": install, "digest": config_digest(pod),
                        "seconds": round(clock - _epoch(pod["metadata"]["creationTimestamp"]), 1)})
        del records[:-INSTALL_RECORDS]
        self.core.patch_node(node_name, {"metadata": {"annotations": {INSTALLS_ANNOTATION: json.dumps(records)}}})
        LOG.info("node %s: driver pod %s came up (%s) after %.1f s", node_name, pod["metadata"]["name"], install,
                 records[-1]["seconds"])

    def validation_files(self, node_name, boot, pods):
        """The node's /run/nvidia/validations: emptied by a boot (whose pods then run their init containers again)
        and by the preStop hook of a validator pod that went."""
        files = self.files.setdefault(node_name, {})
        if self.files_boot.get(node_name) != boot:
            self.files_boot[node_name] = boot
            files.clear()
            self.initialized.difference_update(pod["metadata"]["uid"] for pod in pods)
        validators = {pod["metadata"]["uid"] for pod in pods if component(pod) == VALIDATOR}
        if self.validators.get(node_name, set()) - validators:
            for name in [name for name in files if name.endswith("-ready")]:
                del files[name]
        self.validators[node_name] = validators
        return files

    def publish_validation_files(self, node, files):
        shown = json.dumps(files, sort_keys=True)
        if (node["metadata"].get("annotations") or {}).get(VALIDATIONS_ANNOTATION, "{}") != shown:
            self.core.patch_node(node["metadata"]["name"], {"metadata": {"annotations": {VALIDATIONS_ANNOTATION: shown}}})

    def publish_module_parameters(self, node, parameters):
        shown = packages.shown_module_parameters(parameters)
        if (node["metadata"].get("annotations") or {}).get(packages.MODULE_PARAMETERS_ANNOTATION) != shown:
            self.core.patch_node(node["metadata"]["name"], {"metadata": {"annotations": {
                packages.MODULE_PARAMETERS_ANNOTATION: shown}}})

    def ready_pod(self, pods, kind):
        return next((p for p in pods if component(p) == kind and self.written.get(p["metadata"]["uid"], [""])[0]
                     == "ready"), None)

    def reconcile_mig(self, node, ready, pods):
        """The MIG manager of the node, while its pod is Ready: the layout the label asks for, and its state."""
        labels = node["metadata"].get("labels") or {}
        wanted = labels.get(mig.CONFIG_LABEL)
        manager = self.ready_pod(pods, mig.MIG_MANAGER) if mig.MIG_MANAGER in ready else None
        name, hw = node["metadata"]["name"], hardware(node)
        if not wanted or not manager or self.mig_decided.get(name) == (wanted, labels.get(mig.STATE_LABEL)):
            return
        applied = self.mig_layouts.get(name) or mig.disabled(hw)
        try:
            config = self.core.read_namespaced_config_map(mig.config_map_of(manager), manager["metadata"]["namespace"])
            text = (config.data or {}).get("config.yaml")
        except ApiException as error:
            if error.status != 404:
                raise
            text = None
        holders = ["%s/%s" % (p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods
                   if self.holds_gpus(p) or component(p) in MIG_CLIENTS]
        state, layout, message = mig.outcome(hw, wanted, text, applied, holders)
        # A change stops the GPU clients first; the layout waits for their pods to go. Once done, they restart.
        patch = mig.pause_labels(labels) if layout != applied or state == "pending" else {}
        if patch:
            state, layout, message = "pending", applied, "stopping the GPU clients"
        elif state != "pending":
            patch = mig.restart_labels(labels)
        self.mig_layouts[name] = layout
        if labels.get(mig.STATE_LABEL) != state:
            patch[mig.STATE_LABEL] = state
            LOG.info("node %s: MIG layout %s %s: %s", name, wanted, state, message)
        if patch:
            self.core.patch_node(name, {"metadata": {"labels": patch}})
        if state != "pending":
            self.mig_decided[name] = (wanted, state)

    def holds_gpus(self, pod):
        """A pod that keeps the node's GPUs: by its resource requests, or by its claims allocated from gpu.nvidia.com."""
        return holds_gpus(pod) or self.dra.holds_gpus(pod)

    def driver_version_of(self, node, pods):
        """The version of the node's driver: its Ready driver pod's image tag, else the host's."""
        driver = self.ready_pod(pods, DRIVER)
        return driver_version(driver["spec"]["containers"][0]["image"]) if driver \
            else hardware(node).get("host_driver") or driver_version("")

    def reconcile_resource_slice(self, node, ready, pods):
        """The DRA kubelet plugin's ResourceSlice while its pod is Ready on the node (dra.py)."""
        plugin = self.ready_pod(pods, dra.KUBELET_PLUGIN) if dra.KUBELET_PLUGIN in ready and DRIVER in ready else None
        if plugin is None and not self.dra.node_slices(node["metadata"]["name"]):
            return
        hw = hardware(node)
        version = self.driver_version_of(node, pods)
        restarting = DRIVER in ready and (node["metadata"].get("labels") or {}).get(dra.DEPLOY_LABEL) == "true"
        again = self.dra.reconcile(node, hw, plugin, version,
                                   "%d.%d" % CUDA_OF_BRANCH.get(version.split(".")[0], (12, 0)),
                                   self.mig_layouts.get(node["metadata"]["name"]) or mig.disabled(hw), time.time(),
                                   restarting)
        if again:
            self.wake_at(again, node["metadata"]["name"])

    def reconcile_gfd_labels(self, node, ready, pods):
        """GFD's labels while a GFD pod is Ready on the node (with the driver version of its Ready driver pod); none
        otherwise."""
        labels = node["metadata"].get("labels") or {}
        wanted = {}
        # The watch thread forgets a deleted pod meanwhile: GFD in ready, its pod may be gone by now.
        gfd = self.ready_pod(pods, GFD) if GFD in ready else None
        if gfd:
            hw = hardware(node)
            version = self.driver_version_of(node, pods)
            wanted = sharing.gfd_labels(gfd_node_labels(hw, version,
                                                        container_env(gfd["spec"]["containers"][0], "MIG_STRATEGY")
                                                        or "none",
                                                        labels.get("nvidia.com/gfd.timestamp") or str(int(time.time()))),
                                        sharing.pod_sharing(gfd, node, self.config_map_data))
        elif labels.get(mig.GFD_DEPLOY_LABEL) == mig.PAUSED:
            # Stopped by the MIG manager for a change: NFD keeps what GFD published (nvidia.com/mig.capable, which the
            # MIG manager's DaemonSet selects on, among it) until GFD publishes again.
            return
        patch = {key: value for key, value in wanted.items() if labels.get(key) != value}
        patch.update((key, None) for key in GFD_LABEL_KEYS if key in labels and key not in wanted)
        if patch and not wanted and (self.core.read_node(node["metadata"]["name"]).metadata.labels or {}).get(
                mig.GFD_DEPLOY_LABEL) == mig.PAUSED:
            # The MIG manager paused GFD, then the DaemonSet controller deleted its pod: the watch may deliver the
            # deletion before the node's new label, and the MIG manager's DaemonSet selects on nvidia.com/mig.capable.
            return
        if patch:
            self.core.patch_node(node["metadata"]["name"], {"metadata": {"labels": patch}})
            LOG.info("node %s: %s GFD labels", node["metadata"]["name"], "set" if wanted else "removed")

    def reconcile_node_status(self, node, ready, pods):
        hw = hardware(node)
        node_name = node["metadata"]["name"]
        plugin = self.ready_pod(pods, DEVICE_PLUGIN) if DRIVER in ready and DEVICE_PLUGIN in ready else None
        advertised = mig.resources(hw, self.mig_layouts.get(node_name) or mig.disabled(hw),
                                   container_env(plugin["spec"]["containers"][0], "MIG_STRATEGY") if plugin else None,
                                   plugin is not None)
        unhealthy = set()
        if plugin:
            advertised = self.shared_resources(plugin, node, pods, advertised)
            unhealthy = self.unhealthy_gpus(node, plugin)
        wanted = {"capacity": advertised, "allocatable": gpu_faults.allocatable(
            advertised, GPU, int((hw.get("gpu") or {}).get("count") or 0), unhealthy)}
        patch = {}
        for field, resources in wanted.items():
            current = {key: value for key, value in (node["status"].get(field) or {}).items()
                       if key.startswith(GPU) or key.startswith("nvidia.com/mig-")}
            # Resources no longer advertised go (a MIG profile of a previous layout).
            change = {key: None for key in current if key not in resources}
            change.update((key, str(value)) for key, value in resources.items()
                          if current.get(key, "0" if key == GPU else None) != str(value))
            if change:
                patch[field] = change
        if hw.get("gpu") and patch:
            self.core.patch_node_status(node_name, {"status": patch})
            LOG.info("node %s: %s", node_name, "; ".join("%s %s" % (field, ", ".join(
                "%s=%s" % item for item in sorted(change.items()))) for field, change in sorted(patch.items())))
        if NFD_WORKER in ready:
            labels = node["metadata"].get("labels") or {}
            wanted = {k: v for k, v in (hw.get("nfd_labels") or {}).items() if labels.get(k) != v}
            if wanted and not (hw.get("faults") or {}).get("no_nfd_labels"):
                self.core.patch_node(node_name, {"metadata": {"labels": wanted, "annotations": {
                    "nfd.node.kubernetes.io/feature-labels": ",".join(
                        sorted(k.split("/", 1)[1] for k in hw["nfd_labels"]))}}})
                LOG.info("node %s: %d NFD labels", node_name, len(wanted))

    def unhealthy_gpus(self, node, plugin):
        """The GPUs the node's Ready device plugin pod marked Unhealthy: those with a fault of an XID it checks, now or
        since it started (its pod's, and the node's boot: a restart forgets them)."""
        node_name = node["metadata"]["name"]
        started = (plugin["metadata"]["uid"], ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID"))
        seen, marked = self.unhealthy.get(node_name, (None, set()))
        main = plugin["spec"]["containers"][0]
        marked = (marked if seen == started else set()) | gpu_faults.unhealthy_gpus(
            gpu_faults.faults_of(node["metadata"].get("annotations")), container_env(main, "DP_DISABLE_HEALTHCHECKS"),
            container_env(main, "DP_ENABLE_HEALTHCHECKS"))
        self.unhealthy[node_name] = (started, marked)
        return marked

    def config_map_data(self, namespace, name):
        """A ConfigMap's data, None when it does not exist."""
        try:
            return self.core.read_namespaced_config_map(name, namespace).data or {}
        except ApiException as error:
            if error.status != 404:
                raise
            return None

    def shared_resources(self, plugin, node, pods, resources):
        """The device plugin's resources under its sharing configuration (sharing.py): with MPS, only while the
        node's MPS control daemon is ready."""
        shared = sharing.pod_sharing(plugin, node, self.config_map_data)
        problem = None
        if shared[0] == "mps":
            daemons = [p for p in pods if component(p) == sharing.MPS_CONTROL_DAEMON
                       and self.written.get(p["metadata"]["uid"], [""])[0] == "ready"]
            problem = sharing.mps_daemon_problem(plugin, daemons, node, self.config_map_data)
            if problem and self.mps_waiting.get(node["metadata"]["name"]) != problem:
                LOG.info("node %s: the device plugin waits for the MPS daemon: %s", node["metadata"]["name"], problem)
            self.mps_waiting[node["metadata"]["name"]] = problem
        return sharing.advertised(resources, shared, problem)

    def hostengine_problem(self, pod, node_name, pods):
        """Why a DCGM exporter pod cannot reach the hostengine it is given (hostengine.py): it crash-loops then."""
        if component(pod) != DCGM_EXPORTER:
            return None
        engines = [p for p in pods if component(p) == hostengine.HOSTENGINE
                   and self.written.get(p["metadata"]["uid"], [""])[0] == "ready"]

        def read_service(namespace, name):
            try:
                return self.client.sanitize_for_serialization(self.core.read_namespaced_service(name, namespace))
            except ApiException as error:
                if error.status != 404:
                    raise
                return None
        problem = hostengine.problem(pod, node_name, engines, read_service)
        return ("CrashLoopBackOff", problem) if problem else None

    def reconcile_subscription(self, subscription):
        namespace = subscription["metadata"]["namespace"]
        package = (subscription.get("spec") or {}).get("name")
        status = subscription.get("status") or {}
        if package not in CATALOG:
            if status.get("state") != "ResolutionFailed":
                # OLM stamps every status it writes (lastUpdated, required by the real API).
                self.custom.patch_namespaced_custom_object_status(
                    "operators.coreos.com", "v1alpha1", namespace, "subscriptions", subscription["metadata"]["name"],
                    {"status": {"state": "ResolutionFailed", "lastUpdated": now(), "conditions": [{
                        "type": "ResolutionFailed", "status": "True", "reason": "ConstraintsNotSatisfiable",
                        "message": "no operators found in package %s in the catalog referenced by subscription %s"
                                   % (package, subscription["metadata"]["name"]), "lastTransitionTime": now()}]}})
            return
        csv_name, deployment_name = CATALOG[package]
        if status.get("installedCSV") == csv_name:
            return
        self._create_ignoring_conflict(lambda: self.custom.create_namespaced_custom_object(
            "operators.coreos.com", "v1alpha1", namespace, "clusterserviceversions", {
                "apiVersion": "operators.coreos.com/v1alpha1", "kind": "ClusterServiceVersion",
                "metadata": {"name": csv_name, "namespace": namespace},
                "spec": {"displayName": package, "install": {"strategy": "deployment"}}}))
        labels = {"app.kubernetes.io/name": deployment_name, "olm.owner": csv_name}
        self._create_ignoring_conflict(lambda: kubernetes.client.AppsV1Api(self.client).create_namespaced_deployment(
            namespace, {"metadata": {"name": deployment_name, "labels": labels},
                        "spec": {"replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": deployment_name}},
                                 "template": {"metadata": {"labels": labels}, "spec": {"containers": [
                                     {"name": "manager", "image": OPERATOR_IMAGE}]}}}}))
        self.custom.patch_namespaced_custom_object_status(
            "operators.coreos.com", "v1alpha1", namespace, "clusterserviceversions", csv_name,
            {"status": {"phase": "Succeeded", "reason": "InstallSucceeded", "message": "install strategy completed"}})
        self.custom.patch_namespaced_custom_object_status(
            "operators.coreos.com", "v1alpha1", namespace, "subscriptions", subscription["metadata"]["name"],
            {"status": {"state": "AtLatestKnown", "currentCSV": csv_name, "installedCSV": csv_name,
                        "lastUpdated": now()}})
        LOG.info("subscription %s/%s: installed %s", namespace, subscription["metadata"]["name"], csv_name)

    def reconcile_feature_discovery(self, discovery):
        """The NFD operator: once its Deployment is ready, a NodeFeatureDiscovery gets nfd-master and nfd-worker."""
        apps = kubernetes.client.AppsV1Api(self.client)
        namespace, name = discovery["metadata"]["namespace"], discovery["metadata"]["name"]
        seen = (discovery["metadata"]["uid"], discovery["metadata"].get("generation"))
        if seen in self.reconciled:
            return
        # The operator reconciles once its pod runs, which is the event that brings this call: its Deployment's
        # readyReplicas, which the controller manager writes after that event, may still be 0 when it comes.
        if not any(pod_ready(pod) for pod in list(self.pods.values())
                   if pod["metadata"]["namespace"] == namespace and not pod["metadata"].get("deletionTimestamp")
                   and (pod["metadata"].get("labels") or {}).get("app.kubernetes.io/name") == CATALOG["nfd"][1]):
            return  # no operator running in this namespace: nothing reconciles the resource yet
        spec = discovery.get("spec") or {}
        operand = spec.get("operand") or {}
        image = operand.get("image") or NFD_OPERAND_IMAGE
        owner = [{"apiVersion": "nfd.openshift.io/v1", "kind": "NodeFeatureDiscovery", "name": name,
                  "uid": discovery["metadata"]["uid"], "controller": True}]
        config = {"metadata": {"name": "nfd-worker", "ownerReferences": owner},
                  "data": {"nfd-worker.conf": (spec.get("workerConfig") or {}).get("configData") or ""}}
        self._create_or_replace(lambda: self.core.create_namespaced_config_map(namespace, config),
                                lambda: self.core.replace_namespaced_config_map("nfd-worker", namespace, config))
        for kind, role in (("Deployment", "nfd-master"), ("DaemonSet", "nfd-worker")):
            labels = {"app": role, COMPONENT: role}
            pod = {"metadata": {"labels": labels}, "spec": {
                "tolerations": operand.get("workerTolerations") or [] if role == "nfd-worker" else [],
                "containers": [{"name": role, "image": image, "imagePullPolicy": operand.get("imagePullPolicy")
                                or "IfNotPresent"}]}}
            body = {"metadata": {"name": role, "labels": labels, "ownerReferences": owner},
                    "spec": {"selector": {"matchLabels": {"app": role}}, "template": pod}}
            if kind == "Deployment":
                body["spec"]["replicas"] = 1
                self._create_or_replace(lambda: apps.create_namespaced_deployment(namespace, body),
                                        lambda: apps.patch_namespaced_deployment(role, namespace, body))
            else:
                self._create_or_replace(lambda: apps.create_namespaced_daemon_set(namespace, body),
                                        lambda: apps.patch_namespaced_daemon_set(role, namespace, body))
        available = {"type": "Available", "status": "True", "reason": "OperandsCreated",
                     "message": "nfd-master and nfd-worker created"}
        before = (discovery.get("status") or {}).get("conditions") or []
        if [{key: c.get(key) for key in available} for c in before] != [available]:
            condition = dict(available, lastTransitionTime=now(),
                             observedGeneration=discovery["metadata"].get("generation"))
            self.custom.patch_namespaced_custom_object_status(*FEATURE_DISCOVERIES[:2], namespace,
                                                              FEATURE_DISCOVERIES[2], name,
                                                              {"status": {"conditions": [condition]}})
            LOG.info("nodefeaturediscovery %s/%s: operands created with %s", namespace, name, image)
        self.reconciled.add(seen)

    @staticmethod
    def _create_or_replace(create, replace):
        try:
            create()
        except ApiException as error:
            if error.status != 409:
                raise
            replace()

    @staticmethod
    def _create_ignoring_conflict(create):
        try:
            create()
        except ApiException as error:
            if error.status != 409:
                raise


def _namespaced_key(obj):
    return "%s/%s" % (obj["metadata"].get("namespace"), obj["metadata"]["name"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--prometheus-port", type=int, required=True,
                        help="port on 127.0.0.1 of the DCGM exporters' fields as a Prometheus query API")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    simulator = Simulator(kubernetes.config.new_client_from_config(config_file=args.kubeconfig))
    gpu_faults.PrometheusAPI(args.prometheus_port, simulator.gpu_series).start()
    simulator.run()


if __name__ == "__main__":
    main()
