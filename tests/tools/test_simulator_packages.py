"""The simulated offline Ubuntu node and the driver's ConfigMaps: a driver pod rendered by the collection fails as apt
does without a reachable repository, builds with a repository file naming the fleet's mirror (and its CA), and loads
its modules with the parameters of /drivers/nvidia.conf."""

from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.facts import node_facts
from ansible_collections.accelerators.gpu.plugins.module_utils.operands.checks.pods import pod_problems
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.driver.role_template import desired_driver_daemonsets
from localcluster import fleet, packages, simulator

MIRROR = "https://mirror.example.test/ubuntu"
CA = "-----BEGIN CERTIFICATE-----\nMIIBsite\n-----END CERTIFICATE-----\n"
SPEC = {"namespace": "gpu", "repository": "nvcr.io/nvidia", "version": "570.172.08"}
CONFIG_MAPS = {
    "mirror-repo": {"mirror.sources": "Types: deb\nURIs: %s\nSuites: jammy jammy-updates\nComponents: main\n" % MIRROR},
    "other-repo": {"other.sources": "Types: deb\nURIs: https://elsewhere.example.test/ubuntu\n"},
    "mirror-ca": {"mirror-ca.crt": CA},
    "module-params": {"nvidia.conf": "NVreg_EnableGpuFirmware=0\nNVreg_RegistryDwords=RMIntrLockingMode=1 "
                                     "NVreg_OpenRmEnableUnsupportedGpus=1\n"},
}


def node(offline=True, ca=CA):
    group = {"name": "g", "os": {"ubuntu": "22.04"}, "gpu": {"product": "NVIDIA-L40S", "count": 4},
             "offline": offline}
    made = fleet.expand_groups({"package_mirror": {"url": MIRROR, "ca": ca}, "nodes": [group]})[0]
    return {"metadata": {"name": made["name"], "labels": made["labels"], "annotations": made["annotations"]},
            "status": made["status"]}


def driver_pod(the_node, mode="single", **spec):
    """A pod of the DaemonSet the collection renders for the node, with the ConfigMaps' keys."""
    keys = dict((name, sorted(data)) for name, data in CONFIG_MAPS.items())
    daemonset, = desired_driver_daemonsets(dict(SPEC, **spec), [node_facts(the_node)], {}, mode,
                                           config_map_keys=keys)["desired"]
    return {"metadata": {"name": "driver-x", "namespace": "gpu", "uid": "u1",
                         "labels": daemonset["spec"]["template"]["metadata"]["labels"]},
            "spec": daemonset["spec"]["template"]["spec"]}


def read_config_map(namespace, name):
    assert namespace == "gpu"
    return CONFIG_MAPS.get(name)


def problem(the_node, **spec):
    return simulator.driver_problem(driver_pod(the_node, **spec), the_node, simulator.hardware(the_node),
                                    read_config_map)


def test_an_offline_node_cannot_install_the_kernel_headers_without_a_repo_config():
    found = problem(node())
    assert found == (
        "nvidia-driver init on node g: Updating the package cache... W: Failed to fetch "
        "http://archive.ubuntu.com/ubuntu/dists/jammy/InRelease  Temporary failure resolving 'archive.ubuntu.com' "
        "W: Some index files failed to download. They have been ignored, or old ones used instead. Installing Linux "
        "kernel headers... E: Unable to locate package linux-headers-5.15.0-100-generic")
    # Nor with a repository file naming another repository.
    assert problem(node(), repo_config="other-repo") == found


def test_the_mirror_needs_its_ca():
    found = problem(node(), repo_config="mirror-repo")
    assert "W: Failed to fetch %s/dists/jammy/InRelease  Certificate verification failed" % MIRROR in found
    assert found.endswith("E: Unable to locate package linux-headers-5.15.0-100-generic")
    assert problem(node(), repo_config="mirror-repo", cert_config="mirror-ca") is None
    # A mirror whose certificate the image trusts already.
    assert problem(node(ca=None), repo_config="mirror-repo") is None


def test_an_online_node_and_a_precompiled_driver_install_no_packages_from_the_mirror():
    assert problem(node(offline=False)) is None
    the_node = node()
    pod = driver_pod(the_node, mode="kernel", branch="570")
    assert simulator.driver_problem(pod, the_node, simulator.hardware(the_node), read_config_map) is None


def test_the_module_parameters_of_nvidia_conf():
    assert packages.module_parameters(driver_pod(node(), kernel_module_config="module-params"), read_config_map) == {
        "nvidia": ["NVreg_EnableGpuFirmware=0", "NVreg_RegistryDwords=RMIntrLockingMode=1",
                   "NVreg_OpenRmEnableUnsupportedGpus=1"]}
    assert packages.module_parameters(driver_pod(node()), read_config_map) == {}


def test_the_wait_reads_the_simulated_failure_as_missing_kernel_headers():
    """The status the simulator writes for the failing pod, as a wait reads it: the problem points to the setting."""
    the_node = node()
    pod = driver_pod(the_node)
    state, reason, message, _retry = simulator.outcome(pod, the_node, set(), registry(), 0,
                                                       read_config_map=read_config_map)
    assert (state, reason) == ("waiting", "CrashLoopBackOff")
    pod["spec"]["nodeName"] = "g"
    pod["status"] = simulator.status_for(pod, the_node, state, reason, message)
    problem, = pod_problems(pod)
    assert "could not install the kernel headers linux-headers-5.15.0-100-generic" in problem["text"]
    assert "driver_repo_config" in problem["text"]


def registry():
    held = simulator.Registry()
    held.patterns = ["nvcr.io/nvidia/*"]
    return held
