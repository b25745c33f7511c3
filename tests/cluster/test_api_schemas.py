"""On a cluster of its own with the demo fleet (`make demo`'s), which every node of the cluster is part of:

- The Molecule scenario (molecule/default): converge (the deploy playbook with its defaults: NFD through OLM, the DCGM
  exporter's ServiceMonitor and PrometheusRules), idempotence, verify, as a user runs it against the cluster
  KUBECONFIG names.
- The local control plane serves each OpenShift, OLM, monitoring and NFD API with the real API's schema (the upstream
  CRDs of OLM and the Prometheus Operator, fetch-crds.sh; schemas written from the real APIs,
  tools/localcluster/crds): on that deployed cluster, a misspelt field of anything the collection renders is refused,
  per API group, and every object of every custom kind (the collection's, the simulated operators') is valid as it is.
- The status playbook's table fits a terminal of 120 columns there, as `make demo` prints it.

One cluster and one first deploy of the demo fleet for all: they are most of the time any would take alone.
"""

import collections
import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import Cluster, start_cluster, wait_for
from gpu_fleet import RHCOS_418
from localcluster import fleet, mco, upgrade
from playbook import COLLECTIONS, ROOT, play
from strict_schema import custom_objects, key, misspelt, refused_field, rendered_objects, replace_problems
from test_deploy import playbook

DEMO_FLEET = Path(ROOT, "tools", "localcluster", "fleets", "demo.yml")
# The demo fleet has no MachineConfigPool: two CPU nodes in a pool bring the simulated machine-config operator's
# writes (the pool's status as its nodes move to a new build) and the cluster-version operator's (the upgrade).
POOL_FLEET = {"name": "pooled", "registry": [], "openshift": {"version": "4.18.24"},
              "nodes": [{"name": "infra", "count": 2, "role": "infra", "os": {"rhcos": RHCOS_418}}],
              "pools": [{"name": "infra", "reboot_seconds": 1, "nfd_lag_seconds": 0}]}
TARGET, TARGET_OCP = "9.6.20260401-0", "4.19.10"
# The kinds whose objects the demo cluster must hold, so that the check below cannot pass on an empty cluster.
DEMO_KINDS = {"ClusterVersion", "ImageStream", "Subscription", "OperatorGroup", "ClusterServiceVersion",
              "NodeFeatureDiscovery", "ServiceMonitor", "PrometheusRule", "MachineConfigPool", "MachineConfig"}
# OpenShift's restricted SCC (its required fields, the types of the others), for the API group the collection only
# refers to: its service accounts' roles use the privileged SCC.
SCC = {"apiVersion": "security.openshift.io/v1", "kind": "SecurityContextConstraints",
       "metadata": {"name": "t-restricted"}, "allowHostDirVolumePlugin": False, "allowHostIPC": False,
       "allowHostNetwork": False, "allowHostPID": False, "allowHostPorts": False, "allowPrivilegedContainer": False,
       "allowPrivilegeEscalation": True, "allowedCapabilities": None, "defaultAddCapabilities": None,
       "fsGroup": {"type": "MustRunAs"}, "groups": [], "priority": None, "readOnlyRootFilesystem": False,
       "requiredDropCapabilities": ["KILL", "MKNOD", "SETUID", "SETGID"], "runAsUser": {"type": "MustRunAsRange"},
       "seLinuxContext": {"type": "MustRunAs"}, "supplementalGroups": {"type": "RunAsAny"}, "users": [],
       "volumes": ["configMap", "downwardAPI", "emptyDir", "persistentVolumeClaim", "projected", "secret"]}
ICSP = {"apiVersion": "operator.openshift.io/v1alpha1", "kind": "ImageContentSourcePolicy",
        "metadata": {"name": "t-mirrors"}, "spec": {"repositoryDigestMirrors": [
            {"source": "quay.io/openshift-release-dev", "mirrors": ["mirror.example.test/ocp"]}]}}


# Every title of the status table's wide view, in its order.
STATUS_TITLES = ["NODE", "GPUS", "PRODUCT", "MEMORY MiB", "MIG", "RHCOS / KERNEL", "DRIVER DAEMONSET",
                 "DRIVER CONFIG", "DRIVER", "KERNEL MODULES", "DRIVER UPGRADE", "TOOLKIT", "DEVICE PLUGIN", "SHARING",
                 "MPS DAEMON", "DRA DRIVER", "DCGM EXPORTER", "GFD", "MIG MANAGER", "MIG CONFIG", "ALLOCATABLE",
                 "DRA DEVICES", "LAST VALIDATION", "HEALTH", "STACK"]
# Every field of a node's row in gpu_stack_status (the stack_status module's RETURN), whatever the table shows.
STATUS_FIELDS = {"node", "gpus", "product", "memory", "mig_capable", "gpu_info", "os", "driver_daemonset",
                 "driver_configuration", "driver", "driver_version", "kernel_module_type", "kernel_modules", "toolkit",
                 "device_plugin", "dra_driver", "stack", "dra_devices", "dra_allocated", "dcgm_exporter",
                 "gpu_feature_discovery", "mig_manager", "mps_control_daemon", "sharing", "sharing_replicas",
                 "driver_upgrade", "driver_upgrade_failure", "mig_config", "mig_config_state", "allocatable",
                 "validation", "validated_at", "without_driver_daemonset", "ready", "health", "gpu_faults"}


# Where Molecule would install the collection under test if HOME were the user's.
INSTALLED_IN_HOME = Path.home() / ".ansible" / "collections" / "ansible_collections" / "accelerators" / "gpu"


def molecule_test(kubeconfig, home):
    """`molecule test` of the default scenario against the cluster of kubeconfig; returns the process, and whether the
    collection was in the user's home before and after."""
    installed_before = INSTALLED_IN_HOME.exists()
    bin_dir = os.path.dirname(sys.executable)
    # A home of its own: Molecule's prerun installs the collection under test into ~/.ansible/collections, where it
    # would outlive the test and shadow the checkout for later ansible-lint runs.
    env = dict(os.environ, KUBECONFIG=str(kubeconfig), ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, HOME=str(home),
               PATH=bin_dir + os.pathsep + os.environ["PATH"], ANSIBLE_NOCOLOR="true", NO_COLOR="1")
    process = subprocess.run([os.path.join(bin_dir, "molecule"), "test"], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=1200, check=False)
    return process, installed_before, INSTALLED_IN_HOME.exists()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A cluster of its own with the demo fleet, the GPU stack deployed by the Molecule scenario's converge (the deploy
    playbook with its defaults), then by the deploy playbook again for its JSON report of what the roles rendered,
    then a pool of two more nodes; yields the cluster, the deploy's run, the pool's fleet and Molecule's process."""
    plane = start_cluster(tmp_path_factory, "openshift")
    try:
        cluster = Cluster(plane.kubeconfig, "openshift")
        fleet.Fleet(cluster.client, yaml.safe_load(DEMO_FLEET.read_text())).apply().wait_ready()
        molecule = molecule_test(plane.kubeconfig, tmp_path_factory.mktemp("molecule-home"))
        run = playbook(cluster, "deploy").succeeded()
        yield cluster, run, fleet.Fleet(cluster.client, POOL_FLEET).apply().wait_ready(), molecule
    finally:
        plane.down()


def test_molecule_default_scenario_converges_is_idempotent_and_verifies_on_the_demo_fleet(demo):
    molecule, installed_before, installed_after = demo[3]
    output = molecule.stdout + molecule.stderr
    assert molecule.returncode == 0, output[-6000:]
    # Each step of the sequence ran, none was skipped.
    for step in ("syntax", "converge", "idempotence", "verify"):
        assert "default ➜ %s: Completed" % step in output or "default > %s" % step in output, (step, output[-6000:])
    assert installed_after == installed_before, "the test installed the collection into " + str(Path.home())


def test_every_object_of_every_custom_kind_on_the_demo_cluster_is_valid_as_it_is(demo):
    cluster, _run, pooled, _molecule = demo
    pool = pooled.pools[0]["metadata"]["name"]
    config = upgrade.start_upgrade(pooled, pool, TARGET, TARGET_OCP)
    wait_for(lambda: (cluster.custom.get_cluster_custom_object(*mco.POOLS, pool).get("status") or {}).get(
        "configuration", {}).get("name") == config, timeout=120, message="pool %s on %s" % (pool, config))

    objects = custom_objects(cluster)
    kinds = collections.Counter(obj["kind"] for obj in objects)
    print("custom objects on the demo cluster: %s" % dict(sorted(kinds.items())))
    assert DEMO_KINDS <= set(kinds), DEMO_KINDS - set(kinds)
    assert replace_problems(cluster, objects) == {}
    # The check bites: a Subscription status as the simulated OLM wrote it before OLM's real schema (no lastUpdated).
    (subscription,) = [copy.deepcopy(obj) for obj in objects if obj["kind"] == "Subscription"]
    del subscription["status"]["lastUpdated"]
    assert "status.lastUpdated: Required value" in replace_problems(cluster, [subscription])[key(subscription)]
    assert cluster.simulator_failures(0) == []


def rendered(run, kind):
    """The first object of that kind the run's roles rendered, a copy."""
    return copy.deepcopy(next(obj for _task, obj in rendered_objects(run, built_in=False) if obj["kind"] == kind))


def stored(cluster, kind):
    """An object of that kind as the cluster holds it (written by the simulation), without its server-set metadata."""
    obj = next(obj for obj in custom_objects(cluster) if obj["kind"] == kind)
    obj["metadata"] = {k: obj["metadata"][k] for k in ("name", "namespace") if k in obj["metadata"]}
    obj.pop("status", None)
    return obj


# API group: (kind, where the object comes from, the field misspelt, its misspelling). "rendered": as the deploy
# playbook's roles rendered it; "stored": as the simulated cluster holds it (the collection only reads the kind).
MISSPELLINGS = {
    "operators.coreos.com": [("Subscription", "rendered", ["spec", "sourceNamespace"], "sourceNamespce"),
                             ("OperatorGroup", "rendered", ["spec", "targetNamespaces"], "targetNamespace")],
    "monitoring.coreos.com": [("ServiceMonitor", "rendered", ["spec", "endpoints", 0, "interval"], "intervall"),
                              ("PrometheusRule", "rendered", ["spec", "groups", 0, "rules", 0, "expr"], "expresion")],
    "nfd.openshift.io": [("NodeFeatureDiscovery", "rendered", ["spec", "operand", "imagePullPolicy"],
                          "imagePulPolicy")],
    "config.openshift.io": [("ClusterVersion", "stored", ["spec", "channel"], "chanel")],
    "image.openshift.io": [("ImageStream", "stored", ["spec", "tags", 0, "from"], "form")],
    "machineconfiguration.openshift.io": [("MachineConfigPool", "stored", ["spec", "paused"], "pasued"),
                                          ("MachineConfig", "stored", ["spec", "config"], "confg")],
    "operator.openshift.io": [("ImageContentSourcePolicy", ICSP, ["spec", "repositoryDigestMirrors"],
                               "repositoryDigestMirror")],
    "security.openshift.io": [("SecurityContextConstraints", SCC, ["allowHostNetwork"], "allowHostNetworks")],
}


@pytest.mark.parametrize("group", sorted(MISSPELLINGS))
def test_a_misspelt_field_is_refused_in_each_api_group(demo, group):
    cluster, run, _pooled, _molecule = demo
    for kind, source, path, wrong in MISSPELLINGS[group]:
        if source == "rendered":
            obj = rendered(run, kind)
        elif source == "stored":
            obj = stored(cluster, kind)
        else:
            obj = copy.deepcopy(source)
        assert obj["apiVersion"].split("/")[0] == group
        refused_field(cluster, obj, path, wrong)


def test_the_collections_writes_are_strict_a_misspelt_field_fails_the_task_naming_it(demo):
    """The operand module applies with fieldValidation=Strict (here in check mode: a dry run); kubernetes.core.k8s
    has no such option, but the API server warns of the field it drops, and the task reports the warning."""
    cluster, run, pooled, _molecule = demo
    monitor, field = misspelt(rendered(run, "ServiceMonitor"), ["spec", "endpoints", 0, "interval"], "intervall")
    (result,) = play(cluster, [("accelerators.gpu.operand", {"definitions": [monitor]})], check=True)
    # Server-side apply's wording: ".spec.endpoints[0].intervall: field not declared in schema".
    assert result.get("failed") and ".%s: field not declared in schema" % field in result["msg"], result
    assert "ServiceMonitor" in result["msg"] and monitor["metadata"]["name"] in result["msg"]
    # The API server answers it with a 500, which is the answer, not a fault to retry: the task failed at once (it
    # used to retry for two minutes: "tried 19 times in 119.7 s").
    assert "tried" not in result["msg"] and not result.get("api_faults"), result

    pool = pooled.pools[0]["metadata"]["name"]
    (patched,) = play(cluster, [("kubernetes.core.k8s", {
        "api_version": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool", "name": pool,
        "state": "patched", "merge_type": "merge", "definition": {"spec": {"pasued": True}}})], check=True)
    assert any('unknown field "spec.pasued"' in warning for warning in patched.get("warnings") or []), patched


def status_table(run):
    (table,) = [result["msg"] for name, result in run.results if name == "Print the status table"]
    return table


def test_status_fits_a_terminal_of_120_columns_and_wide_shows_every_column_with_the_same_data(demo):
    """ansible-playbook accelerators.gpu.status as make demo runs it, with ansible-core's default output: every line
    it prints fits 120 columns; with status_columns=wide the table has every column, and gpu_stack_status is the same
    in both, every field of every row."""
    cluster, _run, _pooled, _molecule = demo
    env = dict(cluster.env, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="true")
    printed = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                              "accelerators.gpu.status"], env=env, capture_output=True, text=True, timeout=300,
                             check=False)
    assert printed.returncode == 0 and "WARNING" not in printed.stderr, printed.stdout[-3000:] + printed.stderr[-3000:]
    print(printed.stdout)
    lines = printed.stdout.splitlines()
    header = [line for line in lines if line.lstrip().startswith('"NODE ')]
    assert [line.split() for line in header] == [['"NODE', "GPUS", "PRODUCT", "DRIVER", 'STACK",']], lines
    assert [line for line in lines if len(line) > 120] == []

    default = playbook(cluster, "status").succeeded()
    wide = playbook(cluster, "status", {"status_columns": "wide"}).succeeded()
    table, wide_table = status_table(default), status_table(wide)
    # The default view's lines as printed above, ready on every GPU node of the demo fleet.
    assert ['        "%s",' % line for line in table[:-1]] == lines[lines.index(header[0]):][:len(table) - 1]
    status = default.report["global_custom_stats"]["gpu_stack_status"]
    assert status["ready"] is True and len(status["nodes"]) == 5
    assert table[1:len(status["nodes"]) + 1] == [line for line in table if line.endswith("  ready")]
    # Each title between two columns' gaps, in the order of the list.
    titles = "  %s  " % wide_table[0]
    assert [title for title in STATUS_TITLES if "  %s  " % title not in titles] == []
    assert sorted(STATUS_TITLES, key=lambda title: titles.index("  %s  " % title)) == STATUS_TITLES
    assert len(wide_table) == len(table) and max(len(line) for line in wide_table) > 120
    assert wide.report["global_custom_stats"]["gpu_stack_status"] == status
    assert [sorted(set(row) ^ STATUS_FIELDS) for row in status["nodes"]] == [[]] * 5
