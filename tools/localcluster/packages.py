"""What a driver container finds in the ConfigMaps its pod mounts: the package repositories and CAs an Ubuntu driver
build installs the kernel headers with, and the kernel module parameters it loads the modules with.

An offline node group (fleet `offline: true`) reaches no package repository but the fleet's mirror
(`package_mirror: {url, ca}`), and that only through a repository file naming the mirror mounted into
/etc/apt/sources.list.d, and, for an https mirror with a CA, that CA mounted into /usr/local/share/ca-certificates.
Otherwise the driver container fails as NVIDIA's ubuntu nvidia-driver script does: `apt-get -qq update` only warns
that it could not fetch the index (it exits 0), then `apt-get install linux-headers-$(uname -r)` in
_install_prerequisites finds no such package.

A loaded driver's module parameters are those of /drivers/<module>.conf (the script's _get_module_params, one or more
parameters a line), which the node shows as /sys/module/<module>/parameters would, in the annotation
sim.accelerators.gpu/module-parameters.
"""

import json

APT_SOURCES = "/etc/apt/sources.list.d"
UBUNTU_CERTIFICATES = "/usr/local/share/ca-certificates"
MODULE_CONFIG_DIR = "/drivers"
MODULES = ("nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-peermem")
MODULE_PARAMETERS_ANNOTATION = "sim.accelerators.gpu/module-parameters"
UBUNTU_SUITES = {"20.04": "focal", "22.04": "jammy", "24.04": "noble"}


def mounted_files(pod, container, directory, read_config_map):
    """{file name: content} of the ConfigMap keys the container mounts by subPath into directory."""
    sources = dict((volume["name"], volume["configMap"]) for volume in pod["spec"].get("volumes") or []
                   if volume.get("configMap"))
    namespace = pod["metadata"]["namespace"]
    found = {}
    for mount in container.get("volumeMounts") or []:
        parent, name = mount["mountPath"].rsplit("/", 1)
        source = sources.get(mount["name"])
        if parent != directory or not source or not mount.get("subPath"):
            continue
        data = read_config_map(namespace, source["name"]) or {}
        if mount["subPath"] in data:
            found[name] = data[mount["subPath"]]
    return found


def offline_settings(group, fleet):
    """The hardware entry of an offline node group: the fleet's mirror and the node's Ubuntu suite; None online."""
    if not group.get("offline"):
        return None
    mirror = fleet.get("package_mirror") or {}
    version = str((group.get("os") or {}).get("ubuntu", ""))
    return {"mirror": mirror.get("url"), "ca": mirror.get("ca"), "suite": UBUNTU_SUITES.get(version, version)}


def headers_problem(pod, node_name, hw, read_config_map):
    """Why the driver container of an offline node cannot install the kernel headers, or None."""
    offline = hw.get("offline")
    if not offline or (pod["metadata"].get("labels") or {}).get("nvidia.com/precompiled") == "true":
        return None
    driver = pod["spec"]["containers"][0]
    kernel = hw["kernel"]
    mirror = offline.get("mirror")
    sources = mounted_files(pod, driver, APT_SOURCES, read_config_map)
    if mirror and any(mirror in content for content in sources.values()):
        if not (mirror.startswith("https://") and offline.get("ca")):
            return None
        trusted = mounted_files(pod, driver, UBUNTU_CERTIFICATES, read_config_map)
        if any(offline["ca"].strip() in content for content in trusted.values()):
            return None
        fetch = ("W: Failed to fetch %s/dists/%s/InRelease  Certificate verification failed: The certificate is NOT "
                 "trusted. The certificate issuer is unknown.  Could not handshake: Error in the certificate "
                 "verification." % (mirror.rstrip("/"), offline["suite"]))
    else:
        fetch = ("W: Failed to fetch http://archive.ubuntu.com/ubuntu/dists/%s/InRelease  Temporary failure "
                 "resolving 'archive.ubuntu.com'" % offline["suite"])
    return ("nvidia-driver init on node %s: Updating the package cache... %s W: Some index files failed to download. "
            "They have been ignored, or old ones used instead. Installing Linux kernel headers... E: Unable to locate "
            "package linux-headers-%s" % (node_name, fetch, kernel))


def module_parameters(pod, read_config_map):
    """{module: [parameters]} a driver pod loads its modules with, from its /drivers/<module>.conf."""
    files = mounted_files(pod, pod["spec"]["containers"][0], MODULE_CONFIG_DIR, read_config_map)
    found = {}
    for module in MODULES:
        content = files.get(module + ".conf")
        if content:
            found[module] = [parameter for line in content.splitlines() for parameter in line.split()]
    return found


def shown_module_parameters(parameters):
    """The annotation value of the parameters of the node's loaded modules."""
    return json.dumps(parameters, sort_keys=True)
