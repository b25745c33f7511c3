"""Starting and stopping a cluster: flavours, loopback-only listeners, nothing left running."""

import os
import socket
import struct

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from localcluster import api, controlplane

LISTEN = "0A"


def listening_addresses(pids):
    """(address, port) of every listening TCP socket held by these processes."""
    inodes = set()
    for pid in pids:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        with open("/proc/net/" + table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state != LISTEN or inode not in inodes:
                    continue
                address, port = local.split(":")
                raw = bytes.fromhex(address)
                if family == socket.AF_INET:
                    raw = struct.pack("<I", int(address, 16))
                else:
                    raw = b"".join(struct.pack("<I", int(address[i:i + 8], 16)) for i in range(0, 32, 8))
                found.append((socket.inet_ntop(family, raw), int(port, 16)))
    return found


def test_kubernetes_flavour_starts_on_loopback_and_stops_completely(tmp_path):
    plane = controlplane.ControlPlane(tmp_path / "state")
    info = plane.up("kubernetes")
    pids = list(info["pids"].values())
    try:
        print("kubernetes flavour up in %.1fs" % info["startup_seconds"])
        listeners = listening_addresses(pids)
        assert listeners, "no listening socket found: the check itself is broken"
        assert all(address in ("127.0.0.1", "::1") for address, _port in listeners), listeners
        assert info["ports"]["apiserver"] in [port for _address, port in listeners]
        client = api.client_from_kubeconfig(plane.kubeconfig)
        version = kubernetes.client.VersionApi(client).get_code()
        assert version.git_version.startswith("v1.34.")
        groups = [g.name for g in kubernetes.client.ApisApi(client).get_api_versions().groups]
        assert "apps" in groups
        assert not [g for g in groups if g.endswith("openshift.io")]
        assert "monitoring.coreos.com" not in groups
        namespaces = [n.metadata.name for n in kubernetes.client.CoreV1Api(client).list_namespace().items]
        assert not set(api.OPENSHIFT_NAMESPACES) & set(namespaces)
        assert api.local_flavour(client, controlplane.MARKER) == "kubernetes"
        assert api.reusable_flavour(plane.kubeconfig, controlplane.MARKER) == ("kubernetes", None)
    finally:
        stopped = plane.down()
    assert set(stopped) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "simulator"}
    assert [pid for pid in pids if controlplane._alive(pid)] == []
    # Its kubeconfig stays behind (KUBECONFIG may still name it): the tests then start a cluster of their own.
    flavour, why_not = api.reusable_flavour(plane.kubeconfig, controlplane.MARKER)
    assert flavour is None
    assert why_not.startswith("no API server answers at %s (" % info["server"]), why_not


def test_openshift_flavour_serves_the_openshift_apis(cluster):
    if cluster.flavour != "openshift":
        pytest.skip("the session cluster is of the kubernetes flavour")
    ext = kubernetes.client.ApiextensionsV1Api(cluster.client)
    for group, version, kind, plural, scope, has_status in api.OPENSHIFT_APIS:
        crd = ext.read_custom_resource_definition("%s.%s" % (plural, group))
        assert (crd.spec.names.kind, crd.spec.scope) == (kind, scope)
        served = crd.spec.versions[0]
        assert served.name == version
        assert bool(served.subresources and served.subresources.status is not None) == has_status
    namespaces = [n.metadata.name for n in cluster.core.list_namespace().items]
    assert set(api.OPENSHIFT_NAMESPACES) <= set(namespaces)


def test_a_real_cluster_is_never_taken_for_a_local_one(cluster):
    core = kubernetes.client.CoreV1Api(cluster.client)
    namespace, name = controlplane.MARKER
    marker = core.read_namespaced_config_map(name, namespace)
    core.delete_namespaced_config_map(name, namespace)
    try:
        assert api.local_flavour(cluster.client, controlplane.MARKER) is None
        server = cluster.client.configuration.host
        assert api.reusable_flavour(cluster.kubeconfig, controlplane.MARKER) == (
            None, "the cluster at %s was not started by this project: it is left alone" % server)
    finally:
        try:
            core.create_namespaced_config_map(namespace, {"metadata": {"name": name}, "data": marker.data})
        except ApiException as error:
            assert error.status == 409
