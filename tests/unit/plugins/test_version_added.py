# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Release hygiene: every version_added of the plugins' documentation (the plugin's, an option's, a returned
value's) is one the collection has reached (galaxy.yml's version), and the changelog's releases are galaxy.yml's
version and those before it, each plugin listed as new in the release its version_added names."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import os
import re

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# Where the documentation of each kind of plugin is: DOCUMENTATION (and RETURN) strings of Python files, or the keys
# of a YAML file (a filter's, since one Python file holds several filters).
PLUGIN_DIRECTORIES = ('modules', 'filter', 'lookup', 'connection', 'doc_fragments')
# The changelog's sections of new plugins: `modules` for modules, `plugins` by kind for the others.
CHANGELOG_KINDS = {'modules': 'module', 'filter': 'filter', 'lookup': 'lookup', 'connection': 'connection'}


def load_yaml(*path):
    with open(os.path.join(ROOT, *path)) as stream:
        return yaml.safe_load(stream)


def version(text):
    return tuple(int(part) for part in str(text).split('.'))


def collection_version():
    return load_yaml('galaxy.yml')['version']


def documentation_of(path):
    """{'DOCUMENTATION': ..., 'RETURN': ...} of a plugin file, each parsed, those it has."""
    if path.endswith('.yml'):
        data = load_yaml(path)
        return {section: data[section] for section in ('DOCUMENTATION', 'RETURN') if data.get(section)}
    with open(os.path.join(ROOT, path)) as stream:
        tree = ast.parse(stream.read(), path)
    # ast.walk also finds a doc fragment's class attributes.
    return {target.id: yaml.safe_load(node.value.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name)
            and target.id in ('DOCUMENTATION', 'RETURN') and isinstance(node.value, ast.Constant)}


def documented_plugins():
    """The path of every documented plugin file, relative to the checkout: plugins/<kind>/<file>."""
    found = []
    for kind in PLUGIN_DIRECTORIES:
        for name in sorted(os.listdir(os.path.join(ROOT, 'plugins', kind))):
            path = os.path.join('plugins', kind, name)
            # A filter's documentation is its .yml; its Python file holds the code of several filters.
            if name.endswith('.yml') or (name.endswith('.py') and kind != 'filter' and name != '__init__.py'):
                found.append(path)
    return found


def entries(specs, prefix):
    """(dotted name, spec) of each option or returned value, their suboptions and contained values included."""
    for name, spec in (specs or {}).items():
        yield prefix + name, spec
        for nested in ('suboptions', 'contains'):
            if isinstance(spec.get(nested), dict):
                yield from entries(spec[nested], prefix + name + '.')


def versions_added(path):
    """(what, version_added) of the plugin documented in path, of each of its options and returned values."""
    docs = documentation_of(path)
    documentation = docs.get('DOCUMENTATION') or {}
    if 'version_added' in documentation:
        yield path, documentation['version_added']
    for name, spec in entries(documentation.get('options'), path + ' option '):
        if 'version_added' in spec:
            yield name, spec['version_added']
    for name, spec in entries(docs.get('RETURN'), path + ' return value '):
        if 'version_added' in spec:
            yield name, spec['version_added']


def test_every_plugin_file_is_read():
    documented = documented_plugins()
    for kind in ('modules', 'filter', 'lookup', 'connection'):
        assert any(path.startswith('plugins/%s/' % kind) for path in documented), kind
    for path in documented:
        assert documentation_of(path), path + ' has no DOCUMENTATION'


def test_no_version_added_is_later_than_the_collection():
    reached = collection_version()
    later = ['%s: version_added %s' % (what, added) for path in documented_plugins()
             for what, added in versions_added(path) if version(added) > version(reached)]
    assert not later, 'later than galaxy.yml\'s version %s:\n%s' % (reached, '\n'.join(later))


def test_the_changelog_releases_galaxy_yml_version_last():
    releases = sorted(load_yaml('changelogs', 'changelog.yaml')['releases'], key=version)
    assert releases[-1] == collection_version(), releases
    with open(os.path.join(ROOT, 'CHANGELOG.md')) as stream:
        # antsibull-changelog's Markdown: a section "## v0\.1\.0" per release, newest first.
        headings = re.findall(r'^## v(\S+)$', stream.read(), re.M)
    assert [heading.replace('\\', '') for heading in headings] == releases[::-1]


def test_each_plugin_is_new_in_the_release_its_version_added_names():
    releases = load_yaml('changelogs', 'changelog.yaml')['releases']
    misplaced = []
    for path in documented_plugins():
        kind = path.split('/')[1]
        if kind not in CHANGELOG_KINDS:
            continue
        documentation = documentation_of(path)['DOCUMENTATION']
        name, added = documentation.get('module') or documentation['name'], str(documentation['version_added'])
        release = releases.get(added) or {}
        listed = release.get('modules') if kind == 'modules' else (release.get('plugins') or {}).get(kind)
        if name not in [plugin['name'] for plugin in listed or []]:
            misplaced.append('%s (%s %s): version_added %s' % (path, CHANGELOG_KINDS[kind], name, added))
    assert not misplaced, ('not listed as new in that release of changelogs/changelog.yaml '
                           '(antsibull-changelog release --update-existing):\n' + '\n'.join(misplaced))
