"""The simulated MIG manager: the layouts of the role's stock file, held back by GPU pods, failing where it must."""

import os

from localcluster import mig

STOCK = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "mig_manager", "files", "mig-parted-config.yaml")
A100 = {"gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 2, "mig_capable": True}}


def stock():
    with open(STOCK) as stream:
        return stream.read()


def test_a_layout_waits_for_the_gpu_pods_then_gives_its_devices():
    assert mig.outcome(A100, "all-1g.10gb", stock(), mig.disabled(A100), ["ml/trainer"]) == (
        "pending", [None, None], "waiting for the GPU clients to go: ml/trainer")
    state, layout, _message = mig.outcome(A100, "all-1g.10gb", stock(), mig.disabled(A100), [])
    assert (state, layout) == ("success", [{"1g.10gb": 7}, {"1g.10gb": 7}])
    assert mig.resources(A100, layout, "mixed", True) == {"nvidia.com/gpu": 0, "nvidia.com/mig-1g.10gb": 14}
    assert mig.resources(A100, layout, "single", True) == {"nvidia.com/gpu": 14}
    assert mig.resources(A100, layout, "mixed", False) == {"nvidia.com/gpu": 0, "nvidia.com/mig-1g.10gb": 0}
    # Back to whole GPUs; a layout already applied needs no GPU pod gone.
    assert mig.outcome(A100, "all-disabled", stock(), layout, [])[:2] == ("success", [None, None])
    assert mig.outcome(A100, "all-1g.10gb", stock(), layout, ["ml/trainer"])[0] == "success"


def test_no_mig_an_unknown_layout_and_the_fault_fail():
    l40s = {"gpu": {"product": "NVIDIA-L40S", "count": 1, "mig_capable": False}}
    assert mig.outcome(l40s, "all-1g.10gb", stock(), [None], []) == (
        "failed", [None], "GPU NVIDIA-L40S is not MIG-capable")
    assert mig.outcome(A100, "all-9g.1gb", stock(), [None, None], [])[0] == "failed"
    faulty = dict(A100, faults={"mig_reconfig_fails": True})
    assert mig.outcome(faulty, "all-1g.10gb", stock(), [None, None], []) == (
        "failed", [None, None], "applying all-1g.10gb failed: GPU reset refused (injected fault)")
    assert mig.outcome(faulty, "all-disabled", stock(), [None, None], [])[0] == "success"


def test_the_mig_manager_pod_names_its_configmap():
    pod = {"spec": {"volumes": [{"name": "host-sys", "hostPath": {"path": "/sys"}},
                                {"name": "mig-parted-config", "configMap": {"name": "default-mig-parted-config"}}]}}
    assert mig.config_map_of(pod) == "default-mig-parted-config"
