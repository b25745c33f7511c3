"""Running the collection's modules through real `ansible-playbook` processes against the test cluster."""

import json
import os
import re
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, ".build", "collections")
# The api_retry_seconds of a cluster whose API server is down, in the tests: its modules fail after 5 s, not 120 s.
UNREACHABLE_RETRY_SECONDS = 5


def assert_tried_within_budget(message):
    """A module's failure on an API server that refused every connection, with UNREACHABLE_RETRY_SECONDS: it tried
    again, and stopped within that budget (backoff 0.5, 1, 2, 4 s leaves room for 4 tries at most; slow tries only
    make fewer; the default 120 s makes 19)."""
    tries = re.search(r"\(tried (\d+) times in [0-9.]+ s\)", message)
    assert tries and 2 <= int(tries.group(1)) <= 4, message


class PlaybookRun(list):
    """The results of a playbook's tasks, in order, with the process's output and wall time."""

    def __init__(self, results, process, seconds):
        super().__init__(results)
        self.process = process
        self.seconds = seconds


def play(cluster, tasks, check=False, diff=False, extra_env=None, timeout=300, task_options=None,
         connection="local", verbose=False):
    """Run tasks [(module, args)] in one play on localhost; returns their results (a failed task ends the play).
    task_options: keywords every task gets (async, poll...); connection: the connection plugin of the play; verbose:
    with -v, whose messages go to the process's stderr.

    Modules run with this interpreter (the project's virtual environment, which has the kubernetes client) and
    reach the cluster through K8S_AUTH_KUBECONFIG, as any kubernetes.core module would.
    """
    if not os.path.isdir(os.path.join(COLLECTIONS, "ansible_collections", "accelerators", "gpu")):
        raise RuntimeError("%s has no accelerators.gpu: run `make collection` first" % COLLECTIONS)
    playbook = [{"hosts": "localhost", "gather_facts": False,
                 "tasks": [dict(task_options or {}, name="task %d: %s" % (index, module), **{module: args})
                           for index, (module, args) in enumerate(tasks)]}]
    env = dict(cluster.env, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_NOCOLOR="true", ANSIBLE_VERBOSE_TO_STDERR="true")
    env.update(extra_env or {})
    with tempfile.TemporaryDirectory(prefix="accelerators-gpu-play-") as workdir:
        path = os.path.join(workdir, "play.yml")
        with open(path, "w") as handle:
            yaml.safe_dump(playbook, handle)
        command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                   "-c", connection, path] + (["--check"] if check else []) + (["--diff"] if diff else []) + (
                       ["-v"] if verbose else [])
        started = time.monotonic()
        process = subprocess.run(command, env=env, cwd=workdir, capture_output=True, text=True, timeout=timeout,
                                 check=False)
        seconds = time.monotonic() - started
    try:
        report = json.loads(process.stdout)
    except ValueError:
        raise AssertionError("ansible-playbook gave no JSON report (rc=%d)\nstdout: %s\nstderr: %s"
                             % (process.returncode, process.stdout[-3000:], process.stderr[-3000:]))
    results = [task["hosts"]["localhost"] for task in report["plays"][0]["tasks"]]
    return PlaybookRun(results, process, seconds)


_WARM = set()


def warm_up(cluster):
    """Run one module against the cluster once per session, so that kubernetes.core's discovery cache (in the temp
    directory, per API server address) exists and exact api_requests counts hold no discovery requests."""
    if cluster.kubeconfig not in _WARM:
        run(cluster, "accelerators.gpu.nfd_labels", {"label_selector": "accelerators.gpu/warm-up=none"})
        _WARM.add(cluster.kubeconfig)


def run(cluster, module, args, **options):
    """Run one module task; returns its result (a dict, with `failed` when it failed)."""
    return play(cluster, [(module, args)], **options)[0]


# What a run cost and how long it took rather than what it found: the API requests and bytes, the arguments as
# invoked, and the timings of the modules' results (nfd_labels' waited_seconds, operand and operand_status' elapsed,
# driver_upgrade's seconds).
RUN_FIELDS = ("api_requests", "api_response_bytes", "invocation", "waited_seconds", "elapsed", "seconds")


def findings(result):
    """A module's result without RUN_FIELDS: two runs that found the same cluster compare equal, however fast the API
    server answered (a timing compared made CI fail: waited_seconds 0.0 in one run, 0.1 in the other)."""
    return {key: value for key, value in result.items() if key not in RUN_FIELDS}
