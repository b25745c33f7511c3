# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the module worker's tests share: an AnsiballZ wrapper with the lines the worker reads, as this ansible-core
writes them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest


def _has_ansiballz_loader():
    try:
        from ansible.module_utils._internal._ansiballz import _loader  # noqa: F401 pylint: disable=unused-import
    except ImportError:
        return False
    return True


@pytest.fixture
def ansiballz_wrapper():
    """ansiballz_wrapper(interpreter, module_fqn): the wrapper's bytes."""
    def wrapper(interpreter='/venv/bin/python3',
                module_fqn='ansible_collections.accelerators.gpu.plugins.modules.cluster_facts'):
        if _has_ansiballz_loader():  # ansible-core 2.19 on: the arguments the wrapper calls _ansiballz_main with
            named = "if __name__ == '__main__':\n    _ansiballz_main(\nmodule_fqn=%r,\nprofile='legacy',\n)\n" % (
                module_fqn,)
        else:  # before 2.19: the wrapper runs the module itself
            named = ("        runpy.run_module(mod_name=%r, init_globals=dict(_module_fqn=%r, "
                     "_modlib_path=modlib_path),\n"
                     "                         run_name='__main__', alter_sys=True)\n" % (module_fqn, module_fqn))
        return ('#!%s\n# -*- coding: utf-8 -*-\n_ANSIBALLZ_WRAPPER = True\n%s' % (interpreter, named)).encode('utf-8')
    return wrapper
