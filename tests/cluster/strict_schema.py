"""The objects a playbook run's roles rendered, checked by the API server itself: a dry-run create with
fieldValidation=Strict, which refuses a field the object's schema lacks (misspelt, misplaced, of another version) and
runs the API server's validation of the kind, as a first create of the object would."""

import json
import re

import kubernetes
from kubernetes.client.rest import ApiException

# Kubernetes' own API groups (core v1, apps/v1, batch/v1, rbac.authorization.k8s.io/v1...), not custom resources.
BUILT_IN = re.compile(r"^(v1|[a-z0-9]+/v\w+|[a-z0-9.]+\.k8s\.io/v\w+)$")


def rendered_objects(run):
    """The built-in objects the run's accelerators.gpu.operand tasks applied (their definitions), by task."""
    return [(task, obj) for task, result in run.results
            for obj in ((result.get("invocation") or {}).get("module_args") or {}).get("definitions") or []
            if BUILT_IN.match(obj.get("apiVersion", ""))]


def strict_problems(cluster, objects):
    """{kind/namespace/name: the API server's message} of each object it refuses under strict field validation. Each
    is created under a generated name (the deployed one exists), as a dry run: nothing is stored."""
    resources = kubernetes.dynamic.DynamicClient(cluster.client).resources
    problems = {}
    for obj in objects:
        metadata = obj["metadata"]
        resource = resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        path = resource.path(namespace=metadata.get("namespace") if resource.namespaced else None)
        body = dict(obj, metadata=dict((key, value) for key, value in metadata.items() if key != "name"),)
        body["metadata"]["generateName"] = metadata["name"][:50] + "-"
        try:
            cluster.client.call_api(
                path, "POST", body=body, auth_settings=["BearerToken"], _preload_content=False,
                query_params=[("dryRun", "All"), ("fieldValidation", "Strict")],
                header_params={"Content-Type": "application/json", "Accept": "application/json"})
        except ApiException as error:
            problems["%s/%s/%s" % (obj["kind"], metadata.get("namespace", ""), metadata["name"])] = json.loads(
                error.body).get("message")
    return problems
