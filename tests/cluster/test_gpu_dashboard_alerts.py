"""The DCGM exporter role's console dashboard, alerts, recording rules and OpenShift monitoring RBAC: the manifests it
renders (no cluster), their life on the OpenShift flavour (applied by the deploy, unchanged by a re-run and by check
mode, the rules removed when switched off, all removed by the uninstall and nothing else with them), the exporter's
metrics list, and their absence on plain Kubernetes. The same deploy, with CDI on, checks the container toolkit's
RuntimeClasses (three with CDI, only the operands' without, none after the uninstall) and GPU feature discovery
(test_gpu_feature_discovery.check_gfd_*); the Kubernetes one checks the single driver DaemonSet, the validations and
the upgrade guard's refusal (test_deploy's Kubernetes deploy). Each deploy and uninstall costs CI a minute: checks of one
cluster state share one."""

import json
import os
import re
import subprocess
import sys
import tempfile

import pytest
import yaml
from ansible_collections.accelerators.gpu.plugins.module_utils.remediation import state as remediation
from kubernetes.client.rest import ApiException

from gpu_fleet import COMMON_DEFAULTS
from playbook import COLLECTIONS, ROOT
from test_deploy import fleet_variables, gpu_fleet, jobs_by_check, node_labels, playbook
from test_gpu_feature_discovery import GROUPS as GFD_GROUPS
from test_gpu_feature_discovery import (check_gfd_deployed, check_gfd_status, check_gfd_switched_off,
                                        check_gfd_uninstalled, fleet_groups)

ROLE = os.path.join(ROOT, "roles", "dcgm_exporter")
DASHBOARD = ("openshift-config-managed", "nvidia-dcgm-exporter-dashboard")
DASHBOARD_KEY = "dcgm-exporter-dashboard.json"
RULE = "nvidia-gpu-alerts"
RECORDING_RULE = "nvidia-dcgm-exporter"
RECORDS = {"accelerator_gpu_utilization", "accelerator_memory_used_bytes", "accelerator_memory_total_bytes",
           "accelerator_power_usage_watts", "accelerator_temperature_celsius", "accelerator_sm_clock_hertz",
           "accelerator_memory_clock_hertz"}
# The exporter's metrics list by default, as the GPU Operator's (in the image), and the fields of it the rules and the
# dashboard read (dcgm-exporter's etc/dcp-metrics-included.csv).
COLLECTORS = "/etc/dcgm-exporter/dcp-metrics-included.csv"
PROFILING_LIST_FIELDS = {"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_GPU_TEMP",
                         "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS",
                         "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED"}
RUNTIME_CLASSES = ("nvidia", "nvidia-cdi", "nvidia-legacy")
ALERTS = ["GPUOperatorNodeDeploymentDriverFailed", "GPUOperatorNodeDeploymentToolkitFailed",
          "GPUOperatorNodeDeploymentFailed", "GPUOperatorNodeDeploymentCudaFailed", "GPUXidError",
          "GPUTemperatureHigh", "GPUNodeGPUsUnavailable", "GPUNodeMetricsMissing", "GPUNodeQuarantinedForRMA",
          "GPURemediationFailed"]
# What the dashboard must show (the metrics of the DCGM exporter's default list it draws on).
DASHBOARD_METRICS = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_TEMP",
                     "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_XID_ERRORS"}
# Every series the expressions may read: the DCGM exporter's (its metrics list) and kube-state-metrics'.
NODE_SERIES = {"kube_node_status_capacity", "kube_node_status_allocatable", "kube_node_labels", "kube_node_spec_taint"}
KNOWN_METRICS = PROFILING_LIST_FIELDS | NODE_SERIES | {"kube_pod_info", "kube_pod_status_ready",
                                                       "kube_pod_status_phase"}
# The remediation's state label as kube-state-metrics' kube_node_labels names it (every character not a letter, digit
# or _ made _), and its quarantine taint for RMA as kube_node_spec_taint has it.
STATE_SERIES_LABEL = "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", remediation.STATE_LABEL)
RMA_TAINT = 'kube_node_spec_taint{key="%s", value="%s"}' % (
    remediation.TAINT_KEY, remediation.quarantine_taint("rma")["value"])
RUNBOOK = os.path.join(ROOT, "docs", "docsite", "rst", "failing-gpus.rst")
METRIC = re.compile(r"\b(DCGM_FI_[A-Z0-9_]+|kube_[a-z_]+)\b")
PAIRS = {")": "(", "}": "{", "]": "["}


def promql_problems(expr):
    """What is visibly wrong with a PromQL expression: empty, Jinja left in it, unbalanced brackets or quotes,
    unknown metrics. Not a parser: it catches what a template can break."""
    problems = []
    if not expr or not expr.strip():
        return ["empty"]
    if "{{" in expr or "{%" in expr:
        problems.append("Jinja left in it")
    stack, quoted = [], False
    for char in expr:
        if char == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif char in "({[":
            stack.append(char)
        elif char in PAIRS:
            if not stack or stack.pop() != PAIRS[char]:
                problems.append("unbalanced %s" % char)
                break
    if quoted:
        problems.append("unterminated string")
    if stack:
        problems.append("unclosed %s" % "".join(stack))
    unknown = set(METRIC.findall(expr)) - KNOWN_METRICS
    if unknown:
        problems.append("unknown metrics %s" % sorted(unknown))
    if not METRIC.search(expr):
        problems.append("reads no metric")
    return problems


def test_promql_problems_catches_what_a_template_can_break():
    assert promql_problems('max by (node) (kube_pod_info{namespace="a"}) > 0') == []
    assert promql_problems("  ") == ["empty"]
    assert promql_problems('max(DCGM_FI_DEV_GPU_TEMP{namespace="{{ ns }}"})') == ["Jinja left in it"]
    assert promql_problems("max(DCGM_FI_DEV_GPU_TEMP") == ["unclosed ("]
    assert promql_problems('sum(DCGM_FI_DEV_GPU_TEMP{a="x)"}))') == ["unbalanced )"]
    assert promql_problems('DCGM_FI_DEV_GPU_TEMP{a="x}') == ["unterminated string", "unclosed {"]
    assert promql_problems("DCGM_FI_DEV_NOPE > 1") == ["unknown metrics ['DCGM_FI_DEV_NOPE']"]
    assert promql_problems("vector(1)") == ["reads no metric"]


def render(variables):
    """The role's PrometheusRule and dashboard ConfigMap, rendered by ansible-playbook as the role renders them
    (template lookup; the dashboard's file lookup), with the role's defaults and vars under `variables`."""
    with tempfile.TemporaryDirectory(prefix="accelerators-gpu-render-") as workdir:
        for folder in ("templates", "files"):
            os.symlink(os.path.join(ROLE, folder), os.path.join(workdir, folder))
        play = [{"hosts": "localhost", "gather_facts": False,
                 "vars_files": [os.path.join(ROLE, "defaults", "main.yml"), os.path.join(ROLE, "vars", "main.yml")],
                 "tasks": [{"name": "render", "ansible.builtin.debug": {"msg": "{{ query('ansible.builtin.template', "
                                                                               "'prometheusrule.yml.j2', "
                                                                               "'dashboard_configmap.yml.j2', "
                                                                               "'recording_rules.yml.j2', "
                                                                               "'prometheus_rbac.yml.j2') }}"}}]}]
        path = os.path.join(workdir, "render.yml")
        with open(path, "w") as handle:
            yaml.safe_dump(play, handle)
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
                   ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
                   ANSIBLE_PYTHON_INTERPRETER=sys.executable)
        process = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
             "-e", json.dumps(variables), path],
            env=env, cwd=workdir, capture_output=True, text=True, timeout=120, check=False)
    assert process.returncode == 0, (process.stdout[-3000:], process.stderr[-3000:])
    assert "WARNING]" not in process.stderr, process.stderr
    rule_text, dashboard_text, recording_text, rbac_text = json.loads(
        process.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"]
    return (yaml.safe_load(rule_text), yaml.safe_load(dashboard_text), yaml.safe_load(recording_text),
            list(yaml.safe_load_all(rbac_text)))


def rules_of(rule):
    return {entry["alert"]: entry for group in rule["spec"]["groups"] for entry in group["rules"]}


def check_rule(rule, namespace):
    """The PrometheusRule as the role declares it: its alerts, each with a sound expression, a severity, a
    duration and Prometheus' own templates intact in its annotations."""
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert (rule["metadata"]["name"], rule["metadata"]["namespace"]) == (RULE, namespace)
    assert rule["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "accelerators.gpu"
    rules = rules_of(rule)
    assert sorted(rules) == sorted(ALERTS)
    for name, entry in rules.items():
        assert promql_problems(entry["expr"]) == [], (name, entry["expr"])
        assert entry["labels"]["severity"] in ("info", "warning", "critical"), name
        assert re.match(r"^\d+[smh]$", entry["for"]), (name, entry["for"])
        assert entry["annotations"]["summary"] and entry["annotations"]["description"], name
        assert "{{ $labels." in entry["annotations"]["description"], name
    # Each alert reads this stack's exporter and operands, not another namespace's; nodes have no namespace.
    for name in ALERTS:
        if set(METRIC.findall(rules[name]["expr"])) - NODE_SERIES:
            assert 'namespace="%s"' % namespace in rules[name]["expr"], name
    check_remediation_rules(rules)
    return rules


def check_remediation_rules(rules):
    """The alerts on the nodes the remediation holds: read from the state label remediation/state.py writes (and
    the taint for RMA), one alert per node, each naming the node's label and record and a section of the runbook."""
    rma, failed = rules["GPUNodeQuarantinedForRMA"], rules["GPURemediationFailed"]
    assert '%s{%s="%s"}' % ("kube_node_labels", STATE_SERIES_LABEL, remediation.RMA) in rma["expr"]
    assert RMA_TAINT in rma["expr"]
    assert '%s{%s="%s"}' % ("kube_node_labels", STATE_SERIES_LABEL, remediation.FAILED) in failed["expr"]
    with open(RUNBOOK) as handle:
        headings = set(re.findall(r"^(.+)\n-+\n", handle.read(), re.MULTILINE))
    for entry in (rma, failed):
        assert entry["expr"].count("max by (node) (") == entry["expr"].count("kube_node_"), entry["expr"]
        description = entry["annotations"]["description"]
        assert "{{ $labels.node }}" in description
        assert remediation.STATE_LABEL in description and remediation.RECORD_ANNOTATION in description
        document, section = entry["annotations"]["runbook"].rsplit(": ", 1)
        assert document.endswith("(docs/docsite/rst/failing-gpus.rst)") and section in headings, entry["annotations"]


def check_recording_rules(rule, namespace):
    """The GPU Operator's accelerator_* recording rules, in the units their names say, reading this stack's exporter."""
    assert (rule["kind"], rule["metadata"]["name"], rule["metadata"]["namespace"]) == (
        "PrometheusRule", RECORDING_RULE, namespace)
    assert rule["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "accelerators.gpu"
    [group] = rule["spec"]["groups"]
    records = {entry["record"]: entry for entry in group["rules"]}
    assert set(records) == RECORDS
    for name, entry in records.items():
        assert promql_problems(entry["expr"]) == [], (name, entry["expr"])
        assert set(METRIC.findall(entry["expr"])) <= PROFILING_LIST_FIELDS, name
        assert 'namespace="%s"' % namespace in entry["expr"], name
        assert entry["labels"] == {"vendor": "nvidia"}, name
    # MiB and MHz as DCGM reports them, bytes and hertz as the names say.
    assert records["accelerator_memory_used_bytes"]["expr"].endswith("* 1048576")
    assert records["accelerator_sm_clock_hertz"]["expr"].endswith("* 1000000")
    return records


def check_prometheus_rbac(role, binding, namespace):
    """The GPU Operator's prometheus-k8s Role and RoleBinding: OpenShift's monitoring reads the exporter's endpoints."""
    assert (role["kind"], role["metadata"]["name"], role["metadata"]["namespace"]) == ("Role", "prometheus-k8s", namespace)
    assert role["rules"] == [{"apiGroups": [""], "resources": ["services", "endpoints", "pods"],
                              "verbs": ["get", "list", "watch"]}]
    assert (binding["kind"], binding["metadata"]["name"], binding["roleRef"]["name"]) == (
        "RoleBinding", "prometheus-k8s", "prometheus-k8s")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "prometheus-k8s",
                                    "namespace": "openshift-monitoring"}]
    for item in (role, binding):
        assert item["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "accelerators.gpu"


def check_dashboard(config_map):
    """The dashboard ConfigMap: the console's labels, and a Grafana dashboard whose panels query the DCGM metrics."""
    assert (config_map["metadata"]["namespace"], config_map["metadata"]["name"]) == DASHBOARD
    labels = config_map["metadata"]["labels"]
    assert labels["console.openshift.io/dashboard"] == "true"
    assert labels["console.openshift.io/odc-dashboard"] == "true"
    assert labels["app.kubernetes.io/managed-by"] == "accelerators.gpu"
    assert list(config_map["data"]) == [DASHBOARD_KEY]
    dashboard = json.loads(config_map["data"][DASHBOARD_KEY])
    assert dashboard["title"] and dashboard["panels"]
    # Only the panel types the console renders.
    assert {panel["type"] for panel in dashboard["panels"]} <= {"row", "singlestat", "graph"}
    expressions = [target["expr"] for panel in dashboard["panels"] if panel["type"] != "row"
                   for target in panel["targets"]]
    assert expressions
    for expr in expressions:
        assert promql_problems(expr) == [], expr
    assert DASHBOARD_METRICS <= set(METRIC.findall(" ".join(expressions)))
    check_node_health_panels(dashboard["panels"])
    # Panel ids are unique and every panel sits on the 24-column grid.
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
    assert all(panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24 for panel in dashboard["panels"])
    return dashboard


def check_node_health_panels(panels):
    """The row Node health: GPUs unavailable per node, nodes quarantined, for RMA, failed and in each state, the last
    XID per GPU, from the same series as the alerts."""
    rows = sorted((panel["gridPos"]["y"], panel["title"]) for panel in panels if panel["type"] == "row")
    [start] = [y for y, title in rows if title == "Node health"]
    end = min([y for y, _title in rows if y > start] or [float("inf")])
    health = [panel for panel in panels if panel["type"] != "row" and start < panel["gridPos"]["y"] < end]
    expressions = " ".join(target["expr"] for panel in health for target in panel["targets"])
    assert NODE_SERIES | {"DCGM_FI_DEV_XID_ERRORS"} <= set(METRIC.findall(expressions))
    for value in (remediation.RMA, remediation.FAILED):
        assert '%s{%s="%s"}' % ("kube_node_labels", STATE_SERIES_LABEL, value) in expressions
    assert RMA_TAINT in expressions
    assert 'kube_node_spec_taint{key="%s"}' % remediation.TAINT_KEY in expressions
    # Counts read 0, not "no data", when no node is held.
    counts = [target["expr"] for panel in health if panel["type"] == "singlestat" for target in panel["targets"]
              if "kube_node_status" not in target["expr"]]
    assert counts and all(expr.endswith(" or vector(0)") for expr in counts), counts


def test_rendered_rule_and_dashboard_are_sound_with_defaults_and_overrides():
    rule, config_map, recording, (role, binding) = render({"common_namespace": "gpu-stack"})
    rules = check_rule(rule, "gpu-stack")
    check_dashboard(config_map)
    check_recording_rules(recording, "gpu-stack")
    check_prometheus_rbac(role, binding, "gpu-stack")
    assert (rules["GPUXidError"]["labels"]["severity"], rules["GPUXidError"]["for"]) == ("warning", "0s")
    assert rules["GPUTemperatureHigh"]["expr"].strip().endswith("> 85")
    assert rules["GPUNodeGPUsUnavailable"]["labels"]["severity"] == "critical"
    assert rules["GPUOperatorNodeDeploymentDriverFailed"]["for"] == "30m"
    assert (rules["GPUNodeQuarantinedForRMA"]["labels"]["severity"], rules["GPURemediationFailed"]["for"]) == (
        "warning", "5m")

    rule = render({"common_namespace": "gpu-stack", "dcgm_exporter_alerts_temperature_threshold": 78,
                   "dcgm_exporter_alerts_severity": {"GPUXidError": "critical", "GPURemediationFailed": "critical"},
                   "dcgm_exporter_alerts_for": {"GPUTemperatureHigh": "10m"}})[0]
    rules = check_rule(rule, "gpu-stack")
    assert rules["GPUXidError"]["labels"]["severity"] == "critical"
    assert rules["GPURemediationFailed"]["labels"]["severity"] == "critical"
    assert rules["GPUTemperatureHigh"]["for"] == "10m"
    assert rules["GPUTemperatureHigh"]["expr"].strip().endswith("> 78")
    assert "above 78 °C" in rules["GPUTemperatureHigh"]["annotations"]["description"]
    # Overrides touch only what they name.
    assert rules["GPUNodeGPUsUnavailable"]["labels"]["severity"] == "critical"


def read_optional(cluster, path):
    try:
        return cluster.client.call_api(path, "GET", response_type="object", _return_http_data_only=True,
                                       auth_settings=["BearerToken"])
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def dashboard_of(cluster):
    return read_optional(cluster, "/api/v1/namespaces/%s/configmaps/%s" % DASHBOARD)


def rule_of(cluster, namespace, name=RULE):
    return read_optional(cluster, "/apis/monitoring.coreos.com/v1/namespaces/%s/prometheusrules/%s" % (namespace, name))


def prometheus_rbac_of(cluster, namespace):
    return [read_optional(cluster, "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/%s/prometheus-k8s" % (
        namespace, kind)) for kind in ("roles", "rolebindings")]


def runtime_classes(cluster):
    """The RuntimeClasses of the toolkit's runtime handlers that exist."""
    return [name for name in RUNTIME_CLASSES
            if read_optional(cluster, "/apis/node.k8s.io/v1/runtimeclasses/" + name) is not None]


def test_openshift_deploy_applies_them_reruns_unchanged_and_uninstall_removes_only_them_gfd_labels_every_gpu_node(
        cluster, namespace, make_fleet):
    """One deploy checked for two states: the DCGM exporter's dashboard, rules and RBAC (and the toolkit's
    RuntimeClasses) and GPU feature discovery's labels on a fleet of every GPU model it names (check_gfd_*)."""
    if cluster.flavour != "openshift":
        pytest.skip("the session cluster is of the kubernetes flavour")
    spec = gpu_fleet(*GFD_GROUPS)
    names = make_fleet(spec).node_names
    _groups, gpu_nodes, _cpu = fleet_groups(names)
    before = node_labels(cluster, names)
    # The console's own dashboards share the namespace: the uninstall must leave them.
    site = "site-dashboard-" + os.urandom(2).hex()
    cluster.core.create_namespaced_config_map(DASHBOARD[0], {"metadata": {
        "name": site, "labels": {"console.openshift.io/dashboard": "true"}}, "data": {"site.json": "{}"}})
    try:
        variables = fleet_variables(namespace, spec, dcgm_exporter_alerts_temperature_threshold=80,
                                    common_cdi_enabled=True)
        first = playbook(cluster, "deploy", variables).succeeded()
        rules = check_rule(rule_of(cluster, namespace), namespace)
        assert rules["GPUTemperatureHigh"]["expr"].strip().endswith("> 80")
        check_recording_rules(rule_of(cluster, namespace, RECORDING_RULE), namespace)
        check_prometheus_rbac(*prometheus_rbac_of(cluster, namespace), namespace)
        dashboard = dashboard_of(cluster)
        check_dashboard(dashboard)
        applied = [item["object"] for _name, result in first.results for item in result.get("objects") or []]
        for name in (RULE, RECORDING_RULE):
            assert "PrometheusRule %s/%s" % (namespace, name) in applied
        assert "ConfigMap %s/%s" % DASHBOARD in applied
        # The exporter pods, one per GPU node, read the profiling metrics list, as the GPU Operator's.
        exporters = cluster.core.list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/component=nvidia-dcgm-exporter").items
        assert sorted(pod.spec.node_name for pod in exporters) == gpu_nodes
        for exporter in exporters:
            env = {entry.name: entry.value for entry in exporter.spec.containers[0].env}
            assert env["DCGM_EXPORTER_COLLECTORS"] == COLLECTORS, exporter.metadata.name
        # CDI on: the toolkit's three runtime handlers have their RuntimeClass.
        assert runtime_classes(cluster) == list(RUNTIME_CLASSES)
        check_gfd_deployed(cluster, namespace, first, names)

        assert playbook(cluster, "deploy", variables).succeeded().stats["changed"] == 0
        assert playbook(cluster, "deploy", variables, check=True).succeeded().stats["changed"] == 0
        assert dashboard_of(cluster)["metadata"]["resourceVersion"] == dashboard["metadata"]["resourceVersion"]
        check_gfd_status(cluster, variables, names)

        # Rules switched off go, and with CDI off its RuntimeClasses, nothing else: the dashboard and the monitoring
        # RBAC stay as they were, and so does the operands' RuntimeClass.
        off = playbook(cluster, "deploy", dict(variables, dcgm_exporter_alerts=False, dcgm_exporter_recording_rules=False,
                                               common_cdi_enabled=False), tags="container_toolkit,dcgm_exporter")
        deleted = {item["object"] for _name, result in off.succeeded().results for item in result.get("objects") or []
                   if item["action"] == "deleted"}
        assert deleted == {"PrometheusRule %s/%s" % (namespace, RULE), "PrometheusRule %s/%s" % (namespace, RECORDING_RULE),
                           "RuntimeClass nvidia-cdi", "RuntimeClass nvidia-legacy"}
        assert (rule_of(cluster, namespace), rule_of(cluster, namespace, RECORDING_RULE)) == (None, None)
        assert dashboard_of(cluster)["metadata"]["resourceVersion"] == dashboard["metadata"]["resourceVersion"]
        assert None not in prometheus_rbac_of(cluster, namespace)
        assert runtime_classes(cluster) == ["nvidia"]
        playbook(cluster, "deploy", variables, tags="container_toolkit,dcgm_exporter").succeeded()
        assert None not in (rule_of(cluster, namespace), rule_of(cluster, namespace, RECORDING_RULE))
        assert runtime_classes(cluster) == list(RUNTIME_CLASSES)
        check_gfd_switched_off(cluster, namespace, variables, names)

        playbook(cluster, "uninstall", variables).succeeded()
        assert (rule_of(cluster, namespace), rule_of(cluster, namespace, RECORDING_RULE)) == (None, None)
        assert prometheus_rbac_of(cluster, namespace) == [None, None]
        assert runtime_classes(cluster) == []
        assert dashboard_of(cluster) is None
        # The namespace existed before the deploy: it stays, and so do the site's dashboards.
        assert cluster.core.read_namespace(namespace).metadata.deletion_timestamp is None
        assert cluster.core.read_namespaced_config_map(site, DASHBOARD[0]).data == {"site.json": "{}"}
        assert node_labels(cluster, names) == before
        check_gfd_uninstalled(cluster, namespace)
    finally:
        cluster.core.delete_namespaced_config_map(site, DASHBOARD[0])


def test_kubernetes_single_driver_deploys_validated_reruns_unchanged_without_the_monitoring_apis_uninstalls_cleanly(
        kubernetes_cluster, make_fleet):
    """One deploy on plain Kubernetes checked for the stack (one driver DaemonSet, every node validated, a re-run
    that changes nothing, the upgrade guard refused) and for the DCGM exporter's OpenShift objects left out."""
    spec = gpu_fleet({"name": "gpu", "count": 2, "gpu": {"count": 2}, "os": {"ubuntu": "22.04"},
                      "runtime": "containerd", "nfd_style": "class-vendor"},
                     {"name": "cpu", "os": {"ubuntu": "22.04"}, "runtime": "containerd"}, openshift=None)
    gpu0, gpu1, _cpu = make_fleet(spec, on=kubernetes_cluster).node_names
    namespace = "t-dash-k8s-" + os.urandom(2).hex()
    variables = fleet_variables(namespace, spec)
    try:
        # An alert the role does not define is refused before anything of the state is applied.
        refused = playbook(kubernetes_cluster, "deploy", dict(variables, dcgm_exporter_alerts_for={"GPUOnFire": "1m"}),
                           tags="dcgm_exporter")
        task, failed = refused.failure()
        assert task.endswith(": Alert names given severities or durations are the role's")
        assert "GPUOnFire" in failed["msg"] and "GPUXidError" in failed["msg"]

        run = playbook(kubernetes_cluster, "deploy", variables).succeeded()
        driver = kubernetes_cluster.apps.read_namespaced_daemon_set("nvidia-driver-daemonset", namespace)
        assert driver.spec.template.spec.containers[0].image == "nvcr.io/nvidia/driver:%s-ubuntu22.04" % (
            COMMON_DEFAULTS["common_driver_version"])
        assert jobs_by_check(kubernetes_cluster, namespace) == {
            (check, node): 1 for check in ("driver", "toolkit", "cuda") for node in (gpu0, gpu1)}
        applied = [item["object"] for _name, result in run.results for item in result.get("objects") or []]
        assert not [name for name in applied if name.startswith("PrometheusRule") or DASHBOARD[1] in name
                    or name.endswith("/prometheus-k8s")]
        assert any(name.startswith("DaemonSet %s/nvidia-dcgm-exporter" % namespace) for name in applied)
        assert dashboard_of(kubernetes_cluster) is None
        assert read_optional(kubernetes_cluster, "/apis/monitoring.coreos.com/v1") is None
        assert playbook(kubernetes_cluster, "deploy", variables).succeeded().stats["changed"] == 0
        # The upgrade guard names MachineConfigPools, which plain Kubernetes has not: refused, nothing changed.
        guarded = playbook(kubernetes_cluster, "deploy", dict(variables, driver_paused_pools=["gpu-worker"]),
                           tags="driver")
        name, result = guarded.failure()
        assert name.endswith("Refuse the upgrade guard where there are no MachineConfigPools"), (name, result.get("msg"))
        assert "Nothing was changed" in result["msg"] and guarded.stats["changed"] == 0

        playbook(kubernetes_cluster, "uninstall", variables).succeeded()
        assert kubernetes_cluster.apps.list_namespaced_daemon_set(namespace).items == []
    finally:
        try:
            kubernetes_cluster.core.delete_namespace(namespace)
        except ApiException as error:
            if error.status != 404:
                raise
