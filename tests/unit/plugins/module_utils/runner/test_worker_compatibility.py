# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the module worker relies on in ansible-core beyond its public interface
(plugins/module_utils/runner/worker_compatibility.py): checked once per ansible-core version, each mismatch named.
The checks run against the ansible-core of the environment (each combination of the matrix runs these tests); the
wrapper is the one tests/unit/plugins/conftest.py writes as this ansible-core does, and the matrix's deploys run the
real ones."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible.module_utils import basic
from ansible.plugins.action import ActionBase
from ansible.release import __version__ as ANSIBLE_CORE_VERSION
from ansible_collections.accelerators.gpu.plugins.module_utils.runner import worker_compatibility

ENVIRONMENT_METHOD = ActionBase._compute_environment_string


@pytest.fixture
def wrapper(ansiballz_wrapper):
    return ansiballz_wrapper()


def renamed(wrapper):
    """wrapper naming its module in a way no ansible-core does."""
    return wrapper.replace(b'module_fqn=', b'module_name=').replace(b'mod_name=', b'module_name=')


def test_this_ansible_core_offers_what_the_worker_relies_on(wrapper, tmp_path):
    assert worker_compatibility.module_side_reason() is None
    assert worker_compatibility.environment_method_reason(ENVIRONMENT_METHOD) is None
    assert worker_compatibility.wrapper_reason(wrapper) is None
    assert worker_compatibility.verdict(ANSIBLE_CORE_VERSION, wrapper, ENVIRONMENT_METHOD, str(tmp_path)) is None


@pytest.mark.parametrize('module_fqn, module', [
    ('ansible_collections.kubernetes.core.plugins.modules.k8s_info', 'kubernetes.core.k8s_info'),
    ('ansible_collections.accelerators.gpu.plugins.modules.operand', 'accelerators.gpu.operand'),
    ('ansible.modules.command', 'ansible.builtin.command'),
])
def test_the_wrapper_names_its_module(ansiballz_wrapper, module_fqn, module):
    assert worker_compatibility.wrapper_module(ansiballz_wrapper(module_fqn=module_fqn)) == module


def test_a_wrapper_that_names_its_module_otherwise_gives_the_reason(wrapper, tmp_path):
    assert worker_compatibility.wrapper_module(renamed(wrapper)) is None
    reason = worker_compatibility.verdict(ANSIBLE_CORE_VERSION, renamed(wrapper), ENVIRONMENT_METHOD, str(tmp_path))
    assert reason.startswith('ansible-core %s: the AnsiballZ wrapper names its module with no ' % ANSIBLE_CORE_VERSION)
    assert reason.endswith("='...'")


def test_a_wrapper_that_runs_its_module_without_the_globals_a_module_process_reads_gives_the_reason(
        wrapper, monkeypatch):
    # Where those globals are set: in the wrapper before ansible-core 2.19, in the AnsiballZ loader from 2.19 on.
    monkeypatch.setattr(worker_compatibility, '_MODULE_GLOBALS', (b'_module_fqn=', b'_no_such_global='))
    assert worker_compatibility.wrapper_reason(wrapper).endswith('runs the module without the global _no_such_global')


def test_a_missing_name_of_ansible_module_utils_gives_the_reason(monkeypatch, wrapper):
    monkeypatch.delattr(basic, '_ANSIBLE_ARGS')
    assert worker_compatibility.module_side_reason() == 'ansible.module_utils.basic has no _ANSIBLE_ARGS'


def test_an_ansiballz_loader_that_takes_other_arguments_gives_the_reason(monkeypatch):
    class Loader:
        @staticmethod
        def run_module(json_params, profile):
            pass
    monkeypatch.setattr(basic, '_ANSIBLE_PROFILE', None, raising=False)
    monkeypatch.setattr(worker_compatibility, '_loader', lambda: Loader)
    assert worker_compatibility.module_side_reason() == (
        'ansible.module_utils._internal._ansiballz._loader.run_module takes no module_fqn, modlib_path, extensions '
        '(it takes json_params, profile)')


def test_an_environment_method_without_raw_environment_out_gives_the_reason():
    assert worker_compatibility.environment_method_reason(lambda self: '') == (
        'ActionBase._compute_environment_string takes no raw_environment_out (it takes self)')


def test_the_verdict_is_checked_once_per_ansible_core_version_and_kept(monkeypatch, wrapper, tmp_path):
    checked = []

    def counted(method):
        checked.append(method)
        return None
    monkeypatch.setattr(worker_compatibility, 'environment_method_reason', counted)
    directory = str(tmp_path)
    assert worker_compatibility.verdict('2.98.0', wrapper, ENVIRONMENT_METHOD, directory) is None
    assert worker_compatibility.verdict('2.98.0', renamed(wrapper), ENVIRONMENT_METHOD, directory) is None
    assert len(checked) == 1
    mismatch = worker_compatibility.verdict('2.99.0', renamed(wrapper), ENVIRONMENT_METHOD, directory)
    assert mismatch.startswith('ansible-core 2.99.0: the AnsiballZ wrapper names its module')
    # Kept too: a mismatch found once is the verdict of that version's later runs.
    assert worker_compatibility.verdict('2.99.0', wrapper, ENVIRONMENT_METHOD, directory) == mismatch
    assert len(checked) == 2
    kept = sorted(name.rsplit('-', 1)[0] for name in os.listdir(directory))
    assert kept == ['ansible-core-2.98.0', 'ansible-core-2.99.0']
    # Nowhere to keep it: checked each time.
    assert worker_compatibility.verdict('2.98.0', wrapper, ENVIRONMENT_METHOD, None) is None
    assert len(checked) == 3
