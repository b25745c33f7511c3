"""The simulated failing GPUs (tools/localcluster/gpu_faults.py): the device plugin's health, the DCGM exporter's
fields and their query API, and what reset and reboot pods do."""

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.remediation import jobs
from localcluster import controlplane, dra, gpu_faults, simulator

NODE = "gpu-a"
GPU = {"product": "NVIDIA-A100-SXM4-80GB", "count": 4}
HOST_ROOT_VOLUME = {"name": "host", "hostPath": {"path": "/"}}


def fault(index, xid, permanent=False):
    return gpu_faults.new_fault(NODE, GPU["count"], index, xid, permanent, now=0)


def pod(*commands, privileged=True, shell=False, host_mount=False):
    """A pod whose one container runs the commands (argv lists), as a `sh -c` script when shell, with the driver's
    root mounted where it is (and the host's / at /host when host_mount)."""
    container = {"name": "c", "image": "i", "securityContext": {"privileged": privileged},
                 "volumeMounts": [{"name": "driver", "mountPath": "/run/nvidia/driver"}]}
    volumes = [{"name": "driver", "hostPath": {"path": "/run/nvidia/driver"}}]
    if shell:
        container.update(command=["/bin/sh", "-ec"], args=["\n".join(" ".join(argv) for argv in commands)])
    else:
        [container["command"]] = commands
    if host_mount:
        container["volumeMounts"].append({"name": "host", "mountPath": "/host"})
        volumes.append(HOST_ROOT_VOLUME)
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [container], "volumes": volumes}}


def reset(*ids, root="/run/nvidia/driver"):
    argv = ["chroot", root, "nvidia-smi", "-r"]
    return argv + ["-i", ",".join(ids)] if ids else argv


def run(maintenance_pod, faults, holders=(), driver_root=gpu_faults.DRIVER_CONTAINER_ROOT, driver_ready=True):
    """The Maintenance played, with its exit code and output."""
    done = gpu_faults.Maintenance(maintenance_pod, NODE, GPU["count"], faults, list(holders), driver_root,
                                  driver_ready, now=0)
    done.exit_code, done.output = done.run()
    return done


def test_identity_matches_what_the_dra_plugin_publishes_in_nvml_form():
    devices = dra.gpu_devices(NODE, {"gpu": dict(GPU, memory=1, compute="8.0")}, "570.1.2", "12.8", [None] * 4)
    assert gpu_faults.gpu_uuid(NODE, 1) == devices[1]["attributes"]["uuid"]["string"]
    assert gpu_faults.pci_bus_id(2) == "00000000:3A:00.0"
    assert gpu_faults.gpu_uuid(NODE, 0) != gpu_faults.gpu_uuid("gpu-b", 0)


def test_a_fault_names_its_gpu_and_how_it_clears():
    assert fault(1, 48) == {"gpu": 1, "uuid": gpu_faults.gpu_uuid(NODE, 1), "pci_bus_id": "00000000:29:00.0",
                            "xid": 48, "permanent": False, "since": "1970-01-01T00:00:00Z"}
    assert [gpu_faults.clears_with(f) for f in (fault(0, 48), fault(0, 79), fault(0, 48, permanent=True))] == [
        "reset", "reboot", "never"]
    with pytest.raises(gpu_faults.FaultError, match="has 4 GPUs: no GPU 4"):
        fault(4, 48)


def test_the_device_plugin_skips_application_xids_and_its_env_adjusts_them():
    assert [xid for xid in (13, 31, 43, 45, 48, 68, 79, 109, 119) if gpu_faults.marks_unhealthy(xid)] == [48, 79, 119]
    assert not gpu_faults.marks_unhealthy(48, disable="48,62")
    assert not gpu_faults.marks_unhealthy(79, disable="xids")
    assert gpu_faults.marks_unhealthy(13, disable="all", enable="13")
    assert gpu_faults.unhealthy_gpus([fault(0, 13), fault(2, 79), fault(3, 48)]) == {2, 3}


def test_allocatable_loses_the_unhealthy_gpus_share():
    assert gpu_faults.allocatable({"nvidia.com/gpu": 4}, "nvidia.com/gpu", 4, {1}) == {"nvidia.com/gpu": 3}
    # Time-slicing: each GPU's replicas go with it.
    assert gpu_faults.allocatable({"nvidia.com/gpu": 16}, "nvidia.com/gpu", 4, {1, 2}) == {"nvidia.com/gpu": 8}
    assert gpu_faults.allocatable({"nvidia.com/gpu": 0}, "nvidia.com/gpu", 4, {1}) == {"nvidia.com/gpu": 0}


def exporter():
    return {"metadata": {"name": "nvidia-dcgm-exporter-x", "namespace": "gpu"},
            "spec": {"containers": [{"name": "nvidia-dcgm-exporter"}]}}


def test_exporter_series_carry_dcgm_exporters_labels_and_the_last_xid():
    series = gpu_faults.exporter_series(NODE, GPU, [fault(1, 48), fault(1, 64), fault(2, 63)], exporter())
    assert len(series) == 3 * GPU["count"]
    by_key = {(labels["__name__"], labels["gpu"]): value for labels, value in series}
    assert [by_key[("DCGM_FI_DEV_XID_ERRORS", str(i))] for i in range(4)] == [0, 64, 63, 0]
    assert [by_key[("DCGM_FI_DEV_ROW_REMAP_FAILURE", str(i))] for i in range(4)] == [0, 1, 0, 0]
    assert [by_key[("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", str(i))] for i in range(4)] == [0, 1, 1, 0]
    assert series[3][0] == {"__name__": "DCGM_FI_DEV_XID_ERRORS", "gpu": "1", "UUID": gpu_faults.gpu_uuid(NODE, 1),
                            "pci_bus_id": "00000000:29:00.0", "device": "nvidia1",
                            "modelName": "NVIDIA A100-SXM4-80GB", "Hostname": NODE, "namespace": "gpu",
                            "pod": "nvidia-dcgm-exporter-x", "container": "nvidia-dcgm-exporter"}


def test_queries_select_series_by_name_and_matchers_and_refuse_the_rest_of_promql():
    series = gpu_faults.exporter_series(NODE, GPU, [fault(1, 79)], exporter())
    series += gpu_faults.exporter_series("gpu-b", GPU, [], exporter())

    def values(expr):
        return [(r["metric"]["Hostname"], r["metric"]["gpu"], r["value"][1])
                for r in gpu_faults.query(expr, series, 5.0)["data"]["result"]]
    assert len(values("DCGM_FI_DEV_XID_ERRORS")) == 8
    assert values('DCGM_FI_DEV_XID_ERRORS{Hostname="gpu-a", gpu=~"[01]"}') == [(NODE, "0", "0"), (NODE, "1", "79")]
    assert values('DCGM_FI_DEV_ROW_REMAP_FAILURE{Hostname!="gpu-a",gpu!~"1|2|3"}') == [("gpu-b", "0", "0")]
    assert values('{__name__="DCGM_FI_DEV_XID_ERRORS", UUID="%s"}' % gpu_faults.gpu_uuid(NODE, 1)) == [
        (NODE, "1", "79")]
    assert values("DCGM_FI_DEV_GPU_TEMP") == []
    answer = gpu_faults.query("DCGM_FI_DEV_XID_ERRORS", series, 5.0)
    assert answer["status"] == "success" and answer["data"]["resultType"] == "vector"
    assert answer["data"]["result"][0]["value"] == [5.0, "0"]
    for refused in ("DCGM_FI_DEV_XID_ERRORS > 0", "rate(DCGM_FI_DEV_XID_ERRORS[5m])", "{}", '{gpu=""}',
                    'DCGM_FI_DEV_XID_ERRORS{gpu=1}'):
        with pytest.raises(gpu_faults.QueryError):
            gpu_faults.query(refused, series, 5.0)


def test_the_query_api_answers_get_and_post_on_loopback():
    series = gpu_faults.exporter_series(NODE, GPU, [fault(0, 48)], exporter())
    server = gpu_faults.PrometheusAPI(0, lambda: series).start()
    try:
        assert server.url.startswith("http://127.0.0.1:")
        selector = 'DCGM_FI_DEV_XID_ERRORS{gpu="0"}'
        with urllib.request.urlopen(server.url + "/api/v1/query?" + urllib.parse.urlencode({"query": selector})) as got:
            answer = json.load(got)
        assert [r["value"][1] for r in answer["data"]["result"]] == ["48"]
        posted = urllib.request.Request(server.url + "/api/v1/query", urllib.parse.urlencode(
            {"query": selector}).encode(), {"Content-Type": "application/x-www-form-urlencoded"})
        with urllib.request.urlopen(posted) as got:
            assert [(r["metric"], r["value"][1]) for r in json.load(got)["data"]["result"]] == [
                (r["metric"], r["value"][1]) for r in answer["data"]["result"]]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(server.url + "/api/v1/query?query=sum(DCGM_FI_DEV_XID_ERRORS)")
        assert refused.value.code == 400 and json.load(refused.value)["errorType"] == "bad_data"
    finally:
        server.stop()


def test_prometheus_url_reads_the_port_the_control_plane_gave(tmp_path):
    plane = controlplane.ControlPlane(tmp_path)
    plane.info_file.write_text(json.dumps({"ports": {"apiserver": 1, "prometheus": 23456}}))
    assert gpu_faults.prometheus_url(plane) == "http://127.0.0.1:23456"
    assert gpu_faults.prometheus_url(str(plane.kubeconfig)) == "http://127.0.0.1:23456"
    plane.info_file.write_text(json.dumps({"ports": {"apiserver": 1}}))
    with pytest.raises(gpu_faults.FaultError, match="without the simulated Prometheus"):
        gpu_faults.prometheus_url(plane)


def test_only_resets_and_reboots_are_maintenance():
    assert not gpu_faults.is_maintenance(pod(["chroot", "/run/nvidia/driver", "nvidia-smi"]))
    assert not gpu_faults.is_maintenance(pod(["sleep", "3600"]))
    assert gpu_faults.is_maintenance(pod(reset("0")))
    assert gpu_faults.is_maintenance(pod(["set", "-e"], ["chroot /host systemctl reboot"], shell=True))


def test_a_reset_clears_the_resettable_fault_of_its_gpu_only_and_is_recorded():
    faults = [fault(1, 48), fault(2, 119)]
    done = run(pod(reset(gpu_faults.gpu_uuid(NODE, 1))), faults)
    assert (done.exit_code, done.cleared, done.reboot) == (0, {1}, False)
    assert done.output == ["GPU 00000000:29:00.0 was successfully reset.", "All done."]
    values = gpu_faults.after_maintenance({gpu_faults.FAULTS_ANNOTATION: json.dumps(faults)}, done)
    assert json.loads(values[gpu_faults.FAULTS_ANNOTATION]) == [faults[1]]
    assert json.loads(values[gpu_faults.RESETS_ANNOTATION]) == [
        {"uuid": gpu_faults.gpu_uuid(NODE, 1), "time": "1970-01-01T00:00:00Z", "result": "success"}]
    # By bus ID (either form) or index, in a script with persistence mode off and on around it.
    script = pod(["chroot", "/run/nvidia/driver", "nvidia-smi", "-pm", "0"], reset("0000:3a:00.0", "1"),
                 ["chroot", "/run/nvidia/driver", "nvidia-smi", "-pm", "1"], shell=True)
    assert run(script, faults).cleared == {1, 2}


def test_a_reset_fails_in_use_while_anything_holds_the_gpus_and_clears_nothing():
    done = run(pod(reset("0")), [fault(0, 48)], holders=["gpu/nvidia-device-plugin-x"])
    assert done.exit_code == gpu_faults.EXIT_OTHER and not done.cleared
    assert done.output[0].startswith("GPU 00000000:18:00.0 is currently in use by another process.")
    assert "gpu/nvidia-device-plugin-x" in done.output[-1]
    assert [r["result"] for r in done.resets] == ["in_use"]


def test_a_lost_gpu_or_a_permanent_fault_fails_the_reset_and_stops_the_script():
    lost = run(pod(reset("1") + ["||", "exit", "3"], reset("2"), shell=True), [fault(1, 79), fault(2, 48)])
    assert lost.exit_code == 3 and not lost.cleared
    assert "GPU is lost.  Reboot the system to recover this GPU" in lost.output[0]
    assert [r["result"] for r in lost.resets] == ["gpu_lost"]  # the script stopped before GPU 2
    permanent = run(pod(reset("2")), [fault(2, 48, permanent=True)])
    assert (permanent.exit_code, permanent.output, permanent.cleared) == (
        gpu_faults.EXIT_OTHER, ["Unable to reset GPU 00000000:3A:00.0: Unknown Error"], set())
    values = gpu_faults.after_maintenance({}, permanent)
    assert gpu_faults.FAULTS_ANNOTATION not in values


def test_a_reset_needs_the_drivers_root_mounted_the_driver_privileges_and_a_known_gpu():
    assert run(pod(reset("0", root="/host")), []).exit_code == 125  # not mounted
    assert run(pod(reset("0", root="/host"), host_mount=True), []).exit_code == 127  # no driver under the host's /
    assert run(pod(reset("0", root="/host"), host_mount=True), [], driver_root="/").exit_code == 0
    assert run(pod(["nvidia-smi", "-r", "-i", "0"]), []).output == ["sh: nvidia-smi: not found"]
    assert run(pod(reset("0")), [], driver_ready=False).exit_code == gpu_faults.EXIT_NO_DRIVER
    assert run(pod(reset("0"), privileged=False), []).exit_code == gpu_faults.EXIT_NO_PERMISSION
    assert run(pod(reset("GPU-nope")), []).output == ["No devices were found"]
    everything = run(pod(reset()), [fault(0, 48), fault(3, 62)])
    assert everything.cleared == {0, 1, 2, 3} and len(everything.resets) == 4


def test_the_remediations_reset_job_resets_its_gpus_in_order_and_stops_at_the_first_refused():
    uuids = [gpu_faults.gpu_uuid(NODE, 1), gpu_faults.gpu_uuid(NODE, 2)]
    job = jobs.reset_job(NODE, uuids, "gpu", "example.test/sim/tools:1", "remediation")
    reset_pod = dict(job["spec"]["template"], metadata={"name": "p", "namespace": "gpu", "uid": "u"})
    assert gpu_faults.is_maintenance(reset_pod)
    done = run(reset_pod, [fault(1, 48), fault(2, 119), fault(3, 48)])
    assert (done.exit_code, done.cleared) == (0, {1, 2})
    assert done.output[-1] == "reset: %s" % " ".join(uuids)
    refused = run(reset_pod, [fault(1, 48)], holders=["gpu/nvidia-dcgm-exporter-x"])
    assert refused.exit_code == 1 and not refused.cleared
    assert jobs.reset_outcome(False, "\n".join(refused.output))[0] == "refused"
    assert [r["uuid"] for r in refused.resets] == uuids[:1]
    lost = run(reset_pod, [fault(1, 79)])
    assert jobs.reset_outcome(False, "\n".join(lost.output))[0] == "failed"
    # On a pre-installed driver the Job mounts the host's / at /host and chroots there.
    host = jobs.reset_job(NODE, uuids, "gpu", "example.test/sim/tools:1", "remediation", driver_root="/")
    host_pod = dict(host["spec"]["template"], metadata={"name": "p", "namespace": "gpu", "uid": "u"})
    assert run(host_pod, [fault(1, 48)], driver_root="/").cleared == {1, 2}


def test_a_reboot_needs_the_hosts_root_and_a_boot_clears_all_but_permanent_faults():
    job = jobs.reboot_job(NODE, "gpu", "example.test/sim/tools:1", "remediation")
    reboot_pod = dict(job["spec"]["template"], metadata={"name": "p", "namespace": "gpu", "uid": "u"})
    assert gpu_faults.is_maintenance(reboot_pod)
    assert run(reboot_pod, []).reboot
    assert run(pod(["chroot", "/host", "reboot"], host_mount=True), []).reboot
    no_mount = run(pod(["chroot", "/host", "systemctl", "reboot"]), [])
    assert not no_mount.reboot and no_mount.exit_code == 125
    assert not run(pod(["systemctl", "reboot"], host_mount=True), []).reboot
    faults = [fault(0, 79), fault(1, 48), fault(2, 48, permanent=True)]
    values = gpu_faults.after_boot({gpu_faults.FAULTS_ANNOTATION: json.dumps(faults)}, "boot-2", 60)
    assert json.loads(values[gpu_faults.FAULTS_ANNOTATION]) == [faults[2]]
    assert json.loads(values[gpu_faults.REBOOTS_ANNOTATION]) == [{"time": "1970-01-01T00:01:00Z", "boot_id": "boot-2"}]
    again = gpu_faults.after_boot(dict(values), "boot-3", 120)
    assert gpu_faults.FAULTS_ANNOTATION not in again
    assert [r["boot_id"] for r in json.loads(again[gpu_faults.REBOOTS_ANNOTATION])] == ["boot-2", "boot-3"]


def test_the_simulated_plugin_keeps_a_gpu_unhealthy_until_it_restarts_with_the_fault_cleared():
    sim = simulator.Simulator(None)
    node = {"metadata": {"name": NODE, "annotations": {gpu_faults.FAULTS_ANNOTATION: json.dumps([fault(1, 48)])}},
            "status": {"nodeInfo": {"bootID": "boot-1"}}}
    plugin = {"metadata": {"uid": "plugin-1"}, "spec": {"containers": [{"name": "p"}]}}
    assert sim.unhealthy_gpus(node, plugin) == {1}
    node["metadata"]["annotations"][gpu_faults.FAULTS_ANNOTATION] = "[]"
    assert sim.unhealthy_gpus(node, plugin) == {1}  # cleared, but the plugin never looks again
    assert sim.unhealthy_gpus(node, dict(plugin, metadata={"uid": "plugin-2"})) == set()
    node["metadata"]["annotations"][gpu_faults.FAULTS_ANNOTATION] = json.dumps([fault(0, 79), fault(2, 13)])
    assert sim.unhealthy_gpus(node, dict(plugin, metadata={"uid": "plugin-2"})) == {0}
    node["metadata"]["annotations"][gpu_faults.FAULTS_ANNOTATION] = "[]"
    node["status"]["nodeInfo"]["bootID"] = "boot-2"  # the same pod, restarted by a boot
    assert sim.unhealthy_gpus(node, dict(plugin, metadata={"uid": "plugin-2"})) == set()
