# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver_daemonsets module's work: bring the driver DaemonSets in line with the plan of driver.plan.

run() takes the module and a k8s.api.ClusterAPI (or any object with the same methods).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ..k8s.errors import APIError, TaskError
from ..k8s.views import NODE_INFO
from ..nodes.facts import node_facts
from ..operands.checks.daemonsets import daemonset_state
from ..operands.wait import wait_for_operands, wait_params
from ..registry.image_list import pod_template_images
from .changes import nodes_left_without_driver, plan_driver_changes
from .configs import missing_objects_refusal, named_objects
from .configurations import IMPLICIT_DEFAULT, NEXT_OWNER_LABEL, OWNER_LABEL, configuration_specs
from .dtk_image_lookup import dtk_images_as_pulled
from .names import COMPONENT_LABEL, MANAGED_BY, MANAGED_BY_LABEL, PlanError
from .plan import desired_driver_daemonsets
from .precompiled import checked_precompiled
from .revisions import would_run_differently
from .upgrade_plan import IN_PROGRESS, STATE_LABEL
from .versions import driver_downgrades, downgrade_refusal

MANAGED_DRIVERS_SELECTOR = '%s=%s,%s=nvidia-driver' % (MANAGED_BY_LABEL, MANAGED_BY, COMPONENT_LABEL)
FACTS_KEYS = ('name', 'labels', 'gpu_present', 'deploy_labels', 'kernel', 'os', 'rhcos_version', 'rhcos_label',
              'rhcos_os_image')
# Set by the API server; left out of diffs, where they would only be noise.
_SERVER_METADATA = ('uid', 'resourceVersion', 'generation', 'creationTimestamp', 'managedFields', 'selfLink')
_SERVER_ANNOTATIONS = ('deprecated.daemonset.template.generation',)


def given_node_facts(nodes):
    """Facts of nodes given to the module: Node objects (as k8s_info returns them) or nfd_labels' node facts."""
    facts_list = []
    for index, item in enumerate(nodes):
        if 'metadata' in item:
            facts_list.append(node_facts(item))
            continue
        missing = [key for key in FACTS_KEYS if key not in item]
        if missing:
            raise TaskError('nodes[%d] is neither a Node object (no metadata) nor node facts from nfd_labels '
                            '(no %s)' % (index, ', '.join(missing)))
        facts_list.append(item)
    return facts_list


def given_dtk_images(dtk_images):
    """DTK entries per RHCOS version from the dtk_images option: dtk_image_lookup's images, or plain references."""
    entries = {}
    for version, value in dtk_images.items():
        if isinstance(value, dict):
            if value.get('status') == 'resolved' and not value.get('image'):
                raise TaskError('dtk_images[%s] is resolved but has no image' % version)
            entries[version] = value
        else:
            entries[version] = {'image': value, 'source': 'override', 'status': 'resolved', 'history': [],
                                'message': 'DTK image for RHCOS %s given in dtk_images' % version}
    return entries


def _looked_up_dtk_images(module, api, facts_list, prepare_versions):
    """As dtk_image_lookup finds them (with dtk_overrides), warning about the images no node could pull."""
    versions = set(facts['rhcos_version'] for facts in facts_list if facts['gpu_present'] and facts['rhcos_version'])
    versions.update(prepare_versions)
    if not versions:
        return {}
    found = dtk_images_as_pulled(api, sorted(versions), module.params['dtk_overrides'])
    for problem in found['problems']:
        module.warn(problem)
    return found['images']


def _diffable(daemonset):
    """A DaemonSet without status and server-set metadata, for before/after diffs."""
    if not daemonset:
        return {}
    metadata = dict((key, value) for key, value in daemonset['metadata'].items() if key not in _SERVER_METADATA)
    annotations = dict((key, value) for key, value in (metadata.get('annotations') or {}).items()
                       if key not in _SERVER_ANNOTATIONS)
    if annotations:
        metadata['annotations'] = annotations
    else:
        metadata.pop('annotations', None)
    return {'apiVersion': daemonset.get('apiVersion', 'apps/v1'), 'kind': daemonset.get('kind', 'DaemonSet'),
            'metadata': metadata, 'spec': daemonset.get('spec')}


def _diff(name, before, after):
    return {'before_header': 'DaemonSet %s' % name, 'after_header': 'DaemonSet %s' % name,
            'before': _diffable(before), 'after': _diffable(after)}


def _delete(api, daemonset, result, diffs):
    """Delete a DaemonSet unless it changed since it was read; a changed one is kept, with the reason."""
    metadata = daemonset['metadata']
    try:
        api.delete_daemonset(metadata['namespace'], metadata['name'], metadata['uid'], metadata['resourceVersion'])
    except APIError as error:
        if error.status == 404:
            return
        if error.status != 409:
            raise
        result['kept'].append({'name': metadata['name'], 'reason': (
            'not deleted: it changed since it was read (resourceVersion %s), so its pods may have changed too; '
            'run again' % metadata['resourceVersion'])})
        return
    result['deleted'].append(metadata['name'])
    diffs.append(_diff(metadata['name'], daemonset, None))


def _blocked_error(plan, left):
    """The failure message for blocked versions that leave nodes without a driver."""
    parts = []
    for entry in plan['blocked']:
        stranded = [name for name in entry['nodes'] if name in left]
        if stranded:
            parts.append('%s: node(s) %s would be left without a driver: %s' % (
                entry['key'], ', '.join(stranded), entry['reason']))
    return ('driver DaemonSets left unchanged, because %s. Fix that and run again, or set allow_blocked: true to '
            'apply the other DaemonSets (DaemonSets that still serve nodes are kept either way)' % '; '.join(parts))


def _remove_all(module, api):
    """state=absent: delete every driver DaemonSet this collection manages in the namespace."""
    params = module.params
    owned = api.list_daemonsets(params['namespace'], MANAGED_DRIVERS_SELECTOR)
    result = {'changed': False, 'created': [], 'updated': [], 'unchanged': [], 'deleted': [], 'blocked': [],
              'kept': [], 'assignments': {}, 'left_without_driver': []}
    diffs = []
    if params['plan_only']:
        result['deleted'] = sorted(daemonset['metadata']['name'] for daemonset in owned)
    else:
        for daemonset in sorted(owned, key=lambda daemonset: daemonset['metadata']['name']):
            _delete(api, daemonset, result, diffs)
        result['changed'] = bool(result['deleted'])
    if module._diff:
        result['diff'] = diffs
    return result


def read_named_objects(api, spec, specs):
    """({ConfigMap name: [keys]}, {ConfigMap name: data}) of the ConfigMaps the driver option and its configurations name
    (configurations.configuration_specs), after refusing, before any write, a run whose ConfigMap or Secret does not
    exist in the namespace (configs.missing_objects_refusal()): the driver option's named by its role variable, a
    configuration's own by the configuration."""
    namespace = spec['namespace']
    found, config_map_keys, config_map_data = set(), {}, {}
    wanted = sorted(set((kind, name) for entry in specs for kind, name, _setting, _variable in named_objects(entry['spec'])))
    for kind, name in wanted:
        plural = 'configmaps' if kind == 'ConfigMap' else 'secrets'
        stored = api.read_optional('/api/v1/namespaces/%s/%s/%s' % (namespace, plural, name))[0]
        if stored is None:
            continue
        found.add((kind, name))
        if kind == 'ConfigMap':
            # As upstream, the keys of data are mounted; a Secret's values are never kept.
            config_map_keys[name] = sorted(stored.get('data') or {})
            config_map_data[name] = stored.get('data') or {}
    refusals = [missing_objects_refusal(spec, namespace, found)] + [
        missing_objects_refusal(entry['overrides'], namespace, found, entry['name']) for entry in specs
        if entry['name'] != IMPLICIT_DEFAULT]
    if any(refusals):
        raise TaskError('; '.join(refusal for refusal in refusals if refusal))
    return config_map_keys, config_map_data


def _plan(module, api):
    params = module.params
    if params['nodes'] is None:
        # The plan reads labels and status.nodeInfo only: NODE_INFO carries them, a small part of each Node.
        nodes = api.list_nodes(params['label_selector'], params['page_size'], view=NODE_INFO)
        facts_list = [node_facts(node) for node in nodes]
    else:
        facts_list = given_node_facts(params['nodes'])
    if params['dtk_images'] is None:
        dtk_images = ({} if params['mode'] == 'single'
                      else _looked_up_dtk_images(module, api, facts_list,
                                                 params['prepare_versions'] if params['mode'] == 'rhcos' else ()))
    else:
        dtk_images = given_dtk_images(params['dtk_images'])
    spec = dict((key, value) for key, value in (params['driver'] or {}).items() if value is not None)
    spec['namespace'] = params['namespace']
    available, checks = params['precompiled_available'], None
    if params['mode'] == 'kernel' and params['precompiled_registry_check'] is not None:
        available, checks = checked_precompiled(api, spec, facts_list, params['precompiled_registry_check'],
                                                params['prepare_versions'])
    try:
        specs = configuration_specs(spec, params['configurations'], params['gpudirect_images'])
        config_map_keys, config_map_data = read_named_objects(api, spec, specs)
        plan = desired_driver_daemonsets(params['daemonset_template'], spec, facts_list, dtk_images, params['mode'],
                                         available, params['prepare_versions'], config_map_keys,
                                         params['configurations'], params['gpudirect_images'], config_map_data)
        if checks is not None:
            plan['precompiled_checks'] = checks
        # Every DaemonSet of the namespace, not only labelled ones: one this collection did not create (the GPU
        # Operator's, of the same name) must be seen so that it is left alone rather than applied over.
        existing = api.list_daemonsets(params['namespace'])
        changes = plan_driver_changes(plan['desired'], existing, facts_list)
    except PlanError as error:
        raise TaskError('%s (object %s, field %s)' % (error, error.obj, error.field))
    return facts_list, plan, existing, changes


def outdated_driver_nodes(api, namespace, changes, plan):
    """{node: DaemonSet} of the nodes whose driver pod runs an older revision than its DaemonSet's newest, or would
    once this run's updates of DaemonSet pod templates are applied (OnDelete: a rollout must replace it), and of the
    nodes that move to another driver configuration (the DaemonSet they move to). Only a revision that runs
    differently counts (revisions.py): a new DRIVER_CONFIG_DIGEST or node selector alone does not."""
    pods = [pod for pod in api.list_pods(namespace, MANAGED_DRIVERS_SELECTOR)
            if not pod['metadata'].get('deletionTimestamp')]
    revisions = api.list_revisions(namespace, MANAGED_DRIVERS_SELECTOR)
    template_changes = set(desired['metadata']['name'] for existing, desired in changes['update']
                           if would_run_differently(desired['spec']['template'], existing['spec']['template']))
    outdated = {}
    for daemonset in api.list_daemonsets(namespace, MANAGED_DRIVERS_SELECTOR):
        name = daemonset['metadata']['name']
        state = daemonset_state(daemonset, pods, revisions, accept_outdated=True)
        nodes = [entry['node'] for entry in state['pods'] if entry['node']] if name in template_changes \
            else state.get('outdated', [])
        outdated.update((node, name) for node in nodes)
    outdated.update((node, plan['assignments'][node]['daemonset']) for node in plan['owner_changes']['move'])
    return outdated


def _facts_owned(facts_list, labelled):
    """The node facts as they are once this run has labelled the nodes without an owner."""
    return [dict(facts, labels=dict(facts['labels'], **{OWNER_LABEL: labelled[facts['name']]}))
            if facts['name'] in labelled else facts for facts in facts_list]


def _set_owners(api, owner_changes, facts_list):
    """Label the nodes without an owner; mark those that move for the rollout (NEXT_OWNER_LABEL), and unmark those
    whose move is no longer asked for. Returns the names of the nodes patched."""
    labels = dict((facts['name'], facts['labels']) for facts in facts_list)
    patches = dict((node, {OWNER_LABEL: owner}) for node, owner in owner_changes['label'].items())
    patches.update((node, {NEXT_OWNER_LABEL: move['to']}) for node, move in owner_changes['move'].items()
                   if labels[node].get(NEXT_OWNER_LABEL) != move['to'])
    patches.update((node, {NEXT_OWNER_LABEL: None}) for node in owner_changes['settled'])
    for node in sorted(patches):
        api.patch_node(node, {'metadata': {'labels': patches[node]}})
    return sorted(patches)


def upgrade_in_progress(facts_list):
    """The nodes a driver rollout left between its steps (or failed): with no outdated driver pod either, there is
    no rollout to plan."""
    return sorted(facts['name'] for facts in facts_list
                  if (facts.get('labels') or {}).get(STATE_LABEL) in IN_PROGRESS)


def run(module, api):
    params = module.params
    if params['state'] == 'absent':
        return _remove_all(module, api)
    facts_list, plan, existing, changes = _plan(module, api)
    # Nodes without an owner are labelled before any DaemonSet changes, so that the DaemonSets select them.
    left = nodes_left_without_driver(changes, plan['blocked'], _facts_owned(facts_list, plan['owner_changes']['label']))
    result = {
        'changed': False,
        'created': [daemonset['metadata']['name'] for daemonset in changes['create']],
        'updated': [desired['metadata']['name'] for _existing, desired in changes['update']],
        'unchanged': changes['unchanged'],
        'deleted': [],
        'blocked': plan['blocked'],
        'kept': [{'name': entry['name'], 'reason': entry['reason']} for entry in changes['keep']],
        'assignments': plan['assignments'],
        'images': pod_template_images(plan['desired']),
        'left_without_driver': left,
        'mismatched': plan['mismatched'],
        'prepared': plan['prepared'],
        'upgrade_in_progress': upgrade_in_progress(facts_list),
        'downgrades': driver_downgrades(plan['assignments'], existing, facts_list),
        'owners': plan['owners'],
        'moves': plan['owner_changes']['move'],
    }
    if 'precompiled_checks' in plan:
        result['precompiled_checks'] = plan['precompiled_checks']
    if left and not params['allow_blocked']:
        # The lists say what would have been done: under `plan`, so that no one reads them as done.
        raise TaskError(_blocked_error(plan, left), blocked=plan['blocked'], left_without_driver=left, plan=result)
    for warning in plan['warnings']:
        module.warn(warning)
    # A desired DaemonSet that is kept is one this collection does not manage: its nodes get no driver from here.
    desired_names = set(daemonset['metadata']['name'] for daemonset in plan['desired'])
    for entry in changes['keep']:
        if entry['name'] in desired_names:
            module.warn('DaemonSet %s: %s' % (entry['name'], entry['reason']))
    for entry in plan['blocked']:
        module.warn('driver for %s blocked, node(s) %s: %s' % (entry['key'], ', '.join(entry['nodes']), entry['reason']))
    if params['plan_only']:
        result['deleted'] = changes['delete']
        return result
    if result['downgrades'] and not params['allow_downgrade']:
        refusal = downgrade_refusal(result['downgrades'])
        raise TaskError('%s: set allow_downgrade: true to do it. Nothing was changed.' % refusal,
                        downgrades=result['downgrades'], downgrade_refusal=refusal, plan=result)
    if params['refuse_outdated'] or module.check_mode:
        outdated = outdated_driver_nodes(api, params['namespace'], changes, plan)
        result['outdated'] = outdated
        if outdated and params['refuse_outdated']:
            raise TaskError('driver pods run, or would run after this update, an outdated revision on %d node(s), '
                            'and refuse_outdated is set: %s. Nothing was changed.' % (len(outdated), ', '.join(
                                '%s (%s)' % (node, outdated[node]) for node in sorted(outdated))),
                            outdated=outdated, plan=result)
    diffs = []
    existing_by_name = dict((daemonset['metadata']['name'], daemonset) for daemonset in existing)
    applied = []
    try:
        if not module.check_mode:
            result['owner_labelled'] = _set_owners(api, plan['owner_changes'], facts_list)
        for before, desired in [(None, daemonset) for daemonset in changes['create']] + changes['update']:
            name = desired['metadata']['name']
            diffs.append(_diff(name, before, api.apply_daemonset(desired)))
            applied.append(name)
        for name in changes['delete']:
            _delete(api, existing_by_name[name], result, diffs)
    except APIError as error:
        raise TaskError('%s (before this failure: applied %s; deleted %s)' % (
            error, ', '.join(applied) or 'none', ', '.join(result['deleted']) or 'none'),
            status=error.status, plan=result)
    result['changed'] = bool(diffs or result.get('owner_labelled'))
    if module._diff:
        result['diff'] = diffs
    names = result['created'] + result['updated'] + result['unchanged']
    if params['wait'] is not None and names and not module.check_mode:
        try:
            result['status'] = wait_for_operands(
                wait_params('daemonsets', namespace=params['namespace'], names=names, **params['wait']), api)
        except TaskError as error:
            raise TaskError(str(error), status=error.result, **result)
    return result
