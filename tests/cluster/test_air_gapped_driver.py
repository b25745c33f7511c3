"""An air-gapped Ubuntu pool on a vanilla Kubernetes cluster: accelerators.gpu.driver_daemonsets with the driver's
repository, certificate and kernel-module ConfigMaps and its secret env, as the GPU Operator's NVIDIADriver.

The simulator (tools/localcluster/packages.py) makes the pool honest: its nodes reach only the fleet's mirror, so an
Ubuntu driver build crash-loops as apt does (no linux-headers package) unless its pod mounts a repository file naming
the mirror in /etc/apt/sources.list.d and the mirror's CA in /usr/local/share/ca-certificates, and a loaded driver
shows the parameters of the /drivers/nvidia.conf it mounts.
"""

import json
import os

from conftest import create_namespace, wait_for
from gpu_fleet import REGISTRY, create_driver_service_account, driver, selector
from localcluster import fleet as fleets
from localcluster.packages import MODULE_PARAMETERS_ANNOTATION
from playbook import run

MODULE = "accelerators.gpu.driver_daemonsets"
DAEMONSET = "nvidia-driver-daemonset"
MIRROR = "https://mirror.example.test/ubuntu"
CA = "-----BEGIN CERTIFICATE-----\nMIIBaW1pcnJvci1jYQ==\n-----END CERTIFICATE-----\n"
KERNEL = "5.15.0-100-generic"
CONFIG_MAPS = {
    "mirror-repo": {"mirror.sources": "Types: deb\nURIs: %s\nSuites: jammy jammy-updates jammy-security\n"
                                      "Components: main restricted\n" % MIRROR},
    "mirror-ca": {"mirror-ca.crt": CA},
    "module-params": {"nvidia.conf": "NVreg_EnableGpuFirmware=0\nNVreg_RegistryDwords=RMIntrLockingMode=1\n"},
}
CONFIGS = {"repo_config": "mirror-repo", "cert_config": "mirror-ca", "kernel_module_config": "module-params",
           "secret_env": "driver-secrets"}
WAIT = {"timeout": 60, "grace": 5}


def snapshot(cluster, namespace, nodes):
    """What a refused run must leave as it was: the namespace's DaemonSets, ConfigMaps, Secrets and pods, and the
    nodes' labels, with their resourceVersions."""
    def versions(items):
        return sorted((item.metadata.name, item.metadata.resource_version) for item in items)
    return {
        "daemonsets": versions(cluster.apps.list_namespaced_daemon_set(namespace).items),
        "configmaps": versions(cluster.core.list_namespaced_config_map(namespace).items),
        "secrets": versions(cluster.core.list_namespaced_secret(namespace).items),
        "pods": versions(cluster.core.list_namespaced_pod(namespace).items),
        "nodes": [(name, cluster.core.read_node(name).metadata.labels) for name in nodes],
    }


def create_config_map(cluster, namespace, name):
    cluster.core.create_namespaced_config_map(namespace, {"metadata": {"name": name}, "data": CONFIG_MAPS[name]})


def test_an_air_gapped_ubuntu_pool_needs_a_repo_config_naming_the_mirror_with_its_ca(kubernetes_cluster, request):
    cluster = kubernetes_cluster
    namespace = "t-driver-configs-%s" % os.urandom(2).hex()
    create_namespace(cluster, namespace)
    spec = {"name": "m-" + os.urandom(3).hex(), "registry": REGISTRY,
            "package_mirror": {"url": MIRROR, "ca": CA},
            "nodes": [{"name": "offline", "count": 2, "gpu": {"count": 4}, "os": {"ubuntu": "22.04"},
                       "kernel": KERNEL, "offline": True}]}
    pool = fleets.Fleet(cluster.client, spec, prefix="%s-" % spec["name"]).apply().wait_ready()
    request.addfinalizer(pool.delete)
    request.addfinalizer(lambda: cluster.core.delete_namespace(namespace))
    nodes = pool.node_names
    create_driver_service_account(cluster, namespace)
    labelled = run(cluster, "accelerators.gpu.nfd_labels", {"label_selector": selector(spec), "manage_labels": True})
    assert not labelled.get("failed"), labelled.get("msg")
    args = {"namespace": namespace, "mode": "single", "label_selector": selector(spec)}

    # Refused before any write: the message names each missing object and its setting.
    before = snapshot(cluster, namespace, nodes)
    refused = run(cluster, MODULE, dict(args, driver=driver(spec, **CONFIGS)))
    assert refused["failed"]
    assert refused["msg"] == (
        "ConfigMap mirror-repo (driver.repo_config, role variable driver_repo_config) does not exist in namespace "
        "{ns}; ConfigMap mirror-ca (driver.cert_config, role variable driver_cert_config) does not exist in "
        "namespace {ns}; ConfigMap module-params (driver.kernel_module_config, role variable "
        "driver_kernel_module_config) does not exist in namespace {ns}; Secret driver-secrets (driver.secret_env, "
        "role variable driver_secret_env) does not exist in namespace {ns}. Create them in namespace {ns}, or unset "
        "the setting; nothing was changed".format(ns=namespace))
    assert snapshot(cluster, namespace, nodes) == before

    # Without a repository configuration the offline nodes cannot install the kernel headers: the run says so and
    # points to the setting.
    failed = run(cluster, MODULE, dict(args, driver=driver(spec), wait=WAIT))
    assert failed["failed"] and failed["created"] == [DAEMONSET]
    hint = ("the driver container could not install the kernel headers linux-headers-%s: the node reaches no package "
            "repository that has them. Point it at a mirror with driver_repo_config" % KERNEL)
    assert hint in failed["msg"]
    problems = [p["text"] for p in failed["status"]["problems"]]
    # The run stops at the first node found failing (grace 5 s): the other may not have failed yet.
    named = sorted(p.split(":")[0] for p in problems if hint in p)
    assert named and set(named) <= set("node %s" % name for name in nodes), problems
    assert "E: Unable to locate package linux-headers-%s" % KERNEL in failed["msg"]

    # The repository file alone: the mirror's certificate is not trusted.
    for name in ("mirror-repo", "module-params"):
        create_config_map(cluster, namespace, name)
    cluster.core.create_namespaced_secret(namespace, {"metadata": {"name": "driver-secrets"},
                                                      "stringData": {"HTTPS_PROXY_PASSWORD": "hunter2"}})
    before = snapshot(cluster, namespace, nodes)
    refused = run(cluster, MODULE, dict(args, driver=driver(spec, **CONFIGS)))
    assert refused["msg"].startswith("ConfigMap mirror-ca (driver.cert_config, role variable driver_cert_config) "
                                     "does not exist in namespace %s." % namespace)
    assert snapshot(cluster, namespace, nodes) == before
    untrusted = driver(spec, **dict((key, value) for key, value in CONFIGS.items() if key != "cert_config"))
    updated = run(cluster, MODULE, dict(args, driver=untrusted))
    assert updated["updated"] == [DAEMONSET]
    delete_driver_pods(cluster, namespace)
    failed = run(cluster, MODULE, dict(args, driver=untrusted, wait=WAIT))
    assert "Certificate verification failed" in failed["msg"]
    assert "trust the mirror's CA with driver_cert_config" in failed["msg"]

    # With the repository and the certificate configuration the pool comes up; the OnDelete pods are replaced as a
    # rollout replaces them.
    create_config_map(cluster, namespace, "mirror-ca")
    updated = run(cluster, MODULE, dict(args, driver=driver(spec, **CONFIGS)))
    assert updated["updated"] == [DAEMONSET]
    delete_driver_pods(cluster, namespace)
    ready = run(cluster, MODULE, dict(args, driver=driver(spec, **CONFIGS), wait=WAIT))
    assert not ready.get("failed"), ready.get("msg")
    assert (ready["changed"], ready["unchanged"], sorted(ready["status"]["ready_nodes"])) == (
        False, [DAEMONSET], sorted(nodes))

    # The mounts sit at the GPU Operator's paths for Ubuntu, by subPath from volumes named after the ConfigMaps.
    template = cluster.apps.read_namespaced_daemon_set(DAEMONSET, namespace).spec.template.spec
    container = template.containers[0]
    assert [(m.name, m.mount_path, m.sub_path, m.read_only) for m in container.volume_mounts if m.sub_path and
            m.read_only] == [
        ("mirror-repo", "/etc/apt/sources.list.d/mirror.sources", "mirror.sources", True),
        ("mirror-ca", "/usr/local/share/ca-certificates/mirror-ca.crt", "mirror-ca.crt", True),
        ("module-params", "/drivers/nvidia.conf", "nvidia.conf", True)]
    assert {v.name: [(i.key, i.path) for i in v.config_map.items] for v in template.volumes
            if v.name in CONFIG_MAPS} == {"mirror-repo": [("mirror.sources", "mirror.sources")],
                                          "mirror-ca": [("mirror-ca.crt", "mirror-ca.crt")],
                                          "module-params": [("nvidia.conf", "nvidia.conf")]}
    assert [e.secret_ref.name for e in container.env_from] == ["driver-secrets"]
    # The module parameters of nvidia.conf reached the loaded driver.
    for name in nodes:
        shown = (cluster.core.read_node(name).metadata.annotations or {}).get(MODULE_PARAMETERS_ANNOTATION)
        assert json.loads(shown) == {"nvidia": ["NVreg_EnableGpuFirmware=0", "NVreg_RegistryDwords=RMIntrLockingMode=1"]}


def delete_driver_pods(cluster, namespace):
    """As the rollout does for OnDelete DaemonSets: the driver pods go, and the DaemonSet makes new ones."""
    old = set(p.metadata.uid for p in cluster.core.list_namespaced_pod(namespace).items)
    cluster.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    wait_for(lambda: not old & set(p.metadata.uid for p in cluster.core.list_namespaced_pod(namespace).items),
             message="the old driver pods gone")
