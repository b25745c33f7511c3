"""execution-environment.yml and meta/execution-environment.yml, checked without a container build.

`ansible-builder create` validates the definition and writes the build context; the context's galaxy stage is then
played here as the Containerfile runs it (ansible-galaxy install of its requirements.yml, in a network namespace
with no network), and ansible-builder's own introspection script lists what the EE's builder stage would install.
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.bundle

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def pins():
    """{package: version} of requirements.txt."""
    found = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if match:
            found[match.group(1).lower()] = match.group(2)
    return found


def test_definition_pins_and_collections_match_the_project():
    definition = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
    assert definition["version"] == 3
    dependencies = definition["dependencies"]
    assert dependencies["ansible_core"]["package_pip"] == "ansible-core==" + pins()["ansible-core"]
    assert dependencies["ansible_runner"]["package_pip"] == "ansible-runner==" + pins()["ansible-runner"]
    galaxy_version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    assert dependencies["galaxy"]["collections"][0] == {
        "name": "collections/accelerators-gpu-%s.tar.gz" % galaxy_version, "type": "file"}
    meta = yaml.safe_load((ROOT / "meta" / "execution-environment.yml").read_text())
    assert meta == {"version": 1, "dependencies": {"python": "meta/ee-requirements.txt",
                                                   "system": "meta/ee-bindep.txt"}}


def test_builder_creates_the_context_and_its_galaxy_stage_installs_offline(offline_bundle, tmp_path):
    # The definition finds the bundle at .build/bundle/ beside itself: put a copy beside the built bundle.
    build_root = offline_bundle.parents[2]
    shutil.copy(ROOT / "execution-environment.yml", build_root)
    context = tmp_path / "context"
    created = subprocess.run([str(BIN / "ansible-builder"), "create", "--file", "execution-environment.yml",
                              "--context", str(context)], cwd=build_root, capture_output=True, text=True, check=False)
    assert created.returncode == 0, created.stdout + created.stderr
    assert "No matches" not in created.stdout + created.stderr
    containerfile = (context / "Dockerfile").read_text()
    assert 'ARG ANSIBLE_INSTALL_REFS="ansible-core==%s ansible-runner==%s"' % (
        pins()["ansible-core"], pins()["ansible-runner"]) in containerfile
    assert 'ARG ANSIBLE_GALAXY_CLI_COLLECTION_OPTS="--offline"' in containerfile

    # The galaxy stage: `ansible-galaxy collection install $ANSIBLE_GALAXY_CLI_COLLECTION_OPTS -r requirements.yml`
    # in /build (the context's _build). Only the target path counts as installed, as in a fresh base image.
    collections = tmp_path / "collections"
    env = {"PATH": "%s:/usr/bin:/bin" % BIN, "ANSIBLE_COLLECTIONS_PATH": str(collections),
           "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false", "ANSIBLE_GALAXY_DISABLE_GPG_VERIFY": "1", "HOME": str(tmp_path)}
    galaxy = subprocess.run(["unshare", "--net", str(BIN / "ansible-galaxy"), "collection", "install", "--offline",
                             "-r", "requirements.yml", "--collections-path", str(collections)],
                            cwd=context / "_build", env=env, capture_output=True, text=True, check=False)
    assert galaxy.returncode == 0, galaxy.stdout + galaxy.stderr
    assert "accelerators.gpu:0.1.0 was installed successfully" in galaxy.stdout

    # The builder stage: introspect.py lists the collections' Python and system requirements.
    introspected = subprocess.run([sys.executable, str(context / "_build" / "scripts" / "introspect.py"), "introspect",
                                   str(collections)], capture_output=True, text=True, check=True)
    requirements = yaml.safe_load(introspected.stdout)
    assert "kubernetes>=24.2.0,<38  # from collection accelerators.gpu" in requirements["python"]
    assert "jsonpatch  # from collection kubernetes.core" in requirements["python"]
    assert "openshift-clients [platform:rhel-8 platform:rhel-9]  # from collection accelerators.gpu" in \
        requirements["system"]
    # Nothing from the development requirements.txt (pytest, ansible-lint, ...) reaches the EE.
    development = ("pytest", "ansible-lint", "molecule", "bcrypt", "ansible-builder")
    assert not [line for line in requirements["python"] if line.startswith(development)]
