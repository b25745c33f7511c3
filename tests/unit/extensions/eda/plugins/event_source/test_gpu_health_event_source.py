# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_health event source: its options, and one event per node whose faults are new or changed, over polls of
health records made by the collection's own records() from nodes and DCGM samples."""

import asyncio

import pytest

from ansible_collections.accelerators.gpu.extensions.eda.plugins.event_source import gpu_health
from ansible_collections.accelerators.gpu.plugins.module_utils.health.records import records
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.errors import APIError

UUID_0 = "GPU-0c3f9a7e-55aa-4b7d-8f12-3e4d5c6b7a80"
UUID_1 = "GPU-0c3f9a7e-55aa-4b7d-8f12-3e4d5c6b7a81"


def node(name, allocatable=2):
    return {"metadata": {"name": name, "labels": {"feature.node.kubernetes.io/pci-10de.present": "true"}},
            "spec": {}, "status": {"capacity": {"nvidia.com/gpu": "2"},
                                   "allocatable": {"nvidia.com/gpu": str(allocatable)}}}


def xid(gpu, uuid, value):
    return {"name": "DCGM_FI_DEV_XID_ERRORS", "labels": {"gpu": str(gpu), "UUID": uuid}, "value": float(value)}


def health(allocatable=None, samples=None):
    """The records of nodes a and b: allocatable {node: GPUs} (2 by default), samples {node: DCGM samples}."""
    return records([node(name, (allocatable or {}).get(name, 2)) for name in ("a", "b")], samples or {}, "prometheus")


def test_settings_fill_defaults_and_take_templated_numbers():
    options = gpu_health.settings({"interval": "5", "kubeconfig": "/k", "prometheus_url": None})
    assert options == dict(gpu_health.DEFAULTS, interval=5.0, kubeconfig="/k")


@pytest.mark.parametrize("args, message", [
    ({"intervall": 5}, "unknown options intervall"),
    ({"interval": "soon"}, "interval is 'soon', not a number of seconds"),
    ({"interval": 0}, "interval is 0.0: the seconds between polls are above 0"),
    ({"api_retry_seconds": []}, "api_retry_seconds is [], not a number of seconds"),
])
def test_settings_refuse_what_they_do_not_know(args, message):
    with pytest.raises(ValueError, match="accelerators.gpu.gpu_health: " + message.replace("[", r"\[")
                       .replace("]", r"\]").replace("(", r"\(")):
        gpu_health.settings(args)


def test_a_new_fault_is_an_event_once_and_a_changed_one_again():
    healthy = health()
    assert gpu_health.changed_faults({}, healthy) == ([], {})

    failing = health({"a": 1}, {"a": [xid(1, UUID_1, 48)]})
    events, seen = gpu_health.changed_faults({}, failing)
    assert [(r["node"], r["action"], [f["xid"] for f in r["faults"]]) for r in events] == [("a", "reset", [48])]
    assert list(seen) == ["a"]
    # The same faults, however their messages read, are no event.
    same = health({"a": 1}, {"a": [xid(1, UUID_1, 48)]})
    same[0]["faults"][0]["message"] = "another wording"
    assert gpu_health.changed_faults(seen, same) == ([], seen)
    # Another XID on the node, and a fault on the other node: an event each.
    worse = health({"a": 1, "b": 1}, {"a": [xid(0, UUID_0, 79), xid(1, UUID_1, 48)], "b": [xid(0, UUID_0, 119)]})
    events, seen = gpu_health.changed_faults(seen, worse)
    assert [(r["node"], r["action"]) for r in events] == [("a", "reboot"), ("b", "reset")]


def test_a_node_seen_healthy_is_forgotten_so_its_next_fault_is_an_event():
    failing = health({"a": 1}, {"a": [xid(1, UUID_1, 48)]})
    seen = gpu_health.changed_faults({}, failing)[1]
    events, forgotten = gpu_health.changed_faults(seen, health())
    assert (events, forgotten) == ([], {})
    assert [r["node"] for r in gpu_health.changed_faults(forgotten, failing)[0]] == ["a"]


def test_application_errors_are_events_for_the_rules_that_report_them():
    events = gpu_health.changed_faults({}, health(samples={"b": [xid(0, UUID_0, 13)]}))[0]
    assert [(r["node"], r["healthy"], r["action"]) for r in events] == [("b", True, "none")]


class Polls:
    """A reader answering each poll from a script: health records, or an exception raised; past its end, Done."""

    class Done(Exception):
        pass

    def __init__(self, *answers):
        self.answers = list(answers)

    def __call__(self):
        if not self.answers:
            raise Polls.Done()
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_watch_puts_the_events_of_each_poll_and_goes_on_through_a_failed_read():
    failing = health({"a": 1}, {"a": [xid(1, UUID_1, 48)]})
    read = Polls(health(), failing, APIError("GET", "/api/v1/nodes", 503, "the API server is restarting"), failing,
                 health({"a": 1, "b": 1}, {"a": [xid(1, UUID_1, 48)], "b": [xid(0, UUID_0, 79)]}))
    queue = asyncio.Queue()
    with pytest.raises(Polls.Done):
        asyncio.run(gpu_health.watch(queue, read, "gpu-prod-1", 0.001))
    events = [queue.get_nowait() for index in range(queue.qsize())]
    assert [(e["cluster"], e["gpu_health"]["node"], e["gpu_health"]["action"]) for e in events] == [
        ("gpu-prod-1", "a", "reset"), ("gpu-prod-1", "b", "reboot")]
