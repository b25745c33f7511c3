"""The collection run the way AWX runs it: ansible-runner with a private data directory whose env/envvars hold only
the Kubernetes credential's K8S_AUTH_HOST, K8S_AUTH_API_KEY and K8S_AUTH_SSL_CA_CERT (no kubeconfig anywhere), and
a token of a user whose RBAC allows only what the job needs."""

import base64
import json
import os
import subprocess
import sys

import yaml

from gpu_fleet import RHCOS_416, fleet, selector
from playbook import COLLECTIONS
from rbac_tokens import DEPLOY_RULES, limited_token
from test_deploy import fleet_variables, gpu_fleet

GPU_PRESENT = "nvidia.com/gpu.present"


def credential_env(cluster, token, workdir):
    """What AWX's Kubernetes bearer-token credential injects: the CA goes to a file, its path to the env."""
    config = yaml.safe_load(open(cluster.kubeconfig))["clusters"][0]["cluster"]
    ca_file = workdir / "ca.crt"
    ca_file.write_bytes(base64.b64decode(config["certificate-authority-data"]))
    return {"K8S_AUTH_HOST": config["server"], "K8S_AUTH_API_KEY": token, "K8S_AUTH_SSL_CA_CERT": str(ca_file)}


def run_job(workdir, credentials, tasks=None, playbook=None, extravars=None, timeout=300):
    """ansible-runner run of one play of tasks on localhost, or of a collection playbook as a job template's
    project imports it, with the template's extra variables; returns (status, rc, events, stdout) from its
    artifacts."""
    for sub in ("project", "inventory", "env"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    (workdir / "project" / "job.yml").write_text(yaml.safe_dump(
        [{"name": "GPU job", "ansible.builtin.import_playbook": playbook}] if playbook else
        [{"name": "GPU job", "hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    (workdir / "inventory" / "hosts").write_text(
        "localhost ansible_connection=local ansible_python_interpreter=%s\n" % sys.executable)
    (workdir / "env" / "envvars").write_text(yaml.safe_dump(credentials))
    (workdir / "env" / "extravars").write_text(yaml.safe_dump(extravars or {}))
    # The process environment has no cluster access of its own, as in an execution environment.
    env = {"PATH": "%s:/usr/bin:/bin" % os.path.dirname(sys.executable), "HOME": str(workdir),
           "ANSIBLE_COLLECTIONS_PATH": COLLECTIONS, "LANG": "C.UTF-8"}
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-runner"), "run", str(workdir),
                    "--playbook", "job.yml", "--ident", "job"],
                   env=env, capture_output=True, text=True, timeout=timeout, check=False)
    artifacts = workdir / "artifacts" / "job"
    events = [json.loads(path.read_text()) for path in sorted((artifacts / "job_events").glob("*.json"),
                                                              key=lambda path: int(path.name.split("-")[0]))]
    return ((artifacts / "status").read_text(), int((artifacts / "rc").read_text()), events,
            (artifacts / "stdout").read_text())


def task_results(events, outcome):
    return [event["event_data"] for event in events if event["event"] == outcome]


def test_least_privilege_token_from_the_environment_only(cluster, namespace, make_fleet, tmp_path):
    spec = fleet([{"name": "gpu", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}}])
    [node] = make_fleet(spec).node_names
    # nfd_labels with manage_labels reads and patches nodes, and needs nothing else.
    rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}]
    with limited_token(cluster, namespace, "gpu-automation", rules) as token:
        status, rc, events, stdout = run_job(tmp_path, credential_env(cluster, token, tmp_path), [
            {"name": "Label the GPU nodes", "accelerators.gpu.nfd_labels": {
                "label_selector": selector(spec), "manage_labels": True}}])
    assert (status, rc) == ("successful", 0), stdout[-3000:]
    [labelled] = task_results(events, "runner_on_ok")
    assert labelled["task_action"] == "accelerators.gpu.nfd_labels"
    assert labelled["res"]["changed"] is True and labelled["res"]["gpu_nodes"] == [node]
    assert [event["event"] for event in events][-1] == "playbook_on_stats"
    assert cluster.core.read_node(node).metadata.labels[GPU_PRESENT] == "true"
    # The token never reaches the job's output or events.
    assert token not in stdout and not [event for event in events if token in json.dumps(event)]


def test_token_without_list_nodes_fails_naming_the_permission(cluster, namespace, make_fleet, tmp_path):
    spec = fleet([{"name": "gpu", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}}])
    make_fleet(spec)
    rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    with limited_token(cluster, namespace, "no-list", rules) as token:
        status, rc, events, stdout = run_job(tmp_path, credential_env(cluster, token, tmp_path), [
            {"name": "Read the GPU nodes", "accelerators.gpu.nfd_labels": {"label_selector": selector(spec)}}])
    assert (status, rc) == ("failed", 2), stdout[-3000:]
    [failed] = task_results(events, "runner_on_failed")
    message = failed["res"]["msg"]
    assert 'User "system:serviceaccount:%s:no-list" cannot list resource "nodes"' % namespace in message
    assert failed["res"]["status"] == 403


def test_deploy_runs_with_the_least_privilege_token_of_the_docs(cluster, namespace, make_fleet, tmp_path):
    spec = gpu_fleet({"name": "gpu", "gpu": {"count": 4}, "os": {"rhcos": RHCOS_416}})
    [node] = make_fleet(spec).node_names
    with limited_token(cluster, namespace, "gpu-deployer", DEPLOY_RULES) as token:
        status, rc, events, stdout = run_job(tmp_path, credential_env(cluster, token, tmp_path),
                                             playbook="accelerators.gpu.deploy",
                                             extravars=fleet_variables(namespace, spec), timeout=1200)
    assert (status, rc) == ("successful", 0), stdout[-3000:]
    [stats] = [event["event_data"] for event in events if event["event"] == "playbook_on_stats"]
    assert stats["failures"] == {} and stats["dark"] == {} and stats["ok"]["localhost"] > 0
    assert not task_results(events, "runner_on_failed")
    assert cluster.core.read_node(node).status.allocatable["nvidia.com/gpu"] == "4"
    assert token not in stdout
