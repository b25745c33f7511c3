"""MIG devices through ResourceClaims on a node of the DRA stack, against the local control plane: the MIG manager
applies a layout there (the mig_config playbook), the NVIDIA DRA driver's kubelet plugin publishes the MIG devices
(found when its pod starts, as the real plugin finds them: the playbook restarts it once the layout is applied, and the
pool's generation goes up), and the real kube-scheduler allocates a claim of class mig.nvidia.com selecting a profile
by CEL onto one of them, and the node's CUDA check onto another; the next layout evicts the claim holder first. The MIG manager would set the device plugin's
deploy label to true on the node after a change (absent labels too), and the simulated one does: no device plugin may
start beside the kubelet plugin. One node, one story: deploy, a layout, reconcile, a layout, uninstall."""

import os

from conftest import wait_for
from gpu_fleet import RHCOS_416
from test_deploy import fleet_variables, gpu_fleet, node_labels, playbook
from test_dra import (COMPONENT, DEVICE_PLUGIN, DRA_SELECTOR, KUBELET_PLUGIN, RESOURCE, audit_evictions, call,
                      claim_pod, running_on, slices_of)
from test_gpu_feature_discovery import delete_namespace, no_warnings

CONFIG, STATE = "nvidia.com/mig.config", "nvidia.com/mig.config.state"
DEVICE_PLUGIN_LABEL = "nvidia.com/gpu.deploy.device-plugin"
ONE_G = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"


def published(cluster, node):
    """(pool generation, [(device name, type, profile)]) of the node's one slice of gpu.nvidia.com."""
    (found,) = slices_of(cluster, node)
    return found["spec"]["pool"]["generation"], [
        (device["name"], device["attributes"]["type"]["string"], device["attributes"].get("profile", {}).get("string"))
        for device in found["spec"]["devices"]]


def plugin_pods(cluster, namespace, node, component):
    return [pod.metadata.uid for pod in cluster.core.list_namespaced_pod(
        namespace, label_selector=COMPONENT + "=" + component, field_selector="spec.nodeName=" + node).items]


def allocated_devices(cluster, namespace, pod):
    """The devices the scheduler allocated to the claims of a pod (from its claim's status)."""
    claims = cluster.core.read_namespaced_pod(pod, namespace).status.resource_claim_statuses or []
    return [result["device"] for status in claims for result in call(
        cluster, "GET", RESOURCE + "/namespaces/%s/resourceclaims/%s" % (namespace, status.resource_claim_name))[
            "status"]["allocation"]["devices"]["results"]]


def test_a_mig_claim_is_allocated_on_the_layouts_devices_which_the_kubelet_plugin_publishes_anew(cluster, make_fleet):
    spec = gpu_fleet({"name": "dra-a100", "role": "gpu-dra", "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 1},
                      "os": {"rhcos": RHCOS_416}})
    (node,) = make_fleet(spec).node_names
    before = node_labels(cluster, [node])[node]
    namespace = "t-dramig-" + os.urandom(2).hex()
    workloads = namespace + "-w"
    # The MIG strategy stays none: it is the device plugin's, and the DRA driver serves any layout.
    variables = fleet_variables(namespace, spec, common_dra_node_selector=DRA_SELECTOR)
    try:
        no_warnings(playbook(cluster, "deploy", variables).succeeded())
        cluster.core.create_namespace({"metadata": {"name": workloads}})
        wait_for(lambda: {key: value for key, value in node_labels(cluster, [node])[node].items()
                          if key in (CONFIG, STATE)} == {CONFIG: "all-disabled", STATE: "success"},
                 message="the default MIG layout applied")
        generation, devices = published(cluster, node)
        assert devices == [("gpu-0", "gpu", None)]
        # No MIG device yet: a claim of class mig.nvidia.com waits.
        claim_pod(cluster, workloads, "small", {"deviceClassName": "mig.nvidia.com",
                                                "selectors": [{"cel": {"expression": ONE_G}}]})
        wait_for(lambda: [c for c in cluster.core.read_namespaced_pod("small", workloads).status.conditions or []
                          if c.type == "PodScheduled" and c.reason == "Unschedulable"],
                 message="the MIG claim unschedulable on whole GPUs")
        plugin = plugin_pods(cluster, namespace, node, KUBELET_PLUGIN)

        applied = no_warnings(playbook(cluster, "mig_config", dict(
            variables, mig_config_layout="all-1g.10gb", mig_config_nodes=[node])).succeeded())
        (result,) = [result for name, result in applied.results if "restarted" in result]
        assert result["expected"] == {node: {"gpu": 0, "mig-1g.10gb": 7}}
        assert len(result["restarted"]) == 1
        # The plugin was restarted and published the seven MIG devices in the pool's next generation, each with its
        # profile, parent and capacity as the real driver publishes them.
        assert plugin_pods(cluster, namespace, node, KUBELET_PLUGIN) not in ([], plugin)
        mig_generation, devices = published(cluster, node)
        assert mig_generation > generation
        assert devices == [("gpu-0-mig-19-%d-1" % slot, "mig", "1g.10gb") for slot in range(7)]
        (first,) = [d for d in slices_of(cluster, node)[0]["spec"]["devices"] if d["name"] == "gpu-0-mig-19-0-1"]
        assert first["attributes"]["productName"] == {"string": "NVIDIA A100-SXM4-80GB"}
        assert sorted(first["capacity"]) == ["copyEngines", "decoders", "encoders", "jpegEngines", "memory",
                                             "memorySlice0", "multiprocessors", "ofaEngines"]
        # The MIG manager stopped and restarted its GPU clients, but no device plugin came to this node: its label was
        # pinned to false for the change and is gone again.
        labels = node_labels(cluster, [node])[node]
        assert (labels[STATE], labels.get(DEVICE_PLUGIN_LABEL)) == ("success", None)
        assert plugin_pods(cluster, namespace, node, DEVICE_PLUGIN) == []
        assert int((cluster.core.read_node(node).status.allocatable or {}).get("nvidia.com/gpu", "0")) == 0

        # The waiting claim is allocated one of the MIG devices, and its pod runs.
        assert wait_for(lambda: running_on(cluster, workloads, "small"), message="the MIG claim's pod running") == node
        (device,) = allocated_devices(cluster, workloads, "small")
        assert device.startswith("gpu-0-mig-19-"), device
        # A reconcile checks the new kubelet plugin with a CUDA Job, whose claim takes a MIG device: no whole GPU is
        # left on the node.
        validation = cluster.batch.read_namespaced_job("nvidia-dra-validation-" + node, namespace).metadata.uid
        no_warnings(playbook(cluster, "reconcile", variables).succeeded())
        job = cluster.batch.read_namespaced_job("nvidia-dra-validation-" + node, namespace)
        assert (job.metadata.uid != validation, job.status.succeeded) == (True, 1)

        # Back to whole GPUs: the claim holder is evicted first, the plugin publishes the GPU again.
        no_warnings(playbook(cluster, "mig_config", dict(
            variables, mig_config_layout="all-disabled", mig_config_nodes=[node])).succeeded())
        assert audit_evictions(cluster, workloads) == ["small"]
        whole_generation, devices = published(cluster, node)
        assert (whole_generation > mig_generation, devices) == (True, [("gpu-0", "gpu", None)])
        claim_pod(cluster, workloads, "whole", {"deviceClassName": "gpu.nvidia.com"})
        assert wait_for(lambda: running_on(cluster, workloads, "whole"), message="a whole GPU's pod running") == node
        cluster.core.delete_namespaced_pod("whole", workloads)
        wait_for(lambda: not cluster.core.list_namespaced_pod(workloads).items, message="the workloads gone")

        no_warnings(playbook(cluster, "uninstall", variables).succeeded())
        assert node_labels(cluster, [node])[node] == before
        assert slices_of(cluster, node) == []
    finally:
        delete_namespace(cluster, workloads)
        delete_namespace(cluster, namespace)
