"""The DRA stack (role dra_driver) beside the device-plugin stack, deployed by the deploy playbook on Kubernetes 1.34:
nodes in DRA mode get the NVIDIA DRA driver's kubelet plugin, whose ResourceSlices the simulator publishes while its pod
is Ready (tools/localcluster/dra.py); the real kube-scheduler allocates the claims of pods from them. A pod holding a
claim of gpu.nvidia.com starts only once the plugin prepared it, and goes only once the plugin unprepared it: on a
node whose plugin left first, it stays Terminating (as with a real kubelet), so a mode switch in the wrong order fails.

One module-scoped fleet of three nodes serves the tests, in order (one story, one deploy): a device-plugin node, and
two DRA nodes of different products, one of which is switched to the device plugin and back; then the DRA stack is
switched off altogether (both DRA nodes switched to the device plugin, one at a time) and on again before the
uninstall.
"""

import json
import os
import time
import types

import kubernetes
import pytest

from conftest import create_namespace, wait_for
from gpu_fleet import COMMON_DEFAULTS, FLEET_LABEL, RHCOS_416, selector
from localcluster import api, gpu_faults
from localcluster import fleet as fleets
from sampler import Sampler, at_one_revision
from test_deploy import REGISTRY, fleet_variables, playbook

# Nodes of this role run the DRA stack (common_dra_node_selector), as a site would select them.
DRA_ROLE = "node-role.kubernetes.io/gpu-dra"
DRA_SELECTOR = {DRA_ROLE: ""}
RESOURCE = "/apis/resource.k8s.io/v1"
WORKLOAD_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
COMPONENT = "app.kubernetes.io/component"
DEVICE_PLUGIN, KUBELET_PLUGIN = "nvidia-device-plugin", "nvidia-dra-driver-kubelet-plugin"
PLUGINS = (DEVICE_PLUGIN, KUBELET_PLUGIN)
VALIDATOR = "nvidia-operator-validator"
# The node agents that come in one DaemonSet per allocator: on the DRA nodes the "-dra" one, its GPUs from an
# admin-access claim of its template (by the agent's component label).
AGENTS = {"gpu-feature-discovery": ("gpu-feature-discovery-dra", "nvidia-gfd-admin"),
          "nvidia-dcgm-exporter": ("nvidia-dcgm-exporter-dra", "nvidia-dcgm-exporter-admin"),
          "nvidia-dcgm": ("nvidia-dcgm-dra", "nvidia-dcgm-admin")}
ADMIN_ACCESS = "resource.kubernetes.io/admin-access"
DRA_LABEL = "nvidia.com/gpu.deploy.dra-driver"
COMPUTE_DOMAINS = "/apis/resource.nvidia.com/v1beta1/namespaces/%s/computedomains"
# What the uninstall playbook removes cluster-wide (uninstall_managed).
MANAGED = "app.kubernetes.io/managed-by=accelerators.gpu"
# A driver newer than the default (common_driver_version), which the story's rollout takes every node to.
NEW_DRIVER = "610.57.04"


def dra_fleet():
    """The smallest mixed fleet: a device-plugin node and two DRA nodes of different products."""
    return {"name": "dra-" + os.urandom(3).hex(), "registry": REGISTRY, "openshift": {"version": "4.18.22"},
            "nodes": [
                {"name": "dp", "gpu": {"product": "NVIDIA-A10", "count": 2}, "os": {"rhcos": RHCOS_416}},
                {"name": "dra-l4", "role": "gpu-dra", "gpu": {"product": "NVIDIA-L4", "count": 2},
                 "os": {"rhcos": RHCOS_416}},
                {"name": "dra-h100", "role": "gpu-dra", "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 1},
                 "os": {"rhcos": RHCOS_416}}]}


@pytest.fixture(scope="module")
def story(cluster):
    """The fleet, the operand namespace (created first, as the session's tests do), the object names before the
    deploy, and the deploy's variables (ComputeDomains and standalone DCGM on); the stack deployed once."""
    spec = dra_fleet()
    made = fleets.Fleet(cluster.client, spec, prefix="dra-%s-" % os.urandom(2).hex()).apply().wait_ready()
    log_size = cluster.simulator_log_size()
    namespace = "t-dra-" + os.urandom(2).hex()
    workloads = namespace + "-w"
    for name in (namespace, workloads):
        create_namespace(cluster, name)
    before = api.object_names(cluster.client)
    # The session cluster's earlier tests may still be deleting their namespaces: what those hold goes meanwhile.
    leaving = {ns.metadata.name for ns in cluster.core.list_namespace().items if ns.metadata.deletion_timestamp}
    # And their deploys may have left the stack's cluster-wide objects (RBAC, the RuntimeClass), which outlive their
    # namespaces and which an uninstall removes, whoever deployed them.
    left = api.object_names(cluster.client, label_selector=MANAGED)
    variables = fleet_variables(namespace, spec, common_dra_node_selector=DRA_SELECTOR,
                                dra_driver_compute_domains_enabled=True, dcgm_enabled=True)
    playbook(cluster, "deploy", variables).succeeded()
    yield types.SimpleNamespace(spec=spec, nodes=made.node_names, namespace=namespace, workloads=workloads,
                                before=before, leaving=leaving, left=left, variables=variables)
    cluster.core.delete_namespace(workloads)
    cluster.core.delete_namespace(namespace)
    made.delete()
    failures = cluster.simulator_failures(log_size)
    assert not failures, "the simulator failed during these tests:\n%s" % "\n".join(failures)[-3000:]


def call(cluster, method, path, body=None, query=None):
    return cluster.client.call_api(path, method, body=body, query_params=query or [], response_type="object",
                                   _return_http_data_only=True, auth_settings=["BearerToken"],
                                   header_params={"Content-Type": "application/json"})


def slices_of(cluster, node):
    found = call(cluster, "GET", RESOURCE + "/resourceslices", query=[("fieldSelector", "spec.nodeName=" + node)])
    return [s for s in found["items"] if s["spec"]["driver"] == "gpu.nvidia.com"]


def claim_pod(cluster, namespace, name, request, node=None):
    """A pod asking for a GPU through a ResourceClaimTemplate whose one request is `request` (exactly); on that node
    when given."""
    call(cluster, "POST", RESOURCE + "/namespaces/%s/resourceclaimtemplates" % namespace, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}}})
    cluster.core.create_namespaced_pod(namespace, {"metadata": {"name": name, "labels": {"app": "claim"}}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": node} if node else {},
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "cuda", "image": WORKLOAD_IMAGE, "command": ["sleep", "infinity"],
                        "resources": {"claims": [{"name": "gpu"}]}}]}})


def plugin_client(cluster, namespace, node):
    """A client with a token of the kubelet plugin pod of node, bound to that pod, as the kubelet mounts it."""
    (pod,) = cluster.core.list_namespaced_pod(namespace, label_selector=COMPONENT + "=" + KUBELET_PLUGIN,
                                              field_selector="spec.nodeName=" + node).items
    token = cluster.core.create_namespaced_service_account_token(pod.spec.service_account_name, namespace, {
        "spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name,
                                    "uid": pod.metadata.uid}}}).status.token
    config = kubernetes.client.Configuration()
    base = cluster.client.configuration
    config.host, config.ssl_ca_cert = base.host, base.ssl_ca_cert
    config.api_key = {"authorization": "Bearer " + token}
    return kubernetes.client.ApiClient(config)


def refusal(client, method, path, body, query=None):
    """None when the API server took the write, else (its status code, its message)."""
    try:
        client.call_api(path, method, body=body, query_params=query or [], response_type="object",
                        auth_settings=["BearerToken"], header_params={"Content-Type": "application/json"})
    except kubernetes.client.rest.ApiException as error:
        return error.status, json.loads(error.body)["message"]
    return None


def running_on(cluster, namespace, name):
    pod = cluster.core.read_namespaced_pod(name, namespace)
    return pod.spec.node_name if pod.status.phase == "Running" else None


def agent_pods(cluster, namespace):
    """{component: {app: {node: pod}}} of the node agents' pods (AGENTS) in namespace, not being deleted."""
    found = {}
    for pod in cluster.core.list_namespaced_pod(namespace, label_selector="%s in (%s)" % (
            COMPONENT, ", ".join(AGENTS))).items:
        if not pod.metadata.deletion_timestamp:
            found.setdefault(pod.metadata.labels[COMPONENT], {}).setdefault(
                pod.metadata.labels["app"], {})[pod.spec.node_name] = pod
    return found


def claim_of(cluster, pod):
    """The ResourceClaim the scheduler made for the pod's claim admin-gpus (from its template)."""
    (status,) = [s for s in pod.status.resource_claim_statuses or [] if s.name == "admin-gpus"]
    return call(cluster, "GET", RESOURCE + "/namespaces/%s/resourceclaims/%s" % (
        pod.metadata.namespace, status.resource_claim_name))


def test_a_mixed_fleet_deploys_in_one_run_each_node_with_its_plugin(cluster, story):
    dp, dra_l4, dra_h100 = story.nodes
    # The device-plugin node advertises nvidia.com/gpu; the DRA nodes run the kubelet plugin and advertise none.
    labels = {node: cluster.core.read_node(node).metadata.labels for node in story.nodes}
    assert labels[dp]["nvidia.com/gpu.deploy.device-plugin"] == "true"
    assert "nvidia.com/gpu.deploy.dra-driver" not in labels[dp]
    for node in (dra_l4, dra_h100):
        assert labels[node]["nvidia.com/gpu.deploy.dra-driver"] == "true"
        assert "nvidia.com/gpu.deploy.device-plugin" not in labels[node]
        assert int((cluster.core.read_node(node).status.allocatable or {}).get("nvidia.com/gpu", "0")) == 0
    assert cluster.core.read_node(dp).status.allocatable["nvidia.com/gpu"] == "2"
    assert slices_of(cluster, dp) == []
    (l4_slice,) = slices_of(cluster, dra_l4)
    # The generation goes up each time the plugin publishes the pool anew (a restart of its pod, say): any is good.
    pool = l4_slice["spec"]["pool"]
    assert (pool["name"], pool["resourceSliceCount"], pool["generation"] >= 1) == (dra_l4, 1, True), pool
    assert [d["name"] for d in l4_slice["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    attributes = l4_slice["spec"]["devices"][0]["attributes"]
    assert (attributes["type"], attributes["productName"], attributes["architecture"],
            attributes["cudaComputeCapability"], attributes["driverVersion"]) == (
        {"string": "gpu"}, {"string": "NVIDIA L4"}, {"string": "Ada Lovelace"}, {"version": "8.9.0"},
        # The default driver's version as the DRA driver publishes it: semantic, no leading zeros (595.91.07 -> 595.91.7).
        {"version": ".".join(str(int(part)) for part in COMMON_DEFAULTS["common_driver_version"].split("."))})
    assert l4_slice["spec"]["devices"][0]["capacity"] == {"memory": {"value": "23034Mi"}}
    # The CUDA check of each DRA node got its GPU from a claim the scheduler allocated there (the simulated plugin
    # prepared and unprepared it: the Job's pod is gone with no claim left prepared).
    jobs = cluster.batch.list_namespaced_job(story.namespace, label_selector="accelerators.gpu/validation=dra").items
    assert sorted((job.metadata.annotations["accelerators.gpu/node"], job.status.succeeded) for job in jobs) == [
        (dra_h100, 1), (dra_l4, 1)]
    cuda = cluster.batch.list_namespaced_job(story.namespace, label_selector="accelerators.gpu/validation=cuda").items
    assert [job.metadata.annotations["accelerators.gpu/node"] for job in cuda] == [dp]
    # ComputeDomains: the controller, the compute-domain DeviceClasses and the ComputeDomain CRD the collection made.
    classes = sorted(c["metadata"]["name"] for c in call(cluster, "GET", RESOURCE + "/deviceclasses")["items"])
    assert classes == ["compute-domain-daemon.nvidia.com", "compute-domain-default-channel.nvidia.com",
                       "gpu.nvidia.com", "mig.nvidia.com"]
    assert cluster.apps.read_namespaced_deployment("nvidia-dra-driver-controller", story.namespace).spec.replicas == 1
    # GFD, the DCGM exporter and DCGM: on the device-plugin node as before, on each DRA node their "-dra" form,
    # Running with a claim of its template that the scheduler allocated every GPU of the node with admin access (in the
    # namespace labelled to allow it); the exporters reach their node's hostengine through the one Service.
    assert cluster.core.read_namespace(story.namespace).metadata.labels[ADMIN_ACCESS] == "true"
    agents = agent_pods(cluster, story.namespace)
    for component, (dra_name, template) in AGENTS.items():
        assert {app: sorted(pods) for app, pods in agents[component].items()} == {
            component: [dp], dra_name: sorted([dra_l4, dra_h100])}, component
        assert not agents[component][component][dp].spec.resource_claims
        for node in (dra_l4, dra_h100):
            pod = agents[component][dra_name][node]
            assert pod.status.phase == "Running", (component, node)
            assert [c.resource_claim_template_name for c in pod.spec.resource_claims] == [template]
            results = claim_of(cluster, pod)["status"]["allocation"]["devices"]["results"]
            assert sorted((r["pool"], r["device"], r["adminAccess"]) for r in results) == sorted(
                (node, d["name"], True) for s in slices_of(cluster, node) for d in s["spec"]["devices"]), results
    # Kubernetes 1.34 takes admin access (DRAAdminAccess, beta and on by default) only in a namespace so labelled.
    admin_template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                      "metadata": {"name": "peek"}, "spec": {"spec": {"devices": {"requests": [{
                          "name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All",
                                                      "adminAccess": True}}]}}}}
    denied = refusal(cluster.client, "POST", RESOURCE + "/namespaces/%s/resourceclaimtemplates" % story.workloads,
                     admin_template)
    assert denied[0] == 422 and ADMIN_ACCESS in denied[1], denied
    exporter_env = {e.name: e.value for e in agents["nvidia-dcgm-exporter"]["nvidia-dcgm-exporter-dra"][dra_l4]
                    .spec.containers[0].env}
    assert (exporter_env["KUBERNETES_ENABLE_DRA"], exporter_env["DCGM_REMOTE_HOSTENGINE_INFO"]) == (
        "true", "nvidia-dcgm:5555")

    assert playbook(cluster, "deploy", story.variables).succeeded().stats["changed"] == 0

    # The simulator writes a node's slice as its plugin pod: the admission policy lets that pod's token write its own
    # node's slice and refuses another node's.
    as_plugin = plugin_client(cluster, story.namespace, dra_l4)
    denied = refusal(as_plugin, "POST", RESOURCE + "/resourceslices", dict(
        l4_slice, metadata={"generateName": "forged-"}, spec=dict(l4_slice["spec"], nodeName=dra_h100)))
    assert denied[0] == 422 and "may not modify cluster or node resourceslices" in denied[1], denied
    assert refusal(as_plugin, "PUT", RESOURCE + "/resourceslices/" + l4_slice["metadata"]["name"],
                   slices_of(cluster, dra_l4)[0]) is None


def test_the_compute_domain_api_refuses_what_the_real_one_refuses(cluster, story):
    """The ComputeDomain CRD's schema: a valid object is taken; a misspelt field (strict field validation), a missing
    required field, a value outside an enum and a change of the immutable spec are refused, naming the field."""
    path = COMPUTE_DOMAINS % story.workloads
    domain = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain", "metadata": {"name": "nvl72"},
              "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "nvl72-channel"}}}}
    strict = [("fieldValidation", "Strict")]
    created = call(cluster, "POST", path, domain, query=strict)
    assert created["spec"]["channel"]["allocationMode"] == "Single"  # the API's default
    misspelt = refusal(cluster.client, "POST", path, dict(domain, metadata={"name": "x"}, spec=dict(
        domain["spec"], numNode=2)), query=strict)
    assert misspelt[0] == 400 and 'unknown field "spec.numNode"' in misspelt[1], misspelt
    missing = refusal(cluster.client, "POST", path, dict(domain, metadata={"name": "y"}, spec={"numNodes": 0}))
    assert missing[0] == 422 and "spec.channel: Required value" in missing[1], missing
    wrong = refusal(cluster.client, "POST", path, dict(domain, metadata={"name": "z"}, spec=dict(
        domain["spec"], channel={"allocationMode": "Some", "resourceClaimTemplate": {"name": "c"}})))
    assert wrong[0] == 422 and 'spec.channel.allocationMode: Unsupported value: "Some"' in wrong[1], wrong
    changed = refusal(cluster.client, "PUT", path + "/nvl72", dict(created, spec=dict(created["spec"], numNodes=2)))
    assert changed[0] == 422 and "A computeDomain.spec is immutable" in changed[1], changed


def test_the_scheduler_allocates_claims_by_class_and_by_cel_selector_and_status_shows_why_one_is_pending(
        cluster, story):
    dp, dra_l4, dra_h100 = story.nodes
    workloads = story.workloads
    # A CEL selector on product and memory: the H100 node's one GPU. Then any GPU: the L4 node's, the H100 being
    # taken. Nothing matches a B200.
    claim_pod(cluster, workloads, "big-hopper", {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {
        "expression": "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')"
                      " && device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('64Gi')) >= 0"}}]})
    assert wait_for(lambda: running_on(cluster, workloads, "big-hopper"), message="big-hopper running") == dra_h100
    claim_pod(cluster, workloads, "any-gpu", {"deviceClassName": "gpu.nvidia.com"})
    assert wait_for(lambda: running_on(cluster, workloads, "any-gpu"), message="any-gpu running") == dra_l4
    claim_pod(cluster, workloads, "no-such-gpu", {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {
        "expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"}}]})
    pending = wait_for(lambda: [c for c in cluster.core.read_namespaced_pod("no-such-gpu", workloads).status.conditions
                                or [] if c.type == "PodScheduled" and c.reason == "Unschedulable"],
                       message="no-such-gpu unschedulable")
    assert "cannot allocate all claims" in pending[0].message
    assert cluster.core.read_namespaced_pod("no-such-gpu", workloads).spec.node_name is None

    run = playbook(cluster, "status", story.variables).succeeded()
    status = run.report["global_custom_stats"]["gpu_stack_status"]
    rows = {row["node"]: row for row in status["nodes"]}
    assert [(rows[node]["dra_devices"], rows[node]["dra_allocated"]) for node in story.nodes] == [
        (None, None), (2, 1), (1, 1)]
    assert all(rows[node]["ready"] for node in story.nodes), rows
    (claim,) = status["pending_claims"]
    assert (claim["pod"], claim["reason"]) == ("%s/no-such-gpu" % workloads, pending[0].message)
    (table,) = [result["msg"] for name, result in run.results if name == "Print the status table"]
    assert "claim %s of pod %s/no-such-gpu pending: %s" % (claim["claim"], workloads, pending[0].message) in table
    # The ComputeDomain controller, which the deploy waited for, under the table.
    assert "ComputeDomain controller %s/nvidia-dra-driver-controller available: 1 of 1 replicas available" % (
        story.namespace) in table
    assert (status["dra_controller"]["name"], status["dra_controller"]["ready"]) == ("nvidia-dra-driver-controller", True)

    # Deleted (not forced): each pod goes once the kubelet plugin unprepared its claim.
    for pod in ("any-gpu", "big-hopper", "no-such-gpu"):
        cluster.core.delete_namespaced_pod(pod, workloads)
        call(cluster, "DELETE", RESOURCE + "/namespaces/%s/resourceclaimtemplates/%s" % (workloads, pod))
    wait_for(lambda: not cluster.core.list_namespaced_pod(workloads).items, message="the claim pods gone")


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
            "containers": [{"name": "serve", "image": WORKLOAD_IMAGE, "command": ["sleep", "infinity"],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}


def slice_lister(cluster):
    """The ResourceSlices list, as at_one_revision calls a list (the client has no resource.k8s.io/v1 models)."""
    def read(resource_version=None, resource_version_match=None):
        answer = call(cluster, "GET", RESOURCE + "/resourceslices", query=[
            (key, value) for key, value in (("resourceVersion", resource_version),
                                            ("resourceVersionMatch", resource_version_match)) if value])
        return types.SimpleNamespace(items=answer["items"])
    return read


def observe(cluster, story):
    """One moment of the cluster: per node of the fleet, its allocatable nvidia.com/gpu and the devices its
    ResourceSlices publish, whether it is cordoned and labelled for the kubelet plugin, its plugin pods and validator
    pods (by DaemonSet; terminating ones too) and the workload pods on it and the node agents' pods holding claims, by
    name: how they get GPUs (DEVICE_PLUGIN: nvidia.com/gpu, KUBELET_PLUGIN: a claim, None), terminating or not; and the
    serve replicas running."""
    nodes, operands, pods, slices = at_one_revision(
        lambda: cluster.core.list_node(label_selector=selector(story.spec)),
        lambda **at: cluster.core.list_namespaced_pod(story.namespace, label_selector="%s in (%s)" % (
            COMPONENT, ", ".join(PLUGINS + (VALIDATOR,) + tuple(AGENTS))), **at),
        lambda **at: cluster.core.list_namespaced_pod(story.workloads, **at),
        slice_lister(cluster))
    sample = {}
    for node in nodes:
        name = node.metadata.name
        sample[name] = {
            "gpus": (int((node.status.allocatable or {}).get("nvidia.com/gpu", "0")),
                     sum(len(s["spec"]["devices"]) for s in slices if s["spec"].get("nodeName") == name)),
            "cordoned": bool(node.spec.unschedulable),
            "dra_label": (node.metadata.labels or {}).get(DRA_LABEL),
            "plugins": sorted(p.metadata.labels[COMPONENT] for p in operands
                              if p.spec.node_name == name and p.metadata.labels[COMPONENT] in PLUGINS),
            "validators": sorted(p.metadata.labels["app"] for p in operands
                                 if p.spec.node_name == name and p.metadata.labels[COMPONENT] == VALIDATOR),
            # The node agents holding claims too.
            "pods": {p.metadata.name: (gpus_from(p), bool(p.metadata.deletion_timestamp))
                     for p in pods + [a for a in operands if a.spec.resource_claims] if p.spec.node_name == name}}
    sample["serving"] = len([p for p in pods if (p.metadata.labels or {}).get("app") == "serve" and not
                             p.metadata.deletion_timestamp and p.status.phase == "Running"])
    return sample


def gpus_from(pod):
    if pod.spec.resource_claims:
        return KUBELET_PLUGIN
    if any("nvidia.com/gpu" in ((c.resources and c.resources.limits) or {}) for c in pod.spec.containers):
        return DEVICE_PLUGIN
    return None


def sampled_deploy(cluster, story, variables, nodes, leaving):
    """Runs the deploy with variables under a sampler while nodes switch away from the plugin `leaving`; checks what
    must hold all along: the other nodes' GPUs as they were, and on each switching node the plugin `leaving` as long
    as a pod getting its GPUs from it is there. Returns the samples and the workload pods evicted meanwhile."""
    others = {name: observe(cluster, story)[name]["gpus"] for name in story.nodes if name not in nodes}
    evicted_before = audit_evictions(cluster, story.workloads)
    with Sampler(lambda: observe(cluster, story), interval=0.5) as sampler:
        playbook(cluster, "deploy", variables).succeeded()
    assert not sampler.errors, sampler.errors[:3]
    samples = sampler.values
    assert samples
    for name, gpus in others.items():
        assert {sample[name]["gpus"] for sample in samples} == {gpus}, (name, gpus)
    # The plugin leaves last: no moment shows a pod using it on the node without it.
    held = [sample[node] for sample in samples for node in nodes
            if leaving in [gpus for gpus, _gone in sample[node]["pods"].values()]]
    assert held, "the sampler never saw the nodes' GPU pods"
    assert all(leaving in sample["plugins"] for sample in held), [s for s in held if leaving not in s["plugins"]]
    return samples, audit_evictions(cluster, story.workloads)[len(evicted_before):]


def switch(cluster, story, node, labels, leaving):
    """Relabels node for the other mode and runs the deploy under a sampler (sampled_deploy), the PodDisruptionBudget's
    replica serving all along. Returns the workload pods evicted meanwhile."""
    cluster.core.patch_node(node, {"metadata": {"labels": labels}})
    samples, evicted = sampled_deploy(cluster, story, story.variables, [node], leaving)
    assert min(sample["serving"] for sample in samples) >= 1
    return evicted


def test_switching_a_node_to_the_device_plugin_and_back_evicts_only_its_gpu_pods_and_keeps_every_other_nodes_gpus(
        cluster, story):
    dp, dra_l4, dra_h100 = story.nodes
    workloads = story.workloads
    cluster.apps.create_namespaced_deployment(workloads, serve_deployment(story.spec))
    kubernetes.client.PolicyV1Api(cluster.client).create_namespaced_pod_disruption_budget(workloads, {
        "metadata": {"name": "serve"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "serve"}}}})
    # A claim on each DRA node, and a pod without GPUs on the node that switches.
    claim_pod(cluster, workloads, "claimer", {"deviceClassName": "gpu.nvidia.com"}, node=dra_l4)
    claim_pod(cluster, workloads, "hopper", {"deviceClassName": "gpu.nvidia.com"}, node=dra_h100)
    cluster.core.create_namespaced_pod(workloads, {"metadata": {"name": "bystander"}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": dra_l4},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "web", "image": WORKLOAD_IMAGE, "command": ["sleep", "infinity"]}]}})
    wait_for(lambda: {name: running_on(cluster, workloads, name) for name in ("claimer", "hopper", "bystander")} == {
        "claimer": dra_l4, "hopper": dra_h100, "bystander": dra_l4}, message="the claim pods and the bystander running")
    wait_for(lambda: [p.spec.node_name for p in cluster.core.list_namespaced_pod(workloads, label_selector="app=serve")
                      .items if p.status.phase == "Running"] == [dp], message="one serve replica, on the device-plugin node")
    # What must stay: the bystander, the claim on the other DRA node, the serve replica on the device-plugin node.
    kept = {p.metadata.name: p.metadata.uid for p in cluster.core.list_namespaced_pod(workloads).items
            if p.metadata.name != "claimer" and p.spec.node_name}

    # To the device plugin: the claim holder there is evicted while the kubelet plugin can still unprepare it.
    assert switch(cluster, story, dra_l4, {DRA_ROLE: None}, KUBELET_PLUGIN) == ["claimer"]
    node = cluster.core.read_node(dra_l4)
    assert (node.metadata.labels.get("nvidia.com/gpu.deploy.device-plugin"),
            node.metadata.labels.get("nvidia.com/gpu.deploy.dra-driver"), node.spec.unschedulable) == ("true", None, None)
    assert observe(cluster, story)[dra_l4]["gpus"] == (2, 0)
    cuda = cluster.batch.list_namespaced_job(story.namespace, label_selector="accelerators.gpu/validation=cuda").items
    assert sorted(job.metadata.annotations["accelerators.gpu/node"] for job in cuda) == sorted([dp, dra_l4])
    # The second serve replica finds the node's GPUs.
    wait_for(lambda: running_on_nodes(cluster, workloads, "app=serve") == sorted([dp, dra_l4]),
             message="a serve replica on each device-plugin node")
    on_l4 = [p.metadata.name for p in cluster.core.list_namespaced_pod(workloads, label_selector="app=serve").items
             if p.spec.node_name == dra_l4]

    # Back to DRA: the serve replica there is evicted (the budget allows it, the other serves), the bystander stays.
    assert switch(cluster, story, dra_l4, DRA_SELECTOR, DEVICE_PLUGIN) == on_l4
    assert observe(cluster, story)[dra_l4]["gpus"] == (0, 2)
    assert running_on_nodes(cluster, workloads, "app=serve") == [dp]
    jobs = cluster.batch.list_namespaced_job(story.namespace, label_selector="accelerators.gpu/validation=dra").items
    assert {job.metadata.annotations["accelerators.gpu/node"]: job.status.succeeded for job in jobs} == {
        dra_h100: 1, dra_l4: 1}
    # Nothing else was evicted or restarted.
    now = {p.metadata.name: p.metadata.uid for p in cluster.core.list_namespaced_pod(workloads).items
           if not p.metadata.deletion_timestamp}
    assert {name: now.get(name) for name in kept} == kept

    cluster.apps.delete_namespaced_deployment("serve", workloads)
    for pod in ("hopper", "bystander"):
        cluster.core.delete_namespaced_pod(pod, workloads)
    for template in ("claimer", "hopper"):
        call(cluster, "DELETE", RESOURCE + "/namespaces/%s/resourceclaimtemplates/%s" % (workloads, template))
    wait_for(lambda: not cluster.core.list_namespaced_pod(workloads).items, message="the workloads gone")


def running_on_nodes(cluster, namespace, label_selector):
    return sorted(p.spec.node_name for p in cluster.core.list_namespaced_pod(namespace, label_selector=label_selector)
                  .items if p.status.phase == "Running" and not p.metadata.deletion_timestamp)


def audit_evictions(cluster, namespace):
    """The pods of namespace evicted through the Eviction API, in order, from the API server's audit log."""
    evicted = []
    with open(cluster.audit_log) as log:
        for line in log:
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if (ref.get("namespace"), ref.get("resource"), ref.get("subresource"), event["verb"]) == (
                    namespace, "pods", "eviction", "create") and (event.get("responseStatus") or {}).get("code") == 201:
                evicted.append(ref["name"])
    return evicted


def test_a_driver_change_rolls_through_the_dra_nodes_each_validated_with_a_gpu_from_a_claim(cluster, story):
    """A DRA node advertises no nvidia.com/gpu: the rollout's CUDA check there gets its GPU from a ResourceClaim of
    the validation template (a Job asking for nvidia.com/gpu would never be scheduled, and the line would stop)."""
    values = dict(story.variables, common_driver_version=NEW_DRIVER)
    # One wave of the three nodes: a wave's check replaces the Jobs of that check on the other nodes, so only one
    # wave's Jobs are left to look at.
    one_wave = dict(values, driver_upgrade_max_parallel=0, driver_upgrade_max_unavailable="100%")
    playbook(cluster, "deploy", one_wave).succeeded()
    story.variables = values
    drivers = cluster.core.list_namespaced_pod(story.namespace, label_selector=COMPONENT + "=nvidia-driver").items
    assert sorted(pod.spec.node_name for pod in drivers if NEW_DRIVER in pod.spec.containers[0].image) == sorted(
        story.nodes)
    jobs = cluster.batch.list_namespaced_job(story.namespace,
                                             label_selector="accelerators.gpu/validation=driver-upgrade-cuda").items
    claims = {}
    for job in jobs:
        pod = job.spec.template.spec
        assert job.status.succeeded == 1, job.metadata.name
        claims[job.metadata.annotations["accelerators.gpu/node"]] = (
            [claim.resource_claim_template_name for claim in pod.resource_claims or []],
            (pod.containers[0].resources.limits or {}).get("nvidia.com/gpu"))
    dra = sorted(node.metadata.name for node in cluster.core.list_node(label_selector=DRA_ROLE).items
                 if node.metadata.name in story.nodes)
    assert len(dra) == 2, dra
    assert claims == dict([(name, (["nvidia-dra-validation-gpu"], None)) for name in dra] + [
        (name, ([], "1")) for name in story.nodes if name not in dra]), claims


def test_xid_48_on_a_dra_node_is_reset_and_validated_with_a_gpu_from_a_claim(cluster, story):
    """The remediation of a node in DRA mode: the GPU clients and the kubelet plugin stopped for the reset, the GPUs
    back when its ResourceSlices publish every GPU GPU feature discovery counts, the CUDA validation Job's GPU from a
    claim of the DRA driver role's template (a Job asking for nvidia.com/gpu would never be scheduled there)."""
    node_name = sorted(node.metadata.name for node in cluster.core.list_node(label_selector=DRA_ROLE).items
                       if node.metadata.name in story.nodes)[0]
    variables = dict(story.variables, remediation_label_selector=selector(story.spec), remediation_poll_interval=0.5,
                     remediation_prometheus_url=gpu_faults.prometheus_url(cluster))
    started = time.monotonic()
    fault = gpu_faults.inject_xid(cluster.client, node_name, 0, 48)

    run = playbook(cluster, "remediate", variables).succeeded()
    print("remediate (reset, DRA node): %.1f s; XID 48 to the node back (a run started at once): %.1f s" % (
        run.seconds, time.monotonic() - started))

    node = cluster.core.read_node(node_name)
    record = json.loads(node.metadata.annotations["accelerators.gpu/gpu-remediation"])
    assert node.metadata.labels["accelerators.gpu/gpu-remediation-state"] == "done" and not node.spec.unschedulable
    assert (record["gpu_uuids"], record["xids"]) == ([fault["uuid"]], [48])
    assert [(a["action"], a["result"]) for a in record["attempts"]] == [("reset", "succeeded")]
    assert gpu_faults.faults_of(node.metadata.annotations) == []
    [job] = cluster.batch.list_namespaced_job(
        story.namespace, label_selector="accelerators.gpu/validation=gpu-remediation-cuda").items
    pod = job.spec.template.spec
    assert job.status.succeeded == 1 and job.metadata.annotations["accelerators.gpu/node"] == node_name
    assert [claim.resource_claim_template_name for claim in pod.resource_claims or []] == ["nvidia-dra-validation-gpu"]
    assert not (pod.containers[0].resources.limits or {}).get("nvidia.com/gpu")
    published = {device["name"] for s in slices_of(cluster, node_name) for device in s["spec"]["devices"]
                 if device["attributes"]["type"]["string"] == "gpu"}
    assert len(published) == int(node.metadata.labels["nvidia.com/gpu.count"]), published


def test_switching_the_dra_stack_off_rolls_its_nodes_to_the_device_plugin_one_at_a_time_before_its_objects_go(
        cluster, story):
    """common_dra_node_selector: {} after it selected nodes: each node still labelled for the kubelet plugin is
    switched as one node is (cordoned, its claim holders evicted while the plugin can unprepare their claims,
    relabelled, uncordoned once the device plugin advertises its GPUs), one at a time, and only then do the DRA objects
    go."""
    dp, dra_l4, dra_h100 = story.nodes
    workloads = story.workloads
    claim_pod(cluster, workloads, "holder", {"deviceClassName": "gpu.nvidia.com"}, node=dra_l4)
    pinned = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    cluster.core.create_namespaced_pod(workloads, {"metadata": {"name": "bystander"}, "spec": dict(pinned, **{
        "nodeSelector": {"kubernetes.io/hostname": dra_h100},
        "containers": [{"name": "web", "image": WORKLOAD_IMAGE, "command": ["sleep", "infinity"]}]})})
    cluster.core.create_namespaced_pod(workloads, {"metadata": {"name": "steady"}, "spec": dict(pinned, **{
        "nodeSelector": {"kubernetes.io/hostname": dp},
        "containers": [{"name": "cuda", "image": WORKLOAD_IMAGE, "command": ["sleep", "infinity"],
                        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]})})
    wait_for(lambda: {name: running_on(cluster, workloads, name) for name in ("holder", "bystander", "steady")} == {
        "holder": dra_l4, "bystander": dra_h100, "steady": dp}, message="the holder, bystander and steady running")
    running = {p.metadata.name: p.metadata.uid for p in cluster.core.list_namespaced_pod(workloads).items}
    kept = {name: uid for name, uid in running.items() if name != "holder"}
    # The device-plugin node's agents, which switching DRA off leaves as they are.
    steady_agents = {component: apps[component][dp].metadata.uid
                     for component, apps in agent_pods(cluster, story.namespace).items()}
    assert sorted(steady_agents) == sorted(AGENTS)
    before = api.object_names(cluster.client)
    labelled = {node: cluster.core.read_node(node).metadata.labels for node in story.nodes}
    values = dict(story.variables, common_dra_node_selector={})

    # Check mode: each DRA node's switch reported (its evictions as dry runs), nothing changed.
    checked = playbook(cluster, "deploy", values, check=True).succeeded()
    assert sorted(result["evicted"] for _name, result in checked.results if "spared" in result) == [
        [], ["%s/holder" % workloads]]
    assert api.object_names(cluster.client) == before
    assert {node: cluster.core.read_node(node).metadata.labels for node in story.nodes} == labelled
    assert {p.metadata.name: p.metadata.uid for p in cluster.core.list_namespaced_pod(workloads).items} == running

    samples, evicted = sampled_deploy(cluster, story, values, [dra_l4, dra_h100], KUBELET_PLUGIN)
    assert evicted == ["holder"]
    # The DRA node agents went before the kubelet plugin (sampled_deploy: no moment shows one of their pods on a node
    # without it), and they were seen there.
    seen = {name for sample in samples for node in (dra_l4, dra_h100) for name, (gpus, _gone)
            in sample[node]["pods"].items() if gpus == KUBELET_PLUGIN and name != "holder"}
    assert {name.rsplit("-", 1)[0] for name in seen} == {dra_name for dra_name, _template in AGENTS.values()}, seen
    # One node at a time: never both DRA nodes cordoned or without GPUs at once.
    down = [[node for node in (dra_l4, dra_h100) if sample[node]["cordoned"] or sum(sample[node]["gpus"]) == 0]
            for sample in samples]
    assert max(len(nodes) for nodes in down) == 1, [nodes for nodes in down if len(nodes) > 1]
    # A DRA node keeps its own validator until its labels flip; the device-plugin one keeps off it until then (and is
    # not rolled out anew on the other nodes, whose GPUs stayed as they were).
    early = [(node, sample[node]["validators"]) for sample in samples for node in (dra_l4, dra_h100)
             if sample[node]["dra_label"] == "true" and VALIDATOR in sample[node]["validators"]]
    assert not early, early[:3]
    # Then one validator DaemonSet for all (rolled out after the deploy, which does not wait for it).
    wait_for(lambda: [observe(cluster, story)[node]["validators"] for node in story.nodes] == [[VALIDATOR]] * 3,
             message="one validator pod of nvidia-operator-validator on each node")
    now = observe(cluster, story)
    assert {node: (now[node]["gpus"], now[node]["cordoned"], now[node]["plugins"]) for node in story.nodes} == {
        dp: ((2, 0), False, [DEVICE_PLUGIN]), dra_l4: ((2, 0), False, [DEVICE_PLUGIN]),
        dra_h100: ((1, 0), False, [DEVICE_PLUGIN])}
    for node in story.nodes:
        labels = cluster.core.read_node(node).metadata.labels
        assert (labels.get("nvidia.com/gpu.deploy.device-plugin"), labels.get("nvidia.com/gpu.deploy.dra-driver")) == (
            "true", None), node
    # The agents: one DaemonSet each, on every node, those of the device-plugin node the same pods as before; the
    # operand namespace no longer lets claims take admin access.
    agents = agent_pods(cluster, story.namespace)
    assert {component: sorted(apps[component]) for component, apps in agents.items()} == {
        component: sorted(story.nodes) for component in AGENTS}
    assert {component: apps[component][dp].metadata.uid for component, apps in agents.items()} == steady_agents
    assert ADMIN_ACCESS not in cluster.core.read_namespace(story.namespace).metadata.labels
    # No pod left Terminating: the holder went (its claim unprepared), the others stand.
    pods = cluster.core.list_namespaced_pod(workloads).items
    assert {p.metadata.name: p.metadata.uid for p in pods} == kept
    assert not [p.metadata.name for p in pods if p.metadata.deletion_timestamp]
    # Every DRA object of the collection went (the ComputeDomain CRD stays with its ComputeDomains, as it does when
    # ComputeDomains are switched off); nothing else did, here or cluster-wide (the namespaces of the session's
    # earlier tests may still be going, with what they hold).
    after = api.object_names(cluster.client)
    namespace = story.namespace
    accounts = ["compute-domain-daemon-service-account", "nvidia-dcgm-exporter-dra", "nvidia-dra-driver-controller",
                "nvidia-dra-driver-kubeletplugin"]
    gone = {kind: sorted(key for key in set(names) - set(after[kind]) if isinstance(key, str) or key[0] == namespace)
            for kind, names in before.items() if kind != "namespaces"}
    assert {kind: names for kind, names in gone.items() if names} == {
        "daemonsets": [(namespace, name) for name in sorted(
            ["nvidia-dra-driver-kubelet-plugin", "nvidia-operator-validator-dra"]
            + [dra_name for dra_name, _template in AGENTS.values()])],
        "deployments": [(namespace, "nvidia-dra-driver-controller")],
        "jobs": sorted((namespace, "nvidia-dra-validation-" + node) for node in (dra_l4, dra_h100)),
        "serviceaccounts": [(namespace, name) for name in accounts],
        "roles": [(namespace, name) for name in accounts],
        "clusterroles": accounts,
        "clusterrolebindings": accounts,
        "deviceclasses": ["compute-domain-daemon.nvidia.com", "compute-domain-default-channel.nvidia.com",
                          "gpu.nvidia.com", "mig.nvidia.com"],
        "resourceslices": before["resourceslices"],
        "resourceclaimtemplates": [(namespace, name) for name in sorted(
            ["nvidia-dra-validation-gpu"] + [template for _dra_name, template in AGENTS.values()])],
        "validatingadmissionpolicies": ["resourceslices-policy-nvidia-dra-driver"],
        "validatingadmissionpolicybindings": ["resourceslices-policy-nvidia-dra-driver"]}
    assert "computedomains.resource.nvidia.com" in after["crds"]

    assert playbook(cluster, "deploy", values).succeeded().stats["changed"] == 0

    for pod in ("bystander", "steady"):
        cluster.core.delete_namespaced_pod(pod, workloads)
    call(cluster, "DELETE", RESOURCE + "/namespaces/%s/resourceclaimtemplates/holder" % workloads)
    wait_for(lambda: not cluster.core.list_namespaced_pod(workloads).items, message="the workloads gone")


def test_uninstall_removes_every_dra_object_and_leaves_the_cluster_as_before(cluster, story):
    # DRA on again, as before the test above: its nodes switch back, so that there is a DRA stack to remove.
    playbook(cluster, "deploy", story.variables).succeeded()
    assert all(slices_of(cluster, node) for node in story.nodes[1:])
    # A ComputeDomain of the earlier test goes with its CRD.
    assert call(cluster, "GET", COMPUTE_DOMAINS % story.workloads)["items"]
    # A pod holding a GPU through a claim: the uninstall refuses, naming it, before anything changes (once the
    # kubelet plugin is gone its claim could not be unprepared); deleted while the plugin runs, it goes.
    dra_l4 = story.nodes[1]
    claim_pod(cluster, story.workloads, "holder", {"deviceClassName": "gpu.nvidia.com"}, node=dra_l4)
    wait_for(lambda: running_on(cluster, story.workloads, "holder"), message="the claim holder running")
    deployed = api.object_names(cluster.client)
    task, failed = playbook(cluster, "uninstall", story.variables).failure()
    assert task.endswith("No pod holds GPUs of the DRA driver through a ResourceClaim (uninstall_claim_holders_ignored)")
    claim = cluster.core.read_namespaced_pod("holder", story.workloads).status.resource_claim_statuses[0]
    assert "Pods hold GPUs of the DRA driver through ResourceClaims: pod %s/holder on node %s (claim %s)." % (
        story.workloads, dra_l4, claim.resource_claim_name) in failed["msg"], failed["msg"]
    assert api.object_names(cluster.client) == deployed
    cluster.core.delete_namespaced_pod("holder", story.workloads)
    call(cluster, "DELETE", RESOURCE + "/namespaces/%s/resourceclaimtemplates/holder" % story.workloads)
    wait_for(lambda: not cluster.core.list_namespaced_pod(story.workloads).items, message="the claim holder gone")
    playbook(cluster, "uninstall", story.variables).succeeded()
    assert not any(slices_of(cluster, node) for node in story.nodes)
    # No pod stays Terminating: the DRA node agents went while the kubelet plugin could unprepare their claims. The
    # namespace, which the test made, no longer lets claims take admin access.
    wait_for(lambda: not cluster.core.list_namespaced_pod(story.namespace).items, message="the operand pods gone")
    assert ADMIN_ACCESS not in (cluster.core.read_namespace(story.namespace).metadata.labels or {})
    after = api.object_names(cluster.client)

    def keys(names):
        return {name if isinstance(name, str) else tuple(name) for name in names}

    def explained(kind, key):
        """Gone with a namespace that was being deleted before the deploy (or that namespace itself), or the stack's
        own, left by an earlier test's deploy."""
        return (key[0] if isinstance(key, tuple) else key) in story.leaving or key in keys(story.left[kind])
    added = {kind: sorted(keys(names) - keys(story.before[kind])) for kind, names in after.items()}
    removed = {kind: sorted(key for key in keys(names) - keys(after[kind]) if not explained(kind, key))
               for kind, names in story.before.items()}
    assert {kind: names for kind, names in added.items() if names} == {}
    assert {kind: names for kind, names in removed.items() if names} == {}
    assert "computedomains.resource.nvidia.com" not in after["crds"]
