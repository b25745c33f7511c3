# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""pytest imports the test files of tests/cluster, tests/tools and tests/matrix by their base name (rootdir-relative,
no packages): a test file anywhere under tests/ that shares its name with another cannot be collected in the same run
("import file mismatch"), and CI's one run collects them all."""

import collections
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_file_has_a_name_of_its_own():
    paths = collections.defaultdict(list)
    for path in TESTS.rglob('test_*.py'):
        paths[path.name].append(str(path.relative_to(TESTS)))
    assert not {name: found for name, found in paths.items() if len(found) > 1}
