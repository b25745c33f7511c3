"""A disconnected site behind a proxy, on one full deploy on the simulated OpenShift: the image_list playbook lists
every image of every rendered manifest (its ImageSetConfiguration has only oc-mirror v2's documented fields, its
skopeo sync file names the same images), and the cluster's Proxy reaches the driver without its credentials showing."""

import base64

import kubernetes
import pytest
import yaml

from conftest import Cluster, start_cluster
from gpu_fleet import COMMON_DEFAULTS, RHCOS_416, RHCOS_96
from test_deploy import gpu_fleet, playbook

NAMESPACE = "nvidia-gpu-operator"
NFD_NAMESPACE = "openshift-nfd"
# The cluster's proxy, with credentials that must not show in any output.
PROXY_STATUS = {"httpProxy": "http://gpu:hunter2@proxy.example.test:3128",
                "httpsProxy": "http://gpu:hunter2@proxy.example.test:3129", "noProxy": ".cluster.local,172.30.0.0/16"}
# An upgrade target no node runs yet; the fleet's image stream has its DTK tag.
TARGET = "9.7.20260501-0"

# oc-mirror v2's ImageSetConfiguration fields (mirror.openshift.io/v2alpha1), as documented: a key maps to the
# allowed keys of its value (a dict, or each dict of a list), None for a scalar or a list of scalars.
LEAF = None
CHANNEL = {"name": LEAF, "minVersion": LEAF, "maxVersion": LEAF}
IMAGE_SET_SCHEMA = {
    "apiVersion": LEAF, "kind": LEAF, "archiveSize": LEAF,
    "mirror": {
        "platform": {"channels": {"name": LEAF, "type": LEAF, "minVersion": LEAF, "maxVersion": LEAF,
                                  "shortestPath": LEAF, "full": LEAF},
                     "architectures": LEAF, "graph": LEAF, "kubeVirtContainer": LEAF, "release": LEAF},
        "operators": {"catalog": LEAF, "full": LEAF, "targetCatalog": LEAF, "targetTag": LEAF,
                      "packages": {"name": LEAF, "channels": CHANNEL, "minVersion": LEAF, "maxVersion": LEAF,
                                   "bundles": {"name": LEAF}}},
        "additionalImages": {"name": LEAF},
        "blockedImages": {"name": LEAF},
        "helm": {"local": LEAF, "repositories": LEAF},
    },
}


def unknown_fields(value, schema, path=""):
    """Paths of the keys the schema does not allow."""
    if schema is LEAF:
        return [] if not isinstance(value, (dict, list)) or all(not isinstance(v, (dict, list)) for v in value) \
            else [path + " (not a scalar)"]
    items = value if isinstance(value, list) else [value]
    found = []
    for item in items:
        if not isinstance(item, dict):
            return [path + " (not an object)"]
        for key, sub in item.items():
            found += [path + "." + key] if key not in schema else unknown_fields(sub, schema[key], path + "." + key)
    return found


def workloads(cluster, namespace):
    return (cluster.apps.list_namespaced_daemon_set(namespace).items
            + cluster.apps.list_namespaced_deployment(namespace).items
            + cluster.batch.list_namespaced_job(namespace).items)


def template_images(workload):
    spec = workload.spec.template.spec
    return {container.image for container in (spec.init_containers or []) + spec.containers}


def set_cluster_proxy(cluster):
    custom = kubernetes.client.CustomObjectsApi(cluster.client)
    args = ("config.openshift.io", "v1", "proxies")
    custom.create_cluster_custom_object(*args, {
        "apiVersion": "config.openshift.io/v1", "kind": "Proxy", "metadata": {"name": "cluster"},
        "spec": {"httpProxy": PROXY_STATUS["httpProxy"], "httpsProxy": PROXY_STATUS["httpsProxy"],
                 "noProxy": "172.30.0.0/16", "trustedCA": {"name": "user-ca-bundle"}}})
    # The cluster network operator adds the cluster's own domains to status.noProxy.
    custom.patch_cluster_custom_object_status(*args, "cluster", {"status": PROXY_STATUS})


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """A private OpenShift cluster behind a proxy, with the full stack deployed by the deploy playbook, NFD through
    OLM; yields the cluster and the deploy's run."""
    plane = start_cluster(tmp_path_factory, "openshift")
    try:
        cluster = Cluster(plane.kubeconfig, "openshift")
        from localcluster import fleet as fleets
        spec = gpu_fleet(openshift={"version": "4.18.22", "driver_toolkit": {"extra": [TARGET]}})
        fleets.Fleet(cluster.client, spec).apply().wait_ready()
        set_cluster_proxy(cluster)
        yield cluster, playbook(cluster, "deploy").succeeded()
    finally:
        plane.down()


def test_image_list_names_every_image_of_the_deployed_stack_and_the_upgrade_target(deployed, tmp_path):
    from localcluster.fleet import dtk_image
    deployed, _run = deployed
    variables = dict(common_image_list_dir=str(tmp_path), common_image_list_upgrade_target=TARGET)
    playbook(deployed, "image_list", variables).succeeded()
    listed = (tmp_path / "images.txt").read_text().splitlines()
    assert listed == sorted(set(listed))

    rendered, olm = set(), set()
    for namespace in (NAMESPACE, NFD_NAMESPACE):
        for workload in workloads(deployed, namespace):
            # An operator OLM installed comes from its catalog: oc-mirror mirrors it with its package.
            owned_by_olm = "olm.owner" in (workload.metadata.labels or {})
            (olm if owned_by_olm else rendered).update(template_images(workload))
    assert len(rendered) >= 8, rendered  # driver, DTK, toolkit, plugin, exporter, validator, CUDA, NFD
    assert rendered - set(listed) == set()
    # The DTK images of the versions the nodes run and of the upgrade target, and the target's driver image.
    stream = {dtk_image(version) for version in (RHCOS_416, RHCOS_96, TARGET)}
    assert stream - set(listed) == set()
    assert "nvcr.io/nvidia/driver:%s-rhel9.7" % COMMON_DEFAULTS["common_driver_version"] in listed

    image_set = yaml.safe_load((tmp_path / "imageset-config.yaml").read_text())
    assert unknown_fields(image_set, IMAGE_SET_SCHEMA) == []
    assert (image_set["apiVersion"], image_set["kind"]) == ("mirror.openshift.io/v2alpha1", "ImageSetConfiguration")
    assert sorted(entry["name"] for entry in image_set["mirror"]["additionalImages"]) == listed
    catalogs = {entry["catalog"]: [package["name"] for package in entry["packages"]]
                for entry in image_set["mirror"]["operators"]}
    assert catalogs == {"registry.redhat.io/redhat/redhat-operator-index:v4.18": ["nfd"],
                        "registry.redhat.io/redhat/certified-operator-index:v4.18": ["gpu-operator-certified"]}
    assert olm, "the NFD operator's Deployment (installed by OLM) was not found"

    sync = yaml.safe_load((tmp_path / "skopeo-sync.yaml").read_text())
    from_sync = sorted("%s/%s%s%s" % (registry, repository, "@" if version.startswith("sha256:") else ":", version)
                       for registry, entry in sync.items() for repository, versions in entry["images"].items()
                       for version in versions)
    assert from_sync == listed

    again = playbook(deployed, "image_list", variables).succeeded()
    assert again.stats["changed"] == 0


def test_the_cluster_proxy_reaches_the_driver_through_a_secret_and_its_trusted_ca_is_mounted(deployed):
    cluster, run = deployed
    names = sorted(["HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"])
    secret = cluster.core.read_namespaced_secret("accelerators-gpu-proxy", NAMESPACE)
    assert {key: base64.b64decode(value).decode() for key, value in secret.data.items()} == {
        name: PROXY_STATUS[{"HTTP": "httpProxy", "HTTPS": "httpsProxy", "NO": "noProxy"}[name.split("_")[0].upper()]]
        for name in names}
    config_map = cluster.core.read_namespaced_config_map("gpu-operator-trusted-ca", NAMESPACE)
    assert config_map.metadata.labels["config.openshift.io/inject-trusted-cabundle"] == "true"

    daemonsets = cluster.apps.list_namespaced_daemon_set(
        NAMESPACE, label_selector="app.kubernetes.io/component=nvidia-driver").items
    assert len(daemonsets) == 2
    for daemonset in daemonsets:
        pod = daemonset.spec.template.spec
        (driver,) = [c for c in pod.containers if c.name == "nvidia-driver-ctr"]
        from_secret = {env.name: (env.value_from.secret_key_ref.name, env.value_from.secret_key_ref.key)
                       for env in driver.env if env.value_from and env.value_from.secret_key_ref}
        assert from_secret == {name: ("accelerators-gpu-proxy", name) for name in names}, daemonset.metadata.name
        (volume,) = [v for v in pod.volumes if v.name == "trusted-ca"]
        assert volume.config_map.name == "gpu-operator-trusted-ca"
        assert [(item.key, item.path) for item in volume.config_map.items] == [("ca-bundle.crt", "tls-ca-bundle.pem")]
        assert [(m.mount_path, m.read_only) for m in driver.volume_mounts if m.name == "trusted-ca"] == [
            ("/etc/pki/ca-trust/extracted/pem", True)]
    # The credentials are in no DaemonSet and in no output of the play.
    assert "hunter2" not in str([daemonset.to_dict() for daemonset in daemonsets])
    assert "hunter2" not in run.process.stdout + run.process.stderr
