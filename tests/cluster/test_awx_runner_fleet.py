"""A fleet of two clusters run the way AWX runs a job (docs/docsite/rst/awx.rst, "A fleet of clusters"): ansible-runner
with a private data directory whose inventory/ names the clusters as hosts of the group gpu_clusters, each with its API
host and its CA as host variables, the CA a file of the project: AWX (and ansible-runner) put the project and the
inventory (the script of an inventory AWX synced from the project) in the job's private data directory, so
"{{ inventory_dir | dirname }}/project" is the project (playbook_dir is the collection's playbooks/ in an imported
collection playbook, and a relative path does not resolve against the project), and whose group_vars take each cluster's token
from gpu_fleet_tokens, the one extra variable the docs' custom credential type injects: a YAML string mapping cluster
to bearer token, in env/extravars. Nothing in env/envvars or the process environment names a cluster. The status
playbook reads both clusters; no token appears in the runner's stdout or in any of its artifacts."""

import base64
import json
import os
import subprocess
import sys

import yaml

from gpu_fleet import FLEET_LABEL, REGISTRY, RHCOS_416
from playbook import COLLECTIONS
from rbac_tokens import limited_token

GPU = {"product": "NVIDIA-A100-SXM4-80GB", "count": 2}
# All the status playbook reads: nodes, the stack's pods, DaemonSets and validation Jobs. Read-only.
STATUS_RULES = [
    {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list"]},
    {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get", "list"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list"]},
]
# The inventory's group variables, as docs/docsite/rst/awx.rst shows them: a string as AWX injects it, or a mapping.
GROUP_VARS = {"gpu_cluster_api_key": "{{ (gpu_fleet_tokens if gpu_fleet_tokens is mapping else gpu_fleet_tokens"
                                     " | from_yaml)[inventory_hostname] }}"}


def fleet_spec(name, os_spec, openshift):
    spec = {"name": "%s-%s" % (name, os.urandom(3).hex()), "registry": REGISTRY,
            "nodes": [{"name": "gpu", "gpu": GPU, "os": os_spec}]}
    if openshift:
        spec["openshift"] = {"version": "4.18.22"}
    return spec


def server_and_ca(cluster):
    config = yaml.safe_load(open(cluster.kubeconfig))["clusters"][0]["cluster"]
    return config["server"], base64.b64decode(config["certificate-authority-data"])


def run_fleet_job(workdir, clusters, tokens, namespace):
    """ansible-runner run of accelerators.gpu.status, imported by the project's job.yml, over the inventory of clusters
    {name: (cluster, node selector)}; tokens {name: token} as the custom credential injects them. Returns (status, rc,
    events, stdout, {artifact path: text})."""
    for sub in ("project/ca", "inventory/group_vars", "env"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    (workdir / "project" / "job.yml").write_text(yaml.safe_dump(
        [{"name": "GPU job", "ansible.builtin.import_playbook": "accelerators.gpu.status"}]))
    hosts = {}
    for name, (cluster, selector) in clusters.items():
        server, ca = server_and_ca(cluster)
        (workdir / "project" / "ca" / ("%s.crt" % name)).write_bytes(ca)
        hosts[name] = {"gpu_cluster_api_host": server, "gpu_cluster_ca_cert": "{{ inventory_dir | dirname }}/project/ca/%s.crt" % name,
                       "driver_node_selector": selector}
    (workdir / "inventory" / "hosts.yml").write_text(yaml.safe_dump({"gpu_clusters": {
        "hosts": hosts, "vars": {"ansible_python_interpreter": sys.executable, "common_namespace": namespace}}},
        sort_keys=False))
    (workdir / "inventory" / "group_vars" / "gpu_clusters.yml").write_text(yaml.safe_dump(GROUP_VARS))
    # The custom credential type's injector: one extra variable, the secret field's text as it was typed.
    (workdir / "env" / "extravars").write_text(yaml.safe_dump({"gpu_fleet_tokens": yaml.safe_dump(tokens)}))
    (workdir / "env" / "envvars").write_text(yaml.safe_dump({"ANSIBLE_FORCE_COLOR": "false"}))
    env = {"PATH": "%s:/usr/bin:/bin" % os.path.dirname(sys.executable), "HOME": str(workdir),
           "ANSIBLE_COLLECTIONS_PATH": COLLECTIONS, "LANG": "C.UTF-8"}
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-runner"), "run", str(workdir),
                    "--playbook", "job.yml", "--ident", "job"],
                   env=env, capture_output=True, text=True, timeout=600, check=False)
    artifacts = workdir / "artifacts" / "job"
    events = [json.loads(path.read_text()) for path in sorted((artifacts / "job_events").glob("*.json"),
                                                              key=lambda path: int(path.name.split("-")[0]))]
    files = {str(path.relative_to(artifacts)): path.read_text(errors="replace")
             for path in artifacts.rglob("*") if path.is_file()}
    return ((artifacts / "status").read_text(), int((artifacts / "rc").read_text()), events,
            (artifacts / "stdout").read_text(), files)


def test_status_of_two_clusters_with_tokens_from_one_credential(cluster, kubernetes_cluster, namespace, make_fleet,
                                                                tmp_path):
    ocp = fleet_spec("ar-ocp", {"rhcos": RHCOS_416}, openshift=True)
    k8s = fleet_spec("ar-k8s", {"ubuntu": "22.04"}, openshift=False)
    [ocp_node] = make_fleet(ocp).node_names
    [k8s_node] = make_fleet(k8s, on=kubernetes_cluster).node_names
    # The second cluster's service account needs a namespace there.
    kubernetes_cluster.core.create_namespace({"metadata": {"name": namespace}})
    clusters = {"ocp-a": (cluster, {FLEET_LABEL: ocp["name"]}), "k8s-b": (kubernetes_cluster, {FLEET_LABEL: k8s["name"]})}
    try:
        with limited_token(cluster, namespace, "gpu-status", STATUS_RULES) as ocp_token, \
                limited_token(kubernetes_cluster, namespace, "gpu-status", STATUS_RULES) as k8s_token:
            tokens = {"ocp-a": ocp_token, "k8s-b": k8s_token}
            status, rc, events, stdout, artifacts = run_fleet_job(tmp_path, clusters, tokens, namespace)
    finally:
        kubernetes_cluster.core.delete_namespace(namespace)
    assert (status, rc) == ("successful", 0), stdout[-3000:]
    assert not [event for event in events if event["event"] == "runner_on_failed"]

    # Both clusters were read, each with its own token: its own GPU node, as the fleet's table and stats show.
    [stats] = [event["event_data"] for event in events if event["event"] == "playbook_on_stats"]
    assert stats["failures"] == {} and stats["dark"] == {} and sorted(stats["ok"]) == ["k8s-b", "ocp-a"]
    fleet_status = stats["artifact_data"]["gpu_fleet_status"]
    assert {name: (summary["gpu_nodes"], summary["error"]) for name, summary in fleet_status.items()} == {
        "ocp-a": (1, None), "k8s-b": (1, None)}
    rows = [line.split()[:2] for line in stdout.splitlines() if line.strip().startswith(('"ocp-a ', '"k8s-b '))]
    assert [[cell.strip('"') for cell in row] for row in rows] == [["ocp-a", ocp_node], ["k8s-b", k8s_node]], stdout

    # No token in the output nor in any artifact (job events, command, status...).
    assert not [name for name, token in tokens.items() if token in stdout]
    assert not [(path, name) for path, text in artifacts.items() for name, token in tokens.items() if token in text]
    assert "job_events" in {path.split("/")[0] for path in artifacts}
