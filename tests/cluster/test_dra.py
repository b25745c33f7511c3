"""The DRA stack (role dra_driver) beside the device-plugin stack, deployed by the deploy playbook on Kubernetes 1.34:
nodes in DRA mode get the NVIDIA DRA driver's kubelet plugin, whose ResourceSlices the simulator publishes while its pod
is Ready (tools/localcluster/dra.py); the real kube-scheduler allocates the claims of pods from them."""

import json
import os

import kubernetes

from conftest import wait_for
from gpu_fleet import FLEET_LABEL, RHCOS_416
from localcluster import api
from sampler import Sampler
from test_deploy import REGISTRY, fleet_variables, playbook, status_of

# Nodes of this role run the DRA stack (common_dra_node_selector), as a site would select them.
DRA_ROLE = "node-role.kubernetes.io/gpu-dra"
DRA_SELECTOR = {DRA_ROLE: ""}
RESOURCE = "/apis/resource.k8s.io/v1"
WORKLOAD_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"


def dra_fleet():
    """The smallest mixed fleet: a device-plugin node and two DRA nodes of different products."""
    return {"name": "dra-" + os.urandom(3).hex(), "registry": REGISTRY, "openshift": {"version": "4.18.22"},
            "nodes": [
                {"name": "dp", "gpu": {"product": "NVIDIA-A10", "count": 2}, "os": {"rhcos": RHCOS_416}},
                {"name": "dra-l4", "role": "gpu-dra", "gpu": {"product": "NVIDIA-L4", "count": 2},
                 "os": {"rhcos": RHCOS_416}},
                {"name": "dra-h100", "role": "gpu-dra", "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 1},
                 "os": {"rhcos": RHCOS_416}}]}


def call(cluster, method, path, body=None):
    return cluster.client.call_api(path, method, body=body, response_type="object", _return_http_data_only=True,
                                   auth_settings=["BearerToken"], header_params={"Content-Type": "application/json"})


def slices_of(cluster, node):
    found = call(cluster, "GET", RESOURCE + "/resourceslices?fieldSelector=spec.nodeName=%s" % node)["items"]
    return [s for s in found if s["spec"]["driver"] == "gpu.nvidia.com"]


def claim_pod(cluster, namespace, name, request, node=None):
    """A pod asking for a GPU through a ResourceClaimTemplate whose one request is `request` (exactly); on that node
    when given."""
    call(cluster, "POST", RESOURCE + "/namespaces/%s/resourceclaimtemplates" % namespace, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}}})
    cluster.core.create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": node} if node else {},
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "cuda", "image": WORKLOAD_IMAGE, "command": ["sleep", "infinity"],
                        "resources": {"claims": [{"name": "gpu"}]}}]}})


def plugin_client(cluster, namespace, node):
    """A client with a token of the kubelet plugin pod of node, bound to that pod, as the kubelet mounts it."""
    (pod,) = cluster.core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/component=nvidia-dra-driver-kubelet-plugin",
        field_selector="spec.nodeName=" + node).items
    token = cluster.core.create_namespaced_service_account_token(pod.spec.service_account_name, namespace, {
        "spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name,
                                    "uid": pod.metadata.uid}}}).status.token
    config = kubernetes.client.Configuration()
    base = cluster.client.configuration
    config.host, config.ssl_ca_cert = base.host, base.ssl_ca_cert
    config.api_key = {"authorization": "Bearer " + token}
    return kubernetes.client.ApiClient(config)


def call_as(client, method, path, body):
    """None when the API server took the write, else its ApiException."""
    try:
        client.call_api(path, method, body=body, response_type="object", auth_settings=["BearerToken"],
                        header_params={"Content-Type": "application/json"})
    except kubernetes.client.rest.ApiException as error:
        return error
    return None


def running_on(cluster, namespace, name):
    pod = cluster.core.read_namespaced_pod(name, namespace)
    return pod.spec.node_name if pod.status.phase == "Running" else None


def test_a_mixed_fleet_deploys_in_one_run_and_the_scheduler_allocates_claims_from_the_dra_nodes(
        cluster, namespace, make_fleet):
    spec = dra_fleet()
    dp, dra_l4, dra_h100 = make_fleet(spec).node_names
    before = api.object_names(cluster.client)
    variables = fleet_variables(namespace, spec, common_dra_node_selector=DRA_SELECTOR)
    playbook(cluster, "deploy", variables).succeeded()

    # The device-plugin node advertises nvidia.com/gpu; the DRA nodes run the kubelet plugin and advertise none.
    labels = {node: cluster.core.read_node(node).metadata.labels for node in (dp, dra_l4, dra_h100)}
    assert labels[dp]["nvidia.com/gpu.deploy.device-plugin"] == "true"
    assert "nvidia.com/gpu.deploy.dra-driver" not in labels[dp]
    for node in (dra_l4, dra_h100):
        assert labels[node]["nvidia.com/gpu.deploy.dra-driver"] == "true"
        assert "nvidia.com/gpu.deploy.device-plugin" not in labels[node]
        assert int((cluster.core.read_node(node).status.allocatable or {}).get("nvidia.com/gpu", "0")) == 0
    assert cluster.core.read_node(dp).status.allocatable["nvidia.com/gpu"] == "2"
    assert slices_of(cluster, dp) == []
    (l4_slice,) = slices_of(cluster, dra_l4)
    assert l4_slice["spec"]["pool"] == {"name": dra_l4, "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in l4_slice["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    attributes = l4_slice["spec"]["devices"][0]["attributes"]
    assert (attributes["type"], attributes["productName"], attributes["architecture"],
            attributes["cudaComputeCapability"], attributes["driverVersion"]) == (
        {"string": "gpu"}, {"string": "NVIDIA L4"}, {"string": "Ada Lovelace"}, {"version": "8.9.0"},
        {"version": "570.172.8"})
    assert l4_slice["spec"]["devices"][0]["capacity"] == {"memory": {"value": "23034Mi"}}
    # The CUDA check of each DRA node got its GPU from a claim the scheduler allocated there.
    jobs = cluster.batch.list_namespaced_job(namespace, label_selector="accelerators.gpu/validation=dra").items
    assert sorted((job.metadata.annotations["accelerators.gpu/node"], job.status.succeeded) for job in jobs) == [
        (dra_h100, 1), (dra_l4, 1)]
    cuda = cluster.batch.list_namespaced_job(namespace, label_selector="accelerators.gpu/validation=cuda").items
    assert [job.metadata.annotations["accelerators.gpu/node"] for job in cuda] == [dp]

    assert playbook(cluster, "deploy", variables).succeeded().stats["changed"] == 0

    # The simulator writes a node's slice as its plugin pod: the admission policy lets that pod's token write its own
    # node's slice and refuses another node's.
    as_plugin = plugin_client(cluster, namespace, dra_l4)
    denied = call_as(as_plugin, "POST", RESOURCE + "/resourceslices", dict(
        l4_slice, metadata={"generateName": "forged-"}, spec=dict(l4_slice["spec"], nodeName=dra_h100)))
    assert denied.status == 422 and "may not modify cluster or node resourceslices" in denied.body, denied.body
    assert call_as(as_plugin, "PUT", RESOURCE + "/resourceslices/" + l4_slice["metadata"]["name"],
                   slices_of(cluster, dra_l4)[0]) is None

    # A CEL selector on product and memory: the H100 node's one GPU. Then any GPU: the L4 node's, the H100 being
    # taken. Nothing matches a B200.
    claim_pod(cluster, namespace, "big-hopper", {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {
        "expression": "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')"
                      " && device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('64Gi')) >= 0"}}]})
    assert wait_for(lambda: running_on(cluster, namespace, "big-hopper"), message="big-hopper running") == dra_h100
    claim_pod(cluster, namespace, "any-gpu", {"deviceClassName": "gpu.nvidia.com"})
    assert wait_for(lambda: running_on(cluster, namespace, "any-gpu"), message="any-gpu running") == dra_l4
    claim_pod(cluster, namespace, "no-such-gpu", {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {
        "expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"}}]})
    pending = wait_for(lambda: [c for c in cluster.core.read_namespaced_pod("no-such-gpu", namespace).status.conditions
                                or [] if c.type == "PodScheduled" and c.reason == "Unschedulable"],
                       message="no-such-gpu unschedulable")
    assert "cannot allocate all claims" in pending[0].message
    assert cluster.core.read_namespaced_pod("no-such-gpu", namespace).spec.node_name is None

    status = status_of(cluster, variables)
    rows = {row["node"]: row for row in status["nodes"]}
    assert [(rows[node]["dra_devices"], rows[node]["dra_allocated"]) for node in (dp, dra_l4, dra_h100)] == [
        (None, None), (2, 1), (1, 1)]
    assert all(rows[node]["ready"] for node in (dp, dra_l4, dra_h100)), rows
    (claim,) = status["pending_claims"]
    assert (claim["pod"], claim["reason"]) == ("%s/no-such-gpu" % namespace, pending[0].message)

    for pod in ("any-gpu", "big-hopper", "no-such-gpu"):
        cluster.core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
        call(cluster, "DELETE", RESOURCE + "/namespaces/%s/resourceclaimtemplates/%s" % (namespace, pod))
    wait_for(lambda: not cluster.core.list_namespaced_pod(namespace, label_selector="!app.kubernetes.io/component"
                                                          ).items, message="the workloads gone")
    playbook(cluster, "uninstall", variables).succeeded()
    # The slices go with the kubelet plugin pods.
    wait_for(lambda: not any(slices_of(cluster, node) for node in (dra_l4, dra_h100)), message="the slices gone")
    assert api.object_names(cluster.client) == before


def serve_deployment(spec):
    """Two replicas requesting nvidia.com/gpu, one per node (required anti-affinity), behind a PodDisruptionBudget."""
    labels = {"app": "serve"}
    return {"metadata": {"name": "serve", "labels": labels}, "spec": {
        "replicas": 2, "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels}, "spec": {
            "nodeSelector": {FLEET_LABEL: spec["name"]},
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}]}},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "serve", "image": WORKLOAD_IMAGE, "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}


def gpus_of(cluster, node):
    """What a node offers: ('device-plugin', allocatable nvidia.com/gpu) and ('dra', devices its slices publish)."""
    published = sum(len(s["spec"]["devices"]) for s in slices_of(cluster, node))
    return int((cluster.core.read_node(node).status.allocatable or {}).get("nvidia.com/gpu", "0")), published


def test_switching_a_node_to_dra_and_back_evicts_only_its_gpu_pods_and_keeps_every_other_nodes_gpus(
        cluster, namespace, make_fleet):
    spec = dra_fleet()
    spec["nodes"][0].update(name="dp", count=2)
    spec["nodes"].pop(2)
    stay, switching, dra = make_fleet(spec).node_names
    variables = fleet_variables(namespace, spec, common_dra_node_selector=DRA_SELECTOR)
    playbook(cluster, "deploy", variables).succeeded()
    workloads = namespace + "-w"
    cluster.core.create_namespace({"metadata": {"name": workloads}})
    try:
        cluster.apps.create_namespaced_deployment(workloads, serve_deployment(spec))
        kubernetes.client.PolicyV1Api(cluster.client).create_namespaced_pod_disruption_budget(workloads, {
            "metadata": {"name": "serve"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "serve"}}}})
        wait_for(lambda: sorted(running_pods(cluster, workloads).values()) == sorted([stay, switching]),
                 message="a serve replica on each device-plugin node")
        on_switching = [name for name, node in running_pods(cluster, workloads).items() if node == switching]

        def observe():
            return {"stay": gpus_of(cluster, stay)[0], "dra": gpus_of(cluster, dra)[1],
                    "serving": len(running_pods(cluster, workloads))}

        cluster.core.patch_node(switching, {"metadata": {"labels": DRA_SELECTOR}})
        with Sampler(observe) as sampler:
            playbook(cluster, "deploy", variables).succeeded()
        assert not sampler.errors and sampler.values
        # Every other node offered its GPUs throughout, and the PodDisruptionBudget held.
        assert {(value["stay"], value["dra"]) for value in sampler.values} == {(2, 2)}
        assert min(value["serving"] for value in sampler.values) >= 1
        assert set(audit_evictions(cluster, workloads)) == set(on_switching)
        node = cluster.core.read_node(switching)
        assert (node.metadata.labels.get("nvidia.com/gpu.deploy.dra-driver"),
                node.metadata.labels.get("nvidia.com/gpu.deploy.device-plugin"), node.spec.unschedulable) == (
            "true", None, None)
        assert gpus_of(cluster, switching) == (0, 2)
        jobs = cluster.batch.list_namespaced_job(namespace, label_selector="accelerators.gpu/validation=dra").items
        assert {job.metadata.annotations["accelerators.gpu/node"]: job.status.succeeded for job in jobs} == {
            dra: 1, switching: 1}

        # Back to the device plugin: the pod holding a claim there goes first, by eviction.
        claim_pod(cluster, workloads, "claimer", {"deviceClassName": "gpu.nvidia.com"}, node=switching)
        assert wait_for(lambda: running_on(cluster, workloads, "claimer"), message="claimer running") == switching
        cluster.core.patch_node(switching, {"metadata": {"labels": {DRA_ROLE: None}}})
        before = set(audit_evictions(cluster, workloads))
        with Sampler(observe) as sampler:
            playbook(cluster, "deploy", variables).succeeded()
        assert not sampler.errors and {(value["stay"], value["dra"]) for value in sampler.values} == {(2, 2)}
        evicted = set(audit_evictions(cluster, workloads)) - before
        assert evicted == {"claimer"}
        assert gpus_of(cluster, switching) == (2, 0)
        assert "nvidia.com/gpu.deploy.dra-driver" not in cluster.core.read_node(switching).metadata.labels
        assert playbook(cluster, "deploy", variables).succeeded().stats["changed"] == 0
    finally:
        cluster.core.delete_namespace(workloads)


def running_pods(cluster, namespace):
    return {p.metadata.name: p.spec.node_name for p in cluster.core.list_namespaced_pod(namespace).items
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp}


def audit_evictions(cluster, namespace):
    """The pods of namespace evicted through the Eviction API, from the API server's audit log."""
    evicted = []
    with open(cluster.audit_log) as log:
        for line in log:
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if (ref.get("namespace"), ref.get("resource"), ref.get("subresource"), event["verb"]) == (
                    namespace, "pods", "eviction", "create") and (event.get("responseStatus") or {}).get("code") == 201:
                evicted.append(ref["name"])
    return evicted
