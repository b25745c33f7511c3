"""The NVIDIA DRA driver's kubelet plugin, for the simulator: the ResourceSlices of the nodes where it runs.

While a kubelet plugin pod (app.kubernetes.io/component=nvidia-dra-driver-kubelet-plugin) is Ready on a node, the node
has one ResourceSlice of driver gpu.nvidia.com (pool: the node's name, one slice in the pool), with a device per GPU,
or per MIG device where the node's MIG layout enabled MIG, carrying the attributes and capacity the real
gpu-kubelet-plugin publishes (NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/deviceinfo.go): type, uuid,
productName (NVML's name), brand, architecture, cudaComputeCapability, driverVersion and cudaDriverVersion (versions),
pcieBusID, addressingMode; capacity memory (and for a MIG device multiprocessors, its engines, memory slices); a MIG
device also parentUUID and profile. The driver version is the node's driver (its driver pod's image tag, or the
host's). The devices are those the plugin found when its pod started, as the real plugin enumerates them once: a MIG
layout the MIG manager applies under a running plugin (which, unlike the device plugin, the MIG manager does not stop)
reaches the slice only once the plugin pod is restarted. A plugin pod replaced on a node still labelled for it keeps
the node's slice for the kubelet's wiping delay, and the new pod publishes the pool anew, in the next generation.

The slice is written as the plugin writes it: with a token of the plugin pod's service account bound to that pod (a
TokenRequest, as the kubelet mounts one), which carries the pod's node name (authentication.kubernetes.io/node-name),
so that the ResourceSlice admission policy judges the simulated plugin as it judges the real one and the plugin's RBAC
applies. When no plugin pod is Ready on the node any more, the slice is deleted with the simulator's own credentials,
as the kubelet deletes the slices of a plugin that unregistered.

The real kube-scheduler allocates claims from these slices; nothing of allocation is played here. What the kubelet
and the plugin do with an allocated claim is played by its outcome only (prepare_problem, unprepare): a pod using
ResourceClaims starts only once each of them is allocated, and one allocated from gpu.nvidia.com only while the node's
kubelet plugin is Ready (NodePrepareResources; else it stays in ContainerCreating, "DRA driver gpu.nvidia.com is not
registered"); the pod is then annotated prepared (PREPARED). A prepared pod that finished or is being deleted is
unprepared (the annotation removed) only while the plugin is Ready: until then kwok does not delete it (stages.py), so
a pod being deleted on a node whose plugin went first stays Terminating, as the kubelet retries NodeUnprepareResources.
That holds for claims with admin access too (the node agents' of the DRA stack).
Not played: the CDI specs themselves, device health, the compute-domain plugin and the ComputeDomain controller. A
prepared pod holds the node's GPUs (holds_gpus) as a pod requesting nvidia.com/gpu does, unless all of its GPUs came
with admin access (annotated PREPARED=ADMIN_ONLY): a monitoring view of devices others use, which the GPU Operator's
agents (GFD, the DCGM exporter, DCGM) hold, and which, as their device-plugin forms' access through the runtime, keeps
neither a driver from loading nor a MIG layout from being applied here.
"""

import hashlib
import logging

import kubernetes
from kubernetes.client.rest import ApiException

# On a pod whose claims of gpu.nvidia.com the kubelet plugin prepared, until it unprepares them; kwok deletes no pod
# carrying it.
from .stages import DRA_PREPARED_ANNOTATION as PREPARED

# PREPARED's value on a pod all of whose claims of gpu.nvidia.com were allocated with admin access.
ADMIN_ONLY = "admin-access"
LOG = logging.getLogger("simulator.dra")
KUBELET_PLUGIN = "nvidia-dra-driver-kubelet-plugin"
# The node label the kubelet plugin DaemonSet selects.
DEPLOY_LABEL = "nvidia.com/gpu.deploy.dra-driver"
DRIVER = "gpu.nvidia.com"
API = "/apis/resource.k8s.io/v1"
SLICES = API + "/resourceslices"
# NVML's product names of the fleet's products (fleet.GPU_MODELS: GFD's labels, spaces as '-').
NVML_NAMES = {
    "NVIDIA-A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-40GB": "NVIDIA A100-SXM4-40GB",
    "NVIDIA-A30": "NVIDIA A30", "NVIDIA-A10": "NVIDIA A10", "NVIDIA-H100-80GB-HBM3": "NVIDIA H100 80GB HBM3",
    "NVIDIA-H200": "NVIDIA H200", "NVIDIA-L40S": "NVIDIA L40S", "NVIDIA-L4": "NVIDIA L4", "Tesla-T4": "Tesla T4",
    "NVIDIA-GH200-480GB": "NVIDIA GH200 480GB", "NVIDIA-B200": "NVIDIA B200", "NVIDIA-GB200": "NVIDIA GB200",
}
# NVML's architecture of a compute capability (go-nvlib's GetArchitectureAsString).
ARCHITECTURES = {"7.0": "Volta", "7.5": "Turing", "8.0": "Ampere", "8.6": "Ampere", "8.7": "Ampere",
                 "8.9": "Ada Lovelace", "9.0": "Hopper", "10.0": "Blackwell", "12.0": "Blackwell"}
# MIG: a profile's GPU instance profile id, memory slices (of 8) and engines (copy, decoder, encoder, JPEG, OFA) on the
# A100 (NVML's GpuInstanceProfileInfo, as `nvidia-smi mig -lgip` lists it); SMs per compute slice. A `+me` profile
# adds the media extensions (a decoder, a JPEG engine and the OFA) to its one slice.
MIG_PROFILES = {"1g": (19, 1, (1, 0, 0, 0, 0)), "2g": (14, 2, (2, 1, 0, 0, 0)), "3g": (9, 4, (3, 2, 0, 0, 0)),
                "4g": (5, 4, (4, 2, 0, 0, 0)), "7g": (0, 8, (7, 5, 0, 1, 1))}
MEDIA_EXTENSIONS = (0, 1, 0, 1, 1)
ENGINES = ("copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines")
SMS_PER_SLICE = 14
# The kubelet deletes the ResourceSlices of a kubelet plugin that unregistered only after this delay (its
# RegistrationHandler's wiping delay), so that a plugin restarting keeps its pool and publishes it anew.
WIPING_DELAY = 30


def _uuid(prefix, *parts):
    digest = hashlib.sha256("/".join(str(part) for part in parts).encode()).hexdigest()
    return "%s-%s-%s-%s-%s-%s" % (prefix, digest[:8], digest[8:12], digest[12:16], digest[16:20], digest[20:32])


def gpu_uuid(node_name, index):
    """The UUID of a node's GPU, as NVML gives it (GPU-...): stable for the node's name and the GPU's index."""
    return _uuid("GPU", node_name, index)


def pcie_bus_id(index):
    """The PCI bus ID of a node's GPU, as the plugin publishes it (pcieBusID: domain 0000, lower-case hex)."""
    return "0000:%02x:00.0" % (0x18 + 0x11 * index)


def semver(version):
    """A version as the driver publishes it (semver.MustParse(...).String()): three parts, no leading zeros."""
    parts = [str(int(part)) for part in (str(version).split(".") + ["0", "0"])[:3]]
    return ".".join(parts)


def gpu_devices(node_name, hw, driver_version, cuda_version, layout):
    """The devices of the node's slice: per GPU, the GPU (MIG disabled) or its MIG devices (layout[index], a
    {profile: count}, as mig.py holds the node's layout)."""
    gpu = hw.get("gpu") or {}
    devices = []
    for index in range(int(gpu.get("count") or 0)):
        uuid = gpu_uuid(node_name, index)
        attributes = {
            "productName": {"string": NVML_NAMES.get(gpu["product"], gpu["product"].replace("-", " "))},
            "brand": {"string": "Tesla" if gpu["product"].startswith("Tesla") else "Nvidia"},
            "architecture": {"string": ARCHITECTURES.get(str(gpu["compute"]), "Unknown")},
            "cudaComputeCapability": {"version": semver(gpu["compute"])},
            "driverVersion": {"version": semver(driver_version)},
            "cudaDriverVersion": {"version": semver(cuda_version)},
            "addressingMode": {"string": "HMM"},
        }
        bus = pcie_bus_id(index)
        profiles = layout[index] if index < len(layout) else None
        if profiles is None:
            devices.append({"name": "gpu-%d" % index, "attributes": dict(
                attributes, type={"string": "gpu"}, uuid={"string": uuid}, pcieBusID={"string": bus}),
                "capacity": {"memory": {"value": "%dMi" % gpu["memory"]}}})
            continue
        start = 0
        for profile, count in sorted(profiles.items()):
            compute = profile.split(".", 1)[0]
            profile_id, size, engines = MIG_PROFILES.get(compute, (99, 1, (1, 0, 0, 0, 0)))
            if profile.endswith("+me"):
                engines = tuple(a + b for a, b in zip(engines, MEDIA_EXTENSIONS))
            memory_gb = int("".join(c for c in profile.split(".", 1)[1].split("+")[0] if c.isdigit()) or 0)
            for _device in range(int(count)):
                capacity = {"memory": {"value": "%dGi" % memory_gb},
                            "multiprocessors": {"value": str(SMS_PER_SLICE * int(compute[:-1]))}}
                capacity.update((name, {"value": str(value)}) for name, value in zip(ENGINES, engines))
                capacity.update(("memorySlice%d" % slot, {"value": "1"}) for slot in range(start, start + size))
                devices.append({
                    "name": "gpu-%d-mig-%d-%d-%d" % (index, profile_id, start, size),
                    "attributes": dict(attributes, type={"string": "mig"},
                                       uuid={"string": _uuid("MIG", node_name, index, start)},
                                       parentUUID={"string": uuid}, profile={"string": profile},
                                       pcieBusID={"string": bus}),
                    "capacity": capacity})
                start += size
    return devices


def allocated_gpus(claim, admin_access=True):
    """Whether the scheduler allocated devices of gpu.nvidia.com to the claim (with admin_access=False: other than
    with admin access)."""
    results = ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")) or []
    return any(result.get("driver") == DRIVER and (admin_access or not result.get("adminAccess"))
               for result in results)


class KubeletPlugin:
    """The kubelet plugins' slices, and the claims that hold GPUs, for the Simulator (which calls reconcile)."""

    def __init__(self, simulator):
        self.sim = simulator
        self.slices = {}  # name -> ResourceSlice (informer store)
        self.claims = {}  # namespace/name -> ResourceClaim (informer store)
        self.tokens = {}  # pod uid -> client acting as the plugin pod's service account
        self.enumerated = {}  # plugin pod uid -> the node's MIG layout when that pod started (the devices it found)
        self.unregistered = {}  # node name -> when its plugin went while its slice stays (WIPING_DELAY)

    def start(self):
        if not self.sim.serves("resource.k8s.io", "v1"):
            return False
        self.sim.informer("resourceslices", self._lister("resourceslices"), lambda o: o["metadata"]["name"],
                          self.slices)
        self.sim.informer("resourceclaims", self._lister("resourceclaims"),
                          lambda o: "%s/%s" % (o["metadata"]["namespace"], o["metadata"]["name"]), self.claims)
        return True

    def _lister(self, plural):
        def list_all(**kwargs):
            return self.sim.custom.list_cluster_custom_object("resource.k8s.io", "v1", plural, **kwargs)
        return list_all

    def holds_gpus(self, pod):
        """A running pod whose claims of gpu.nvidia.com were prepared."""
        if pod["metadata"].get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return False
        return (pod["metadata"].get("annotations") or {}).get(PREPARED, ADMIN_ONLY) != ADMIN_ONLY

    def prepare_problem(self, pod, serving):
        """Why the kubelet cannot start a pod yet because of its ResourceClaims, None when it can (and then the claims
        of gpu.nvidia.com are prepared: the pod annotated PREPARED). serving: the node's kubelet plugin is Ready."""
        refs = pod["spec"].get("resourceClaims") or []
        if not refs:
            return None
        namespace = pod["metadata"]["namespace"]
        generated = {status["name"]: status.get("resourceClaimName")
                     for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        gpus = exclusive = False
        for ref in refs:
            name = ref.get("resourceClaimName") or generated.get(ref["name"])
            claim = self.claims.get("%s/%s" % (namespace, name)) if name else None
            if not claim or not ((claim.get("status") or {}).get("allocation")):
                return "waiting for ResourceClaim %s of pod %s/%s to be allocated" % (
                    name or ref["name"], namespace, pod["metadata"]["name"])
            gpus = gpus or allocated_gpus(claim)
            exclusive = exclusive or allocated_gpus(claim, admin_access=False)
        if not gpus:
            return None
        if not serving:
            return "failed to prepare dynamic resources: DRA driver %s is not registered" % DRIVER
        if PREPARED not in (pod["metadata"].get("annotations") or {}):
            self.sim.core.patch_namespaced_pod(pod["metadata"]["name"], namespace, {"metadata": {"annotations": {
                PREPARED: "true" if exclusive else ADMIN_ONLY}}})
            LOG.info("pod %s/%s: claims of %s prepared on %s", namespace, pod["metadata"]["name"], DRIVER,
                     pod["spec"]["nodeName"])
        return None

    def unprepare(self, pod, serving):
        """A prepared pod that finished or is being deleted: its claims unprepared while the kubelet plugin is Ready
        (serving); until then it keeps PREPARED, and kwok does not delete it."""
        if PREPARED not in (pod["metadata"].get("annotations") or {}):
            return
        name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
        if not serving:
            LOG.info("pod %s/%s: cannot unprepare its claims, DRA driver %s is not registered on %s", namespace, name,
                     DRIVER, pod["spec"]["nodeName"])
            return
        try:
            self.sim.core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {PREPARED: None}}})
        except ApiException as error:
            if error.status != 404:
                raise
        LOG.info("pod %s/%s: claims of %s unprepared on %s", namespace, name, DRIVER, pod["spec"]["nodeName"])

    def nodes_of_claim(self, claim):
        """The nodes of the pods a claim is reserved for."""
        namespace = claim["metadata"]["namespace"]
        pods = (self.sim.pods.get("%s/%s" % (namespace, ref.get("name")))
                for ref in (claim.get("status") or {}).get("reservedFor") or [] if ref.get("resource") == "pods")
        return {pod["spec"].get("nodeName") for pod in pods if pod and pod["spec"].get("nodeName")}

    def node_slices(self, node_name):
        return [s for s in list(self.slices.values())
                if s["spec"].get("nodeName") == node_name and s["spec"].get("driver") == DRIVER]

    def reconcile(self, node, hw, plugin, driver_version, cuda_version, layout, now, restarting=False):
        """The node's slice while its plugin pod is Ready (plugin), none otherwise; hw: its simulated hardware, layout
        its MIG layout now. The plugin publishes the devices it found when its pod started (the real one enumerates
        them once, at startup): a MIG layout applied under a running plugin reaches the slice only when the plugin
        pod is restarted. restarting: no plugin pod is Ready, but the node's driver is and the node is still labelled
        for the plugin (its pod being replaced): the slice stays until WIPING_DELAY after the plugin went, and a new
        plugin pod within it publishes the pool anew (the next generation). Returns when to look again, or None."""
        node_name = node["metadata"]["name"]
        current = self.node_slices(node_name)
        if plugin is None:
            if current and restarting:
                since = self.unregistered.setdefault(node_name, now)
                if now < since + WIPING_DELAY:
                    return since + WIPING_DELAY
            self.unregistered.pop(node_name, None)
            for stale in current:
                self._delete(stale)
            return None
        self.unregistered.pop(node_name, None)
        uid = plugin["metadata"]["uid"]
        if uid not in self.enumerated:
            live = self._live_uids()
            self.enumerated = {key: value for key, value in self.enumerated.items() if key in live}
            self.enumerated[uid] = layout
        devices = gpu_devices(node_name, hw, driver_version, cuda_version, self.enumerated[uid])
        if current and len(current) == 1 and current[0]["spec"].get("devices") == devices:
            return None
        generation = max([s["spec"]["pool"].get("generation", 0) for s in current] or [0]) + 1
        spec = {"driver": DRIVER, "nodeName": node_name, "devices": devices,
                "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1}}
        api = self._plugin_api(plugin)
        if current:
            body = dict(current[0], spec=spec)
            self._call(api, "PUT", "%s/%s" % (SLICES, current[0]["metadata"]["name"]), body)
            for extra in current[1:]:
                self._delete(extra)
        else:
            self._call(api, "POST", SLICES, {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"generateName": "%s-%s-" % (node_name, DRIVER), "ownerReferences": [{
                    "apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node["metadata"]["uid"],
                    "controller": True}]},
                "spec": spec})
        LOG.info("node %s: ResourceSlice of %s with %d devices (pool generation %d)", node_name, DRIVER, len(devices),
                 generation)
        return None

    def _plugin_api(self, pod):
        """A client acting as the plugin pod: its service account's token, bound to the pod (node name included)."""
        uid = pod["metadata"]["uid"]
        if uid not in self.tokens:
            request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {
                "expirationSeconds": 3600,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"], "uid": uid}}}
            answer = self.sim.core.create_namespaced_service_account_token(
                pod["spec"].get("serviceAccountName") or "default", pod["metadata"]["namespace"], request)
            config = kubernetes.client.Configuration()
            base = self.sim.client.configuration
            config.host, config.ssl_ca_cert, config.verify_ssl = base.host, base.ssl_ca_cert, base.verify_ssl
            config.api_key = {"authorization": "Bearer " + answer.status.token}
            self.tokens = {key: value for key, value in self.tokens.items() if key in self._live_uids()}
            self.tokens[uid] = kubernetes.client.ApiClient(config)
        return self.tokens[uid]

    def _live_uids(self):
        return {pod["metadata"]["uid"] for pod in list(self.sim.pods.values())}

    @staticmethod
    def _call(api, method, path, body=None):
        return api.call_api(path, method, body=body, response_type="object", _return_http_data_only=True,
                            auth_settings=["BearerToken"], header_params={"Content-Type": "application/json"})

    def _delete(self, resource_slice):
        """As the kubelet deletes the slices of a plugin that went."""
        try:
            self._call(self.sim.client, "DELETE", "%s/%s" % (SLICES, resource_slice["metadata"]["name"]))
            LOG.info("node %s: ResourceSlice %s deleted, no kubelet plugin is Ready there",
                     resource_slice["spec"].get("nodeName"), resource_slice["metadata"]["name"])
        except ApiException as error:
            if error.status != 404:
                raise
