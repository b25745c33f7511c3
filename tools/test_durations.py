"""Writes each test file's seconds, summed from a pytest JUnit XML report, as JSON: the order in which tests/conftest.py
hands the files to pytest-xdist's workers, longest first.

    python tools/test_durations.py .build/junit.xml tests/durations.json

Files of the old list that the report does not have (a run of part of the suite) keep their seconds, while they exist.
"""

import json
import os
import sys
from xml.etree import ElementTree


def file_seconds(junit_path):
    """{test file path relative to the checkout: seconds of its tests} of a JUnit XML report."""
    seconds = {}
    for case in ElementTree.parse(junit_path).iter("testcase"):
        # classname is the module's dotted path (tests.cluster.test_x), with the class for tests in classes.
        parts = case.get("classname", "").split(".")
        modules = [index for index, part in enumerate(parts) if part.startswith("test_")]
        if not modules:
            continue
        path = "/".join(parts[:modules[0] + 1]) + ".py"
        seconds[path] = seconds.get(path, 0.0) + float(case.get("time") or 0)
    return seconds


def main(junit_path, out_path):
    try:
        with open(out_path, encoding="utf-8") as handle:
            durations = json.load(handle)
    except FileNotFoundError:
        durations = {}
    durations.update({path: round(value, 1) for path, value in file_seconds(junit_path).items()})
    durations = {path: value for path, value in durations.items() if os.path.exists(path)}
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(dict(sorted(durations.items())), handle, indent=1)
        handle.write("\n")
    print("%s: %d files" % (out_path, len(durations)))


if __name__ == "__main__":
    main(*sys.argv[1:])
