# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading the GPU nodes' health: the exporters' pages through the pod proxy (a cluster in memory), a Prometheus
query URL (a Prometheus answering on loopback), and the gpu_health module's work."""

import http.server
import json
import threading
import urllib.parse

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.health.read import (
    EXPORTER_SELECTOR, read_exporters, read_prometheus, run)
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.errors import APIError, TaskError
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.views import NODE_FULL, POD_CELLS
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.health.test_records import node, xid_page

PROXY = "/api/v1/namespaces/gpu/pods/%s:9400/proxy/metrics"


class HealthCluster:
    """What gpu_health reads, in memory: Nodes, the exporter pods (as POD_CELLS) and their pages by pod name (a
    string, or an APIError the proxy answers)."""

    def __init__(self, nodes, pods, pages):
        self.nodes, self.pods, self.pages = nodes, pods, pages
        self.reads = []

    def list_nodes(self, label_selector=None, page_size=None, view=NODE_FULL):
        self.reads.append(("nodes", label_selector, view))
        return iter(self.nodes)

    def list_pods(self, namespace, label_selector=None, view=NODE_FULL):
        self.reads.append(("pods", namespace, label_selector, view))
        return self.pods

    def read_once(self, path):
        self.reads.append(("proxy", path))
        page = self.pages[path.split("/pods/")[1].split(":")[0]]
        if isinstance(page, APIError):
            raise page
        return page


def exporter(name, node_name):
    return {"metadata": {"name": name, "namespace": "gpu"}, "spec": {"nodeName": node_name},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def test_each_exporter_is_read_once_through_the_pod_proxy_and_one_that_does_not_answer_is_said():
    cluster = HealthCluster([], [exporter("dcgm-a", "a"), exporter("dcgm-b", "b"), exporter("dcgm-x", "x")], {
        "dcgm-a": xid_page("a", 0, 48),
        "dcgm-b": APIError("GET", PROXY % "dcgm-b", 503, "error trying to reach service: dial tcp 10.0.0.2:9400: "
                           "connect: connection refused")})
    samples, unread = read_exporters(cluster, "gpu", ["a", "b", "c"])
    assert cluster.reads == [("pods", "gpu", EXPORTER_SELECTOR, POD_CELLS), ("proxy", PROXY % "dcgm-a"),
                             ("proxy", PROXY % "dcgm-b")]
    assert [(sample["labels"]["gpu"], sample["value"]) for sample in samples["a"]] == [("0", 0.0), ("1", 48.0)]
    assert list(samples) == ["a"]
    assert unread == {"b": "DCGM exporter pod dcgm-b: GET %s: HTTP 503: error trying to reach service: dial tcp "
                           "10.0.0.2:9400: connect: connection refused" % (PROXY % "dcgm-b"),
                      "c": "no DCGM exporter pod"}


def test_the_module_returns_the_records_the_unhealthy_nodes_and_the_summary():
    nodes = [node("b", allocatable=7), node("a"), {"metadata": {"name": "cpu", "labels": {}}, "status": {}}]
    cluster = HealthCluster(nodes, [exporter("dcgm-a", "a"), exporter("dcgm-b", "b")],
                            {"dcgm-a": xid_page("a", 0), "dcgm-b": xid_page("b", 0, 0, 79)})
    module = type("Module", (), {"params": {"namespace": "gpu", "label_selector": "role=gpu", "prometheus_url": None}})
    result = run(module, cluster)
    assert cluster.reads[0] == ("nodes", "role=gpu", NODE_FULL)
    assert [(record["node"], record["action"]) for record in result["gpu_health"]] == [("a", "none"), ("b", "reboot")]
    assert list(result["unhealthy"]) == ["b"] and result["unhealthy"]["b"][0]["xid"] == 79
    assert result["changed"] is False
    assert (result["summary"]["metrics_source"], result["summary"]["metrics_unread"],
            result["summary"]["nodes_by_action"]["reboot"]) == ("exporter", {}, 1)


class Prometheus(http.server.BaseHTTPRequestHandler):
    """GET /api/v1/query?query=<name>: the vector of that metric in self.server.series; records the requests."""

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        query = urllib.parse.parse_qs(url.query)["query"][0]
        self.server.requests.append((url.path, query, self.headers.get("Authorization")))
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": dict(labels, __name__=name), "value": [1733120000.5, str(value)]}
            for name, labels, value in self.server.series if name == query]}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def prometheus():
    server = http.server.HTTPServer(("127.0.0.1", 0), Prometheus)
    server.requests, server.series = [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_prometheus_is_queried_once_per_field_and_series_go_to_their_nodes_by_hostname(prometheus):
    prometheus.series = [("DCGM_FI_DEV_XID_ERRORS", {"gpu": "3", "UUID": "GPU-3", "Hostname": "a"}, 119),
                         ("DCGM_FI_DEV_XID_ERRORS", {"gpu": "0", "UUID": "GPU-0", "Hostname": "elsewhere"}, 79),
                         ("DCGM_FI_DEV_ROW_REMAP_FAILURE", {"gpu": "3", "UUID": "GPU-3", "Hostname": "a"}, 0)]
    url = "http://127.0.0.1:%d/" % prometheus.server_port
    samples, unread = read_prometheus(url, ["a", "b"], token="t0ken")
    assert prometheus.requests == [("/api/v1/query", name, "Bearer t0ken") for name in (
        "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")]
    assert [(sample["name"], sample["value"]) for sample in samples["a"]] == [
        ("DCGM_FI_DEV_XID_ERRORS", 119.0), ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 0.0)]
    assert (samples["b"], unread) == ([], {"b": "no series in Prometheus"})


def test_a_prometheus_that_does_not_answer_fails_naming_it(prometheus):
    url = "http://127.0.0.1:%d" % prometheus.server_port
    prometheus.shutdown()
    prometheus.server_close()
    with pytest.raises(TaskError) as error:
        read_prometheus(url, ["a"])
    assert str(error.value).startswith("prometheus_url: cannot read DCGM_FI_DEV_XID_ERRORS from %s: " % url)
