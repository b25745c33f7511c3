"""Fleet files: simulated nodes and the OpenShift state that goes with them.

A fleet file (YAML) lists node groups; each becomes Node objects carrying exactly the labels NFD
would produce for that hardware and OS, a matching `status.nodeInfo`, and the simulated hardware in
the annotation `sim.accelerators.gpu/hardware` (read by the simulator only, never by the collection).

    nfd: prelabelled            # or `worker`: labels appear once an nfd-worker pod is ready on the node
    node_status: realistic      # or `minimal`: see realistic_node() (a busy worker's images, annotations, resources)
    registry: [nvcr.io/nvidia/*, ...]   # image patterns the simulated registry holds
    package_mirror: {url: https://mirror.example.test/ubuntu, ca: "-----BEGIN CERTIFICATE-----..."}
                                # the site's package mirror, which offline node groups reach (with that CA, if any)
    openshift:
      version: 4.16.8
      driver_toolkit: {missing: [416.94.202405081406-0], broken: false, placeholder: false, extra: [...]}
    nodes:
      - name: gpu-a             # a prefix when count > 1: gpu-a-0, gpu-a-1, ...
        count: 2
        role: worker
        gpu: {product: NVIDIA-A100-SXM4-80GB, count: 8}   # a model of GPU_MODELS (memory, compute, MIG from there),
                                                        # or any product with memory, compute ("8.0"), mig_capable
        arch: arm64                             # the node's architecture: the GPU model's (GH200, GB200), else amd64
        machine: PowerEdge-XE8545                       # the DMI product name GFD labels as nvidia.com/gpu.machine
        host_driver: 570.172.08                 # a driver pre-installed on the host, in that version: the node is
                                                # labelled nvidia.com/gpu.deploy.driver=pre-installed (no driver pod)
        network: {driver: doca}                 # an NVIDIA NIC (NFD label pci-15b3.present) and its network driver,
                                                # which nvidia-peermem needs (gpudirect.py): doca, the NVIDIA Network
                                                # Operator's driver container, ready (its label
                                                # network.nvidia.com/operator.mofed.wait=false); host, MOFED on the
                                                # host; none, its driver container not ready (mofed.wait=true)
        os: {rhcos: 416.94.202405081406-0}      # or {ubuntu: "22.04"}, {rhel: "9.4"}
        offline: true                           # reaches no package repository but the fleet's package_mirror
                                                # (packages.py): an Ubuntu driver build needs a repo config naming it
        kernel: 5.14.0-427.13.1.el9_4.x86_64     # optional: derived from the OS otherwise
        runtime: cri-o                          # or containerd
        nfd_style: vendor                       # `pci-10de`; or class-vendor: `pci-0302_10de`
        taints: []
        faults: {stale_nfd_label: 415.92.202402201450-0, driver_build_fails: true, validation_fails: "ECC errors",
                 driver_fails_for: "580.",     # a driver image containing this fails to load (a bad new driver)
                 gfd_init_fails: true,         # GPU feature discovery cannot initialise NVML: it crash-loops
                 mig_reconfig_fails: true,     # the MIG manager fails to change the MIG layout (state failed)
                 never_returns: true, stale_nfd_after_upgrade: true}    # the last two: see mco.py (and kernel.py)
        reboot_seconds: 3       # a simulated kernel reboot (kernel.py) and nfd-worker's delay after it
        nfd_lag_seconds: 1
    pools:                      # openshift: MachineConfigPools, rolled by the simulated MCO (mco.py)
      - name: gpu-worker        # prefixed like the nodes
        role: gpu-worker        # its nodes: this fleet's nodes of that role (default: the pool's name)
        rhcos: 9.6.20260303-1   # its target; needed only when its nodes run several builds
        paused: true
        max_unavailable: 2      # or "25%"; default 1
        reboot_seconds: 2       # simulated reboot and nfd-worker delay (defaults in mco.py)
        nfd_lag_seconds: 1

Nodes of a pool are at the rendered config of their own RHCOS build (`rendered-<pool>-<hash of the build>`).
"""

import copy
import hashlib
import json
import re
import uuid

import kubernetes
from kubernetes.client.rest import ApiException

from . import api
from . import gpudirect
from . import packages

NFD = "feature.node.kubernetes.io/"
HARDWARE_ANNOTATION = "sim.accelerators.gpu/hardware"
FLEET_LABEL = "sim.accelerators.gpu/fleet"
REGISTRY_CONFIGMAP = ("kube-system", "sim-registry")
DTK_STREAM = ("openshift", "driver-toolkit")
DTK_REPOSITORY = "quay.io/openshift-release-dev/ocp-v4.0-art-dev"
FAULTS = ("stale_nfd_label", "driver_build_fails", "driver_fails_for", "validation_fails", "no_nfd_labels",
          "never_returns",
          "stale_nfd_after_upgrade", "gfd_init_fails", "mig_reconfig_fails")
# Labels nfd-worker recomputes after a reboot into another OS build.
OS_LABEL_PREFIXES = (NFD + "system-os_release.", NFD + "kernel-version.")

# The machine-config API: pools, rendered configs and the node annotations of the machine-config daemon.
MCO_API = ("machineconfiguration.openshift.io", "v1")
CURRENT_CONFIG = "machineconfiguration.openshift.io/currentConfig"
DESIRED_CONFIG = "machineconfiguration.openshift.io/desiredConfig"
MCD_STATE = "machineconfiguration.openshift.io/state"
# On a rendered MachineConfig: the release that rendered it (as the real controller annotates), and the simulated
# payload, the RHCOS build and kernel a node boots into (the real one only has an osImageURL digest).
RELEASE_OF_CONFIG = "machineconfiguration.openshift.io/release-image-version"
RHCOS_OF_CONFIG = "sim.accelerators.gpu/rhcos"
KERNEL_OF_CONFIG = "sim.accelerators.gpu/kernel"
# On a pool: how long the simulated reboot and the nfd-worker relabelling take.
REBOOT_SECONDS = "sim.accelerators.gpu/reboot-seconds"
NFD_LAG_SECONDS = "sim.accelerators.gpu/nfd-lag-seconds"

# The kernel each RHEL minor's RHCOS build ships (one representative per stream).
KERNEL_OF_RHEL = {
    "8.4": "4.18.0-305.19.1.el8_4.x86_64",
    "8.6": "4.18.0-372.73.1.el8_6.x86_64",
    "9.2": "5.14.0-284.59.1.el9_2.x86_64",
    "9.4": "5.14.0-427.33.1.el9_4.x86_64",
    "9.6": "5.14.0-570.42.1.el9_6.x86_64",
    "10.1": "6.12.0-124.8.1.el10_1.x86_64",
}
KERNEL_OF_UBUNTU = {"20.04": "5.4.0-182-generic", "22.04": "5.15.0-100-generic", "24.04": "6.8.0-45-generic"}
PCI_CLASS_OF_GPU = "0302"  # 3D controller: data-centre GPUs; display GPUs are 0300
# The GPUs a fleet can hold, as GPU feature discovery labels them: product (nvidia.com/gpu.product, NVML's name with
# spaces as '-'), memory in MiB as NVML reports it, CUDA compute capability, MIG capability. The family label follows
# from the compute capability by GFD's rule (gpu_family).
GPU_MODELS = {
    "NVIDIA-A100-SXM4-80GB": {"memory": 81920, "compute": "8.0", "mig_capable": True},
    "NVIDIA-A100-SXM4-40GB": {"memory": 40960, "compute": "8.0", "mig_capable": True},
    "NVIDIA-A30": {"memory": 24576, "compute": "8.0", "mig_capable": True},
    "NVIDIA-A10": {"memory": 23028, "compute": "8.6", "mig_capable": False},
    "NVIDIA-H100-80GB-HBM3": {"memory": 81559, "compute": "9.0", "mig_capable": True},
    "NVIDIA-H200": {"memory": 143771, "compute": "9.0", "mig_capable": True},
    "NVIDIA-L40S": {"memory": 46068, "compute": "8.9", "mig_capable": False},
    "NVIDIA-L4": {"memory": 23034, "compute": "8.9", "mig_capable": False},
    "Tesla-T4": {"memory": 15360, "compute": "7.5", "mig_capable": False},
    # Grace Hopper and Blackwell run only on the open kernel modules (open_modules_only: the proprietary ones fail to
    # initialise them, naming the PCI device); GH200 and GB200 are Grace superchips, arm64 nodes.
    "NVIDIA-GH200-480GB": {"memory": 97871, "compute": "9.0", "mig_capable": True, "open_modules_only": True,
                           "pci_device": "2342", "arch": "arm64"},
    "NVIDIA-B200": {"memory": 183359, "compute": "10.0", "mig_capable": True, "open_modules_only": True,
                    "pci_device": "2901"},
    "NVIDIA-GB200": {"memory": 189471, "compute": "10.0", "mig_capable": True, "open_modules_only": True,
                     "pci_device": "2941", "arch": "arm64"},
}
# A fleet's GPU without a product is this one.
DEFAULT_GPU_MODEL = "NVIDIA-A100-SXM4-80GB"
DEFAULT_MACHINE = "PowerEdge-R760xa"


def gpu_family(compute):
    """nvidia.com/gpu.family of a compute capability, by GFD's getArchFamily (k8s-device-plugin internal/lm/resource.go):
    every 8.x is ampere there, Ada Lovelace's 8.9 (L4, L40S) included; Blackwell's 10.x and 12.x blackwell, as the
    GFD of the GPU Operator v26.7.0 names them."""
    major, minor = (int(part) for part in compute.split("."))
    if major == 7:
        return "volta" if minor < 5 else "turing"
    return {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 8: "ampere", 9: "hopper",
            10: "blackwell", 12: "blackwell"}.get(major, "undefined")


def gpu_hardware(group):
    """A node group's GPUs with everything GFD labels: product, count, memory, compute, family, mig_capable."""
    gpu = dict(group.get("gpu") or {})
    if not gpu:
        return None
    product = gpu.setdefault("product", DEFAULT_GPU_MODEL)
    model = dict(GPU_MODELS.get(product) or {})
    model.update((key, gpu[key]) for key in ("memory", "compute", "mig_capable") if key in gpu)
    missing = [key for key in ("memory", "compute", "mig_capable") if key not in model]
    if missing:
        raise FleetError("node group %r: GPU %s is not one of %s: give its %s" % (
            group.get("name"), product, ", ".join(sorted(GPU_MODELS)), ", ".join(missing)))
    gpu.update(model, count=int(gpu.get("count", 1)), compute=str(model["compute"]),
               family=gpu_family(str(model["compute"])))
    return gpu


class FleetError(ValueError):
    pass


# What a busy OpenShift worker's Node carries beside what the collection reads, so that reads of nodes cost what
# they cost on a real cluster (10-40 KB of JSON a node): the images its kubelet holds (release payload images by
# digest, workload images by tag and digest), OVN-Kubernetes, CSI and machine-api annotations, more resources.
IMAGE_POOL = (
    ["%s@sha256:%s" % (DTK_REPOSITORY, hashlib.sha256(b"payload-%d" % i).hexdigest()) for i in range(90)]
    + ["registry.redhat.io/%s" % name for name in (
        "openshift4/ose-oauth-proxy", "rhel9/postgresql-15", "ubi9/ubi-minimal", "ubi9/python-311",
        "openshift-logging/fluentd-rhel9", "openshift4/ose-kube-rbac-proxy-rhel9", "rhel9/redis-7",
        "openshift4/ose-csi-external-provisioner-rhel9", "openshift4/ose-csi-node-driver-registrar-rhel9",
        "openshift4/ose-prometheus-node-exporter-rhel9")]
    + ["nvcr.io/nvidia/%s" % name for name in (
        "cuda", "pytorch", "tritonserver", "tensorflow", "nemo", "k8s/cuda-sample", "cloud-native/dcgm",
        "k8s/dcgm-exporter", "k8s-device-plugin", "cloud-native/gpu-operator-validator")])


def realistic_node(name, index, resources):
    """(status fields, annotations) a busy worker's Node adds; deterministic per name, varied across nodes. The
    addresses in annotations are a cloud VPC's; the node's own InternalIP stays the loopback one the simulation
    serves on."""
    seed = int(hashlib.sha256(name.encode()).hexdigest(), 16)
    count = 45 + seed % 21
    start = seed % len(IMAGE_POOL)
    images = []
    for offset in range(count):
        image = IMAGE_POOL[(start + offset * 7) % len(IMAGE_POOL)]
        digest = hashlib.sha256(("%s|%s" % (image, name)).encode()).hexdigest()
        names = ([image] if "@sha256:" in image
                 else ["%s@sha256:%s" % (image, digest), "%s:%d.%d" % (image, 1 + offset % 9, seed % 30)])
        images.append({"names": names, "sizeBytes": 50000000 + (seed >> offset) % 4000000000})
    octet = (index // 250, index % 250 + 1)
    ip = "10.0.%d.%d" % octet
    chassis = hashlib.md5(b"chassis" + name.encode()).hexdigest()
    annotations = {
        "k8s.ovn.org/host-cidrs": json.dumps(["%s/24" % ip]),
        "k8s.ovn.org/l3-gateway-config": json.dumps({"default": {
            "mode": "shared", "bridge-id": "br-ex", "interface-id": "br-ex_" + name,
            "mac-address": ":".join(chassis[i:i + 2] for i in range(0, 12, 2)), "ip-addresses": ["%s/24" % ip],
            "ip-address": "%s/24" % ip, "next-hops": ["10.0.%d.1" % octet[0]], "next-hop": "10.0.%d.1" % octet[0],
            "node-port-enable": "true", "vlan-id": "0"}}),
        "k8s.ovn.org/node-chassis-id": str(uuid.UUID(chassis)),
        "k8s.ovn.org/node-id": str(index + 3),
        "k8s.ovn.org/node-masquerade-subnet": json.dumps({"ipv4": "169.254.0.0/17", "ipv6": "fd69::/112"}),
        "k8s.ovn.org/node-primary-ifaddr": json.dumps({"ipv4": "%s/24" % ip}),
        "k8s.ovn.org/node-subnets": json.dumps({"default": ["10.%d.%d.0/23" % (128 + index // 128, index % 128 * 2)]}),
        "k8s.ovn.org/node-transit-switch-port-ifaddr": json.dumps({"ipv4": "100.88.%d.%d/16" % octet}),
        "k8s.ovn.org/remote-zone-migrated": name,
        "k8s.ovn.org/zone-name": name,
        "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": "i-0%s" % chassis[:16]}),
        "machine.openshift.io/machine": "openshift-machine-api/%s" % name,
        "cloud.network.openshift.io/egress-ipconfig": json.dumps([{
            "interface": "eni-0%s" % chassis[16:32], "ifaddr": {"ipv4": "10.0.%d.0/24" % octet[0]},
            "capacity": {"ipv4": 14, "ipv6": 15}}]),
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
    }
    extra = {"ephemeral-storage": "%dKi" % (1048064000 + seed % 1000), "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
    status = {
        "images": images,
        "allocatable": dict(resources, **extra), "capacity": dict(resources, **extra),
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
    }
    return status, annotations


def sanitize_label_value(value):
    """NFD's rule: characters outside [-A-Za-z0-9_.] become '_', then '-_.' are trimmed at both ends."""
    return re.sub(r"[^-A-Za-z0-9_.]", "_", value).strip("-_.")


def rhcos_streams(version):
    """(OpenShift minor or None, RHEL version) of an RHCOS build string."""
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)-(\d+)", version)
    if not match:
        raise FleetError("RHCOS version %r is not of the form N.N.N-N" % version)
    first, second = match.group(1), match.group(2)
    if int(first) >= 40:  # 416.94.x, 49.84.x: OpenShift 4.16 on RHEL 9.4 (before layered RHCOS, OCP <= 4.18)
        return "%s.%s" % (first[0], first[1:]), "%s.%s" % (second[0], second[1:])
    return None, "%s.%s" % (first, second)  # 9.6.x: layered RHCOS, RHEL 9.6 (OCP >= 4.19)


def os_facts(group, openshift_version):
    """os-release values, osImage and default kernel of a node group's OS."""
    os_spec = group.get("os") or {}
    if "rhcos" in os_spec:
        version = os_spec["rhcos"]
        ocp_of_build, rhel = rhcos_streams(version)
        ocp = ocp_of_build or os_spec.get("openshift") or ".".join(str(openshift_version or "4.21").split(".")[:2])
        release = {"OSTREE_VERSION": version, "OPENSHIFT_VERSION": ocp}
        if ocp_of_build:
            release.update(ID="rhcos", VERSION_ID=ocp, RHEL_VERSION=rhel)
        else:
            release.update(ID="rhel", VERSION_ID=rhel)
        return release, "Red Hat Enterprise Linux CoreOS %s (Plow)" % version, KERNEL_OF_RHEL.get(rhel), version
    if "ubuntu" in os_spec:
        version = str(os_spec["ubuntu"])
        return ({"ID": "ubuntu", "VERSION_ID": version}, "Ubuntu %s LTS" % version,
                KERNEL_OF_UBUNTU.get(version), None)
    if "rhel" in os_spec:
        version = str(os_spec["rhel"])
        return ({"ID": "rhel", "VERSION_ID": version}, "Red Hat Enterprise Linux %s (Plow)" % version,
                KERNEL_OF_RHEL.get(version), None)
    raise FleetError("node group %r: os must name rhcos, ubuntu or rhel" % group.get("name"))


def nfd_labels(release, kernel, gpu, style):
    labels = {}
    for key, value in release.items():
        labels[NFD + "system-os_release." + key] = value
        if key == "VERSION_ID" and "." in value:
            major, minor = value.split(".", 1)
            labels[NFD + "system-os_release.VERSION_ID.major"] = major
            labels[NFD + "system-os_release.VERSION_ID.minor"] = minor
    numbers = re.match(r"(\d+)\.(\d+)\.(\d+)", kernel)
    labels[NFD + "kernel-version.full"] = sanitize_label_value(kernel)
    labels[NFD + "kernel-version.major"], labels[NFD + "kernel-version.minor"], \
        labels[NFD + "kernel-version.revision"] = numbers.groups()
    labels[NFD + "cpu-cpuid.AVX2"] = "true"
    labels[NFD + "pci-1af4.present" if style == "vendor" else NFD + "pci-0200_1af4.present"] = "true"
    if gpu:
        labels[NFD + ("pci-10de.present" if style == "vendor" else "pci-%s_10de.present" % PCI_CLASS_OF_GPU)] = "true"
    return labels


def expand_groups(fleet, prefix=""):
    """One dict a node: name, labels, annotations, taints, status."""
    nodes = []
    openshift_version = (fleet.get("openshift") or {}).get("version")
    if fleet.get("node_status", "realistic") not in ("realistic", "minimal"):
        raise FleetError("node_status must be realistic or minimal, not %r" % fleet.get("node_status"))
    realistic = fleet.get("node_status", "realistic") == "realistic"
    index = 0
    for group in fleet.get("nodes") or []:
        unknown = set(group.get("faults") or {}) - set(FAULTS)
        if unknown:
            raise FleetError("node group %r: unknown faults %s (known: %s)" % (
                group.get("name"), ", ".join(sorted(unknown)), ", ".join(FAULTS)))
        count = int(group.get("count", 1))
        release, os_image, default_kernel, rhcos = os_facts(group, openshift_version)
        kernel = group.get("kernel") or default_kernel
        if not kernel:
            raise FleetError("node group %r: no default kernel for its OS: set kernel" % group.get("name"))
        gpu = gpu_hardware(group)
        # A Grace superchip's node is arm64, its RHEL kernel built for aarch64.
        arch = group.get("arch") or (gpu or {}).get("arch") or "amd64"
        if arch == "arm64" and not group.get("kernel"):
            kernel = kernel.replace("x86_64", "aarch64")
        style = group.get("nfd_style", "vendor")
        if style not in ("vendor", "class-vendor"):
            raise FleetError("node group %r: nfd_style must be vendor or class-vendor" % group.get("name"))
        runtime = group.get("runtime", "cri-o" if rhcos else "containerd")
        faults = dict(group.get("faults") or {})
        offline = packages.offline_settings(group, fleet)
        try:
            network, network_nfd_labels, network_labels = gpudirect.network_of(group, style)
        except ValueError as error:
            raise FleetError(str(error))
        for ordinal in range(count):
            index += 1
            name = prefix + (group["name"] if count == 1 else "%s-%d" % (group["name"], ordinal))
            true_labels = dict(nfd_labels(release, kernel, gpu, style), **network_nfd_labels)
            shown_labels = dict(true_labels)
            if faults.get("stale_nfd_label"):
                shown_labels[NFD + "system-os_release.OSTREE_VERSION"] = faults["stale_nfd_label"]
            hardware = {"gpu": gpu, "nfd_labels": shown_labels, "faults": faults, "rhcos": rhcos,
                        "kernel": kernel, "driver_build_seconds": group.get("driver_build_seconds", 0),
                        "machine": group.get("machine", DEFAULT_MACHINE)}
            if group.get("host_driver"):
                hardware["host_driver"] = str(group["host_driver"])
            if network:
                hardware["network"] = network
            if offline:
                hardware["offline"] = offline
            # Simulated kernel reboots (kernel.py): how long the node is down, and when NFD relabels it after.
            hardware.update({key: group[key] for key in ("reboot_seconds", "nfd_lag_seconds") if key in group})
            # The kubelet registers the beta os/arch labels too; without them kube-controller-manager adds them a
            # moment after creation, and a test that snapshots labels would see a change nobody asked for.
            labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": arch,
                      "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": arch,
                      "node-role.kubernetes.io/%s" % group.get("role", "worker"): ""}
            if rhcos:
                labels["node.openshift.io/os_id"] = release["ID"]
            if fleet.get("name"):
                labels[FLEET_LABEL] = fleet["name"]
            if group.get("host_driver"):
                # As an admin labels such a node for the GPU Operator: no driver container there.
                labels["nvidia.com/gpu.deploy.driver"] = "pre-installed"
            labels.update(network_labels)
            if fleet.get("nfd", "prelabelled") == "prelabelled" and not faults.get("no_nfd_labels"):
                labels.update(shown_labels)
            resources = {"cpu": str(group.get("cpu", 32)), "memory": group.get("memory", "256Gi"), "pods": "250"}
            annotations = {"kwok.x-k8s.io/node": "fake", HARDWARE_ANNOTATION: json.dumps(hardware, sort_keys=True)}
            status = {"allocatable": dict(resources), "capacity": dict(resources),
                      "addresses": [{"type": "InternalIP", "address": "127.0.%d.%d" % (index // 250, index % 250 + 1)},
                                    {"type": "Hostname", "address": name}]}
            if realistic:
                extra_status, extra_annotations = realistic_node(name, index, resources)
                status.update(extra_status)
                status["addresses"].append({"type": "InternalDNS", "address": "%s.ec2.internal" % name})
                annotations.update(extra_annotations)
            nodes.append({
                "name": name, "labels": labels, "taints": group.get("taints") or [], "annotations": annotations,
                "status": dict(status, **{
                    "nodeInfo": {"osImage": os_image, "kernelVersion": kernel, "operatingSystem": "linux",
                                 "architecture": arch, "kubeletVersion": "v1.34.4",
                                 "containerRuntimeVersion": ("cri-o://1.29.8" if runtime == "cri-o"
                                                             else "containerd://1.7.22"),
                                 "machineID": hashlib.md5(name.encode()).hexdigest(),
                                 "systemUUID": hashlib.md5(b"uuid" + name.encode()).hexdigest(),
                                 "bootID": hashlib.md5(b"boot" + name.encode()).hexdigest()}}),
            })
    return nodes


def booted_os(rhcos, openshift_version=None, kernel=None):
    """(os-release values, osImage, kernel) of a node running this RHCOS build; the kernel defaults to the build's."""
    release, os_image, default_kernel, _rhcos = os_facts({"name": rhcos, "os": {"rhcos": rhcos}}, openshift_version)
    return release, os_image, kernel or default_kernel


def relabelled_for_os(labels, release, kernel, keep=()):
    """A node's NFD labels once nfd-worker has seen it run another OS build: os-release and kernel labels are
    recomputed (those the new OS lacks go), the others stay; labels named in `keep` keep their old value (stale)."""
    fresh = nfd_labels(release, kernel, None, "vendor")
    result = {k: v for k, v in labels.items() if not k.startswith(OS_LABEL_PREFIXES) or k in keep}
    result.update({k: v for k, v in fresh.items() if k.startswith(OS_LABEL_PREFIXES) and k not in keep})
    return result


def rendered_config_name(pool, rhcos):
    return "rendered-%s-%s" % (pool, hashlib.md5(rhcos.encode()).hexdigest())


def rendered_config(pool, rhcos, openshift_version=None, kernel=None):
    """The rendered MachineConfig of a pool at an RHCOS build: what the simulated MCO boots nodes into."""
    kernel = booted_os(rhcos, openshift_version, kernel)[2]
    annotations = {RHCOS_OF_CONFIG: rhcos, KERNEL_OF_CONFIG: kernel}
    if openshift_version:
        annotations[RELEASE_OF_CONFIG] = str(openshift_version)
    return {"apiVersion": "%s/%s" % MCO_API, "kind": "MachineConfig",
            "metadata": {"name": rendered_config_name(pool, rhcos), "annotations": annotations},
            "spec": {"config": {"ignition": {"version": "3.4.0"}}}}


def expand_pools(fleet, nodes, prefix=""):
    """(MachineConfigPools, rendered MachineConfigs) of a fleet's `pools`; marks each member node as done at the
    rendered config of its own RHCOS build."""
    pools, configs = [], {}
    openshift_version = (fleet.get("openshift") or {}).get("version")
    for spec in fleet.get("pools") or []:
        name = prefix + spec["name"]
        role = spec.get("role", spec["name"])
        role_label = "node-role.kubernetes.io/" + role
        members = [n for n in nodes if role_label in n["labels"]]
        if not members:
            raise FleetError("pool %r: no node group has role %r" % (spec["name"], role))
        builds = set()
        for node in members:
            hardware = json.loads(node["annotations"][HARDWARE_ANNOTATION])
            if not hardware.get("rhcos"):
                raise FleetError("pool %r: node %s does not run RHCOS" % (spec["name"], node["name"]))
            config = rendered_config(name, hardware["rhcos"], openshift_version, hardware["kernel"])
            configs.setdefault(config["metadata"]["name"], config)
            node["annotations"].update({CURRENT_CONFIG: config["metadata"]["name"],
                                        DESIRED_CONFIG: config["metadata"]["name"], MCD_STATE: "Done"})
            builds.add(hardware["rhcos"])
        target = spec.get("rhcos") or (builds.pop() if len(builds) == 1 else None)
        if not target:
            raise FleetError("pool %r: its nodes run %s: say which is its target (rhcos)" % (
                spec["name"], ", ".join(sorted(builds))))
        config = rendered_config(name, target, openshift_version)
        configs.setdefault(config["metadata"]["name"], config)
        selector = {role_label: ""}
        if fleet.get("name"):
            selector[FLEET_LABEL] = fleet["name"]
        timings = {annotation: str(spec[key]) for key, annotation in (
            ("reboot_seconds", REBOOT_SECONDS), ("nfd_lag_seconds", NFD_LAG_SECONDS)) if key in spec}
        pools.append({
            "apiVersion": "%s/%s" % MCO_API, "kind": "MachineConfigPool",
            "metadata": {"name": name, "annotations": timings},
            "spec": {"configuration": {"name": config["metadata"]["name"]}, "paused": bool(spec.get("paused")),
                     "maxUnavailable": spec.get("max_unavailable", 1), "nodeSelector": {"matchLabels": selector},
                     "machineConfigSelector": {"matchLabels": {"machineconfiguration.openshift.io/role": role}}}})
    return pools, list(configs.values())


def rhcos_versions(fleet):
    versions = {(g.get("os") or {}).get("rhcos") for g in fleet.get("nodes") or []}
    return sorted(v for v in versions if v)


def dtk_image(version):
    """A stable digest reference per RHCOS version, as the release payload would give."""
    return "%s@sha256:%s" % (DTK_REPOSITORY, hashlib.sha256(("dtk-" + version).encode()).hexdigest())


class Fleet:
    """The objects one fleet created, so that a test can remove exactly those."""

    def __init__(self, client, spec, prefix=""):
        self.client = client
        self.spec = spec
        self.nodes = expand_groups(spec, prefix)
        self.pools, self.machine_configs = expand_pools(spec, self.nodes, prefix)
        self.dtk_tags = []

    @property
    def node_names(self):
        return [n["name"] for n in self.nodes]

    def apply(self):
        core = kubernetes.client.CoreV1Api(self.client)
        for node in self.nodes:
            body = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": node["name"], "labels": node["labels"], "annotations": node["annotations"]},
                    "spec": {"taints": node["taints"]} if node["taints"] else {},
                    "status": node["status"]}
            core.create_node(body)
        self._merge_registry(core)
        if self.spec.get("openshift") is not None:
            self._apply_openshift()
        custom = kubernetes.client.CustomObjectsApi(self.client)
        for config in self.machine_configs:
            custom.create_cluster_custom_object(*MCO_API, "machineconfigs", config)
        for pool in self.pools:
            custom.create_cluster_custom_object(*MCO_API, "machineconfigpools", pool)
        return self

    def wait_ready(self, timeout=60):
        """Waits until kwok has initialised every node of this fleet (Ready)."""
        core = kubernetes.client.CoreV1Api(self.client)
        pending = api.wait_each(self.node_names, lambda name: api.has_condition(core.read_node(name), "Ready"),
                                timeout)
        if pending:
            raise FleetError("nodes not Ready after %ds (is kwok running?): %s" % (timeout, ", ".join(pending)))
        return self

    def delete(self):
        custom = kubernetes.client.CustomObjectsApi(self.client)
        for plural, objects in (("machineconfigpools", self.pools), ("machineconfigs", self.machine_configs)):
            for obj in objects:
                try:
                    custom.delete_cluster_custom_object(*MCO_API, plural, obj["metadata"]["name"])
                except ApiException as error:
                    if error.status != 404:
                        raise
        core = kubernetes.client.CoreV1Api(self.client)
        for name in self.node_names:
            try:
                core.delete_node(name)
            except ApiException as error:
                if error.status != 404:
                    raise
        if self.dtk_tags:
            stream = custom.get_namespaced_custom_object("image.openshift.io", "v1", DTK_STREAM[0], "imagestreams",
                                                         DTK_STREAM[1])
            keep = [t for t in stream["spec"].get("tags", []) if t.get("name") not in self.dtk_tags]
            custom.patch_namespaced_custom_object("image.openshift.io", "v1", DTK_STREAM[0], "imagestreams",
                                                  DTK_STREAM[1], {"spec": {"tags": keep}})

    def _merge_registry(self, core):
        images = list(self.spec.get("registry") or [])
        namespace, name = REGISTRY_CONFIGMAP
        try:
            current = core.read_namespaced_config_map(name, namespace).data or {}
        except ApiException as error:
            if error.status != 404:
                raise
            core.create_namespaced_config_map(namespace, {"metadata": {"name": name}, "data": {"images": ""}})
            current = {}
        known = [line for line in (current.get("images") or "").splitlines() if line]
        merged = known + [i for i in images if i not in known]
        if merged != known:
            core.patch_namespaced_config_map(name, namespace, {"data": {"images": "\n".join(merged)}})

    def _apply_openshift(self):
        openshift = self.spec["openshift"] or {}
        dtk = openshift.get("driver_toolkit") or {}
        versions = sorted(set(rhcos_versions(self.spec)) | set(dtk.get("extra") or []))
        missing = set(dtk.get("missing") or [])
        tags = [{"name": v, "from": {"kind": "DockerImage", "name": dtk_image(v)}} for v in versions if v not in missing]
        if dtk.get("broken"):
            tags.append({"name": "", "from": {"kind": "DockerImage", "name": dtk_image("broken")}})
        if dtk.get("placeholder"):
            tags.append({"name": "0.0.1-snapshot-machine-os", "from": {"kind": "DockerImage",
                                                                       "name": dtk_image("placeholder")}})
        core = kubernetes.client.CoreV1Api(self.client)
        _ensure_namespace(core, DTK_STREAM[0])
        self.dtk_tags = [t["name"] for t in tags]
        ensure_dtk_tags(self.client, tags, remove=missing)
        if openshift.get("version"):
            ensure_cluster_version(self.client, str(openshift["version"]))


def _ensure_namespace(core, name):
    try:
        core.create_namespace({"metadata": {"name": name}})
    except ApiException as error:
        if error.status != 409:
            raise


def ensure_dtk_tags(client, tags, remove=()):
    """Adds tags to the openshift/driver-toolkit stream (creating it), `latest` following the newest version."""
    custom = kubernetes.client.CustomObjectsApi(client)
    group, version, plural = "image.openshift.io", "v1", "imagestreams"
    namespace, name = DTK_STREAM
    try:
        stream = custom.get_namespaced_custom_object(group, version, namespace, plural, name)
    except ApiException as error:
        if error.status != 404:
            raise
        stream = custom.create_namespaced_custom_object(group, version, namespace, plural, {
            "apiVersion": "image.openshift.io/v1", "kind": "ImageStream",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"tags": []}})
    current = [t for t in stream.get("spec", {}).get("tags") or []
               if t.get("name") not in remove and t.get("name") != "latest"]
    names = [t.get("name") for t in current]
    current += [t for t in tags if t["name"] not in names]
    versions = [t["name"] for t in current if re.fullmatch(r"\d+\.\d+\.\d+-\d+", t.get("name") or "")]
    spec_tags = copy.deepcopy(current)
    if versions:
        newest = max(versions, key=_version_key)
        spec_tags.append({"name": "latest", "from": {"kind": "DockerImage", "name": dtk_image(newest)}})
    custom.patch_namespaced_custom_object(group, version, namespace, plural, name, {"spec": {"tags": spec_tags}})
    status_tags = [{"tag": t.get("name"), "items": [{
        "dockerImageReference": t["from"]["name"], "image": t["from"]["name"].split("@")[-1],
        "created": "2026-01-01T00:00:00Z", "generation": 1}]} for t in spec_tags]
    custom.patch_namespaced_custom_object_status(group, version, namespace, plural, name, {
        "status": {"dockerImageRepository": "image-registry.openshift-image-registry.svc:5000/openshift/driver-toolkit",
                   "tags": status_tags}})


def _version_key(version):
    numbers = [int(p) for p in re.split(r"[.-]", version)]
    # Layered builds (9.6.x, OCP >= 4.19) come after every 4xx.yy.x build (OCP <= 4.18).
    return numbers[0] < 40, numbers


def ensure_cluster_version(client, version):
    custom = kubernetes.client.CustomObjectsApi(client)
    args = ("config.openshift.io", "v1", "clusterversions")
    try:
        current = custom.create_cluster_custom_object(*args, {
            "apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion", "metadata": {"name": "version"},
            "spec": {"channel": "stable-%s" % ".".join(version.split(".")[:2]), "clusterID": "local"}})
    except ApiException as error:
        if error.status != 409:
            raise
        current = custom.get_cluster_custom_object(*args, "version")
    history = [{"version": version, "image": release_image(version), "state": "Completed", "verified": False,
                "startedTime": "2026-01-01T00:00:00Z", "completionTime": "2026-01-01T01:00:00Z"}]
    custom.patch_cluster_custom_object_status(*args, "version", {
        "status": cluster_version_status(version, history, current["metadata"]["generation"])})


def cluster_version_status(version, history, generation):
    """A ClusterVersion's status as the cluster-version operator writes it once the cluster runs `version`: the
    fields the real API requires, history newest first, no update available."""
    image = release_image(version)
    return {"desired": {"version": version, "image": image}, "history": history, "observedGeneration": generation,
            "versionHash": hashlib.sha256(image.encode()).hexdigest()[:12], "availableUpdates": []}


def release_image(version):
    return "quay.io/openshift-release-dev/ocp-release:%s-x86_64" % version
