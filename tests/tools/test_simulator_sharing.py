"""The simulated GPU sharing (sharing.py) and the exporter's reach of its hostengine (hostengine.py)."""

from localcluster import hostengine, sharing

CONFIGS = {
    "default": "version: v1\nflags:\n  migStrategy: none\n",
    "ts-x3": "version: v1\nsharing:\n  timeSlicing:\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 3\n",
    "ts-renamed": "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
                  "      - name: nvidia.com/gpu\n        replicas: 2\n",
    "mps-x4": "version: v1\nsharing:\n  mps:\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 4\n",
}


def node(config=None):
    return {"metadata": {"name": "n1", "labels": {sharing.CONFIG_LABEL: config} if config else {}}}


def reader(name="nvidia-device-plugin", default="default", mps_root="/run/nvidia/mps", config=True):
    """A pod reading the configuration as the role's manifests do (config manager, CONFIG_FILE, available-configs)."""
    main = {"name": name, "env": [{"name": "CONFIG_FILE", "value": "/config/config.yaml"}] if config else [],
            "volumeMounts": [{"name": "mps-root", "mountPath": "/mps"}]}
    manager = {"name": "config-manager-init", "env": [{"name": "DEFAULT_CONFIG", "value": default}]}
    return {"metadata": {"name": name + "-x", "namespace": "gpu"},
            "spec": {"initContainers": [manager], "containers": [main],
                     "volumes": [{"name": "available-configs", "configMap": {"name": "nvidia-device-plugin-config"}},
                                 {"name": "mps-root", "hostPath": {"path": mps_root}}]}}


def read(namespace, name):
    assert (namespace, name) == ("gpu", "nvidia-device-plugin-config")
    return CONFIGS


def test_a_node_runs_the_configuration_its_label_names_else_the_default():
    assert sharing.pod_sharing(reader(), node("mps-x4"), read) == ("mps", 4, False)
    assert sharing.pod_sharing(reader(), node("ts-x3"), read) == ("time-slicing", 3, False)
    assert sharing.pod_sharing(reader(), node(), read) == sharing.NONE
    assert sharing.pod_sharing(reader(default="ts-x3"), node(), read) == ("time-slicing", 3, False)
    # Without the config manager's file a pod runs unshared, whatever the label says.
    assert sharing.pod_sharing(reader(config=False), node("mps-x4"), read) == sharing.NONE


def test_mps_replicas_need_a_ready_daemon_with_an_mps_configuration_and_the_same_root():
    plugin, mps = reader(), node("mps-x4")
    assert sharing.mps_daemon_problem(plugin, [], mps, read) == "no MPS control daemon is ready on node n1"
    assert sharing.mps_daemon_problem(plugin, [reader("mps-control-daemon-ctr")], mps, read) is None
    assert "runs without an MPS configuration" in sharing.mps_daemon_problem(
        plugin, [reader("mps-control-daemon-ctr", config=False)], mps, read)
    assert "uses MPS root /run/other, the plugin /run/nvidia/mps" in sharing.mps_daemon_problem(
        plugin, [reader("mps-control-daemon-ctr", mps_root="/run/other")], mps, read)
    gpus = {"nvidia.com/gpu": 2}
    assert sharing.advertised(gpus, ("mps", 4, False), None) == {"nvidia.com/gpu": 8}
    assert sharing.advertised(gpus, ("mps", 4, False), "no daemon") == {"nvidia.com/gpu": 0}
    assert sharing.advertised(gpus, ("time-slicing", 3, False), None) == {"nvidia.com/gpu": 6}
    assert sharing.advertised(gpus, ("time-slicing", 2, True), None) == {"nvidia.com/gpu.shared": 4,
                                                                         "nvidia.com/gpu": 0}
    assert sharing.advertised(gpus, sharing.NONE, None) == gpus


def test_gfd_labels_the_sharing_as_upstream_gfd():
    labels = {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.replicas": "1"}
    assert sharing.gfd_labels(labels, ("mps", 4, False)) == {
        "nvidia.com/gpu.product": "NVIDIA-L4-SHARED", "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/mps.capable": "true"}
    assert sharing.gfd_labels(labels, ("time-slicing", 2, True))["nvidia.com/gpu.product"] == "NVIDIA-L4"
    assert sharing.gfd_labels(labels, sharing.NONE)["nvidia.com/gpu.sharing-strategy"] == "none"
    assert sharing.gfd_labels({}, ("mps", 4, False)) == {}


def exporter(target, host_network=False):
    env = [{"name": hostengine.REMOTE_ENV, "value": target}] if target else []
    return {"metadata": {"name": "nvidia-dcgm-exporter-x", "namespace": "gpu"},
            "spec": {"hostNetwork": host_network, "containers": [{"name": "nvidia-dcgm-exporter", "env": env}]}}


def engine(host_network=False):
    return {"metadata": {"name": "nvidia-dcgm-x", "labels": {"app": "nvidia-dcgm"}},
            "spec": {"hostNetwork": host_network, "containers": [
                {"name": "nvidia-dcgm-ctr", "ports": [{"name": "dcgm", "containerPort": 5555}]}]}}


SERVICE = {"spec": {"internalTrafficPolicy": "Local", "selector": {"app": "nvidia-dcgm"},
                    "ports": [{"name": "dcgm", "port": 5555, "targetPort": 5555}]}}


def services(found):
    return lambda namespace, name: found.get((namespace, name))


def test_an_exporter_reaches_its_nodes_hostengine_through_a_node_local_service():
    ours = services({("gpu", "nvidia-dcgm"): SERVICE})
    assert hostengine.problem(exporter(None), "n1", [], ours) is None  # the embedded hostengine
    assert hostengine.problem(exporter("nvidia-dcgm:5555"), "n1", [engine()], ours) is None
    assert hostengine.problem(exporter("nvidia-dcgm.gpu.svc:5555"), "n1", [engine()], ours) is None
    refused = "failed to connect to remote hostengine at nvidia-dcgm:5555 from node n1: "
    assert hostengine.problem(exporter("nvidia-dcgm:5555"), "n1", [], ours) == (
        refused + "no Ready hostengine pod of node n1 behind Service gpu/nvidia-dcgm port 5555")
    assert hostengine.problem(exporter("nvidia-dcgm:5555"), "n1", [engine()], services({})) == (
        refused + "no Service gpu/nvidia-dcgm")
    cluster_wide = dict(SERVICE, spec=dict(SERVICE["spec"], internalTrafficPolicy="Cluster"))
    assert "internalTrafficPolicy is not Local" in hostengine.problem(
        exporter("nvidia-dcgm:5555"), "n1", [engine()], services({("gpu", "nvidia-dcgm"): cluster_wide}))
    assert "has no port 5556" in hostengine.problem(exporter("nvidia-dcgm:5556"), "n1", [engine()], ours)


def test_a_localhost_hostengine_needs_the_nodes_network():
    assert "no hostNetwork" in hostengine.problem(exporter("localhost:5555"), "n1", [engine(True)], services({}))
    assert hostengine.problem(exporter("localhost:5555", True), "n1", [engine(True)], services({})) is None
    assert "no hostengine listens on the node's port 5555" in hostengine.problem(
        exporter("localhost:5555", True), "n1", [engine()], services({}))
