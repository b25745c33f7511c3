"""The Molecule scenario (molecule/default) on the demo fleet: converge, idempotence, verify.

The scenario deploys to every node of the cluster KUBECONFIG names, as it would for a user, so it gets a cluster of
its own instead of the session's, which holds other tests' fleets.
"""

import os
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import start_cluster
from localcluster import api, fleet
from playbook import COLLECTIONS, ROOT

DEMO_FLEET = Path(ROOT, "tools", "localcluster", "fleets", "demo.yml")


def test_molecule_default_scenario_converges_is_idempotent_and_verifies_on_the_demo_fleet(tmp_path_factory):
    installed_in_home = Path.home() / ".ansible" / "collections" / "ansible_collections" / "accelerators" / "gpu"
    installed_before = installed_in_home.exists()
    plane = start_cluster(tmp_path_factory, "openshift")
    try:
        spec = yaml.safe_load(DEMO_FLEET.read_text())
        fleet.Fleet(api.client_from_kubeconfig(plane.kubeconfig), spec).apply().wait_ready()
        bin_dir = os.path.dirname(sys.executable)
        # A home of its own: Molecule's prerun installs the collection under test into ~/.ansible/collections,
        # where it would outlive the test and shadow the checkout for later ansible-lint runs.
        home = tmp_path_factory.mktemp("molecule-home")
        env = dict(os.environ, KUBECONFIG=str(plane.kubeconfig), ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, HOME=str(home),
                   PATH=bin_dir + os.pathsep + os.environ["PATH"], ANSIBLE_NOCOLOR="true", NO_COLOR="1")
        process = subprocess.run([os.path.join(bin_dir, "molecule"), "test"], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=1200, check=False)
        output = process.stdout + process.stderr
        assert process.returncode == 0, output[-6000:]
        # Each step of the sequence ran, none was skipped.
        for step in ("syntax", "converge", "idempotence", "verify"):
            assert "default ➜ %s: Completed" % step in output or "default > %s" % step in output, (step, output[-6000:])
        assert installed_in_home.exists() == installed_before, "the test installed the collection into " + str(Path.home())
    finally:
        plane.down()
