"""Fixtures for tests against the local control plane.

One cluster is started per test session (flavour `openshift`, which is vanilla Kubernetes plus the
OpenShift APIs as CRDs); a test gets its own namespace and its own fleet of simulated nodes, named
with a per-test prefix. KUBECONFIG is used instead when it points at a running cluster this project
started (its marker ConfigMap is checked, so a real cluster is never touched); when it names any other
cluster, or one that does not answer (the demo's, after `make down`), the run says so once and starts
its own.
"""

import hashlib
import os
import signal
import time

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from localcluster import api, controlplane, fleet


class Cluster:
    def __init__(self, kubeconfig, flavour):
        self.kubeconfig = str(kubeconfig)
        self.flavour = flavour
        self.client = api.client_from_kubeconfig(kubeconfig)
        self.core = kubernetes.client.CoreV1Api(self.client)
        self.apps = kubernetes.client.AppsV1Api(self.client)
        self.batch = kubernetes.client.BatchV1Api(self.client)
        self.custom = kubernetes.client.CustomObjectsApi(self.client)
        # The API server's audit log of pod deletions and evictions (localcluster.controlplane.AUDIT_POLICY).
        self.audit_log = os.path.join(os.path.dirname(self.kubeconfig), "logs", "audit.log")
        self.simulator_log = os.path.join(os.path.dirname(self.kubeconfig), "logs", "simulator.log")

    def simulator_log_size(self):
        return os.path.getsize(self.simulator_log) if os.path.exists(self.simulator_log) else 0

    def simulator_failures(self, since):
        """The simulator's tracebacks logged after offset since: a simulation that failed on a node has not played
        its part, whatever the test saw."""
        if not os.path.exists(self.simulator_log):
            return []
        with open(self.simulator_log, encoding="utf-8", errors="replace") as log:
            log.seek(since)
            text = log.read()
        return [entry for entry in text.split("\n20") if "Traceback (most recent call last)" in entry]

    @property
    def env(self):
        """Environment for a process (ansible-playbook) that must reach this cluster."""
        return dict(os.environ, KUBECONFIG=self.kubeconfig, K8S_AUTH_KUBECONFIG=self.kubeconfig)


def wait_for(predicate, timeout=90, interval=0.2, message="condition"):
    """Polls predicate until it returns something truthy; fails naming what was awaited and the last value.

    It returns as soon as the predicate holds, so the timeout costs only a failing test: it is generous because
    CI's 2-core machine can be loaded by a control plane, kwok and ansible-playbook at once."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %ss waiting for %s (last: %r)" % (timeout, message, last))


def wait_until_deleted_namespaces_are_gone(cluster, timeout=180):
    """For a test that compares what a shared session cluster holds before and after: what the namespaces that
    earlier tests deleted still hold goes first, not between the two."""
    wait_for(lambda: not [ns for ns in cluster.core.list_namespace().items if ns.metadata.deletion_timestamp],
             timeout=timeout, message="the namespaces that earlier tests deleted gone")


# A run stopped with SIGTERM (a CI time limit, `timeout`) must still stop the clusters it started: as an
# interrupt, pytest tears the session fixtures down.
def _interrupt(_signum, _frame):
    raise KeyboardInterrupt("SIGTERM")


signal.signal(signal.SIGTERM, _interrupt)


def start_cluster(tmp_path_factory, flavour):
    plane = controlplane.ControlPlane(tmp_path_factory.mktemp("cluster-" + flavour))
    info = plane.up(flavour)
    print("\n%s cluster up in %.1fs" % (flavour, info["startup_seconds"]))
    return plane


@pytest.fixture(scope="session")
def cluster(tmp_path_factory, run_note):
    given = os.environ.get("KUBECONFIG")
    if given:
        flavour, why_not = api.reusable_flavour(given, controlplane.MARKER)
        if flavour:
            yield Cluster(given, flavour)
            return
        run_note("KUBECONFIG=%s: %s; the tests ran on a cluster of their own" % (given, why_not))
    plane = start_cluster(tmp_path_factory, "openshift")
    try:
        yield Cluster(plane.kubeconfig, "openshift")
    finally:
        plane.down()


# The vanilla cluster runs only while its tests do: a worker stops it after a test that used it when the next test it
# runs does not (xdist tells each test the next one), instead of keeping it idle until the end of the run; a later
# test that needs it starts it again. Its tests are kept next to each other, so a run without xdist starts it once.
_VANILLA = pytest.StashKey()


class VanillaCluster:
    """The vanilla cluster of a test session: started when a test asks for it and none runs, stopped after its tests."""

    def __init__(self, tmp_path_factory):
        self.tmp_path_factory = tmp_path_factory
        self.plane = None

    def get(self):
        if self.plane is None:
            self.plane = start_cluster(self.tmp_path_factory, "kubernetes")
        return Cluster(self.plane.kubeconfig, "kubernetes")

    def stop(self):
        if self.plane is not None:
            self.plane.down()
            self.plane = None


@pytest.fixture(scope="session")
def vanilla_cluster(tmp_path_factory, pytestconfig):
    vanilla = pytestconfig.stash[_VANILLA] = VanillaCluster(tmp_path_factory)
    try:
        yield vanilla
    finally:
        vanilla.stop()


@pytest.fixture
def kubernetes_cluster(vanilla_cluster):
    """A second, vanilla cluster (no OpenShift APIs), started only when a test asks for it."""
    return vanilla_cluster.get()


def _uses_vanilla(item):
    return item is not None and "kubernetes_cluster" in item.fixturenames


def pytest_collection_modifyitems(config, items):
    """The files that use the vanilla cluster next to each other, where the first of them was: one process runs them
    on one vanilla cluster. Not on xdist's workers, which share out the files one by one in the collection's order
    (tests/conftest.py: longest first)."""
    if hasattr(config, "workerinput"):
        return
    vanilla_files = set(item.path for item in items if _uses_vanilla(item))
    first = next((index for index, item in enumerate(items) if item.path in vanilla_files), None)
    if first is not None:
        vanilla = [item for item in items if item.path in vanilla_files]
        others = [item for item in items if item.path not in vanilla_files]
        items[:] = others[:first] + vanilla + others[first:]


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After a test that used the vanilla cluster (its fixtures torn down), the cluster stops unless the next needs it."""
    vanilla = item.config.stash.get(_VANILLA, None)
    if vanilla is not None and _uses_vanilla(item) and not _uses_vanilla(nextitem):
        vanilla.stop()


def _test_id(request):
    return hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:6]


@pytest.fixture
def namespace(cluster, request):
    # A fresh name each time: a rerun must not meet the previous run's namespace still terminating.
    name = "t-%s-%s" % (_test_id(request), os.urandom(2).hex())
    create_namespace(cluster, name)
    yield name
    try:
        cluster.core.delete_namespace(name)
    except ApiException as error:
        if error.status != 404:
            raise


def create_namespace(cluster, name):
    """Creates namespace name and waits for the service account the controller manager adds to it a moment later
    (a pod needs it; a list of what the cluster holds taken before it would miss it)."""
    cluster.core.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: _has_default_service_account(cluster, name), message="service account default in " + name)


def _has_default_service_account(cluster, namespace):
    try:
        return cluster.core.read_namespaced_service_account("default", namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


@pytest.fixture
def plane(cluster):
    """The ControlPlane of the session cluster (its state directory holds the kubeconfig); after the test, whatever
    it left stopped is started again, and the cluster answers."""
    plane = controlplane.ControlPlane(os.path.dirname(cluster.kubeconfig))
    if not plane.running():
        pytest.skip("the cluster of %s was not started by this project's control plane" % cluster.kubeconfig)
    yield plane
    healed = plane.heal()
    assert plane.running(), plane.info()["pids"]
    cluster.core.list_namespace(limit=1)
    assert not healed, "the test left %s stopped" % ", ".join(healed)


@pytest.fixture
def make_fleet(cluster, request):
    """Creates the nodes of a fleet spec (dict), named with this test's prefix, and removes them after.

    `on` is the cluster to create them in (the session's openshift-flavoured one by default)."""
    created = []
    log_size = cluster.simulator_log_size()

    def make(spec, on=None):
        made = fleet.Fleet((on or cluster).client, spec, prefix="%s-" % _test_id(request)).apply()
        created.append(made)
        return made.wait_ready()

    yield make
    for made in created:
        made.delete()
    failures = cluster.simulator_failures(log_size)
    assert not failures, "the simulator failed during this test:\n%s" % "\n".join(failures)[-3000:]
