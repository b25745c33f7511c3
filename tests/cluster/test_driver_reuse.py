"""A driver that is not reinstalled for nothing (DRIVER_CONFIG_DIGEST), on one RHCOS GPU node built with the DTK.

The simulator plays what k8s-driver-manager and NVIDIA's driver containers do with the digest: a driver pod that
finds the driver of its digest loaded since the node booted is Ready at once, without the build, and the node's
annotation sim.accelerators.gpu/driver-installs records each driver pod that came up as a build or a reuse, with
the seconds from its creation to Ready. The tests assert on that record, and print the seconds.
One module-scoped fleet serves the tests, in order: they are one story.
"""

import json
import os

import pytest

from conftest import wait_for
from gpu_fleet import RHCOS_416
from localcluster.simulator import INSTALLS_ANNOTATION
from test_deploy import fleet_variables, gpu_fleet, playbook
from test_driver_rollout import DRIVER_SELECTOR

BUILD_SECONDS = 6
DIGEST_ENV = "DRIVER_CONFIG_DIGEST"


@pytest.fixture(scope="module")
def stack(cluster):
    """(the GPU node's name, namespace, deploy variables), the stack deployed."""
    from localcluster import fleet as fleets
    spec = gpu_fleet({"name": "gpu", "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 2},
                      "os": {"rhcos": RHCOS_416}, "driver_build_seconds": BUILD_SECONDS})
    made = fleets.Fleet(cluster.client, spec, prefix="reuse-%s-" % os.urandom(2).hex()).apply().wait_ready()
    namespace = "t-reuse-" + os.urandom(2).hex()
    variables = dict(fleet_variables(namespace, spec, driver_wait_timeout=300, driver_upgrade_poll=1,
                                     container_toolkit_validate=False, device_plugin_validate_workload=False),
                     common_wait_timeout=120)
    playbook(cluster, "deploy", variables).succeeded()
    yield sorted(made.node_names)[0], namespace, variables
    cluster.core.delete_namespace(namespace)
    made.delete()


def installs(cluster, node):
    """The simulator's record of the driver pods that came up on the node, oldest first."""
    return json.loads((cluster.core.read_node(node).metadata.annotations or {}).get(INSTALLS_ANNOTATION) or "[]")


def driver_pod(cluster, namespace):
    pods = [p for p in cluster.core.list_namespaced_pod(namespace, label_selector=DRIVER_SELECTOR).items
            if not p.metadata.deletion_timestamp]
    assert len(pods) == 1, [p.metadata.name for p in pods]
    return pods[0]


def daemonset_digest(cluster, namespace):
    """The DRIVER_CONFIG_DIGEST of the driver DaemonSet's driver container."""
    daemonsets = cluster.apps.list_namespaced_daemon_set(namespace, label_selector=DRIVER_SELECTOR).items
    assert len(daemonsets) == 1
    driver = [c for c in daemonsets[0].spec.template.spec.containers if c.name == "nvidia-driver-ctr"][0]
    return [e.value for e in driver.env if e.name == DIGEST_ENV][0]


def came_up(cluster, node, count):
    """The record of the count-th driver pod that came up on the node, once it did."""
    return wait_for(lambda: installs(cluster, node)[count - 1] if len(installs(cluster, node)) >= count else None,
                    timeout=180, message="driver pod %d up on %s" % (count, node))


def test_deploy_builds_the_driver_once(cluster, stack):
    node, namespace, _variables = stack
    [first] = installs(cluster, node)
    assert first["install"] == "build"
    assert first["pod"] == driver_pod(cluster, namespace).metadata.name
    assert first["digest"] == daemonset_digest(cluster, namespace)


def test_a_deleted_driver_pod_with_unchanged_settings_comes_back_without_a_rebuild(cluster, stack):
    node, namespace, _variables = stack
    old = driver_pod(cluster, namespace)
    cluster.core.delete_namespaced_pod(old.metadata.name, namespace)
    record = came_up(cluster, node, 2)
    assert record["install"] == "reuse", installs(cluster, node)
    assert record["pod"] != old.metadata.name and record["digest"] == daemonset_digest(cluster, namespace)
    build = installs(cluster, node)[0]
    print("driver pod up after a build: %.1f s; after a restart with the same digest: %.1f s"
          % (build["seconds"], record["seconds"]))


def test_a_rollout_that_changes_no_install_setting_counts_the_reused_driver_ready(cluster, stack):
    """Resources are not an install setting: the DaemonSet's template changes, so the rollout replaces the pod, and
    the new one finds its driver loaded."""
    node, namespace, variables = stack
    digest = daemonset_digest(cluster, namespace)
    old = driver_pod(cluster, namespace)
    playbook(cluster, "deploy", dict(variables, driver_resources={"limits": {"memory": "2Gi"}})).succeeded()
    assert driver_pod(cluster, namespace).metadata.uid != old.metadata.uid
    assert daemonset_digest(cluster, namespace) == digest
    record = installs(cluster, node)[-1]
    assert (record["install"], record["pod"]) == ("reuse", driver_pod(cluster, namespace).metadata.name)
    print("driver pod up in a rollout, same digest: %.1f s" % record["seconds"])


def test_a_changed_install_setting_rebuilds(cluster, stack):
    node, namespace, variables = stack
    digest = daemonset_digest(cluster, namespace)
    count = len(installs(cluster, node))
    playbook(cluster, "deploy", dict(variables, driver_resources={"limits": {"memory": "2Gi"}},
                                     driver_env=[{"name": "NVIDIA_DRIVER_DEBUG", "value": "1"}])).succeeded()
    assert daemonset_digest(cluster, namespace) != digest
    record = came_up(cluster, node, count + 1)
    assert (record["install"], record["digest"]) == ("build", daemonset_digest(cluster, namespace))
    assert record["pod"] == driver_pod(cluster, namespace).metadata.name
    print("driver pod up in a rollout, new digest: %.1f s" % record["seconds"])
