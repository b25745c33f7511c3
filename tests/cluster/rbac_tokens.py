"""Bearer tokens of RBAC-limited users on the test cluster, as AWX's Kubernetes credential holds one.

A ServiceAccount's token from the TokenRequest API authenticates like the token file's admin, but as
system:serviceaccount:<namespace>:<name>, with only the permissions a ClusterRole grants it. The cluster's
--token-auth-file is read once at start-up, so users added to it later would need a restart; service accounts
need no change to the control plane.
"""

import contextlib

import kubernetes


@contextlib.contextmanager
def limited_token(cluster, namespace, name, rules, seconds=3600):
    """A token of ServiceAccount namespace/name bound to a ClusterRole of these rules (PolicyRule dicts).

    The ClusterRole and its binding (cluster-scoped, named <namespace>-<name>) are deleted on exit; the
    ServiceAccount goes with its namespace.
    """
    rbac = kubernetes.client.RbacAuthorizationV1Api(cluster.client)
    role = "%s-%s" % (namespace, name)
    cluster.core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    rbac.create_cluster_role({"metadata": {"name": role}, "rules": rules})
    rbac.create_cluster_role_binding({
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]})
    try:
        request = cluster.core.create_namespaced_service_account_token(
            name, namespace, {"spec": {"expirationSeconds": seconds}})
        yield request.status.token
    finally:
        rbac.delete_cluster_role_binding(role)
        rbac.delete_cluster_role(role)


# What the deploy playbook needs on OpenShift with NFD run by someone else (nfd_install=never), and nothing more;
# docs/docsite/rst/awx.rst shows the same ClusterRole. Granting the operands' RBAC (the privileged SCC, the device
# plugin's node reads, GPU feature discovery's NodeFeature writes, the MIG manager's pod watch) needs the permissions
# granted, so they are here too.
DEPLOY_RULES = [
    # Platform and proxy detection, the DTK image stream.
    {"apiGroups": ["config.openshift.io"], "resources": ["clusterversions", "proxies"], "verbs": ["get"]},
    {"apiGroups": ["image.openshift.io"], "resources": ["imagestreams"], "verbs": ["get"]},
    # The mirror rules registry lookups follow.
    {"apiGroups": ["config.openshift.io"], "resources": ["imagedigestmirrorsets", "imagetagmirrorsets"],
     "verbs": ["list"]},
    {"apiGroups": ["operator.openshift.io"], "resources": ["imagecontentsourcepolicies"], "verbs": ["list"]},
    # Node facts, the operand labels, the driver rollout's cordon and state labels; k8s-driver-manager's ClusterRole
    # grants the rest (update, watch).
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch", "update", "watch"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "create", "patch"]},
    # The operands and their waits.
    {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get", "list", "create", "patch", "delete"]},
    {"apiGroups": ["apps"], "resources": ["controllerrevisions"], "verbs": ["list"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "create", "delete"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list"]},
    # Waits and diagnoses read pods; the driver rollout evicts GPU workloads and deletes outdated driver pods, and
    # k8s-driver-manager's ClusterRole grants the rest.
    {"apiGroups": [""], "resources": ["pods", "pods/eviction"],
     "verbs": ["get", "list", "create", "delete", "patch", "update", "watch"]},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list"]},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["serviceaccounts", "configmaps", "services", "secrets"],
     "verbs": ["get", "create", "patch", "delete"]},
    # The DCGM exporter's prometheus-k8s Role grants OpenShift's monitoring these reads (granted, so held).
    {"apiGroups": [""], "resources": ["services", "endpoints", "pods"], "verbs": ["get", "list", "watch"]},
    # delete: the RuntimeClasses of CDI when it is switched off.
    {"apiGroups": ["node.k8s.io"], "resources": ["runtimeclasses"], "verbs": ["get", "create", "patch", "delete"]},
    {"apiGroups": ["monitoring.coreos.com"], "resources": ["servicemonitors"], "verbs": ["get", "create", "patch"]},
    # The alerts' PrometheusRule (delete: when dcgm_exporter_alerts is switched off).
    {"apiGroups": ["monitoring.coreos.com"], "resources": ["prometheusrules"],
     "verbs": ["get", "create", "patch", "delete"]},
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
     "resourceNames": ["servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com",
                       "nodefeaturediscoveries.nfd.openshift.io", "nodefeatures.nfd.k8s-sigs.io"],
     "verbs": ["get"]},
    # GPU feature discovery's Role writes NodeFeature objects (granted, so held).
    {"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeatures"],
     "verbs": ["get", "list", "watch", "create", "update"]},
    # The operands' RBAC, and what it grants.
    {"apiGroups": ["rbac.authorization.k8s.io"],
     "resources": ["roles", "rolebindings", "clusterroles", "clusterrolebindings"], "verbs": ["get", "create", "patch"]},
    {"apiGroups": ["security.openshift.io"], "resources": ["securitycontextconstraints"],
     "resourceNames": ["privileged"], "verbs": ["use"]},
]
