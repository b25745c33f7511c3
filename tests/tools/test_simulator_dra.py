"""The simulated DRA kubelet plugin: the devices of a node's ResourceSlice, and when a pod's claims let it start and go."""

from localcluster import dra

A100 = {"gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 2, "memory": 81920, "compute": "8.0"}}


def test_a_gpu_under_a_mig_layout_is_published_as_its_mig_devices_the_other_whole():
    devices = dra.gpu_devices("node-a", A100, "570.172.08", "12.8", [{"3g.40gb": 2}, None])
    assert [d["name"] for d in devices] == ["gpu-0-mig-9-0-4", "gpu-0-mig-9-4-4", "gpu-1"]
    first, second, whole = devices
    assert (first["attributes"]["type"], first["attributes"]["profile"], first["attributes"]["driverVersion"]) == (
        {"string": "mig"}, {"string": "3g.40gb"}, {"version": "570.172.8"})
    engines = {"copyEngines": {"value": "3"}, "decoders": {"value": "2"}, "encoders": {"value": "0"},
               "jpegEngines": {"value": "0"}, "ofaEngines": {"value": "0"}}
    assert first["capacity"] == dict(engines, memory={"value": "40Gi"}, multiprocessors={"value": "42"},
                                     memorySlice0={"value": "1"}, memorySlice1={"value": "1"},
                                     memorySlice2={"value": "1"}, memorySlice3={"value": "1"})
    assert sorted(second["capacity"]) == sorted(list(engines) + [
        "memory", "memorySlice4", "memorySlice5", "memorySlice6", "memorySlice7", "multiprocessors"])
    assert first["attributes"]["parentUUID"] == second["attributes"]["parentUUID"] != whole["attributes"]["uuid"]
    assert (whole["attributes"]["type"], whole["capacity"]) == ({"string": "gpu"}, {"memory": {"value": "81920Mi"}})
    assert whole["attributes"]["productName"] == {"string": "NVIDIA A100-SXM4-80GB"}


def test_the_media_extensions_add_a_decoder_a_jpeg_engine_and_the_ofa():
    (device,) = dra.gpu_devices("node-a", A100, "570.172.08", "12.8", [{"1g.10gb+me": 1}])[:1]
    assert {key: value["value"] for key, value in device["capacity"].items() if key in dra.ENGINES} == {
        "copyEngines": "1", "decoders": "1", "encoders": "0", "jpegEngines": "1", "ofaEngines": "1"}
    assert device["attributes"]["profile"] == {"string": "1g.10gb+me"}


def test_the_plugin_publishes_what_it_found_at_its_start_and_a_replacement_the_next_generation():
    """A layout applied under a running plugin is not published; a plugin pod replaced within the kubelet's wiping
    delay keeps the pool, and the new one publishes the new devices in the next generation; a plugin gone for good
    (or past the delay) has its slice deleted."""
    calls = []
    sim = type("Sim", (), {"pods": {}, "client": "sim"})()
    plugin = dra.KubeletPlugin(sim)
    plugin._plugin_api = lambda pod: "plugin " + pod["metadata"]["uid"]

    def call(api, method, path, body=None):
        calls.append((api, method, body and [d["name"] for d in body["spec"]["devices"]],
                      body and body["spec"]["pool"]["generation"]))
        if method != "DELETE":
            plugin.slices = {"s": dict(body, metadata={"name": "s"})}
        else:
            plugin.slices = {}
    plugin._call = call
    node = {"metadata": {"name": "a", "uid": "n"}}
    whole, mig = [None], [{"3g.40gb": 2}]
    first, second = ({"metadata": {"uid": uid}} for uid in ("p1", "p2"))
    sim.pods = {"x/p1": first}
    gpu = {"gpu": dict(A100["gpu"], count=1)}

    assert plugin.reconcile(node, gpu, first, "570.172.08", "12.8", whole, 0) is None
    assert plugin.reconcile(node, gpu, first, "570.172.08", "12.8", mig, 1) is None
    assert calls == [("plugin p1", "POST", ["gpu-0"], 1)]
    # Replaced: the slice stays through the delay, then the new pod publishes what it finds.
    assert plugin.reconcile(node, gpu, None, "570.172.08", "12.8", mig, 10, restarting=True) == 10 + dra.WIPING_DELAY
    assert plugin.reconcile(node, gpu, None, "570.172.08", "12.8", mig, 20, restarting=True) == 10 + dra.WIPING_DELAY
    sim.pods = {"x/p2": second}
    assert plugin.reconcile(node, gpu, second, "570.172.08", "12.8", mig, 25) is None
    assert calls[1:] == [("plugin p2", "PUT", ["gpu-0-mig-9-0-4", "gpu-0-mig-9-4-4"], 2)]
    # Past the delay, or not coming back: deleted.
    assert plugin.reconcile(node, gpu, None, "570.172.08", "12.8", mig, 30, restarting=True) == 30 + dra.WIPING_DELAY
    assert plugin.reconcile(node, gpu, None, "570.172.08", "12.8", mig, 30 + dra.WIPING_DELAY, restarting=True) is None
    assert calls[2:] == [("sim", "DELETE", None, None)]
    plugin.reconcile(node, gpu, second, "570.172.08", "12.8", mig, 100)
    plugin.reconcile(node, gpu, None, "570.172.08", "12.8", mig, 101)
    assert [method for _api, method, _devices, _generation in calls[3:]] == ["POST", "DELETE"]


class Core:
    def __init__(self):
        self.patches = []

    def patch_namespaced_pod(self, name, namespace, body):
        self.patches.append((namespace, name, body))


def plugin_with(claims):
    sim = type("Sim", (), {"core": Core()})()
    plugin = dra.KubeletPlugin(sim)
    plugin.claims = {"ml/%s" % claim["metadata"]["name"]: claim for claim in claims}
    return plugin, sim.core


def claim(name, driver=None):
    status = {"allocation": {"devices": {"results": [{"driver": driver, "pool": "a", "device": "gpu-0"}]}}} \
        if driver else {}
    return {"metadata": {"name": name, "namespace": "ml"}, "status": status}


def pod(annotations=None):
    return {"metadata": {"name": "train", "namespace": "ml", "annotations": annotations or {}},
            "spec": {"nodeName": "a", "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]},
            "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "train-gpu"}]}}


def test_a_pod_starts_once_its_claim_is_allocated_and_the_plugin_prepared_it():
    plugin, core = plugin_with([claim("train-gpu")])
    assert plugin.prepare_problem(pod(), True) == "waiting for ResourceClaim train-gpu of pod ml/train to be allocated"
    plugin, core = plugin_with([claim("train-gpu", "gpu.nvidia.com")])
    assert plugin.prepare_problem(pod(), False) == (
        "failed to prepare dynamic resources: DRA driver gpu.nvidia.com is not registered")
    assert core.patches == []
    assert plugin.prepare_problem(pod(), True) is None
    assert core.patches == [("ml", "train", {"metadata": {"annotations": {dra.PREPARED: "true"}}})]
    # Another driver's claim needs no GPU plugin; a pod without claims nothing.
    plugin, core = plugin_with([claim("train-gpu", "nic.example.com")])
    assert plugin.prepare_problem(pod(), False) is None and core.patches == []
    assert plugin.prepare_problem({"metadata": {}, "spec": {}}, False) is None


def test_a_prepared_pod_is_unprepared_only_while_the_plugin_serves():
    plugin, core = plugin_with([])
    prepared = pod({dra.PREPARED: "true"})
    plugin.unprepare(prepared, False)
    assert core.patches == []
    plugin.unprepare(prepared, True)
    assert core.patches == [("ml", "train", {"metadata": {"annotations": {dra.PREPARED: None}}})]
    assert plugin.holds_gpus(prepared) and not plugin.holds_gpus(pod())


def test_a_pod_whose_gpus_all_came_with_admin_access_is_prepared_and_unprepared_but_holds_no_gpus():
    """The node agents' claims: prepared (not Running before) and unprepared (not gone before) as any, but a
    monitoring view of the GPUs, which keeps no driver from loading."""
    admin = claim("train-gpu", "gpu.nvidia.com")
    admin["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    plugin, core = plugin_with([admin])
    assert plugin.prepare_problem(pod(), False) == (
        "failed to prepare dynamic resources: DRA driver gpu.nvidia.com is not registered")
    assert plugin.prepare_problem(pod(), True) is None
    assert core.patches == [("ml", "train", {"metadata": {"annotations": {dra.PREPARED: dra.ADMIN_ONLY}}})]
    prepared = pod({dra.PREPARED: dra.ADMIN_ONLY})
    assert not plugin.holds_gpus(prepared)
    plugin.unprepare(prepared, False)
    assert core.patches[1:] == []
    plugin.unprepare(prepared, True)
    assert core.patches[1:] == [("ml", "train", {"metadata": {"annotations": {dra.PREPARED: None}}})]
