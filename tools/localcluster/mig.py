"""The simulated MIG manager and the resources a MIG layout gives.

A node's layout is what the MIG manager applied there (held by the simulator; every GPU starts with MIG disabled).
The MIG manager pod of a node (Ready, like the other operands, once driver and toolkit are) reads the layout the
label nvidia.com/mig.config names from the ConfigMap its pod mounts (the role's, built from the stock file
roles/mig_manager/files/mig-parted-config.yaml) and writes nvidia.com/mig.config.state:

- success at once when the layout is the one applied (nothing to change), else once no pod holds the node's GPUs;
- pending while pods hold them, or while its GPU clients run: as the real one (mig-parted's reconfigure), it first
  stops them through their deploy labels (each not `false`, absent ones too, becomes `paused-for-mig-change`, and the
  DaemonSet controller removes their pods), and sets those labels to `true` once the layout is applied or failed;
- failed for a GPU that is not MIG-capable, a layout the ConfigMap lacks, or the fleet fault mig_reconfig_fails.

Layouts and resources come from the collection's own plugins/module_utils/mig/parted.py, loaded by its path, so that
the simulator plays the layouts the playbooks expect; the device plugin then advertises them under its MIG_STRATEGY.
"""

import importlib.util
import os

import yaml

CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
MIG_MANAGER = "nvidia-mig-manager"
CONFIG_VOLUME = "mig-parted-config"
# The GPU clients the MIG manager stops while it changes the GPUs (mig-parted's getK8sGPUClients), by deploy label.
GFD_DEPLOY_LABEL = "nvidia.com/gpu.deploy.gpu-feature-discovery"
CLIENT_LABELS = tuple("nvidia.com/gpu.deploy." + name
                      for name in ("device-plugin", "dcgm-exporter", "dcgm", "nvsm")) + (GFD_DEPLOY_LABEL,)
PAUSED = "paused-for-mig-change"
_MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                             "plugins", "module_utils")


def _load(package, name):
    spec = importlib.util.spec_from_file_location("accelerators_gpu_%s_%s" % (package, name),
                                                  os.path.join(_MODULE_UTILS, package, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mig_parted = _load("mig", "parted")
_DEVICE_OF_PRODUCT = {product: device for device, (product, _memory, _capable) in _load("nodes", "gfd_labels").PCI_DEVICES.items()}


def disabled(hw):
    """The layout of a node whose GPUs all have MIG disabled."""
    return [None] * int((hw.get("gpu") or {}).get("count") or 0)


def config_map_of(pod):
    """The name of the ConfigMap of layouts a MIG manager pod mounts."""
    for volume in pod["spec"].get("volumes") or []:
        if volume.get("name") == CONFIG_VOLUME and volume.get("configMap"):
            return volume["configMap"]["name"]
    return None


def outcome(hw, wanted, config_text, applied, holders):
    """(state, layout, message) of the MIG manager asked for the layout wanted on a node of this hardware: layout is
    what the node's GPUs then have (applied unless the state is success)."""
    gpu = hw.get("gpu") or {}
    if not gpu.get("mig_capable"):
        return "failed", applied, "GPU %s is not MIG-capable" % gpu.get("product")
    try:
        layout = mig_parted.gpu_layouts(yaml.safe_load(config_text or "") or {}, wanted, int(gpu["count"]),
                                        _DEVICE_OF_PRODUCT.get(gpu["product"]))
    except mig_parted.LayoutError as error:
        return "failed", applied, str(error)
    if layout == applied:
        return "success", applied, "layout %s already applied" % wanted
    if (hw.get("faults") or {}).get("mig_reconfig_fails"):
        return "failed", applied, "applying %s failed: GPU reset refused (injected fault)" % wanted
    if holders:
        return "pending", applied, "waiting for the GPU clients to go: %s" % ", ".join(sorted(holders))
    return "success", layout, "applied %s" % wanted


def pause_labels(labels):
    """The labels stopping the GPU clients: each client's deploy label not `false` (absent too) set to paused."""
    return {key: PAUSED for key in CLIENT_LABELS if labels.get(key) not in ("false", PAUSED)}


def restart_labels(labels):
    """The labels restarting the GPU clients stopped for a change: paused ones back to `true`."""
    return {key: "true" for key in CLIENT_LABELS if labels.get(key) == PAUSED}


def resources(hw, layout, strategy, advertising):
    """{resource: count} of a node's allocatable and capacity: what the device plugin advertises for the layout
    under its strategy while it runs (advertising), nothing otherwise."""
    found = mig_parted.advertised_resources(layout, strategy or "none")
    return found if advertising else {key: 0 for key in found}
