# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lookup accelerators.gpu.template (plugins/lookup/template.py) renders as ansible.builtin.template does, without
deep-copying every variable for each file. Every deploy of tests/cluster renders the roles' manifests with it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader, lookup_loader
from ansible.template import Templar
from ansible_collections.accelerators.gpu.plugins.lookup import template as template_lookup


@pytest.fixture(scope="module", autouse=True)
def plugin_configuration():
    """The builtin lookup's options, which Ansible's command-line tools load at start."""
    init_plugin_loader()


TEMPLATE = "kind: {{ kind }}\nname: {{ names[0] }}-{{ suffix }}\npath: {{ template_path | basename }}\n"


def render(builtin, template, variables, **options):
    """The template's text from the builtin lookup, or from this collection's."""
    loader = DataLoader()
    templar = Templar(loader=loader, variables=variables)
    if builtin:
        lookup = lookup_loader.get("ansible.builtin.template", loader=loader, templar=templar)
    else:
        lookup = template_lookup.LookupModule(loader=loader, templar=templar)
    return lookup.run([str(template)], variables, **options)


def test_the_lookup_renders_what_the_builtin_renders_and_leaves_the_callers_variables_alone(tmp_path):
    template = tmp_path / "object.yml.j2"
    template.write_text(TEMPLATE)
    variables = {"kind": "DaemonSet", "names": ["nvidia-device-plugin"], "suffix": "daemonset",
                 "ansible_search_path": [str(tmp_path)]}
    before = copy.deepcopy(variables)
    options = {"template_vars": {"suffix": "mps"}}

    ours = render(False, template, variables, **options)

    assert ours == render(True, template, variables, **options)
    assert ours == ["kind: DaemonSet\nname: nvidia-device-plugin-mps\npath: object.yml.j2\n"]
    # template_vars and template_path went into a copy: the caller's variables are what they were.
    assert variables == before


def test_the_lookups_copy_is_of_the_top_level_only(tmp_path, monkeypatch):
    template = tmp_path / "object.yml.j2"
    template.write_text(TEMPLATE)
    names = ["nvidia-device-plugin"]
    copies = []
    real_deepcopy = copy.deepcopy

    def recording_deepcopy(value, memo=None):
        made = real_deepcopy(value, memo)
        copies.append(made)
        return made

    # The name the builtin lookup's module calls.
    monkeypatch.setitem(type(lookup_loader.get("ansible.builtin.template")).run.__globals__, "deepcopy",
                        recording_deepcopy)

    render(False, template, {"kind": "DaemonSet", "names": names, "suffix": "x"})

    assert copies, "ansible.builtin.template no longer copies the variables: this lookup has no reason to be"
    assert all(made["names"] is names for made in copies)
