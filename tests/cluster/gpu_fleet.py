"""Fleets and cluster reads shared by the module tests."""

import collections
import json
import os
import stat

import yaml

# The common role's defaults: what a deploy that sets none of them runs (its images, driver version and branch).
with open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "roles", "common", "defaults", "main.yml"), encoding="utf-8") as defaults:
    COMMON_DEFAULTS = yaml.safe_load(defaults)

RHCOS_416 = "416.94.202405081406-0"
RHCOS_418 = "418.94.202509100653-0"
RHCOS_96 = "9.6.20260303-1"
DRIVER_REPOSITORY = "example.test/nvidia"
DRIVER = {"repository": DRIVER_REPOSITORY, "version": "550.90.07"}
# What the simulated registry holds: the driver images and the DTK images of the fleets' image stream.
REGISTRY = [DRIVER_REPOSITORY + "/*", "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:*", "example.test/sim/*"]
# The driver's k8s-driver-manager as the common role's defaults give it (roles/common/vars/main.yml,
# common_driver_spec.manager): a stack installed module by module must match what the roles apply later, or its
# OnDelete driver pods turn outdated under them.
DRIVER_MANAGER = {"image": COMMON_DEFAULTS["common_driver_manager_image"], "env": [
    {"name": "ENABLE_GPU_POD_EVICTION", "value": "true"}, {"name": "ENABLE_AUTO_DRAIN", "value": "false"},
    {"name": "DRAIN_USE_FORCE", "value": "false"}, {"name": "DRAIN_POD_SELECTOR_LABEL", "value": ""},
    {"name": "DRAIN_TIMEOUT_SECONDS", "value": "300s"}, {"name": "DRAIN_DELETE_EMPTYDIR_DATA", "value": "true"}]}
FLEET_LABEL = "sim.accelerators.gpu/fleet"
OSTREE = "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION"
DRIVER_SERVICE_ACCOUNT = "nvidia-driver"


def fleet(nodes, **extra):
    """A fleet spec with a unique name, so that modules can select exactly its nodes (selector(spec))."""
    spec = {"name": "m-" + os.urandom(3).hex(), "registry": REGISTRY, "openshift": {"version": "4.18.22"},
            "nodes": nodes}
    spec.update(extra)
    return spec


def selector(spec):
    return "%s=%s" % (FLEET_LABEL, spec["name"])


def driver(spec, **options):
    """The driver option of driver_daemonsets, its pods kept on this fleet's nodes (the cluster may hold others)."""
    return dict(DRIVER, node_selector={FLEET_LABEL: spec["name"]}, **options)


def ready(pod):
    statuses = pod.status.container_statuses or []
    return pod.status.phase == "Running" and bool(statuses) and all(c.ready for c in statuses)


def daemonset_versions(cluster, namespace):
    """{DaemonSet name: resourceVersion} of the namespace."""
    return {ds.metadata.name: ds.metadata.resource_version
            for ds in cluster.apps.list_namespaced_daemon_set(namespace).items}


DriverPod = collections.namedtuple("DriverPod", "daemonset node ready")


def driver_pods(cluster, namespace):
    """{pod name: DriverPod} of the namespace's driver pods."""
    pods = cluster.core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=nvidia-driver")
    return {p.metadata.name: DriverPod(p.metadata.labels["app"], p.spec.node_name, ready(p)) for p in pods.items}


def settled(cluster, namespace):
    """True when every DaemonSet's status reflects its spec and every scheduled pod is ready: no more writes by
    the DaemonSet controller, so resourceVersions stay put unless someone else writes."""
    for ds in cluster.apps.list_namespaced_daemon_set(namespace).items:
        status = ds.status
        if status is None or status.observed_generation != ds.metadata.generation:
            return False
        if (status.number_ready or 0) != (status.desired_number_scheduled or 0) or status.number_misscheduled:
            return False
    return True


def create_driver_service_account(cluster, namespace):
    cluster.core.create_namespaced_service_account(namespace, {"metadata": {"name": DRIVER_SERVICE_ACCOUNT}})


def fake_oc(directory, dtk_image, rhcos):
    """An `oc` that records its arguments and prints, as `oc adm release info --output=json` does, a release whose
    driver-toolkit image is dtk_image and whose machine-os is RHCOS rhcos."""
    path = os.path.join(str(directory), "oc")
    info = {"references": {"kind": "ImageStream", "spec": {"tags": [
        {"name": "machine-os-content", "from": {"kind": "DockerImage", "name": "example.test/sim/os@sha256:" + "0" * 64}},
        {"name": "driver-toolkit", "from": {"kind": "DockerImage", "name": dtk_image}}]}},
        "displayVersions": {"machine-os": {"Version": rhcos, "DisplayName": "Red Hat Enterprise Linux CoreOS"}}}
    with open(path, "w") as script:
        script.write("#!/bin/sh\nprintf '%%s\\n' \"$@\" > '%s.args'\ncat <<'EOF'\n%s\nEOF\n" % (path, json.dumps(info)))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path
