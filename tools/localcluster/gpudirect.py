"""GPUDirect RDMA on simulated nodes: the NVIDIA NIC, its network driver, and what nvidia-peermem needs of them.

A node's NIC and network driver come from its fleet group's `network` (fleet.py), as a real node shows them:

- an NVIDIA (Mellanox) NIC: NFD's PCI label `feature.node.kubernetes.io/pci-15b3.present=true` (the label the GPU
  Operator's validator reads; `pci-0207_15b3.present` in the class-vendor style);
- `driver: doca`, the NVIDIA Network Operator's driver container (DOCA-OFED): once its pod is ready on the node it
  writes /run/mellanox/drivers/.driver-ready there and the Network Operator labels the node
  `network.nvidia.com/operator.mofed.wait=false` (`true` while the driver pod is not ready). The simulator reads the
  label, which stands for the file: a test that sets it to `true` takes the network driver away;
- `driver: host`, MOFED installed on the host: mlx5_core loaded from it, its sources in /usr/src/ofa_kernel;
- `driver: none`, a NIC without its network driver: the Network Operator's driver pod is not ready
  (`network.nvidia.com/operator.mofed.wait=true`).

The driver image's `nvidia-driver reload_nvidia_peermem` (nvidia-peermem-ctr) waits until the network driver is there
(/run/mellanox/drivers/.driver-ready, through its /run/mellanox/drivers mount; mlx5_core with USE_HOST_MOFED=true),
then loads nvidia-peermem. Without it the real container waits ("waiting for mellanox ofed and nvidia drivers to be
installed") and its startup probe (`nvidia-driver probe_nvidia_peermem`) fails while mlx5_core is loaded without
nvidia-peermem, until the kubelet restarts it: the simulator shows at once the crash loop the kubelet shows after the
probe's failures, with the cause as its message. A node without any NVIDIA NIC is treated as one without its network
driver (the real container waits there for ever, its probe passing as no mlx5_core is loaded).

The driver container itself loads: the node keeps its GPUs; the pod is not Ready. The GPU Operator's validator then
finds nvidia_peermem missing in its driver check (validateAdditionalDriverComponents, GPU_DIRECT_RDMA_ENABLED in
.driver-ctr-ready) and writes no driver-ready: see simulator.validator_checks.

Not played: nvidia-fs-ctr and nvidia-gdrcopy-ctr build their modules wherever their images exist; the
k8s-driver-manager's own wait for the network driver before the driver container starts.
"""

NFD = "feature.node.kubernetes.io/"
NIC_LABEL = NFD + "pci-15b3.present"
MOFED_WAIT_LABEL = "network.nvidia.com/operator.mofed.wait"
NETWORK_DRIVERS = ("doca", "host", "none")
PEERMEM_CONTAINER = "nvidia-peermem-ctr"
DRIVER_READY_FILE = "/run/mellanox/drivers/.driver-ready"


def network_of(group, style="vendor"):
    """(hardware entry, NFD labels, the Network Operator's labels) of a fleet group's `network`; empty without one.
    style: the fleet's NFD PCI label style (an InfiniBand controller, class 0207, under class-vendor). ValueError for
    an unknown driver."""
    network = group.get("network")
    if not network:
        return {}, {}, {}
    driver = network.get("driver", "doca")
    if driver not in NETWORK_DRIVERS:
        raise ValueError("node group %r: network driver must be one of %s, not %r" % (
            group.get("name"), ", ".join(NETWORK_DRIVERS), driver))
    operator = {MOFED_WAIT_LABEL: "false" if driver == "doca" else "true"} if driver in ("doca", "none") else {}
    nic = NIC_LABEL if style == "vendor" else NFD + "pci-0207_15b3.present"
    return {"driver": driver}, {nic: "true"}, operator


def _env(container, name):
    return next((e.get("value") for e in container.get("env") or [] if e.get("name") == name), None)


def _sees_mellanox_drivers(pod, container):
    host_paths = {v["name"]: (v.get("hostPath") or {}).get("path") for v in pod["spec"].get("volumes") or []}
    return any(m.get("mountPath") == "/run/mellanox/drivers" and host_paths.get(m["name"]) == "/run/mellanox/drivers"
               for m in container.get("volumeMounts") or [])


def peermem_problem(pod, container, node, network):
    """Why nvidia-peermem-ctr cannot load nvidia-peermem on the node, or None."""
    node_name = node["metadata"]["name"]
    waiting = "%s on node %s: waiting for mellanox ofed and nvidia drivers to be installed: " % (
        container["name"], node_name)
    if _env(container, "USE_HOST_MOFED") == "true":
        if network.get("driver") == "host":
            return None
        return waiting + "mlx5_core is not loaded, no MOFED is installed on the host (USE_HOST_MOFED=true)"
    if not _sees_mellanox_drivers(pod, container):
        return waiting + "%s is not mounted (no hostPath volume of /run/mellanox/drivers)" % DRIVER_READY_FILE
    wait = (node["metadata"].get("labels") or {}).get(MOFED_WAIT_LABEL)
    if network.get("driver") == "doca" and wait == "false":
        return None
    if not network:
        why = "the node has no NVIDIA NIC (no label %s=true)" % NIC_LABEL
    elif network.get("driver") == "host":
        why = "the node's MOFED is installed on the host: set use_host_mofed"
    else:
        why = "the NVIDIA Network Operator's driver is not ready on the node (%s=%s)" % (MOFED_WAIT_LABEL, wait)
    return waiting + "%s is missing, %s" % (DRIVER_READY_FILE, why)


def failures(pod, node, network):
    """{container: message} of the GPUDirect containers of a driver pod that cannot load their module on the node."""
    failed = {}
    for container in pod["spec"]["containers"]:
        if container["name"] == PEERMEM_CONTAINER:
            problem = peermem_problem(pod, container, node, network)
            if problem:
                failed[container["name"]] = problem
    return failed
