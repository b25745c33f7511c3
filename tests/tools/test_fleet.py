"""The fleet model: node objects carry what NFD would label for their hardware and OS."""

import json

import pytest

from localcluster import fleet

NFD = "feature.node.kubernetes.io/"


def one(group, **fleet_spec):
    return fleet.expand_groups(dict(fleet_spec, nodes=[group]))[0]


@pytest.mark.parametrize("version, ocp, rhel, os_id", [
    ("416.94.202405081406-0", "4.16", "9.4", "rhcos"),
    ("49.84.202110081407-0", "4.9", "8.4", "rhcos"),
    ("410.84.202203290245-0", "4.10", "8.4", "rhcos"),
    ("9.6.20260303-1", None, "9.6", "rhel"),
    ("10.1.20260126-0", None, "10.1", "rhel"),
])
def test_rhcos_streams_and_os_release(version, ocp, rhel, os_id):
    assert fleet.rhcos_streams(version) == (ocp, rhel)
    node = one({"name": "n", "os": {"rhcos": version, "openshift": "4.21"}, "gpu": {"count": 1}})
    labels = node["labels"]
    assert labels[NFD + "system-os_release.OSTREE_VERSION"] == version
    assert labels[NFD + "system-os_release.ID"] == os_id
    assert node["status"]["nodeInfo"]["osImage"] == "Red Hat Enterprise Linux CoreOS %s (Plow)" % version
    if os_id == "rhcos":
        assert labels[NFD + "system-os_release.VERSION_ID"] == ocp
        assert labels[NFD + "system-os_release.RHEL_VERSION"] == rhel
    else:
        assert labels[NFD + "system-os_release.VERSION_ID"] == rhel
        assert labels[NFD + "system-os_release.OPENSHIFT_VERSION"] == "4.21"


def test_rhcos_version_must_be_a_build_string():
    with pytest.raises(fleet.FleetError, match="4.16"):
        fleet.rhcos_streams("4.16")


def test_pci_label_styles():
    vendor = one({"name": "v", "os": {"ubuntu": "22.04"}, "gpu": {"count": 1}})["labels"]
    klass = one({"name": "c", "os": {"ubuntu": "22.04"}, "gpu": {"count": 1}, "nfd_style": "class-vendor"})["labels"]
    cpu = one({"name": "x", "os": {"ubuntu": "22.04"}})["labels"]
    assert vendor[NFD + "pci-10de.present"] == "true" and NFD + "pci-0302_10de.present" not in vendor
    assert klass[NFD + "pci-0302_10de.present"] == "true" and NFD + "pci-10de.present" not in klass
    assert not [k for k in cpu if "10de" in k]


def test_rt_kernel_is_sanitised_like_nfd():
    node = one({"name": "rt", "os": {"rhcos": "416.94.202405081406-0"}, "kernel": "5.14.0-427.33.1.el9_4.x86_64+rt"})
    assert node["labels"][NFD + "kernel-version.full"] == "5.14.0-427.33.1.el9_4.x86_64_rt"
    assert node["status"]["nodeInfo"]["kernelVersion"] == "5.14.0-427.33.1.el9_4.x86_64+rt"
    assert (node["labels"][NFD + "kernel-version.major"], node["labels"][NFD + "kernel-version.minor"]) == ("5", "14")


def test_stale_label_fault_keeps_os_image_true():
    node = one({"name": "s", "os": {"rhcos": "9.6.20260303-1"}, "faults": {"stale_nfd_label": "418.94.202509100653-0"}})
    assert node["labels"][NFD + "system-os_release.OSTREE_VERSION"] == "418.94.202509100653-0"
    assert "9.6.20260303-1" in node["status"]["nodeInfo"]["osImage"]


def test_worker_mode_leaves_nodes_unlabelled_until_nfd_runs():
    node = one({"name": "w", "os": {"ubuntu": "22.04"}, "gpu": {"count": 2}}, nfd="worker")
    assert not [k for k in node["labels"] if k.startswith(NFD)]
    hardware = json.loads(node["annotations"][fleet.HARDWARE_ANNOTATION])
    assert hardware["nfd_labels"][NFD + "pci-10de.present"] == "true"


def test_counted_groups_and_prefix():
    nodes = fleet.expand_groups({"nodes": [{"name": "g", "count": 3, "os": {"ubuntu": "22.04"}}]}, prefix="t1-")
    assert [n["name"] for n in nodes] == ["t1-g-0", "t1-g-1", "t1-g-2"]
    assert len({n["status"]["addresses"][0]["address"] for n in nodes}) == 3
    assert all(n["status"]["addresses"][0]["address"].startswith("127.") for n in nodes)


def test_unknown_fault_is_named():
    with pytest.raises(fleet.FleetError, match="unknown faults melts"):
        fleet.expand_groups({"nodes": [{"name": "g", "os": {"ubuntu": "22.04"}, "faults": {"melts": True}}]})


def test_nodes_are_as_large_and_varied_as_a_busy_workers_by_default():
    nodes = fleet.expand_groups({"nodes": [{"name": "g", "count": 20, "os": {"rhcos": "9.6.20260303-1"},
                                            "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 8}}]})
    sizes = [len(json.dumps(n)) for n in nodes]
    # Before what the API server and kwok add (managedFields, conditions): real workers carry 10-40 KB.
    assert 10000 < min(sizes) and max(sizes) < 40000, sizes
    counts = {len(n["status"]["images"]) for n in nodes}
    assert min(counts) >= 45 and max(counts) <= 65 and len(counts) > 5, counts
    assert len({json.dumps(n["status"]["images"]) for n in nodes}) == 20
    for node in nodes:
        assert all(image["names"] and image["sizeBytes"] > 0 for image in node["status"]["images"])
        # The simulated machine-config operator owns those annotations; nothing here may preset them.
        assert not [key for key in node["annotations"] if key.startswith("machineconfiguration.openshift.io/")]
        assert node["status"]["addresses"][0]["address"].startswith("127.")
    assert nodes == fleet.expand_groups({"nodes": [{"name": "g", "count": 20, "os": {"rhcos": "9.6.20260303-1"},
                                                    "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 8}}]})


def test_minimal_nodes_carry_only_what_the_simulation_needs():
    node = one({"name": "m", "os": {"ubuntu": "22.04"}}, node_status="minimal")
    assert "images" not in node["status"] and len(json.dumps(node)) < 4000
    with pytest.raises(fleet.FleetError, match="node_status must be realistic or minimal"):
        one({"name": "m", "os": {"ubuntu": "22.04"}}, node_status="huge")


@pytest.mark.parametrize("product, memory, family, compute, mig", [
    ("NVIDIA-A100-SXM4-80GB", 81920, "ampere", "8.0", True),
    ("NVIDIA-A100-SXM4-40GB", 40960, "ampere", "8.0", True),
    ("NVIDIA-H100-80GB-HBM3", 81559, "hopper", "9.0", True),
    ("NVIDIA-L40S", 46068, "ampere", "8.9", False),  # GFD's family rule: every 8.x is ampere
    ("Tesla-T4", 15360, "turing", "7.5", False),
])
def test_gpu_models_give_what_gfd_labels(product, memory, family, compute, mig):
    node = one({"name": "g", "os": {"ubuntu": "22.04"}, "gpu": {"product": product, "count": 2}})
    gpu = json.loads(node["annotations"][fleet.HARDWARE_ANNOTATION])["gpu"]
    assert gpu == {"product": product, "count": 2, "memory": memory, "family": family, "compute": compute,
                   "mig_capable": mig}


def test_a_gpu_without_product_is_the_default_model_and_a_machine_is_recorded():
    node = one({"name": "g", "os": {"ubuntu": "22.04"}, "gpu": {"count": 1}, "machine": "DGX-H100"})
    hardware = json.loads(node["annotations"][fleet.HARDWARE_ANNOTATION])
    assert hardware["gpu"]["product"] == fleet.DEFAULT_GPU_MODEL and hardware["machine"] == "DGX-H100"


def test_an_unknown_gpu_needs_its_memory_compute_and_mig_capability():
    with pytest.raises(fleet.FleetError, match="give its memory, compute, mig_capable"):
        one({"name": "g", "os": {"ubuntu": "22.04"}, "gpu": {"product": "NVIDIA-B300"}})
    gpu = fleet.gpu_hardware({"gpu": {"product": "NVIDIA-B300", "memory": 274877, "compute": "10.3",
                                      "mig_capable": True}})
    assert gpu["family"] == "blackwell" and gpu["count"] == 1
    # A compute capability GFD does not know is undefined.
    assert fleet.gpu_hardware({"gpu": {"product": "X", "memory": 1, "compute": "13.0", "mig_capable": False}})[
        "family"] == "undefined"


def test_gfd_init_fails_is_a_known_fault():
    node = one({"name": "g", "os": {"ubuntu": "22.04"}, "gpu": {"count": 1}, "faults": {"gfd_init_fails": True}})
    assert json.loads(node["annotations"][fleet.HARDWARE_ANNOTATION])["faults"] == {"gfd_init_fails": True}
