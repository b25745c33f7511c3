# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Make `ansible_collections.accelerators.gpu` importable for plain pytest.

ansible-test units, or a Makefile that puts the directory above a .build/ansible_collections/accelerators/gpu
symlink on PYTHONPATH, make the import work already; otherwise (pytest run in a plain checkout) a temporary
ansible_collections/accelerators/gpu symlink to this checkout goes on sys.path.
"""

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile


def _collection_importable():
    try:
        return importlib.util.find_spec('ansible_collections.accelerators.gpu') is not None
    except ModuleNotFoundError:  # raised when a parent package is missing
        return False


if not _collection_importable():
    _PARENT = tempfile.mkdtemp(prefix='accelerators-gpu-units-')
    atexit.register(shutil.rmtree, _PARENT, True)
    os.makedirs(os.path.join(_PARENT, 'ansible_collections', 'accelerators'))
    os.symlink(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
               os.path.join(_PARENT, 'ansible_collections', 'accelerators', 'gpu'))
    sys.path.insert(0, _PARENT)
