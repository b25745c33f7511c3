"""The deploy, status and uninstall playbooks, run as `ansible-playbook accelerators.gpu.<name>` against the local
control plane: a validated stack on OpenShift and Kubernetes, runs that change nothing, failures that name the node,
a node added later, and an uninstall that leaves the cluster as it found it. The Kubernetes deploy is in
test_gpu_dashboard_alerts.py, whose checks of the same deploy it shares."""

import json
import os
import subprocess
import sys
import tempfile
import time

from ansible_collections.accelerators.gpu.tests.unit.golden import render as golden
from ansible_collections.accelerators.gpu.tests.unit.golden.compare import differences
from conftest import Cluster, start_cluster, wait_until_deleted_namespaces_are_gone
from gpu_fleet import COMMON_DEFAULTS, FLEET_LABEL, RHCOS_416, RHCOS_96, selector
from localcluster import api
from localcluster import fleet as fleets
from playbook import COLLECTIONS, ROOT, run

# The simulated registry: NVIDIA's images (the collection's defaults), the DTK images, NFD's.
REGISTRY = ["nvcr.io/nvidia/*", "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:*", "registry.k8s.io/*",
            "registry.redhat.io/*"]
TIMEOUT = 1200
# What a module result says when the module worker ran it, handed over by the playbooks' connection
# (plugins/module_utils/runner/worker.py).
SERVED = {"served_by": "worker", "handed_by": "connection"}


def gpu_fleet(*groups, **extra):
    """A fleet spec with a unique name; extra openshift=None makes it a plain Kubernetes one (no image stream)."""
    spec = {"name": "d-" + os.urandom(3).hex(), "registry": REGISTRY, "openshift": {"version": "4.18.22"},
            "nodes": list(groups) or [
                {"name": "gpu", "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 8}, "os": {"rhcos": RHCOS_416}},
                {"name": "gpu-new", "gpu": {"product": "NVIDIA-L40S", "count": 4},
                 "os": {"rhcos": RHCOS_96, "openshift": "4.21"}},
                {"name": "cpu", "os": {"rhcos": RHCOS_416}}]}
    spec.update(extra)
    return {key: value for key, value in spec.items() if value is not None}


def fleet_variables(namespace, spec, **variables):
    """The stack in the test's namespace, on the fleet's nodes only (the session cluster holds other tests')."""
    return dict(common_namespace=namespace, common_wait_timeout=300, nfd_install="never",
                nfd_node_selector=selector(spec), driver_node_selector={FLEET_LABEL: spec["name"]}, **variables)


class Run:
    """An ansible-playbook run of a collection playbook: its JSON report, return code and wall time, and its module
    results' reports of what ran them ({task, action, report}: tests/callback_plugins/module_reports.py)."""

    def __init__(self, process, seconds, modules):
        self.process = process
        self.seconds = seconds
        self.modules = modules
        try:
            self.report = json.loads(process.stdout)
        except ValueError:
            raise AssertionError("no JSON report (rc=%d)\nstdout: %s\nstderr: %s" % (
                process.returncode, process.stdout[-3000:], process.stderr[-3000:]))

    @property
    def results(self):
        return [(task["task"]["name"], task["hosts"]["localhost"])
                for play in self.report["plays"] for task in play["tasks"] if "localhost" in task["hosts"]]

    @property
    def stats(self):
        return self.report["stats"]["localhost"]

    def failure(self):
        """(task name, result) of the task that failed the play."""
        failed = [(name, result) for name, result in self.results if result.get("failed")]
        assert failed and self.process.returncode != 0, "the play did not fail: %s" % self.process.stdout[-2000:]
        return failed[-1]

    def succeeded(self):
        failed = [(name, result.get("msg")) for name, result in self.results if result.get("failed")]
        assert not failed and self.process.returncode == 0, (failed, self.process.stderr[-2000:])
        # A clean run prints no warning, deprecations of ansible-core included (they reach a user's terminal).
        warnings = [line for line in self.process.stderr.splitlines() if "WARNING]" in line]
        assert not warnings, warnings
        return self


def playbook(cluster, name, variables=None, check=False, tags=None, collections=COLLECTIONS):
    # As README's commands run it: with -i localhost, and nothing hiding ansible-core's warnings; the playbooks
    # choose the Python running ansible-playbook themselves. collections: where accelerators.gpu is found (another
    # version of the collection, test_collection_upgrade.py).
    env = dict(cluster.env, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_SHOW_CUSTOM_STATS="true", ANSIBLE_CALLBACKS_ENABLED="module_reports",
               ANSIBLE_CALLBACK_PLUGINS=os.path.join(ROOT, "tests", "callback_plugins"),
               ANSIBLE_INJECT_INVOCATION="true")
    command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
               "accelerators.gpu." + name,
               "-e", json.dumps(variables or {})] + (["--check"] if check else []) + (
                   ["--tags", tags] if tags else [])
    started = time.monotonic()
    with tempfile.NamedTemporaryFile(mode="r", prefix="module-reports-", suffix=".jsonl") as reports:
        process = subprocess.run(command, env=dict(env, ACCELERATORS_GPU_TEST_MODULE_REPORTS=reports.name),
                                 capture_output=True, text=True, timeout=TIMEOUT, check=False)
        run = Run(process, time.monotonic() - started, [json.loads(line) for line in reports.read().splitlines()])
    print("%s%s: %.1fs, rc=%d" % (name, " --check" if check else "", run.seconds, process.returncode))
    return run


def status_of(cluster, variables):
    run = playbook(cluster, "status", variables).succeeded()
    return run.report["global_custom_stats"]["gpu_stack_status"]


def node_labels(cluster, names):
    return {name: cluster.core.read_node(name).metadata.labels for name in names}


def jobs_by_check(cluster, namespace):
    jobs = cluster.batch.list_namespaced_job(namespace, label_selector="app.kubernetes.io/component=gpu-validation")
    return {(job.metadata.labels["accelerators.gpu/validation"], job.metadata.annotations["accelerators.gpu/node"]):
            job.status.succeeded for job in jobs.items}


def test_openshift_deploy_validates_reruns_unchanged_reports_status_and_uninstalls_to_the_same_cluster(
        tmp_path_factory):
    """A private cluster, so that NFD's installation through OLM and the uninstall compare against a cluster no
    other test touches."""
    plane = start_cluster(tmp_path_factory, "openshift")
    try:
        cluster = Cluster(plane.kubeconfig, "openshift")
        made = fleets.Fleet(cluster.client, gpu_fleet()).apply().wait_ready()
        gpu0, gpu1, cpu = made.node_names
        before_objects, before_labels = objects(cluster), node_labels(cluster, made.node_names)

        first = playbook(cluster, "deploy").succeeded()
        # The module worker ran every module of the deploy, the first included (no_log tasks' results are censored).
        not_served = [module for module in first.modules if module["report"] not in ("censored", SERVED)]
        assert first.modules and not not_served, not_served
        namespace = "nvidia-gpu-operator"
        # One DaemonSet per RHCOS version, each built by its DTK side-car; nothing on the CPU node.
        daemonsets = {ds.metadata.name: ds for ds in cluster.apps.list_namespaced_daemon_set(
            namespace, label_selector="app.kubernetes.io/component=nvidia-driver").items}
        assert sorted(daemonsets) == ["nvidia-driver-daemonset-" + RHCOS_416, "nvidia-driver-daemonset-" + RHCOS_96]
        assert {ds.spec.update_strategy.type for ds in daemonsets.values()} == {"OnDelete"}
        assert cluster.core.read_node(gpu0).status.allocatable["nvidia.com/gpu"] == "8"
        assert cluster.core.read_node(gpu1).status.allocatable["nvidia.com/gpu"] == "4"
        assert jobs_by_check(cluster, namespace) == {(check, node): 1 for check in ("driver", "toolkit", "cuda")
                                                     for node in (gpu0, gpu1)}
        assert "nvidia.com/gpu.present" not in cluster.core.read_node(cpu).metadata.labels

        second = playbook(cluster, "deploy").succeeded()
        assert second.stats["changed"] == 0
        print("deploy %.1fs, second run %.1fs" % (first.seconds, second.seconds))

        status = status_of(cluster, {})
        assert status["ready"] is True
        rows = {row["node"]: row for row in status["nodes"]}
        assert sorted(rows) == [gpu0, gpu1]
        assert (rows[gpu1]["os"], rows[gpu1]["driver_daemonset"], rows[gpu1]["allocatable"]) == (
            RHCOS_96, "nvidia-driver-daemonset-" + RHCOS_96, 4)
        assert rows[gpu0]["validation"] == {"cuda": "ok", "driver": "ok", "toolkit": "ok"}

        playbook(cluster, "uninstall").succeeded()
        assert objects(cluster) == before_objects
        assert node_labels(cluster, made.node_names) == before_labels
    finally:
        plane.down()


def objects(cluster):
    return api.object_names(cluster.client)


# The kinds api.object_names lists, by the golden files' kind.
LISTED_KINDS = {"Namespace": "namespaces", "DaemonSet": "daemonsets", "Deployment": "deployments", "Job": "jobs",
                "ServiceAccount": "serviceaccounts", "Service": "services", "ClusterRole": "clusterroles",
                "ClusterRoleBinding": "clusterrolebindings", "Role": "roles", "CustomResourceDefinition": "crds",
                "RuntimeClass": "runtimeclasses"}
MANAGED_BY = "app.kubernetes.io/managed-by"


def listed_names(golden_objects):
    """The names of the golden objects labelled as the collection's, as api.object_names lists LISTED_KINDS."""
    names = {kind: [] for kind in LISTED_KINDS.values()}
    for obj in golden_objects:
        metadata = obj["metadata"]
        if obj["kind"] in LISTED_KINDS and (metadata.get("labels") or {}).get(MANAGED_BY) == "accelerators.gpu":
            names[LISTED_KINDS[obj["kind"]]].append(
                (metadata["namespace"], metadata["name"]) if metadata.get("namespace") else metadata["name"])
    return {kind: sorted(found) for kind, found in names.items()}


def test_a_deploy_of_the_golden_openshift_fleet_writes_its_golden_objects(tmp_path_factory):
    """tests/golden/openshift is what a deploy of that fleet writes: the unit tests render it from the module results
    tests/golden/inputs/openshift.yml gives (tests/unit/golden/render.py), and this deploy, on a private cluster of
    the fleet's simulated nodes, keeps those results honest. Server-side applying the golden objects again, as a dry
    run with the deploy's field manager (the operand module in check mode), changes none of them: every field the
    deploy applied is in them with its value, and they hold none it did not apply. Fields the API server fills in
    belong to no one's apply and do not count. The validation Jobs' validated-pods annotation holds this run's pod
    uids (the golden files' are placeholders)."""
    plane = start_cluster(tmp_path_factory, "openshift")
    try:
        cluster = Cluster(plane.kubeconfig, "openshift")
        inputs = golden.inputs_of("openshift")
        fleets.Fleet(cluster.client, inputs["fleet"]).apply().wait_ready()
        playbook(cluster, "deploy", inputs["variables"]).succeeded()

        expected = golden.read_golden("openshift")
        for obj in expected.values():
            if obj["kind"] == "Job":
                job = cluster.batch.read_namespaced_job(obj["metadata"]["name"], obj["metadata"]["namespace"])
                annotation = "accelerators.gpu/validated-pods"
                obj["metadata"]["annotations"][annotation] = job.metadata.annotations[annotation]
        # Read from a file, so that Ansible does not template the Prometheus templates of the rules' annotations.
        definitions = tmp_path_factory.mktemp("golden") / "objects.json"
        definitions.write_text(json.dumps(list(expected.values())))
        again = run(cluster, "accelerators.gpu.operand",
                    {"definitions": "{{ lookup('ansible.builtin.file', '%s') | from_json }}" % definitions},
                    check=True, diff=True)
        assert not again.get("failed"), again.get("msg")
        changed = [(entry["before_header"], field, was, now) for entry in again["diff"]
                   for field, was, now in differences(entry["before"], entry["after"])]
        assert not changed, "\n".join("%s: %s: deployed %r, golden %r" % difference for difference in changed)
        # Nor did the deploy write objects of its own beyond them.
        written = api.object_names(cluster.client, label_selector=MANAGED_BY + "=accelerators.gpu")
        assert {kind: written[kind] for kind in LISTED_KINDS.values()} == listed_names(expected.values())
    finally:
        plane.down()


def test_check_mode_writes_nothing(cluster, make_fleet):
    spec = gpu_fleet()
    made = make_fleet(spec)
    namespace = "t-deploy-check-" + os.urandom(2).hex()
    wait_until_deleted_namespaces_are_gone(cluster)
    before_objects, before_labels = objects(cluster), node_labels(cluster, made.node_names)
    checked = playbook(cluster, "deploy", fleet_variables(namespace, spec), check=True).succeeded()
    assert checked.stats["changed"] >= 1  # the namespace and the node labels would be written
    assert objects(cluster) == before_objects
    assert node_labels(cluster, made.node_names) == before_labels


def test_unpullable_driver_image_fails_at_the_driver_state_naming_node_and_image(cluster, namespace, make_fleet):
    # Only RHCOS 4.16's driver image exists in this repository: the 9.6 node cannot pull its own.
    repository = "example.test/driver-" + os.urandom(3).hex()
    spec = gpu_fleet(registry=REGISTRY + [repository + "/driver:*-rhcos4.16"])
    gpu0, gpu1, _cpu = make_fleet(spec).node_names
    result = playbook(cluster, "deploy", fleet_variables(namespace, spec, common_driver_repository=repository))
    task, failed = result.failure()
    assert task.endswith(": Driver DaemonSets, then wait for the driver on every GPU node")
    missing = "%s/driver:%s-rhel9.6" % (repository, COMMON_DEFAULTS["common_driver_version"])
    assert "node %s: pod %s/nvidia-driver-daemonset-%s-" % (gpu1, namespace, RHCOS_96) in failed["msg"]
    assert "cannot pull image %s" % missing in failed["msg"]
    wait = failed["status"]
    assert wait["outcome"] == "failed"
    assert {(problem["kind"], problem["node"]) for problem in wait["problems"]} == {("image", gpu1)}
    pods = cluster.core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=nvidia-driver")
    ready = {pod.spec.node_name: all(c.ready for c in pod.status.container_statuses or []) for pod in pods.items}
    assert ready == {gpu0: True, gpu1: False}
    # The play stopped at the driver: no toolkit was deployed.
    assert not cluster.apps.list_namespaced_daemon_set(
        namespace, field_selector="metadata.name=nvidia-container-toolkit-daemonset").items


def test_validation_failure_on_one_node_is_named(cluster, namespace, make_fleet):
    spec = gpu_fleet({"name": "good", "gpu": {"count": 4}, "os": {"rhcos": RHCOS_416}},
                     {"name": "bad", "gpu": {"count": 4}, "os": {"rhcos": RHCOS_416},
                      "faults": {"validation_fails": "ECC errors on GPU 2"}})
    good, bad = make_fleet(spec).node_names
    task, failed = playbook(cluster, "deploy", fleet_variables(namespace, spec)).failure()
    # The first check of the chain fails: the driver's, on that node only.
    assert task.endswith(": Wait until every node passes check driver")
    assert "Job %s/nvidia-driver-validation-%s failed on node %s: " % (namespace, bad, bad) in failed["msg"]
    assert "ECC errors on GPU 2" in failed["msg"]
    assert {job["node"]: job["result"] for job in failed["jobs"]}[bad] == "failed"
    assert good not in failed["msg"].split("\n")[1]


def test_a_gpu_node_added_later_comes_up_on_one_reconcile_run_and_the_next_changes_nothing(
        cluster, namespace, make_fleet):
    spec = gpu_fleet({"name": "gpu", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}})
    (first,) = make_fleet(spec).node_names
    variables = fleet_variables(namespace, spec)
    playbook(cluster, "deploy", variables).succeeded()
    # The same fleet (label) grows by a node on a new RHCOS version, whose driver DaemonSet the next run adds.
    (added,) = make_fleet(dict(spec, nodes=[{"name": "gpu-added", "gpu": {"count": 2}, "os": {"rhcos": RHCOS_96}}])
                          ).node_names
    assert playbook(cluster, "reconcile", variables).succeeded().stats["changed"] > 0
    assert cluster.core.read_node(added).status.allocatable["nvidia.com/gpu"] == "2"
    assert jobs_by_check(cluster, namespace)[("cuda", added)] == 1
    rows = {row["node"]: row for row in status_of(cluster, variables)["nodes"]}
    assert sorted(rows) == sorted([first, added]) and all(row["ready"] for row in rows.values())
    assert playbook(cluster, "reconcile", variables).succeeded().stats["changed"] == 0


def validation_jobs(cluster, namespace):
    """{(check, node): Job uid} of the validation Jobs in namespace."""
    jobs = cluster.batch.list_namespaced_job(namespace, label_selector="app.kubernetes.io/component=gpu-validation")
    return {(job.metadata.labels["accelerators.gpu/validation"], job.metadata.annotations["accelerators.gpu/node"]):
            job.metadata.uid for job in jobs.items}


def test_rerun_validates_only_replaced_operand_pods_a_tag_runs_common_once_and_uninstall_keeps_the_sites_namespace(
        cluster, namespace, make_fleet):
    """The namespace fixture created the operand namespace before the deploy, with a ConfigMap of the site's: the
    uninstall at the end keeps both."""
    spec = gpu_fleet({"name": "gpu", "count": 2, "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}})
    gpu0, gpu1 = make_fleet(spec).node_names
    cluster.core.create_namespaced_config_map(namespace, {"metadata": {"name": "site-settings"},
                                                          "data": {"owner": "the site"}})
    variables = fleet_variables(namespace, spec)
    playbook(cluster, "deploy", variables).succeeded()
    assert "app.kubernetes.io/managed-by" not in cluster.core.read_namespace(namespace).metadata.labels
    first = validation_jobs(cluster, namespace)
    assert sorted(first) == sorted((check, node) for check in ("driver", "toolkit", "cuda") for node in (gpu0, gpu1))

    again = playbook(cluster, "deploy", variables).succeeded()
    assert again.stats["changed"] == 0
    assert validation_jobs(cluster, namespace) == first
    started = [name for name, result in again.results if "Start a validation Job" in name and not result.get("skipped")]
    assert started == []

    # A new driver pod on gpu0 (OnDelete: deleted, re-created by its DaemonSet): only that node's driver is checked again.
    pods = cluster.core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=nvidia-driver",
                                            field_selector="spec.nodeName=" + gpu0)
    (old_pod,) = pods.items
    cluster.core.delete_namespaced_pod(old_pod.metadata.name, namespace)
    rerun = playbook(cluster, "deploy", variables, tags="driver").succeeded()
    after = validation_jobs(cluster, namespace)
    assert after[("driver", gpu0)] != first[("driver", gpu0)]
    assert {key: uid for key, uid in after.items() if key != ("driver", gpu0)} == {
        key: uid for key, uid in first.items() if key != ("driver", gpu0)}
    # The shared settings run once, with the first state the tags select.
    facts = (": Read the platform, the toolkit nodes' runtime, the operand namespace, NFD workers, the"
             " monitoring APIs, the proxy")
    assert [name for name, _result in rerun.results if name.endswith(facts)] == ["accelerators.gpu.common " + facts]

    playbook(cluster, "uninstall", variables).succeeded()
    kept = cluster.core.read_namespace(namespace)
    assert kept.metadata.deletion_timestamp is None
    assert cluster.core.read_namespaced_config_map("site-settings", namespace).data == {"owner": "the site"}
    assert cluster.apps.list_namespaced_daemon_set(namespace).items == []
    assert cluster.batch.list_namespaced_job(namespace).items == []
    assert [account.metadata.name for account in cluster.core.list_namespaced_service_account(namespace).items] == [
        "default"]
