"""The cluster tests use the cluster KUBECONFIG names only when it is a running one this project started
(localcluster.api.reusable_flavour); a kubeconfig left behind by a stopped cluster, or one that cannot be read, is
a reason to start their own, given in a line, never an error. A cluster that runs: tests/cluster/test_lifecycle.py."""

import socket
import time

import yaml

from localcluster import api, controlplane


def test_a_missing_kubeconfig_is_not_reused(tmp_path):
    assert api.reusable_flavour(tmp_path / "kubeconfig", controlplane.MARKER) == (None, "no such file")


def test_a_kubeconfig_that_is_not_one_is_not_reused(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text("clusters: [")
    flavour, why_not = api.reusable_flavour(path, controlplane.MARKER)
    assert flavour is None
    assert why_not.startswith("not a usable kubeconfig ("), why_not


def test_a_stopped_clusters_kubeconfig_is_not_reused_and_the_reason_names_its_server(tmp_path):
    controlplane.write_pki(tmp_path)
    # A loopback port bound but not listening: a connection to it is refused, as to a stopped API server's.
    with socket.socket() as stopped:
        stopped.bind(("127.0.0.1", 0))
        server = "https://127.0.0.1:%d" % stopped.getsockname()[1]
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(controlplane.kubeconfig(server, tmp_path / "ca.crt", "token")))
        started = time.monotonic()
        flavour, why_not = api.reusable_flavour(path, controlplane.MARKER)
        seconds = time.monotonic() - started
    assert flavour is None
    assert why_not.startswith("no API server answers at %s (" % server), why_not
    assert "connection refused" in why_not.lower(), why_not
    assert seconds < 5, "a refused connection took %.1f s to give up on" % seconds


def test_the_ports_of_one_cluster_are_distinct_though_none_is_bound_yet(monkeypatch):
    # The ports of a cluster are chosen before its servers start: a port chosen once is free still, and a second pick
    # of it (etcd's peer port and the simulator's Prometheus, in one CI run) left the simulator dead at start.
    monkeypatch.setattr(controlplane, "SERVER_PORTS", range(20000, 20002))
    first = controlplane.free_port()
    assert controlplane.free_port(taken=[first]) == ({20000, 20001} - {first}).pop()
