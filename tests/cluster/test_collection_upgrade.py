"""Upgrading the collection on a running cluster with an existing single-driver inventory: the stack deployed by the
collection as main was before issue #43 (commit OLD_MAIN, run for real from `git archive` of it), then reconciled by
this checkout with the old images pinned. The driver DaemonSet gains DRIVER_CONFIG_DIGEST and KERNEL_MODULE_TYPE=auto,
neither of which changes what a running driver pod does: no driver pod is replaced or restarted, and the run is no
rollout. One module-scoped fleet (one GPU node) serves the tests, in order: they are one story.
"""

import io
import os
import subprocess
import tarfile

import pytest
import yaml

from gpu_fleet import RHCOS_416
from playbook import ROOT
from test_deploy import fleet_variables, gpu_fleet, playbook
from test_driver_reuse import installs
from test_driver_rollout import DRIVER_SELECTOR, STATE, audit_events

# main before issue #43: the parent of 8789634, the first commit that set KERNEL_MODULE_TYPE on the driver.
OLD_MAIN = "28f346f96db7633114fd00188630b4d526be0a63"
NEW_ENV = ("DRIVER_CONFIG_DIGEST", "KERNEL_MODULE_TYPE")
DRIVER_TASK = "Driver DaemonSets, then wait for the driver on every GPU node"
# The operands whose templates this release changed (changelog fragments 43-current-defaults, 44-remediation-alerts):
# their tasks report a change although every image is pinned.
OPERAND_TEMPLATE_TASKS = [
    # the entrypoint under /bin/sh, as v26.7.0's
    "Container toolkit service account, RuntimeClass and DaemonSet, the validator DaemonSet, then wait for the toolkit "
    "on every node",
    # GDS_ENABLED, MOFED_ENABLED and GDRCOPY_ENABLED from lsmod when unset, as v26.7.0's entrypoint
    "Device plugin service account, DaemonSet and configuration, the MPS control daemon, then wait until each node "
    "advertises its GPUs",
    # POD_NAME, which GFD uses to own its NodeFeature
    "GPU feature discovery service account, RBAC and DaemonSet, then wait until every node carries its labels",
    # /var/run/cdi mounted, for CDI
    "MIG manager service account, RBAC, layouts and DaemonSet on the MIG-capable nodes, then wait until it is ready",
    # no service account token unless the exporter reads the API; the remediation alerts and the Node health row
    "DCGM exporter service account, DaemonSet, Service, monitoring RBAC, ServiceMonitor, rules and dashboard, then wait "
    "until each node serves metrics",
]


@pytest.fixture(scope="module")
def old_collection(tmp_path_factory):
    """An ANSIBLE_COLLECTIONS_PATH holding accelerators.gpu as OLD_MAIN has it (CI's clone has the history)."""
    root = tmp_path_factory.mktemp("old-collection")
    target = root / "ansible_collections" / "accelerators" / "gpu"
    target.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", ROOT, "archive", OLD_MAIN], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="tar")
    return str(root), yaml.safe_load((target / "roles" / "common" / "defaults" / "main.yml").read_text())


@pytest.fixture(scope="module")
def deployed(cluster, old_collection):
    """(node, namespace, variables): the stack deployed by the old collection, with its images pinned (every
    common_*_image of its defaults, its driver version, and CDI as it was), as the docs tell an inventory to pin them."""
    from localcluster import fleet as fleets
    collections, old_defaults = old_collection
    spec = gpu_fleet({"name": "gpu", "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 2},
                      "os": {"rhcos": RHCOS_416}, "driver_build_seconds": 2})
    made = fleets.Fleet(cluster.client, spec, prefix="colup-%s-" % os.urandom(2).hex()).apply().wait_ready()
    namespace = "t-colup-" + os.urandom(2).hex()
    variables = dict(fleet_variables(namespace, spec, driver_wait_timeout=300, driver_upgrade_poll=1,
                                     container_toolkit_validate=False, device_plugin_validate_workload=False,
                                     **{name: value for name, value in old_defaults.items() if name in (
                                         "common_driver_version", "common_driver_branch", "common_cdi_enabled")
                                        or name.endswith("_image") and name.startswith("common_")}),
                     common_wait_timeout=120)
    playbook(cluster, "deploy", variables, collections=collections).succeeded()
    yield sorted(made.node_names)[0], namespace, variables
    cluster.core.delete_namespace(namespace)
    made.delete()


def driver_daemonsets(cluster, namespace):
    """{name: its pod template's containers' env names}."""
    return {d.metadata.name: {c.name: [e.name for e in c.env or []]
                              for c in (d.spec.template.spec.init_containers or []) + d.spec.template.spec.containers}
            for d in cluster.apps.list_namespaced_daemon_set(namespace, label_selector=DRIVER_SELECTOR).items}


def driver_pods(cluster, namespace):
    """{pod uid: (node, container restart counts)} of the driver pods."""
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=DRIVER_SELECTOR).items
    return {p.metadata.uid: (p.spec.node_name, sorted((s.name, s.restart_count) for s in p.status.container_statuses))
            for p in pods if not p.metadata.deletion_timestamp}


def task_result(run, task):
    [result] = [result for name, result in run.results if name.endswith(task)]
    return result


def changed_tasks(run):
    return [name.split(" : ")[-1] for name, result in run.results if result.get("changed")]


def test_the_old_collection_deployed_the_driver_without_the_new_settings(cluster, deployed):
    node, namespace, _variables = deployed
    daemonsets = driver_daemonsets(cluster, namespace)
    assert len(daemonsets) == 1
    [containers] = daemonsets.values()
    assert not [(c, e) for c, names in containers.items() for e in names if e in NEW_ENV], containers
    [(pod_node, _restarts)] = driver_pods(cluster, namespace).values()
    assert pod_node == node and [i["install"] for i in installs(cluster, node)] == ["build"]


def test_the_plan_after_the_upgrade_updates_the_driver_daemonset_and_rolls_out_nothing(cluster, deployed):
    _node, namespace, variables = deployed
    before = driver_pods(cluster, namespace)
    checked = playbook(cluster, "reconcile", variables, check=True).succeeded()
    result = task_result(checked, DRIVER_TASK)
    names = sorted(driver_daemonsets(cluster, namespace))
    assert (result["updated"], result["created"], result["outdated"]) == (names, [], {})
    # What the new version changes with its images pinned, and only that: the driver DaemonSet's template, and the
    # operands whose templates follow v26.7.0's assets (their DaemonSets roll by their own rolling update).
    assert changed_tasks(checked) == [DRIVER_TASK] + OPERAND_TEMPLATE_TASKS
    assert driver_pods(cluster, namespace) == before


def test_a_reconcile_after_the_upgrade_restarts_no_driver_pod(cluster, deployed):
    node, namespace, variables = deployed
    names = sorted(driver_daemonsets(cluster, namespace))
    before = driver_pods(cluster, namespace)
    pod_names = set(pod.metadata.name for pod in
                    cluster.core.list_namespaced_pod(namespace, label_selector=DRIVER_SELECTOR).items)
    run = playbook(cluster, "reconcile", variables).succeeded()
    assert changed_tasks(run) == [DRIVER_TASK] + OPERAND_TEMPLATE_TASKS
    result = task_result(run, DRIVER_TASK)
    assert (result["updated"], result["status"]["outdated_nodes"]) == (names, [])
    # The DaemonSet has the new template: a pod created from now on runs it.
    daemonsets = driver_daemonsets(cluster, namespace)
    assert sorted(daemonsets) == names
    assert [e for e in NEW_ENV if e in daemonsets[names[0]]["nvidia-driver-ctr"]] == list(NEW_ENV)
    # The run is no rollout: its tasks were skipped, no node got an upgrade state, no driver pod was deleted.
    rollout = task_result(run, "Roll out the new driver node by node")
    assert rollout.get("skipped"), rollout
    assert STATE not in (cluster.core.read_node(node).metadata.labels or {})
    deleted, evicted = audit_events(cluster, namespace)
    assert not [name for name, _agent in deleted if name in pod_names] and not evicted, (deleted, evicted)
    assert driver_pods(cluster, namespace) == before
    assert [i["install"] for i in installs(cluster, node)] == ["build"]


def test_the_next_reconcile_changes_nothing(cluster, deployed):
    node, namespace, variables = deployed
    before = driver_pods(cluster, namespace)
    assert playbook(cluster, "reconcile", variables).succeeded().stats["changed"] == 0
    assert driver_pods(cluster, namespace) == before
    assert [i["install"] for i in installs(cluster, node)] == ["build"]
