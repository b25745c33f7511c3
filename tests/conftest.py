"""Fixtures shared by every test directory.

local_registry: one real OCI registry per test session (tools/localregistry), started only by the tests that
ask for it: TLS from a CA made for it and htpasswd basic auth. precompiled_drivers fills it. token_registry: the
same with the bearer-token flow instead of basic auth.
offline_bundle: the offline install bundle, built once per test session by the tests that ask for it.
run_note: a line the run prints once at its end, however many of pytest-xdist's workers give it.

The test files run longest first, by the seconds tests/durations.json gives each (`make durations` writes it from a
run's JUnit report), so that pytest-xdist's workers do not start the longest stories last and leave the run waiting on
one of them; the tests of a file keep their order.
"""

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = ROOT / "tests" / "durations.json"
# A file durations.json does not list yet: a cluster test file of a few tests.
UNKNOWN_FILE_SECONDS = 30.0


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The files longest first (before tests/cluster/conftest.py puts the vanilla cluster's files together)."""
    try:
        durations = json.loads(DURATIONS.read_text())
    except FileNotFoundError:
        return
    seconds = {}
    for item in items:
        path = item.path.relative_to(config.rootpath).as_posix()
        seconds.setdefault(item.path, durations.get(path, UNKNOWN_FILE_SECONDS))
    items.sort(key=lambda item: -seconds[item.path])


# The run's notes (run_note), in the process that prints the summary: its own, and those of the xdist workers that
# finished.
_NOTES = pytest.StashKey[list]()


@pytest.fixture(scope="session")
def run_note(pytestconfig):
    """note(text): a line for the end of the run, printed once whichever and however many processes give it."""
    notes = pytestconfig.stash.setdefault(_NOTES, [])
    if hasattr(pytestconfig, "workeroutput"):
        # An xdist worker sends its workeroutput to the controller when it finishes (pytest_testnodedown).
        pytestconfig.workeroutput["notes"] = notes
    return notes.append


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """An xdist worker finished: its notes join the controller's."""
    node.config.stash.setdefault(_NOTES, []).extend(getattr(node, "workeroutput", {}).get("notes", []))


def pytest_terminal_summary(terminalreporter):
    """The support matrix's report (each combination's versions, its runs' times and slowest tasks, warnings), which its
    tests print: shown also when they passed on an xdist worker, whose output -s cannot show. Then the run's notes."""
    for report in terminalreporter.stats.get("passed", []):
        if report.when == "call" and "matrix" in report.keywords and report.capstdout:
            terminalreporter.write_sep("-", "matrix: " + report.nodeid)
            terminalreporter.write(report.capstdout)
    for text in dict.fromkeys(terminalreporter.config.stash.get(_NOTES, [])):
        terminalreporter.write_line(text)


def _registry(tmp_path_factory, auth):
    from localregistry import LocalRegistry  # only sessions that use a registry need its binaries

    registry = LocalRegistry(tmp_path_factory.mktemp("registry-" + auth), auth=auth).start()
    try:
        yield registry
    finally:
        registry.stop()


@pytest.fixture(scope="session")
def local_registry(tmp_path_factory):
    yield from _registry(tmp_path_factory, "htpasswd")


@pytest.fixture(scope="session")
def token_registry(tmp_path_factory):
    """A registry asking for bearer tokens from its token service (token_registry.token_service)."""
    yield from _registry(tmp_path_factory, "token")


@pytest.fixture(scope="session")
def precompiled_drivers(local_registry):
    """{kernel: digest} of the precompiled driver images in local_registry: <host>/nvidia/driver:535-<kernel>-rhcos4.18
    for two RHCOS 4.18 kernels (a Docker schema 2 manifest, an OCI index), none for any other kernel."""
    published = {}
    for kernel, media_type in (("5.14.0-427.33.1.el9_4.x86_64", "docker"), ("5.14.0-427.50.1.el9_4.x86_64", "oci-index")):
        published[kernel] = local_registry.push("nvidia/driver", ["535-%s-rhcos4.18" % kernel], media_type=media_type)
    return published


@pytest.fixture(scope="session")
def offline_bundle(tmp_path_factory):
    """The offline bundle's tarball, built by tools/bundle/make-bundle.sh into <tmp>/.build/bundle/ (where the
    execution environment definition looks for it, relative to its own directory)."""
    out = tmp_path_factory.mktemp("bundle-build") / ".build" / "bundle"
    result = subprocess.run(["bash", str(ROOT / "tools" / "bundle" / "make-bundle.sh"), str(out)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, "make-bundle.sh failed:\n%s" % result.stderr[-3000:]
    return Path(result.stdout.strip())
