"""TEMPORARY (removed with the dict builders): every driver plan the tests make is also made by the dict builders of
commit 13e0be4 (driver_plan.py, gpudirect.py, proxy.py as they were), and the two must be equal: the same DaemonSets,
compared as canonical JSON (so True is not 1, and '1' is not 1), the same assignments, warnings and errors.

Load with: python -m pytest -p legacy_driver_comparison (tests/ on PYTHONPATH)."""

import json
import subprocess
import sys
import types

from ansible_collections.accelerators.gpu.plugins.action.driver_daemonsets import driver_daemonset_template
from ansible_collections.accelerators.gpu.plugins.module_utils import driver_plan

LEGACY_COMMIT = '13e0be4'
PACKAGE = 'ansible_collections.accelerators.gpu.plugins.module_utils.'
ROLE_TEMPLATE = driver_daemonset_template()
FIGURES = {'calls': 0, 'plans': 0, 'daemonsets': 0, 'errors': 0}


def _legacy(name, replaced=()):
    source = subprocess.check_output(['git', 'show', '%s:plugins/module_utils/%s.py' % (LEGACY_COMMIT, name)], text=True)
    for old, new in replaced:
        assert old in source, old
        source = source.replace(old, new)
    module = types.ModuleType('legacy_' + name)
    sys.modules['legacy_' + name] = module
    exec(compile(source, 'legacy_%s.py' % name, 'exec'), module.__dict__)
    return module


_legacy('gpudirect')
_legacy('proxy')
LEGACY = _legacy('driver_plan', [(PACKAGE + 'gpudirect import', 'legacy_gpudirect import'),
                                 (PACKAGE + 'proxy import', 'legacy_proxy import')])


def canonical(value):
    return json.dumps(value, sort_keys=True)


def compared(template, spec, *args, **kwargs):
    if template != ROLE_TEMPLATE:
        return NEW(template, spec, *args, **kwargs)  # a test's broken template: no builder to compare with
    FIGURES['calls'] += 1
    try:
        rendered = NEW(template, spec, *args, **kwargs)
    except driver_plan.PlanError as error:
        rendered_error = (str(error), error.obj, error.field)
    else:
        rendered_error = None
    try:
        built = LEGACY.desired_driver_daemonsets(spec, *args, **kwargs)
    except LEGACY.PlanError as error:
        assert rendered_error == (str(error), error.obj, error.field)
        FIGURES['errors'] += 1
        raise driver_plan.PlanError(*rendered_error[:1], obj=rendered_error[1], field=rendered_error[2])
    assert rendered_error is None, rendered_error
    for old, new in zip(built['desired'], rendered['desired']):
        assert canonical(old) == canonical(new), (old['metadata']['name'], canonical(old), canonical(new))
    assert canonical(built) == canonical(rendered)
    FIGURES['plans'] += 1
    FIGURES['daemonsets'] += len(rendered['desired'])
    return rendered


NEW = driver_plan.desired_driver_daemonsets
driver_plan.desired_driver_daemonsets = compared


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(
        'legacy comparison: %(calls)d plans made, %(plans)d equal (%(daemonsets)d DaemonSets, compared as canonical '
        'JSON), %(errors)d equal plan errors' % FIGURES)
