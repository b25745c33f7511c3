# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ansible.builtin.template, without a deep copy of every variable for each file it renders."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: template
short_description: Render templates as ansible.builtin.template does, without copying every variable per file
version_added: 0.1.0
author: accelerators.gpu developers (@accelerators-gpu)
description:
  - Renders each template file and returns its text, exactly as the lookup P(ansible.builtin.template#lookup), to
    which it hands the terms and every option.
  - That lookup deep-copies all the task's variables for each file it renders, so that the variables it adds
    (C(template_path), O(template_vars)...) stay out of the caller's. A role's variables, their defaults and the
    results it registered make that copy cost more than the rendering; the roles of this collection render two dozen
    manifests per run. This lookup hands the variables over so that the copy is of their top level only, which is all
    the builtin lookup changes; the values themselves are read, not copied.
options:
  _terms:
    description: The template files, found as ansible.builtin.template finds them (the role's C(templates) first).
    type: list
    elements: path
    required: true
  template_vars:
    description:
      - Variables the templates see besides the task's.
      - Every other option of P(ansible.builtin.template#lookup) (C(convert_data), C(variable_start_string)...) is
        passed to it as given.
    type: dict
    default: {}
seealso:
  - plugin: ansible.builtin.template
    plugin_type: lookup
"""

EXAMPLES = r"""
- name: A role's DaemonSet and its ConfigMap, applied as one list of objects
  accelerators.gpu.operand:
    definitions: "{{ query('accelerators.gpu.template', 'configmap.yml.j2', 'daemonset.yml.j2')
                     | map('ansible.builtin.from_yaml_all') | flatten(levels=1) | select | list }}"
    wait_for: daemonsets

- name: The same template for a second service account
  ansible.builtin.set_fact:
    mps_service_account: "{{ lookup('accelerators.gpu.template', 'serviceaccount.yml.j2',
                                    template_vars={'common_service_account': 'nvidia-device-plugin-mps-control-daemon'}) }}"
"""

RETURN = r"""
_raw:
  description: The text of each template, rendered.
  type: list
  elements: str
"""

from ansible.plugins.loader import lookup_loader
from ansible.plugins.lookup import LookupBase


class _CopiedAtTopLevel(dict):
    """Task variables whose deep copy is a copy of the mapping alone, sharing its values."""

    def __deepcopy__(self, memo):
        return dict(self)


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        builtin = lookup_loader.get('ansible.builtin.template', loader=self._loader, templar=self._templar)
        return builtin.run(terms, _CopiedAtTopLevel(variables or {}), **kwargs)
