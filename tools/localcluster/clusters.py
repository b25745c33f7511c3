"""Several local clusters at once, as a site's fleet of GPU clusters: each its own control plane (its own state
directory, free ports, CA and tokens) with a small fleet of simulated nodes, started in parallel, and an Ansible
inventory that names them as hosts of the group gpu_clusters, each reached with its own automation credentials only
(playbooks/vars/cluster_connection.yml): half of them through a kubeconfig, the others through API host, token and
CA, so that both ways are used.
"""

import concurrent.futures
from pathlib import Path

import yaml

from . import api, controlplane, fleet

# The simulated registry: NVIDIA's images (the collection's defaults), the DTK images, NFD's.
REGISTRY = ["nvcr.io/nvidia/*", "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:*", "registry.k8s.io/*",
            "registry.redhat.io/*"]
GPU = {"product": "NVIDIA-A100-SXM4-80GB", "count": 2}
# What every cluster of such a fleet gets from the inventory: its stack in the default namespace, NFD's labels already
# on the simulated nodes, a driver rollout one node at a time, no workload validations (the driver's, CUDA's and the
# device plugin's stay).
GROUP_VARS = {"nfd_install": "never", "common_wait_timeout": 180, "driver_upgrade_max_parallel": 1,
              "driver_upgrade_poll": 1, "container_toolkit_validate": False, "device_plugin_validate_workload": False}


def small_fleet(name, os_spec, faulty=None):
    """The fleet spec of cluster name: two GPU nodes of os_spec ({rhcos: build, openshift: minor} on OpenShift, {ubuntu:
    version} on Kubernetes); faulty: the faults of the second node (fleet.FAULTS), which is then named <name>-faulty."""
    second = dict(name="%s-faulty" % name, gpu=GPU, os=os_spec, faults=faulty) if faulty else None
    nodes = [dict(name=name, count=1 if second else 2, gpu=GPU, os=os_spec)] + ([second] if second else [])
    spec = {"name": name, "registry": REGISTRY, "nodes": nodes}
    if "rhcos" in os_spec:
        spec["openshift"] = {"version": "4.18.22"}
    return spec


class Member:
    """One cluster of the fleet: its name (the inventory host), control plane, client (user admin) and nodes."""

    def __init__(self, name, plane, made):
        self.name = name
        self.plane = plane
        self.client = api.client_from_kubeconfig(plane.kubeconfig)
        self.fleet = made
        self.node_names = made.node_names
        automation = yaml.safe_load(plane.automation_kubeconfig.read_text())
        self.automation_user = automation["users"][0]["name"]
        self.automation_token = automation["users"][0]["user"]["token"]
        self.server = automation["clusters"][0]["cluster"]["server"]
        self.ca_file = str(plane.state / "pki" / "ca.crt")

    def tokens(self):
        """Every bearer token of this cluster (automation's and admin's), for checks that none is printed."""
        admin = yaml.safe_load(self.plane.kubeconfig.read_text())
        return [self.automation_token, admin["users"][0]["user"]["token"]]

    def connection(self, index):
        """The inventory host variables that reach this cluster as its automation user."""
        if index % 2 == 0:
            return {"gpu_cluster_kubeconfig": str(self.plane.automation_kubeconfig)}
        return {"gpu_cluster_api_host": self.server, "gpu_cluster_api_key": self.automation_token,
                "gpu_cluster_ca_cert": self.ca_file}


def start(root, specs, audit="requests"):
    """specs: [(cluster name, flavour, fleet spec)]. Every cluster is started at once; returns [Member] in the order
    of specs once each is up with its nodes ready. A cluster that fails to start stops the others."""
    def one(name, flavour, spec):
        plane = controlplane.ControlPlane(Path(root) / name)
        plane.up(flavour, audit=audit)
        made = fleet.Fleet(api.client_from_kubeconfig(plane.kubeconfig), spec).apply().wait_ready()
        return Member(name, plane, made)

    with concurrent.futures.ThreadPoolExecutor(len(specs)) as pool:
        futures = [pool.submit(one, *spec) for spec in specs]
        concurrent.futures.wait(futures)
    failed = [future.exception() for future in futures if future.exception()]
    if failed:
        stop(Path(root) / name for name, _flavour, _spec in specs)
        raise failed[0]
    return [future.result() for future in futures]


def stop(state_dirs):
    for state_dir in state_dirs:
        controlplane.ControlPlane(state_dir).down(quiet=True)


def inventory(members, **group_vars):
    """An inventory of the members in group gpu_clusters, in order, each host with its connection variables; the
    group's variables GROUP_VARS and group_vars."""
    return {"gpu_clusters": {"hosts": {member.name: member.connection(index) for index, member in enumerate(members)},
                             "vars": dict(GROUP_VARS, **group_vars)}}
