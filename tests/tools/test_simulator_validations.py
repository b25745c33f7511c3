"""The simulated /run/nvidia/validations: who writes its files, who waits for them, which driver root follows."""

from localcluster import fleet, simulator, validations

MOUNT = {"name": "run-nvidia-validations", "mountPath": "/run/nvidia/validations"}
VOLUME = {"name": "run-nvidia-validations", "hostPath": {"path": "/run/nvidia/validations"}}
WAIT_FOR_TOOLKIT = "until [ -f /run/nvidia/validations/toolkit-ready ]; do sleep 5; done"
SOURCE_DRIVER_READY = ("until [ -f /run/nvidia/validations/driver-ready ]; do sleep 5; done\n"
                       "set -o allexport\n. /run/nvidia/validations/driver-ready\nexec nvidia-toolkit /usr/local/nvidia")


def node(host_driver=None, gpus_advertised=0):
    group = {"name": "g", "os": {"rhcos": "418.94.202509100653-0"}, "gpu": {"product": "NVIDIA-L40S", "count": 4}}
    if host_driver:
        group["host_driver"] = host_driver
    made = fleet.expand_groups({"nodes": [group]})[0]
    status = dict(made["status"], capacity={simulator.GPU: str(gpus_advertised)})
    return {"metadata": {"name": made["name"], "labels": made["labels"], "annotations": made["annotations"]},
            "status": status}


def pod(component, containers, init_containers=(), volumes=(VOLUME,)):
    return {"metadata": {"name": component + "-x", "namespace": "gpu", "uid": component,
                         "labels": {"app.kubernetes.io/component": component}},
            "spec": {"initContainers": list(init_containers), "containers": list(containers), "volumes": list(volumes)}}


def validator(component):
    return {"name": component + "-validation", "image": "validator", "command": ["sh", "-c"],
            "args": ["nvidia-validator"], "env": [{"name": "COMPONENT", "value": component}], "volumeMounts": [MOUNT]}


def toolkit(args, mounts=(MOUNT,)):
    return pod(simulator.TOOLKIT, [{"name": "nvidia-container-toolkit-ctr", "image": "toolkit",
                                    "command": ["/bin/bash", "-c"], "args": [args], "volumeMounts": list(mounts)}],
               [validator("driver")])


def test_a_pre_installed_driver_gives_driver_ready_the_host_root_and_the_toolkit_follows():
    host = node(host_driver="570.172.08")
    files = {}
    checks = simulator.validator_checks(host, {simulator.DRIVER})
    writes, problem = validations.run_init_containers(toolkit(SOURCE_DRIVER_READY), "n", files, checks)
    assert problem is None
    assert validations.parse_env_file(writes["driver-ready"]) == {
        "IS_HOST_DRIVER": "true", "NVIDIA_DRIVER_ROOT": "/", "DRIVER_ROOT_CTR_PATH": "/host",
        "NVIDIA_DEV_ROOT": "/", "DEV_ROOT_CTR_PATH": "/host"}
    hw = simulator.hardware(host)
    assert simulator.container_problem(toolkit(SOURCE_DRIVER_READY), "n", hw, writes) is None
    # The pre-v24.6 check for host-driver-ready, a file no validator writes any more: the root stays /run/nvidia/driver.
    old = ("if [ -f /run/nvidia/validations/host-driver-ready ]; then :; fi\nexec nvidia-toolkit /usr/local/nvidia")
    stale = toolkit(old)
    stale["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_DRIVER_ROOT", "value": "/run/nvidia/driver"}]
    reason, message = simulator.container_problem(stale, "n", hw, writes)
    assert reason == "CrashLoopBackOff"
    assert "no NVIDIA driver under driver root /run/nvidia/driver (the driver is at /)" in message


def test_a_driver_container_gives_its_root_and_an_entrypoint_not_reading_driver_ready_gets_slash():
    hw = simulator.hardware(node())
    files = {"driver-ready": validations.driver_ready_content(False)}
    assert simulator.container_problem(toolkit(SOURCE_DRIVER_READY), "n", hw, files) is None
    assert simulator.container_problem(toolkit("exec nvidia-toolkit /usr/local/nvidia"), "n", hw, files)[0] \
        == "CrashLoopBackOff"
    # Without the mount the entrypoint never sees the file: it waits, not Ready.
    reason, message = simulator.container_problem(toolkit(SOURCE_DRIVER_READY, mounts=()), "n", hw, files)
    assert reason == "ContainersNotReady" and "/run/nvidia/validations/driver-ready" in message


def test_the_validator_writes_its_files_in_order_as_far_as_the_node_allows():
    pod_ = pod(simulator.VALIDATOR, [{"name": "nvidia-operator-validator", "image": "validator"}],
               [validator(c) for c in ("driver", "toolkit", "cuda", "plugin")])
    ready = {simulator.DRIVER}
    writes, problem = validations.run_init_containers(pod_, "n", {}, simulator.validator_checks(node(), ready))
    assert set(writes) == {"driver-ready"}
    assert problem == "init container toolkit-validation on node n: nvidia-smi fails: the container toolkit is not ready"
    ready.add(simulator.TOOLKIT)
    writes, problem = validations.run_init_containers(pod_, "n", {}, simulator.validator_checks(node(), ready))
    assert set(writes) == {"driver-ready", "toolkit-ready", "cuda-ready"}
    assert problem.endswith("the node advertises no GPUs")
    writes, problem = validations.run_init_containers(pod_, "n", {}, simulator.validator_checks(
        node(gpus_advertised=4), ready))
    assert problem is None and set(writes) == {"driver-ready", "toolkit-ready", "cuda-ready", "plugin-ready"}


def test_an_operand_waiting_for_toolkit_ready_needs_the_file_and_the_mount():
    waiting = {"name": "toolkit-validation", "image": "validator", "command": ["sh", "-c"], "args": [WAIT_FOR_TOOLKIT],
               "volumeMounts": [MOUNT]}
    operand = pod("upstream", [{"name": "operand", "image": "x"}], [waiting])
    writes, problem = validations.run_init_containers(operand, "n", {"driver-ready": ""}, {})
    assert writes == {}
    assert problem == "init container toolkit-validation waits on node n for /run/nvidia/validations/toolkit-ready"
    assert validations.run_init_containers(operand, "n", {"toolkit-ready": ""}, {}) == ({}, None)
    unmounted = pod("upstream", [{"name": "operand", "image": "x"}], [dict(waiting, volumeMounts=[])])
    assert validations.run_init_containers(unmounted, "n", {"toolkit-ready": ""}, {})[1] is not None
    # A mount of /run/nvidia (as older GPU Operator validators have) shows the same files.
    run_nvidia = pod("upstream", [{"name": "operand", "image": "x"}],
                     [dict(waiting, volumeMounts=[{"name": "run-nvidia", "mountPath": "/run/nvidia"}])],
                     volumes=[{"name": "run-nvidia", "hostPath": {"path": "/run/nvidia"}}])
    assert validations.run_init_containers(run_nvidia, "n", {"toolkit-ready": ""}, {}) == ({}, None)


def test_a_fleet_node_with_a_host_driver_is_labelled_pre_installed():
    made = fleet.expand_groups({"nodes": [{"name": "h", "os": {"rhcos": "418.94.202509100653-0"},
                                           "gpu": {"count": 1}, "host_driver": "570.172.08"}]})[0]
    assert made["labels"]["nvidia.com/gpu.deploy.driver"] == "pre-installed"
    assert simulator.hardware({"metadata": made})["host_driver"] == "570.172.08"


def test_with_cdi_the_device_plugin_needs_the_driver_root_of_driver_ready():
    hw = simulator.hardware(node())
    files = {"driver-ready": validations.driver_ready_content(False)}

    def plugin(args, cdi):
        env = [{"name": "CDI_ENABLED", "value": "true"}] if cdi else []
        return pod(simulator.DEVICE_PLUGIN, [{"name": "nvidia-device-plugin", "image": "plugin", "command": ["/bin/sh", "-c"],
                                              "args": [args], "env": env, "volumeMounts": [MOUNT]}])

    sourcing = SOURCE_DRIVER_READY.replace("nvidia-toolkit /usr/local/nvidia", "nvidia-device-plugin")
    assert simulator.container_problem(plugin(sourcing, cdi=True), "n", hw, files) is None
    reason, message = simulator.container_problem(plugin("exec nvidia-device-plugin", cdi=True), "n", hw, files)
    assert reason == "CrashLoopBackOff" and "driver root / (the driver is at /run/nvidia/driver)" in message
    # Without CDI the plugin's device specs do not depend on it.
    assert simulator.container_problem(plugin("exec nvidia-device-plugin", cdi=False), "n", hw, files) is None
