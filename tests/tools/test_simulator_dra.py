"""The simulated DRA kubelet plugin: the devices of a node's ResourceSlice, and when a pod's claims let it start and go."""

from localcluster import dra

A100 = {"gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 2, "memory": 81920, "compute": "8.0"}}


def test_a_gpu_under_a_mig_layout_is_published_as_its_mig_devices_the_other_whole():
    devices = dra.gpu_devices("node-a", A100, "570.172.08", "12.8", [{"3g.40gb": 2}, None])
    assert [d["name"] for d in devices] == ["gpu-0-mig-9-0-4", "gpu-0-mig-9-4-4", "gpu-1"]
    first, second, whole = devices
    assert (first["attributes"]["type"], first["attributes"]["profile"], first["attributes"]["driverVersion"]) == (
        {"string": "mig"}, {"string": "3g.40gb"}, {"version": "570.172.8"})
    assert first["capacity"] == {"memory": {"value": "40Gi"}, "multiprocessors": {"value": "42"},
                                 "memorySlice0": {"value": "1"}, "memorySlice1": {"value": "1"},
                                 "memorySlice2": {"value": "1"}, "memorySlice3": {"value": "1"}}
    assert sorted(second["capacity"]) == ["memory", "memorySlice4", "memorySlice5", "memorySlice6", "memorySlice7",
                                          "multiprocessors"]
    assert first["attributes"]["parentUUID"] == second["attributes"]["parentUUID"] != whole["attributes"]["uuid"]
    assert (whole["attributes"]["type"], whole["capacity"]) == ({"string": "gpu"}, {"memory": {"value": "81920Mi"}})
    assert whole["attributes"]["productName"] == {"string": "NVIDIA A100-SXM4-80GB"}


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
