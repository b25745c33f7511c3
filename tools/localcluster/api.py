"""Small helpers over the kubernetes Python client for the local cluster's tooling."""

import subprocess
import time
from pathlib import Path

import kubernetes
import urllib3
import yaml
from kubernetes.client.rest import ApiException

HERE = Path(__file__).resolve().parent
# The OpenShift and ecosystem APIs the collection talks to: (group, version, kind, plural, scope, has status), as the
# real APIs have them. Each is registered with its real schema: the upstream CRD (OLM, monitoring: fetch-crds.sh) or
# one written here from the real API (crds/).
OPENSHIFT_APIS = (
    ("image.openshift.io", "v1", "ImageStream", "imagestreams", "Namespaced", True),
    ("config.openshift.io", "v1", "ClusterVersion", "clusterversions", "Cluster", True),
    ("config.openshift.io", "v1", "Proxy", "proxies", "Cluster", True),
    ("config.openshift.io", "v1", "ImageDigestMirrorSet", "imagedigestmirrorsets", "Cluster", True),
    ("config.openshift.io", "v1", "ImageTagMirrorSet", "imagetagmirrorsets", "Cluster", True),
    ("operator.openshift.io", "v1alpha1", "ImageContentSourcePolicy", "imagecontentsourcepolicies", "Cluster", True),
    ("machineconfiguration.openshift.io", "v1", "MachineConfigPool", "machineconfigpools", "Cluster", True),
    ("machineconfiguration.openshift.io", "v1", "MachineConfig", "machineconfigs", "Cluster", False),
    ("security.openshift.io", "v1", "SecurityContextConstraints", "securitycontextconstraints", "Cluster", False),
    ("operators.coreos.com", "v1alpha1", "Subscription", "subscriptions", "Namespaced", True),
    ("operators.coreos.com", "v1", "OperatorGroup", "operatorgroups", "Namespaced", True),
    ("operators.coreos.com", "v1alpha1", "ClusterServiceVersion", "clusterserviceversions", "Namespaced", True),
    ("nfd.openshift.io", "v1", "NodeFeatureDiscovery", "nodefeaturediscoveries", "Namespaced", True),
    ("monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors", "Namespaced", True),
    ("monitoring.coreos.com", "v1", "PrometheusRule", "prometheusrules", "Namespaced", False),
)
# Namespaces every OpenShift cluster has that the collection writes into: the console reads its dashboards from
# openshift-config-managed.
OPENSHIFT_NAMESPACES = ("openshift-config-managed",)


def client_from_kubeconfig(path):
    return kubernetes.config.new_client_from_config(config_file=str(path))


def upstream_crds_dir():
    """The directory of the cached upstream CRDs (OLM's, the Prometheus Operator's), fetched on first use."""
    result = subprocess.run(["bash", str(HERE / "fetch-crds.sh")], stdout=subprocess.PIPE, check=True, text=True)
    return Path(result.stdout.strip().splitlines()[-1])


def crd_documents():
    """The CRDs of OPENSHIFT_APIS: the upstream ones and those written here (crds/), by name."""
    found = {}
    for path in sorted(upstream_crds_dir().glob("*.yaml")) + sorted((HERE / "crds").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found[doc["metadata"]["name"]] = doc
    wanted = ["%s.%s" % (plural, group) for group, _version, _kind, plural, _scope, _status in OPENSHIFT_APIS]
    missing = sorted(set(wanted) - set(found))
    if missing:
        raise RuntimeError("no CRD for %s" % ", ".join(missing))
    return [found[name] for name in wanted]


def install_crds(client, flavour, timeout=60):
    """The OpenShift flavour's APIs (OPENSHIFT_APIS) and namespaces (OPENSHIFT_NAMESPACES); nothing for the others."""
    if flavour != "openshift":
        return
    core = kubernetes.client.CoreV1Api(client)
    for name in OPENSHIFT_NAMESPACES:
        try:
            core.create_namespace({"metadata": {"name": name}})
        except ApiException as error:
            if error.status != 409:
                raise
    ext = kubernetes.client.ApiextensionsV1Api(client)
    names = []
    for body in crd_documents():
        names.append(body["metadata"]["name"])
        try:
            ext.create_custom_resource_definition(body)
        except ApiException as error:
            if error.status != 409:
                raise
    pending = wait_each(names, lambda name: has_condition(ext.read_custom_resource_definition(name), "Established"),
                        timeout)
    if pending:
        raise RuntimeError("CRDs not established after %ds: %s" % (timeout, ", ".join(pending)))


def has_condition(obj, kind):
    return any(c.type == kind and c.status == "True" for c in obj.status.conditions or [])


def wait_each(names, done, timeout, interval=0.2):
    """Polls done(name) for every name until all are done or the timeout passes; returns those still pending."""
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending and time.monotonic() < deadline:
        pending = {name for name in pending if not done(name)}
        if pending:
            time.sleep(interval)
    return sorted(pending)


def mark_local(client, marker, flavour):
    namespace, name = marker
    body = {"metadata": {"name": name}, "data": {"flavour": flavour}}
    try:
        kubernetes.client.CoreV1Api(client).create_namespaced_config_map(namespace, body)
    except ApiException as error:
        if error.status != 409:
            raise


def local_flavour(client, marker, timeout=None):
    """The flavour of a cluster this project started, or None for any other cluster."""
    namespace, name = marker
    try:
        return kubernetes.client.CoreV1Api(client).read_namespaced_config_map(
            name, namespace, _request_timeout=timeout).data["flavour"]
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def reusable_flavour(kubeconfig, marker, timeout=5):
    """(flavour, None) when kubeconfig names a running cluster this project started, which tests may use; otherwise
    (None, why not): the file is missing or unreadable, no API server answers (a cluster that was stopped), or the
    cluster is not one of ours (no marker, or the marker cannot be read). It only reads the marker."""
    if not Path(kubeconfig).is_file():
        return None, "no such file"
    try:
        client = client_from_kubeconfig(kubeconfig)
    except (kubernetes.config.ConfigException, yaml.YAMLError, OSError) as error:
        return None, "not a usable kubeconfig (%s)" % " ".join(str(error).split())
    server = client.configuration.host
    try:
        flavour = local_flavour(client, marker, timeout=timeout)
    except urllib3.exceptions.HTTPError as error:
        # The last part of urllib3's message is the cause: "[Errno 111] Connection refused", a timeout, a TLS error.
        cause = str(getattr(error, "reason", None) or error).rsplit(": ", 1)[-1]
        return None, "no API server answers at %s (%s)" % (server, cause)
    except ApiException as error:
        return None, "the API server at %s refused to show the marker of a local cluster (%s %s): it is left alone" % (
            server, error.status, error.reason)
    if flavour is None:
        return None, "the cluster at %s was not started by this project: it is left alone" % server
    return flavour, None


def wait_default_service_account(client, timeout=60):
    """kube-controller-manager is serving once it has created the default service account."""
    core = kubernetes.client.CoreV1Api(client)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            core.read_namespaced_service_account("default", "default")
            return
        except ApiException as error:
            if error.status != 404:
                raise
        time.sleep(0.3)
    raise RuntimeError("kube-controller-manager created no default service account in %ds" % timeout)


def object_names(client, label_selector=None):
    """Names of every object of the kinds a GPU stack creates, cluster-wide, and the namespaces: what tests compare
    before a deploy and after its uninstall. label_selector: only the objects it selects."""
    selected = {"label_selector": label_selector}
    core, apps = kubernetes.client.CoreV1Api(client), kubernetes.client.AppsV1Api(client)
    rbac = kubernetes.client.RbacAuthorizationV1Api(client)
    found = {
        "namespaces": [n.metadata.name for n in core.list_namespace(**selected).items],
        "daemonsets": [(d.metadata.namespace, d.metadata.name)
                       for d in apps.list_daemon_set_for_all_namespaces(**selected).items],
        "deployments": [(d.metadata.namespace, d.metadata.name)
                        for d in apps.list_deployment_for_all_namespaces(**selected).items],
        "jobs": [(j.metadata.namespace, j.metadata.name)
                 for j in kubernetes.client.BatchV1Api(client).list_job_for_all_namespaces(**selected).items],
        "serviceaccounts": [(s.metadata.namespace, s.metadata.name)
                            for s in core.list_service_account_for_all_namespaces(**selected).items],
        "services": [(s.metadata.namespace, s.metadata.name)
                     for s in core.list_service_for_all_namespaces(**selected).items],
        "clusterroles": [r.metadata.name for r in rbac.list_cluster_role(**selected).items],
        "clusterrolebindings": [r.metadata.name for r in rbac.list_cluster_role_binding(**selected).items],
        "roles": [(r.metadata.namespace, r.metadata.name)
                  for r in rbac.list_role_for_all_namespaces(**selected).items],
        "crds": [c.metadata.name for c in
                 kubernetes.client.ApiextensionsV1Api(client).list_custom_resource_definition(**selected).items],
        "runtimeclasses": [r.metadata.name
                           for r in kubernetes.client.NodeV1Api(client).list_runtime_class(**selected).items],
    }
    # Read by path: the kubernetes client of requirements.txt has no resource.k8s.io/v1 models.
    for kind, path in DRA_KINDS:
        found[kind] = [(item["metadata"]["namespace"], item["metadata"]["name"]) if item["metadata"].get("namespace")
                       else item["metadata"]["name"] for item in _items(client, path, label_selector)]
    return {kind: sorted(names) for kind, names in found.items()}


# What the DRA stack creates (role dra_driver, the simulated kubelet plugins): by path, for object_names().
DRA_KINDS = (("deviceclasses", "/apis/resource.k8s.io/v1/deviceclasses"),
             ("resourceslices", "/apis/resource.k8s.io/v1/resourceslices"),
             ("resourceclaimtemplates", "/apis/resource.k8s.io/v1/resourceclaimtemplates"),
             ("validatingadmissionpolicies", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"),
             ("validatingadmissionpolicybindings",
              "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"))


def _items(client, path, label_selector=None):
    """The items of the list at path (those label_selector selects); none where the API server does not serve it
    (resource.k8s.io/v1 before 1.34)."""
    try:
        return client.call_api(path, "GET", query_params=[("labelSelector", label_selector)] if label_selector else [],
                               response_type="object", _return_http_data_only=True,
                               auth_settings=["BearerToken"])["items"]
    except ApiException as error:
        if error.status == 404:
            return []
        raise
