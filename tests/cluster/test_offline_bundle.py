"""The offline bundle (tools/bundle/make-bundle.sh) installs and runs with the network forbidden.

Install and ansible-doc run in a network namespace of their own (`unshare --net`: no interface but a loopback
that is down), so neither pip nor ansible-galaxy can reach an index. The check-mode playbook then runs from the
installed virtual environment and collections only (the checkout's collection is off every path), against the
local control plane on loopback. Slow (about 40 s, mostly pip installing the wheels): marked bundle.
"""

import os
import subprocess
import tarfile

import pytest
import yaml

from gpu_fleet import RHCOS_416, fleet, selector

pytestmark = pytest.mark.bundle


def run(command, env=None, timeout=600):
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, "%s failed (rc=%d)\nstdout: %s\nstderr: %s" % (
        command[:3], result.returncode, result.stdout[-3000:], result.stderr[-3000:])
    return result.stdout


def offline(command, env):
    return run(["unshare", "--net"] + command, env=env)


@pytest.fixture
def clean_env():
    """The environment without anything that points at the checkout's collection, the project's venv or its shared
    bytecode cache (where the site's venv, a new path each run, would leave 50 MB a run)."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "ANSIBLE_COLLECTIONS_PATH", "VIRTUAL_ENV", "PIP_FIND_LINKS",
                          "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    return env


def test_bundle_installs_offline_and_runs(cluster, make_fleet, tmp_path, clean_env, offline_bundle):
    with tarfile.open(offline_bundle) as archive:
        archive.extractall(tmp_path / "unpacked")
    [bundle] = (tmp_path / "unpacked").iterdir()
    assert sorted(path.name for path in (bundle / "collections").iterdir()) == [
        "accelerators-gpu-0.1.0.tar.gz", "kubernetes-core-6.2.0.tar.gz"]

    target = tmp_path / "site"
    exports = offline(["bash", str(bundle / "install.sh"), str(target)], clean_env)
    assert exports.strip() == "export PATH=%s/venv/bin:$PATH ANSIBLE_COLLECTIONS_PATH=%s/collections" % (target, target)
    env = dict(clean_env, PATH="%s/venv/bin:%s" % (target, clean_env["PATH"]),
               ANSIBLE_COLLECTIONS_PATH=str(target / "collections"))
    doc = offline(["ansible-doc", "accelerators.gpu.nfd_labels"], env)
    assert str(target / "collections" / "ansible_collections" / "accelerators" / "gpu") in doc

    spec = fleet([{"name": "gpu", "gpu": {"count": 8}, "os": {"rhcos": RHCOS_416}}])
    [node] = make_fleet(spec).node_names
    playbook = tmp_path / "check.yml"
    # The bundle has no JSON output callback (ansible.posix): the play asserts on the result itself.
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Label the GPU nodes", "register": "nfd", "accelerators.gpu.nfd_labels": {
            "label_selector": selector(spec), "manage_labels": True}},
        {"name": "Check mode says what it would label", "ansible.builtin.assert": {"that": [
            "nfd is changed", "nfd.label_changes['%s']['nvidia.com/gpu.present'] == 'true'" % node]}}]}]))
    output = run(["ansible-playbook", "-i", "localhost,", "-c", "local", "--check", str(playbook)],
                 dict(env, K8S_AUTH_KUBECONFIG=cluster.kubeconfig, ANSIBLE_LOCALHOST_WARNING="false",
                      ANSIBLE_PYTHON_INTERPRETER=str(target / "venv" / "bin" / "python"), ANSIBLE_NOCOLOR="true"))
    assert "localhost                  : ok=2    changed=1 " in output
    assert "nvidia.com/gpu.present" not in (cluster.core.read_node(node).metadata.labels or {})
