"""The fault proxy's choice of the requests it faults (localcluster.apiproxy.Fault): by count, method and path."""

import pytest

from localcluster import apiproxy


def test_a_fault_matches_its_method_and_path_for_its_count():
    fault = apiproxy.Fault(apiproxy.STATUS, status=429, retry_after=1, count=2, method="GET", path=r"^/api/v1/nodes")
    assert fault.label == "429"
    assert not fault.matches("PATCH", "/api/v1/nodes/a")
    assert not fault.matches("GET", "/api/v1/pods")
    assert fault.matches("GET", "/api/v1/nodes?limit=100")
    fault.injected = 2
    assert not fault.matches("GET", "/api/v1/nodes")


def test_a_fault_for_a_time_ends_with_it():
    assert apiproxy.Fault(apiproxy.RESET, seconds=60).active()
    assert not apiproxy.Fault(apiproxy.RESET, seconds=0).active()
    assert apiproxy.Fault(apiproxy.SLOW, delay=2).label == "slow"


def test_unknown_faults_are_refused():
    with pytest.raises(ValueError):
        apiproxy.Fault("teapot")
    with pytest.raises(ValueError):
        apiproxy.Fault(apiproxy.STATUS, status=418)
