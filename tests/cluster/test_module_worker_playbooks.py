"""The module worker (plugins/module_utils/runner/worker.py) through real ansible-playbook runs.

Each test gives the worker a socket directory of its own (XDG_RUNTIME_DIR) and a request log
(ACCELERATORS_GPU_WORKER_LOG), so it sees only its own worker: the first module run starts it and is served by it, as
are later runs, each with its own environment. The plays run with connection local: the action plugin hands the worker
the module's wrapper (from=action in the log); an async or become task still runs a module process, which
forwards (from=module). With the collection's connection (accelerators.gpu.local, the playbooks'), every module
piped into its interpreter goes to the worker, kubernetes.core's too (from=connection). Each module result says what
ran it (accelerators_gpu_worker); a module the worker did not run is said once a run at -v.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest
import yaml
from conftest import wait_for
from playbook import COLLECTIONS, findings, play, run

REPORT = "accelerators_gpu_worker"
SAID = "accelerators.gpu: modules run in their own processes, not in the module worker: "


@pytest.fixture
def worker_env(tmp_path):
    """The environment of the test's plays, worker_env(**extra): a socket directory of its own (XDG_RUNTIME_DIR) and a
    request log. At the test's end the workers started there stop, and it goes."""
    # A short directory: a socket path must fit in an AF_UNIX address, which pytest's tmp_path may not.
    runtime = tempfile.mkdtemp(prefix="agw-", dir="/tmp")
    (tmp_path / "run").symlink_to(runtime)
    yield lambda **extra: dict(XDG_RUNTIME_DIR=runtime, ACCELERATORS_GPU_WORKER_LOG=str(tmp_path / "worker.log"),
                               **extra)
    for pid in workers_in(runtime):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    shutil.rmtree(runtime, ignore_errors=True)


def workers_in(runtime):
    """The pids of the workers started in a socket directory: a worker's command line names its file, kept there."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as cmdline:
                if (runtime + "/").encode() in cmdline.read():
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


def served(tmp_path):
    """The log lines of the requests the worker served: module, child pid, worker pid, rc, seconds."""
    log = tmp_path / "worker.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [dict(field.split("=", 1) for field in line.split()[1:]) | {"module": line.split()[0]} for line in lines]


def sockets(tmp_path):
    return list((tmp_path / "run").glob("accelerators-gpu-*/*.sock"))


def until_served(cluster, tmp_path, env):
    """Run a module until the worker serves one (a module that comes while it starts runs on its own); returns how
    many requests it has served."""
    def served_one():
        run(cluster, "accelerators.gpu.cluster_facts", {"namespace": "default"}, extra_env=env)
        return len(served(tmp_path))
    return wait_for(served_one, timeout=60, interval=0.5, message="a module run served by the worker")


class OnlyKubeconfig:
    """A cluster reached through KUBECONFIG alone (no K8S_AUTH_KUBECONFIG), as the kubernetes client's default."""

    def __init__(self, cluster, kubeconfig):
        self.env = dict((name, value) for name, value in cluster.env.items() if name != "K8S_AUTH_KUBECONFIG")
        self.env["KUBECONFIG"] = kubeconfig


def test_the_first_run_starts_a_worker_that_serves_it_and_the_next_runs_each_with_its_own_environment(
        cluster, tmp_path, worker_env):
    env = worker_env(ACCELERATORS_GPU_WORKER_IDLE="60")
    args = {"namespace": "default"}
    first = run(cluster, "accelerators.gpu.cluster_facts", args, extra_env=env)
    assert not first.get("failed"), first
    # No worker for the action to hand it to: it started one, waited for it to listen, and handed it the module.
    assert [request["from"] for request in served(tmp_path)] == ["action"], served(tmp_path)
    assert first[REPORT] == {"served_by": "worker", "handed_by": "action"}

    # KUBECONFIG alone names the cluster: the worker imported the kubernetes client with none set, so the run's
    # own value must be the one used. Once the worker serves, it serves every run.
    def served_run(kubeconfig):
        count = len(served(tmp_path))
        result = run(OnlyKubeconfig(cluster, kubeconfig), "accelerators.gpu.cluster_facts", args, extra_env=env)
        requests = served(tmp_path)[count:]
        assert len(requests) == 1, (result, requests)
        return result, requests[0]

    second, second_request = served_run(cluster.kubeconfig)
    assert not second.get("failed") and second_request["rc"] == "0", second
    third, third_request = served_run(str(tmp_path / "no-such-kubeconfig"))
    assert third.get("failed") and third_request["rc"] == "1", third
    assert second_request["from"] == third_request["from"] == "action"
    assert second_request["worker"] == third_request["worker"]
    assert second_request["pid"] != third_request["pid"]  # a child per request
    assert second[REPORT] == third[REPORT] == first[REPORT]
    # Served or not, a module returns the same result (the first run also filled kubernetes.core's discovery cache).
    assert findings(second) == findings(first)


def test_check_mode_and_diff_reach_the_module_in_the_worker(cluster, tmp_path, worker_env):
    env = worker_env()
    name = "worker-check-%d" % os.getpid()
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"},
                  "data": {"key": "value"}}
    until_served(cluster, tmp_path, env)

    count = len(served(tmp_path))
    checked = run(cluster, "accelerators.gpu.operand", {"definitions": [config_map]}, check=True, diff=True,
                  extra_env=env)
    assert [request["module"].rsplit(".", 1)[-1] for request in served(tmp_path)[count:]] == ["operand"], checked
    assert checked["changed"] and checked["diff"], checked
    assert name not in [item.metadata.name for item in cluster.core.list_namespaced_config_map("default").items]


@pytest.mark.parametrize("options", [{"async": 60, "poll": 1}, {"become": True, "become_method": "su"}],
                         ids=["async", "become"])
def test_an_async_or_become_task_runs_a_module_process_that_the_worker_serves(cluster, tmp_path, worker_env, options):
    env = worker_env()
    until_served(cluster, tmp_path, env)
    count = len(served(tmp_path))
    result = run(cluster, "accelerators.gpu.cluster_facts", {"namespace": "default"}, extra_env=env,
                 task_options=options)
    assert not result.get("failed") and result["namespace"]["metadata"]["name"] == "default", result
    assert [request["from"] for request in served(tmp_path)[count:]] == ["module"], result
    assert result[REPORT] == {"served_by": "worker", "handed_by": "module"}


@pytest.mark.parametrize("connection", ["local", "accelerators.gpu.local"])
def test_with_the_worker_off_modules_run_in_their_own_processes_each_result_and_verbose_output_saying_so(
        cluster, tmp_path, worker_env, connection):
    env = worker_env(ACCELERATORS_GPU_WORKER="off")
    results = play(cluster, [("accelerators.gpu.cluster_facts", {"namespace": "default"}),
                             ("kubernetes.core.k8s_info", {"kind": "Namespace", "name": "default"})] * 2,
                   extra_env=env, connection=connection, verbose=True)
    assert not any(result.get("failed") for result in results), results
    assert served(tmp_path) == [] and sockets(tmp_path) == []
    off = {"served_by": "module", "reason": "ACCELERATORS_GPU_WORKER=off"}
    # Through connection local, kubernetes.core's modules are Ansible's alone: their results say nothing.
    assert [result.get(REPORT) for result in results] == [off, off if connection != "local" else None] * 2
    said = [line for line in results.process.stderr.splitlines() if line.startswith(SAID)]
    assert said == [SAID + "ACCELERATORS_GPU_WORKER=off"], results.process.stderr[-3000:]


def test_an_idle_worker_exits(cluster, tmp_path, worker_env):
    # Idle long enough to outlast the start of the next ansible-playbook on a busy machine: until_served needs the
    # worker the first run started to be up for the second.
    env = worker_env(ACCELERATORS_GPU_WORKER_IDLE="10")
    until_served(cluster, tmp_path, env)
    wait_for(lambda: not sockets(tmp_path), timeout=60, message="the idle worker to exit")


def collection_with_a_broken_worker(tmp_path):
    """A collections directory whose accelerators.gpu is this checkout but for module_worker.run_wrapper, the
    action's entry to the worker, which takes other arguments: a worker broken on purpose. (kubernetes.core is
    found where it is installed, beside ansible-core.)"""
    checkout = os.path.realpath(os.path.join(COLLECTIONS, "ansible_collections", "accelerators", "gpu"))
    copy = tmp_path / "collections" / "ansible_collections" / "accelerators" / "gpu"
    # Every directory on the way to the worker's file is copied, its other entries linked.
    runner = os.path.join("plugins", "module_utils", "runner")
    on_the_way = ("plugins", "module_utils", "runner", "worker.py")
    for directory in ("", "plugins", os.path.dirname(runner), runner):
        (copy / directory).mkdir(parents=True, exist_ok=True)
        for name in os.listdir(os.path.join(checkout, directory)):
            if not (copy / directory / name).exists() and name not in on_the_way:
                (copy / directory / name).symlink_to(os.path.join(checkout, directory, name))
    source = open(os.path.join(checkout, runner, "worker.py")).read()
    broken = source.replace("def run_wrapper(executable, wrapper, module_fqn, environ, cwd, handed_by='action'):",
                            "def run_wrapper(executable, wrapper, module_fqn, environ, cwd, timeout, handed_by=''):")
    assert broken != source
    (copy / runner / "worker.py").write_text(broken)
    return str(copy.parent.parent.parent)


def test_an_action_broken_on_purpose_falls_back_to_ansibles_own_run_and_says_so_once(cluster, tmp_path, worker_env):
    worker = worker_env()
    env = dict(cluster.env, ANSIBLE_COLLECTIONS_PATH=collection_with_a_broken_worker(tmp_path),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_NOCOLOR="true",
               **worker)
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "facts %d" % index, "accelerators.gpu.cluster_facts": {"namespace": "default"}}
        for index in range(3)]}]))
    process = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-vv", "-i",
                              "localhost,", "-c", "local", str(playbook)], env=env, capture_output=True, text=True,
                             timeout=300, check=False)
    assert process.returncode == 0 and "ok=3" in process.stdout, process.stdout[-3000:] + process.stderr[-3000:]
    said = "modules run in their own processes, not in the module worker: TypeError"
    assert process.stdout.count(said) == 1, process.stdout[-3000:]
    # Ansible ran a module process for each task, which handed its module to the worker once one was up.
    assert all(request["from"] == "module" for request in served(tmp_path)), served(tmp_path)


def test_the_collections_connection_runs_kubernetes_cores_modules_in_the_worker(cluster, tmp_path, worker_env):
    env = worker_env()
    name = "worker-connection-%d" % os.getpid()
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"},
                  "data": {"key": "value"}}
    tasks = [("kubernetes.core.k8s", {"definition": config_map}),
             ("kubernetes.core.k8s_info", {"kind": "ConfigMap", "namespace": "default", "name": name})]
    by_the_connection = [("kubernetes.core.k8s", "connection", "0"), ("kubernetes.core.k8s_info", "connection", "0")]
    # No worker yet: the connection starts one and waits for it, which runs the first module already.
    first = play(cluster, tasks, extra_env=env, connection="accelerators.gpu.local")
    assert not any(result.get("failed") for result in first) and first[0]["changed"], first
    assert [(request["module"], request["from"], request["rc"]) for request in served(tmp_path)] == \
        by_the_connection, first
    count = len(served(tmp_path))
    second = play(cluster, tasks, extra_env=env, connection="accelerators.gpu.local")
    assert [(request["module"], request["from"], request["rc"]) for request in served(tmp_path)[count:]] == \
        by_the_connection, second
    # The results of modules in their own processes: the object unchanged, the same object read.
    assert not second[0]["changed"] and findings(second[1]) == findings(first[1])
    assert second[1]["resources"][0]["data"] == {"key": "value"}
    assert [result[REPORT] for result in first + second] == [{"served_by": "worker", "handed_by": "connection"}] * 4
    cluster.core.delete_namespaced_config_map(name, "default")


def test_the_collections_connection_runs_a_module_with_its_task_environment_in_the_worker(
        cluster, tmp_path, worker_env):
    env = worker_env()
    # Ansible puts the task environment on the interpreter's command line, quoted: the worker gets each value as the
    # shell would have set it.
    value = "set, 'quoted' $HOME"
    result = run(cluster, "ansible.builtin.command", {"argv": ["printenv", "ACCELERATORS_GPU_TEST"]}, extra_env=env,
                 connection="accelerators.gpu.local", task_options={"environment": {"ACCELERATORS_GPU_TEST": value}})
    assert result["stdout"] == value, result
    assert result[REPORT] == {"served_by": "worker", "handed_by": "connection"}
    assert [request["module"] for request in served(tmp_path)] == ["ansible.builtin.command"]
