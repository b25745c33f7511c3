# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.driver.template import (
    ManifestTemplate, ManifestTemplateError)

TEMPLATE = '''kind: ConfigMap
metadata:
  name: {{ name | to_json }}
  labels: {{ labels | to_json }}
data:
{% for key in keys %}
  {{ key }}: "true"
{% endfor %}
{% if mode %}
  mode: {{ mode | to_json }}
{% endif %}
'''


def test_blocks_leave_no_line_behind_and_to_json_keeps_each_value_as_it_was():
    rendered = ManifestTemplate(TEMPLATE).render(
        {'name': 'on', 'labels': {'a': 'true', 'b': '0755', 'c': 'x: y # z'}, 'keys': ['k1', 'k2'], 'mode': 1})
    assert rendered == {'kind': 'ConfigMap', 'metadata': {'name': 'on', 'labels': {
        'a': 'true', 'b': '0755', 'c': 'x: y # z'}}, 'data': {'k1': 'true', 'k2': 'true', 'mode': 1}}


def test_an_undefined_variable_fails_naming_the_template_and_the_variable():
    with pytest.raises(ManifestTemplateError) as error:
        ManifestTemplate(TEMPLATE, 'daemonset_template').render({'name': 'n', 'labels': {}, 'keys': []})
    assert str(error.value) == "daemonset_template: 'mode' is undefined"


@pytest.mark.parametrize('text, message', [
    ('kind: x\n{% if %}\n', 'daemonset_template, line 2: '),
    ('kind: [x\n', 'daemonset_template does not render YAML: '),
    ('- kind\n', 'daemonset_template renders list, not a mapping'),
])
def test_a_template_that_renders_no_object_fails_saying_why(text, message):
    with pytest.raises(ManifestTemplateError) as error:
        ManifestTemplate(text, 'daemonset_template').render({})
    assert str(error.value).startswith(message)
