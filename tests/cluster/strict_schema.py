"""Objects checked by the API server itself, under strict field validation: a dry run refuses a field the object's
schema lacks (misspelt, misplaced, of another version) and runs the API server's validation of the kind (types,
enums, required fields), as a real write would. Nothing is stored."""

import copy
import json
import re

import kubernetes
from kubernetes.client.rest import ApiException

# Kubernetes' own API groups (core v1, apps/v1, batch/v1, rbac.authorization.k8s.io/v1...), not custom resources.
BUILT_IN = re.compile(r"^(v1|[a-z0-9]+/v\w+|[a-z0-9.]+\.k8s\.io/v\w+)$")


def rendered_objects(run, built_in=True):
    """The objects the run's accelerators.gpu.operand tasks applied (their definitions), by task: the built-in ones,
    or (built_in=False) the custom resources."""
    return [(task, obj) for task, result in run.results
            for obj in ((result.get("invocation") or {}).get("module_args") or {}).get("definitions") or []
            if bool(BUILT_IN.match(obj.get("apiVersion", ""))) == built_in]


def key(obj):
    metadata = obj["metadata"]
    return "%s/%s/%s" % (obj["kind"], metadata.get("namespace", ""), metadata["name"])


def _refusal(cluster, method, path, body):
    """The API server's message refusing a dry-run write of body at path under strict field validation, or None."""
    try:
        cluster.client.call_api(
            path, method, body=body, auth_settings=["BearerToken"], _preload_content=False,
            query_params=[("dryRun", "All"), ("fieldValidation", "Strict")],
            header_params={"Content-Type": "application/json", "Accept": "application/json"})
    except ApiException as error:
        return json.loads(error.body).get("message")
    return None


def _resources(cluster):
    """The cluster's kinds, through discovery: resources.get(api_version=..., kind=...)."""
    return kubernetes.dynamic.DynamicClient(cluster.client).resources


def strict_problems(cluster, objects):
    """{kind/namespace/name: the API server's message} of each object it refuses under strict field validation. Each
    is created under a generated name (the deployed one exists), as a dry run."""
    resources, problems = _resources(cluster), {}
    for obj in objects:
        metadata = obj["metadata"]
        resource = resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        path = resource.path(namespace=metadata.get("namespace") if resource.namespaced else None)
        body = dict(obj, metadata=dict((key, value) for key, value in metadata.items() if key != "name"),)
        body["metadata"]["generateName"] = metadata["name"][:50] + "-"
        message = _refusal(cluster, "POST", path, body)
        if message:
            problems[key(obj)] = message
    return problems


def replace_problems(cluster, objects):
    """{kind/namespace/name: the API server's message} of each stored object it refuses to take back as it is under
    strict field validation: a dry-run replace of the object and, where the kind has a status subresource, of its
    status (which only that subresource writes)."""
    resources, problems = _resources(cluster), {}
    for obj in objects:
        metadata = obj["metadata"]
        resource = resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        path = resource.path(name=metadata["name"], namespace=metadata.get("namespace") if resource.namespaced
                             else None)
        paths = [path] + ([path + "/status"] if resource.subresources.get("status") and "status" in obj else [])
        refused = [message for message in (_refusal(cluster, "PUT", p, obj) for p in paths) if message]
        if refused:
            problems[key(obj)] = "; ".join(refused)
    return problems


def custom_objects(cluster):
    """Every object of every kind a CustomResourceDefinition serves, at the CRD's storage version, cluster-wide."""
    custom = kubernetes.client.CustomObjectsApi(cluster.client)
    found = []
    for crd in kubernetes.client.ApiextensionsV1Api(cluster.client).list_custom_resource_definition().items:
        (version,) = [v.name for v in crd.spec.versions if v.storage]
        found += custom.list_cluster_custom_object(crd.spec.group, version, crd.spec.names.plural)["items"]
    return found


def misspelt(obj, path, wrong):
    """obj with the last key of path (keys and list indexes) renamed to wrong; the unknown field's full path."""
    copied = copy.deepcopy(obj)
    parent = copied
    for step in path[:-1]:
        parent = parent[step]
    parent[wrong] = parent.pop(path[-1])
    # As the API server names it: spec.endpoints[0].interval.
    return copied, "".join("[%d]" % step if isinstance(step, int) else "." + step
                           for step in path[:-1] + [wrong]).lstrip(".")


def refused_field(cluster, obj, path, wrong):
    """The API server's message refusing obj with the field at path misspelt as wrong; asserts that obj as it is
    passes and that the message names the field."""
    assert strict_problems(cluster, [obj]) == {}
    bad, field = misspelt(obj, path, wrong)
    message = strict_problems(cluster, [bad]).get(key(bad)) or ""
    assert 'unknown field "%s"' % field in message, (field, message)
    return message
