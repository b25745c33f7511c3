# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the module worker relies on in ansible-core beyond its public interface, checked once per ansible-core version.

- ActionBase._compute_environment_string(raw_environment_out=...): the task's environment, which the modules' action
  hands the worker with the module (plugins/plugin_utils/worker_action.py).
- The text of the AnsiballZ wrapper the worker runs: the line _ANSIBALLZ_WRAPPER = True, and the module it runs,
  module_fqn='...' (ansible-core 2.19 on) or runpy's mod_name='...' (before), which the worker's log names.
- What a module process hands the worker (runner/worker.py, forward) and the worker runs its module with
  (runner/worker_process.py): ansible.module_utils.basic._ANSIBLE_ARGS (and _ANSIBLE_PROFILE, 2.19 on), the globals
  _module_fqn and _modlib_path the module is run with, and, 2.19 on,
  ansible.module_utils._internal._ansiballz._loader.run_module and the keyword arguments it takes.

verdict() checks them all with the first wrapper handed over under an ansible-core version and keeps its answer, by
that version, in the user's private worker directory: None when everything is as expected, else the reason, and the
modules then run as Ansible runs them. module_side_reason() is the part a module process checks itself.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import inspect
import json
import os
import re

from . import worker_process

# The keyword arguments the worker gives the AnsiballZ loader's run_module (ansible-core 2.19 on).
LOADER_ARGUMENTS = ('json_params', 'profile', 'module_fqn', 'modlib_path', 'extensions')
ANSIBALLZ_WRAPPER = re.compile(br'^_ANSIBALLZ_WRAPPER = True\b', re.M)
# How a wrapper names the module it runs: its FQCN's Python module, e.g.
# ansible_collections.kubernetes.core.plugins.modules.k8s_info or ansible.modules.command.
_MODULE_NAMED = {'module_fqn': re.compile(br"\bmodule_fqn=['\"]([\w.]+)['\"]"),
                 'mod_name': re.compile(br"\bmod_name=['\"]([\w.]+)['\"]")}
# The globals a module is run with, which runner/worker.py's forward reads, as the code that sets them says them.
_MODULE_GLOBALS = (b'_module_fqn=', b'_modlib_path=')


def _loader():
    """The AnsiballZ loader of this ansible.module_utils (ansible-core 2.19 on), or None (before 2.19)."""
    try:
        from ansible.module_utils._internal._ansiballz import _loader as loader
    except ImportError:
        return None
    return loader


def module_side_reason():
    """None when this ansible.module_utils lets the worker run a module process's module as AnsiballZ does; else
    the reason."""
    from ansible.module_utils import basic
    loader = _loader()
    names = ('_ANSIBLE_ARGS', '_ANSIBLE_PROFILE') if loader is not None else ('_ANSIBLE_ARGS',)
    missing = [name for name in names if not hasattr(basic, name)]
    if missing:
        return 'ansible.module_utils.basic has no %s' % ', '.join(missing)
    if loader is None:
        return None
    try:
        parameters = inspect.signature(loader.run_module).parameters
    except (AttributeError, TypeError, ValueError) as error:
        return 'ansible.module_utils._internal._ansiballz._loader.run_module: %s' % error
    missing = [name for name in LOADER_ARGUMENTS if name not in parameters]
    if missing:
        return ('ansible.module_utils._internal._ansiballz._loader.run_module takes no %s (it takes %s)'
                % (', '.join(missing), ', '.join(parameters)))
    return None


def wrapper_module(wrapper):
    """The module an AnsiballZ wrapper runs, as a task names it (kubernetes.core.k8s_info, ansible.builtin.command);
    None when the wrapper does not name it the way this ansible-core's wrapper does."""
    named = _MODULE_NAMED[_module_keyword()].search(wrapper)
    if not named:
        return None
    name = named.group(1).decode('ascii')
    if name.startswith('ansible.modules.'):
        return 'ansible.builtin.' + name[len('ansible.modules.'):]
    if name.startswith('ansible_collections.'):
        return name[len('ansible_collections.'):].replace('.plugins.modules.', '.')
    return name


def _module_keyword():
    return 'module_fqn' if _loader() is not None else 'mod_name'


def wrapper_reason(wrapper):
    """None when wrapper, an AnsiballZ wrapper of this ansible-core, reads as the worker expects; else the reason."""
    if not ANSIBALLZ_WRAPPER.search(wrapper):
        return 'the AnsiballZ wrapper has no line _ANSIBALLZ_WRAPPER = True'
    if wrapper_module(wrapper) is None:
        return "the AnsiballZ wrapper names its module with no %s='...'" % _module_keyword()
    loader = _loader()
    # Before 2.19 the wrapper runs the module with these globals itself; from 2.19 on the loader does.
    text, where = (wrapper, 'the AnsiballZ wrapper') if loader is None else (
        inspect.getsource(loader).encode('utf-8'), 'ansible.module_utils._internal._ansiballz._loader')
    missing = [name.decode('ascii').rstrip('=') for name in _MODULE_GLOBALS if name not in text]
    if missing:
        return '%s runs the module without the global %s' % (where, ', '.join(missing))
    return None


def environment_method_reason(method):
    """None when method, ActionBase._compute_environment_string, takes raw_environment_out; else the reason."""
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError) as error:
        return 'ActionBase._compute_environment_string: %s' % error
    if 'raw_environment_out' not in parameters:
        return ('ActionBase._compute_environment_string takes no raw_environment_out (it takes %s)'
                % (', '.join(parameters) or 'no argument'))
    return None


def verdict(version, wrapper, environment_method, directory):
    """None when ansible-core version offers the worker what it relies on, else the reason; checked with wrapper (an
    AnsiballZ wrapper of that version) and environment_method (ActionBase._compute_environment_string) once, and
    kept in directory (the user's private worker directory; None: kept nowhere)."""
    kept = os.path.join(directory, 'ansible-core-%s-%s.json' % (version, _checks_digest())) if directory else None
    if kept:
        try:
            with open(kept) as handle:
                return json.load(handle)['reason']
        except (OSError, ValueError, KeyError, TypeError):
            pass
    reason = environment_method_reason(environment_method) or module_side_reason() or wrapper_reason(wrapper)
    if reason:
        reason = 'ansible-core %s: %s' % (version, reason)
    if kept:
        staging = '%s.%d' % (kept, os.getpid())
        with open(staging, 'w') as handle:
            json.dump({'reason': reason}, handle)
        os.rename(staging, kept)
    return reason


def _checks_digest():
    """This file's digest: a verdict kept by an earlier version of these checks is not used."""
    return hashlib.sha256(worker_process.module_source(__name__, globals()).encode('utf-8')).hexdigest()[:12]
