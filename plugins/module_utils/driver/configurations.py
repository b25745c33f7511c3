# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Named driver configurations, as the GPU Operator's NVIDIADriver resources divide the GPU nodes between drivers
(internal/nvidiadriver: node ownership): pure functions.

Each configuration states only what differs from the driver option (the common settings): its node selection, version,
image, kernel module type, configs, GPUDirect, env, resources... A configuration with `default: true` takes the GPU nodes
no other selects; without one, the driver option itself is the default configuration, named `default`. Every GPU node
carries the upstream owner label `nvidia.com/gpu-operator.driver.owner=<configuration>`, which each configuration's
DaemonSets select, so that two configurations never run a driver pod on one node.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ..nodes.facts import DRIVER_NEXT_OWNER_LABEL, DRIVER_OWNER_LABEL
from ..nodes.selection import affinity_matches
from .names import PlanError

OWNER_LABEL = DRIVER_OWNER_LABEL
# Ours (a label, which node facts carry): the configuration a node moves to, set when its owner must change, so that
# the rollout moves it node by node (cordon, evict, relabel, new driver, validate) rather than the DaemonSet
# controllers all at once.
NEXT_OWNER_LABEL = DRIVER_NEXT_OWNER_LABEL
IMPLICIT_DEFAULT = 'default'
# The settings of a configuration that override the driver option's; lists and dicts are merged as described in
# configuration_specs().
OVERRIDES = ('version', 'repository', 'image', 'branch', 'image_ref', 'image_pull_policy', 'image_pull_secrets',
             'kernel_module_type', 'repo_config', 'cert_config', 'kernel_module_config', 'secret_env', 'rdma',
             'use_host_mofed', 'resources', 'tolerations', 'priority_class_name', 'startup_probe', 'liveness_probe',
             'readiness_probe', 'manager')
# A configuration's name is part of its DaemonSets' names and the owner label's value.
_NAME_RE = re.compile(r'^[a-z0-9]([-a-z0-9]{0,28}[a-z0-9])?$')


def _selection_keys(configuration):
    keys = set(configuration.get('node_selector') or {})
    for term in _affinity_terms(configuration):
        keys.update(expression.get('key') for expression in term.get('matchExpressions') or [])
    return keys


def _affinity_terms(configuration):
    required = (configuration.get('node_affinity') or {}).get('requiredDuringSchedulingIgnoredDuringExecution') or {}
    return required.get('nodeSelectorTerms') or []


def _checked(configurations):
    """The configurations' names, after refusing what upstream refuses: a name that cannot be a label value and part
    of a DaemonSet name, two of one name, two defaults, a default with a selector, a selector on the owner label."""
    problems, names = [], []
    defaults = [c['name'] for c in configurations if c.get('default')]
    for configuration in configurations:
        name = configuration.get('name') or ''
        if not _NAME_RE.match(name):
            problems.append('driver configuration %r: a name is 1-30 lower-case alphanumerics and "-", alphanumeric '
                            'at both ends (it is the value of %s and part of its DaemonSet names)' % (name, OWNER_LABEL))
        elif name in names:
            problems.append('two driver configurations are named %s: give each its own name' % name)
        names.append(name)
        if OWNER_LABEL in _selection_keys(configuration):
            problems.append('driver configuration %s selects nodes by %s, the label this collection sets from the '
                            'configurations themselves: select by another label' % (name, OWNER_LABEL))
        if configuration.get('default') and (configuration.get('node_selector') or _affinity_terms(configuration)):
            problems.append('driver configuration %s is the default and has a node selection: the default takes the '
                            'GPU nodes no other configuration selects; remove its node_selector and node_affinity'
                            % name)
        if not configuration.get('default') and not (configuration.get('node_selector') or
                                                     _affinity_terms(configuration)):
            problems.append('driver configuration %s selects no node: give it a node_selector or node_affinity, or '
                            'make it the default (default: true)' % name)
    if len(defaults) > 1:
        problems.append('driver configurations %s are all default: at most one may be (default: true), the fallback '
                        'for GPU nodes no other configuration selects' % ', '.join(defaults))
    if IMPLICIT_DEFAULT in names and not defaults:
        problems.append('driver configuration default: that name is the implicit default configuration\'s (the '
                        'common driver settings); name it otherwise, or make it the default (default: true)')
    if problems:
        raise PlanError('; '.join(problems), obj='driver configurations', field='configurations')
    return names


def _merged(spec, configuration, gpudirect_images):
    merged = dict(spec)
    for key in OVERRIDES:
        if configuration.get(key) is not None:
            merged[key] = configuration[key]
    # env: the common entries, then the configuration's (a later entry of a name replaces an earlier one).
    merged['env'] = list(spec.get('env') or []) + list(configuration.get('env') or [])
    for key in ('labels', 'annotations'):
        merged[key] = dict(spec.get(key) or {}, **(configuration.get(key) or {}))
    for setting in ('gds', 'gdrcopy'):
        if configuration.get(setting) is not None:
            merged[setting + '_image'] = gpudirect_images.get(setting) if configuration[setting] else None
    if configuration.get('use_precompiled') and configuration.get('version') and not configuration.get('branch'):
        # As upstream's version of a precompiled NVIDIADriver: the branch of its images.
        merged['branch'] = configuration['version']
    if configuration.get('image_ref') is None and configuration.get('version') is not None:
        # A configuration's version names its image, not the common image_ref.
        merged.pop('image_ref', None)
    return merged


def configuration_specs(spec, configurations, gpudirect_images=None):
    """The driver specs of the configurations, in order, the default last: a list of {name, default, spec,
    overrides (the settings it gives itself), use_precompiled, node_selector, node_affinity_terms}. spec: the driver option (the common settings);
    configurations: the module's configurations option; gpudirect_images: {gds, gdrcopy} images a configuration
    with gds or gdrcopy true runs. Without a default configuration the driver option is one, named default."""
    configurations = list(configurations or [])
    _checked(configurations)
    if not any(c.get('default') for c in configurations):
        configurations.append({'name': IMPLICIT_DEFAULT, 'default': True})
    result = []
    for configuration in sorted(configurations, key=lambda c: bool(c.get('default'))):
        merged = _merged(spec, configuration, gpudirect_images or {})
        merged['configuration'] = configuration['name']
        merged['default_configuration'] = bool(configuration.get('default'))
        result.append({'name': configuration['name'], 'default': bool(configuration.get('default')), 'spec': merged,
                       'overrides': dict((key, value) for key, value in configuration.items()
                                         if key in OVERRIDES and value is not None),
                       'use_precompiled': configuration.get('use_precompiled'),
                       'node_selector': dict(configuration.get('node_selector') or {}),
                       'node_affinity_terms': _affinity_terms(configuration)})
    return result


def _selects(configuration, labels):
    return (all(labels.get(key) == value for key, value in configuration['node_selector'].items())
            and affinity_matches(configuration['node_affinity_terms'], labels))


def node_owners(specs, nodes_facts):
    """{node: configuration name} of the GPU nodes (node_facts), as upstream decides: a configuration that selects the
    node wins over the default. A node two non-default configurations select is refused (a PlanError naming the nodes
    and the configurations, before any change), as upstream fails closed."""
    owners, overlaps = {}, []
    default = [entry['name'] for entry in specs if entry['default']]
    for facts in nodes_facts:
        labels = dict(facts['labels'])
        labels.pop(OWNER_LABEL, None)
        matching = [entry['name'] for entry in specs if not entry['default'] and _selects(entry, labels)]
        if len(matching) > 1:
            overlaps.append('node %s is selected by driver configurations %s' % (facts['name'], ', '.join(matching)))
        owners[facts['name']] = matching[0] if matching else default[0]
    if overlaps:
        raise PlanError('%s: one driver runs per node, so each GPU node may be selected by one configuration at most '
                        '(and the default takes the rest); narrow their node_selector or node_affinity'
                        % '; '.join(overlaps), obj='driver configurations', field='node_selector')
    return owners


def owner_changes(owners, nodes_facts):
    """What the owners need on the nodes: {'label': {node: owner}} for nodes without an owner yet (labelled at once:
    no driver pod of another configuration runs there), {'move': {node: {'from': owner, 'to': owner}}} for nodes
    owned by another configuration (moved by the rollout), and {'settled': [nodes]} whose move was asked for and is
    no longer needed (their owner is the desired one again)."""
    changes = {'label': {}, 'move': {}, 'settled': []}
    for facts in nodes_facts:
        name = facts['name']
        if name not in owners:
            continue
        current = facts['labels'].get(OWNER_LABEL)
        next_owner = facts['labels'].get(NEXT_OWNER_LABEL)
        if current is None:
            changes['label'][name] = owners[name]
        elif current != owners[name]:
            changes['move'][name] = {'from': current, 'to': owners[name]}
        elif next_owner is not None:
            changes['settled'].append(name)
    return changes
