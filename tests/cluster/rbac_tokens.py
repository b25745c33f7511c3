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
