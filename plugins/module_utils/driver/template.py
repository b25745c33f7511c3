# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A role's manifest template rendered inside a module: the Jinja2 text of one YAML document, rendered as Ansible's
template lookup renders it (trim_blocks) and loaded, so that a module plans objects from what it reads in the cluster
and a role's template still says what they look like.

Undefined variables fail, and the one filter the templates use is to_json (a value as a JSON scalar, list or mapping,
which YAML reads back as it was). Jinja2 and PyYAML come with ansible-core; they are imported when a template is
compiled, not with this file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import json


class ManifestTemplateError(ValueError):
    """A template that does not compile, or does not render a YAML mapping, with these variables."""


class ManifestTemplate:
    """A template compiled once, rendered for each set of variables."""

    def __init__(self, text, name='template'):
        self.name = name
        self._template = _compiled(text, name)

    def render(self, variables):
        """The object the template renders for variables (a dict)."""
        import jinja2
        import yaml
        try:
            text = self._template.render(variables)
        except jinja2.TemplateError as error:
            raise ManifestTemplateError('%s: %s' % (self.name, error))
        try:
            rendered = yaml.load(text, Loader=getattr(yaml, 'CSafeLoader', yaml.SafeLoader))
        except yaml.YAMLError as error:
            raise ManifestTemplateError('%s does not render YAML: %s' % (self.name, error))
        if not isinstance(rendered, dict):
            raise ManifestTemplateError('%s renders %s, not a mapping' % (self.name, type(rendered).__name__))
        return rendered


# Compiling costs about 30 ms of CPU, 10-20 renders: a process that plans again with the same text (the tests)
# compiles it once.
@functools.lru_cache(maxsize=4)
def _compiled(text, name):
    import jinja2
    environment = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined, autoescape=False)
    environment.filters['to_json'] = json.dumps
    try:
        return environment.from_string(text)
    except jinja2.TemplateSyntaxError as error:
        raise ManifestTemplateError('%s, line %s: %s' % (name, error.lineno, error.message))
