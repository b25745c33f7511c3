"""Starting an OpenShift upgrade as the cluster-version operator and the machine-config operator would once the
control plane has moved: the new build's Driver Toolkit tag in the image stream, the ClusterVersion's desired
version and history, the pool's new rendered config. Whether and how fast the pool's nodes move is then up to the
pool (spec.paused, maxUnavailable) and the simulated MCO (mco.py)."""

import datetime

import kubernetes
from kubernetes.client.rest import ApiException

from . import fleet as fleets


def start_upgrade(fleet, pool, rhcos, openshift_version, kernel=None, dtk_tag=True):
    """Points the pool (its full name) at a rendered config of the RHCOS build; returns the config's name.

    dtk_tag=False leaves the build's tag out of the driver-toolkit stream, as a payload without it would.
    What is created is recorded on the fleet, whose delete() removes it.
    """
    custom = kubernetes.client.CustomObjectsApi(fleet.client)
    if dtk_tag:
        tag = {"name": rhcos, "from": {"kind": "DockerImage", "name": fleets.dtk_image(rhcos)}}
        fleets.ensure_dtk_tags(fleet.client, [tag])
        fleet.dtk_tags.append(rhcos)
    record_cluster_version(custom, str(openshift_version))
    config = fleets.rendered_config(pool, rhcos, openshift_version, kernel)
    try:
        custom.create_cluster_custom_object(*fleets.MCO_API, "machineconfigs", config)
    except ApiException as error:
        if error.status != 409:
            raise
    fleet.machine_configs.append(config)
    custom.patch_cluster_custom_object(*fleets.MCO_API, "machineconfigpools", pool, {
        "spec": {"configuration": {"name": config["metadata"]["name"]}}})
    return config["metadata"]["name"]


def record_cluster_version(custom, version):
    """The ClusterVersion once the control plane runs `version`: desired, and a Completed entry atop the history."""
    args = ("config.openshift.io", "v1", "clusterversions", "version")
    current = custom.get_cluster_custom_object(*args)
    history = (current.get("status") or {}).get("history") or []
    if history and history[0].get("version") == version:
        return
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    image = fleets.release_image(version)
    updated = custom.patch_cluster_custom_object(*args, {"spec": {"desiredUpdate": {"version": version,
                                                                                    "image": image}}})
    entry = {"version": version, "image": image, "state": "Completed", "verified": True, "startedTime": now,
             "completionTime": now}
    custom.patch_cluster_custom_object_status(*args, {"status": fleets.cluster_version_status(
        version, [entry] + history, updated["metadata"]["generation"])})
