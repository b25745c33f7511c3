# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure planning of NVIDIA driver DaemonSets: which must exist (one per RHCOS build, built with its Driver Toolkit;
one per kernel and OS with a precompiled image; or one for all GPU nodes), each rendered from the driver role's
template (roles/driver/templates/daemonset.yml.j2) with the variables planned here.

Inputs are node facts (node_facts.node_facts) and DTK images (dtk.resolve_dtk_images()['versions']). Names and labels
are names.py's; comparing the plan with the DaemonSets that exist is changes.py's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ..nodes.facts import (
    DEPLOY_LABEL_PREFIX, KERNEL_LABEL, OPERANDS_SWITCH, OS_RELEASE_PREFIX, OSTREE_LABEL, sanitize_label_value)
from .configs import config_volumes
from .configurations import OWNER_LABEL, configuration_specs, node_owners, owner_changes
from .digest import config_data_digest, set_config_digest
from .gpudirect import GPUDirectError, side_images
from .kernel_modules import kernel_module_refusals
from .names import (
    COMPONENT_LABEL, DRIVER_DAEMONSET, MANAGED_BY, MANAGED_BY_LABEL, PlanError, build_image, check_label_values,
    driver_daemonset_name, os_tag, precompiled_daemonset_name, precompiled_image, rhcos_os_tag, single_daemonset_name)
from .template import ManifestTemplate, ManifestTemplateError

MODES = ('rhcos', 'kernel', 'single')
DRIVER_DEPLOY_LABEL = DEPLOY_LABEL_PREFIX + 'driver'
PRE_INSTALLED = 'pre-installed'
DTK_LABEL = 'openshift.driver-toolkit'
DTK_RHCOS_LABEL = 'openshift.driver-toolkit.rhcos'
PRECOMPILED_LABEL = 'nvidia.com/precompiled'
OS_ID_LABEL = OS_RELEASE_PREFIX + 'ID'
OS_VERSION_LABEL = OS_RELEASE_PREFIX + 'VERSION_ID'
# The settings of the driver option the template reads as driver.<setting>.
TEMPLATE_SETTINGS = ('image_pull_policy', 'image_pull_secrets', 'env', 'resources', 'tolerations', 'annotations',
                     'startup_probe', 'liveness_probe', 'readiness_probe', 'service_account_name',
                     'priority_class_name', 'manager', 'trusted_ca_config_map', 'rdma', 'use_host_mofed',
                     'kernel_module_type', 'repo_config', 'cert_config', 'kernel_module_config', 'secret_env')


def _require(spec, keys, mode):
    missing = [key for key in keys if not spec.get(key)]
    if missing:
        raise PlanError('mode %s needs %s in the driver spec' % (mode, ', '.join(missing)),
                        obj='driver spec', field=missing[0])


def _template_settings(spec):
    """The driver option's settings the template reads (roles/driver/templates/daemonset.yml.j2), None where not
    given."""
    settings = dict((key, spec.get(key)) for key in TEMPLATE_SETTINGS)
    if settings['manager']:
        settings['manager'] = {'image': settings['manager']['image'], 'env': settings['manager'].get('env')}
    return settings


def _daemonset(spec, name, build_labels, node_selector, image, os_tag_value, kernels=(), dtk=None):
    """The template variables of one driver DaemonSet. build_labels and node_selector: the build's, over
    driver.labels and driver.node_selector; kernels restricts it to nodes whose kernel label is in the list; dtk:
    {image, rhcos} of a DTK build's side-car; os_tag_value: the osTag of its driver image, which GPUDirect Storage's
    and GDRCopy's images take too."""
    labels = dict(spec.get('labels') or {})
    labels.update({'app': name, COMPONENT_LABEL: 'nvidia-driver', MANAGED_BY_LABEL: MANAGED_BY})
    labels.update(build_labels)
    selector = dict(spec.get('node_selector') or {})
    selector.update(node_selector)
    # The nodes of its configuration only (configurations.py): two configurations never both run a pod on one node.
    selector[OWNER_LABEL] = spec['configuration']
    check_label_values(labels, name, 'metadata.labels')
    check_label_values(selector, name, 'spec.template.spec.nodeSelector')
    precompiled = labels[PRECOMPILED_LABEL] == 'true'
    try:
        images = side_images(spec, name, os_tag_value, precompiled)
    except GPUDirectError as error:
        raise PlanError(str(error), obj=name, field=error.field)
    configs = config_volumes(spec, spec.get('config_map_keys') or {}, os_tag_value, precompiled, name)
    data = spec.get('config_map_data') or {}
    return dict(images, name=name, namespace=spec['namespace'], labels=labels, node_selector=selector,
                kernels=list(kernels), image=image, dtk=dtk, prepared_for=None, driver=_template_settings(spec),
                config_volumes=configs['volumes'], config_mounts=configs['mounts'],
                config_data=config_data_digest(dict((volume['name'], data[volume['name']])
                                                    for volume in configs['volumes'] if volume['name'] in data)))


def _rendered(template, variables):
    """The DaemonSet the template renders, each container's env with one entry per name (a later entry replaces an
    earlier one in its place, as the template's header says), and the digest of its install settings
    (DRIVER_CONFIG_DIGEST, digest.py) on the containers the GPU Operator sets it on."""
    try:
        daemonset = template.render(variables)
    except ManifestTemplateError as error:
        raise PlanError(str(error), obj=variables['name'], field='daemonset_template')
    pod_spec = daemonset['spec']['template']['spec']
    volumes = [volume['name'] for volume in pod_spec.get('volumes') or []]
    clashing = sorted(set(name for name in volumes if volumes.count(name) > 1))
    if clashing:
        # A configuration's volume is named after its ConfigMap, as upstream names it.
        raise PlanError('two volumes of the pod are named %s: name the ConfigMap otherwise' % ', '.join(clashing),
                        obj=variables['name'], field='spec.template.spec.volumes')
    for container in pod_spec['containers'] + pod_spec.get('initContainers', []):
        if 'env' in container:
            env = []
            for entry in container['env']:
                names = [known['name'] for known in env]
                if entry['name'] in names:
                    env[names.index(entry['name'])] = entry
                else:
                    env.append(entry)
            container['env'] = env
    # A changed module parameter or repository file changes what is installed although the pod spec does not.
    set_config_digest(pod_spec, variables.get('config_data'))
    return daemonset


def _names(members):
    return [facts['name'] for facts in members]


def _block(plan, key, members, reason):
    plan['blocked'].append({'key': key, 'nodes': _names(members), 'reason': reason})
    for facts in members:
        plan['assignments'][facts['name']] = {'daemonset': None, 'build': 'blocked', 'reason': reason}


def _note_mismatches(plan, members, kind):
    """Report nodes whose NFD label (what the selector sees) differs from what they run."""
    for facts in members:
        if kind == 'rhcos':
            label, effective, key = facts['rhcos_label'], facts['rhcos_version'], OSTREE_LABEL
        else:
            label, effective, key = facts['kernel']['full'], facts['kernel']['effective'], KERNEL_LABEL
        if label == effective:
            continue
        if label is None:
            consequence = 'no driver DaemonSet selects it until NFD labels it'
        elif kind == 'rhcos':
            consequence = ('DaemonSet %s-%s selects it, so its driver pod would build against the DTK of %s and '
                           'not load' % (DRIVER_DAEMONSET, label, label))
        else:
            consequence = 'the DaemonSet for kernel %s selects it, so its driver pod would not load' % label
        message = ('node %s: label %s=%s but the node runs %s: %s; wait for NFD to relabel it (sleepInterval) or '
                   'restart nfd-worker on it' % (facts['name'], key, label, effective, consequence))
        plan['mismatched'].append({'node': facts['name'], 'label': label, 'effective': effective,
                                   'message': message})
        plan['warnings'].append(message)


def _named(spec):
    """The configuration whose name the DaemonSets carry: None for the default one, whose DaemonSets keep the names
    they had before configurations (an upgrade of the collection renames nothing)."""
    return None if spec['default_configuration'] else spec['configuration']


def _dtk_daemonset(spec, rhcos, image, dtk_image, kernels=()):
    return _daemonset(
        spec, driver_daemonset_name(rhcos, _named(spec)), {DTK_LABEL: 'true', DTK_RHCOS_LABEL: rhcos, PRECOMPILED_LABEL: 'false'},
        {OSTREE_LABEL: rhcos, DRIVER_DEPLOY_LABEL: 'true'}, image, rhcos_os_tag(rhcos, field=OSTREE_LABEL), kernels,
        {'image': dtk_image, 'rhcos': rhcos})


def _dtk_message(dtk_images, rhcos):
    entry = dtk_images.get(rhcos) or {}
    if entry.get('status') == 'resolved':
        return None
    return entry.get('message') or 'RHCOS %s was not looked up in the DTK image stream' % rhcos


def _add_dtk_build(spec, plan, rhcos, members, dtk_images, kernels=(), why=''):
    """Add the DTK build DaemonSet of one RHCOS version, or block its nodes; True when added."""
    unresolved = _dtk_message(dtk_images, rhcos)
    if unresolved:
        _block(plan, rhcos, members, why + unresolved)
        return False
    entry = dtk_images[rhcos]
    # The tag from the build, not from the nodes' os-release labels: a node just booted into the build keeps the
    # labels of the one it left until NFD relabels it, and the tag must not change with the order of the nodes.
    image = build_image(spec, rhcos_os_tag(rhcos, field=OSTREE_LABEL))
    daemonset = _dtk_daemonset(spec, rhcos, image, entry['image'], kernels)
    name = daemonset['name']
    plan['desired'].append(daemonset)
    for facts in members:
        plan['assignments'][facts['name']] = {'daemonset': name, 'build': 'dtk', 'image': image,
                                              'dtk_image': entry['image']}
    _note_mismatches(plan, members, 'rhcos')
    return True


def _groups(members, key):
    groups = {}
    for facts in members:
        groups.setdefault(key(facts), []).append(facts)
    return sorted(groups.items(), key=lambda item: str(item[0]))


def _plan_rhcos(spec, nodes, dtk_images, precompiled_available, plan, prepare_versions=()):
    _require(spec, () if spec.get('image_ref') else ('repository', 'version'), 'rhcos')
    groups = _groups(nodes, lambda facts: facts['rhcos_version'])
    for rhcos, members in groups:
        if rhcos is None:
            _block(plan, 'unknown', members, 'no RHCOS version (osImage has none, no OSTREE_VERSION label): '
                                             'not RHCOS nodes; use mode kernel or single for them')
        else:
            _add_dtk_build(spec, plan, rhcos, members, dtk_images)
    for rhcos in sorted(set(prepare_versions) - set(version for version, _members in groups)):
        _prepare_dtk_build(spec, plan, rhcos, dtk_images)


def _prepare_dtk_build(spec, plan, rhcos, dtk_images):
    """The DTK build DaemonSet of a version no GPU node runs yet (an upgrade's target): its node selector, the
    version's OSTREE_VERSION label, selects no node until nodes boot the version and NFD labels them."""
    os_tag_value = rhcos_os_tag(rhcos)
    unresolved = _dtk_message(dtk_images, rhcos)
    if unresolved:
        raise PlanError('prepare_versions: RHCOS %s has no DTK image, so its driver DaemonSet cannot be prepared: %s'
                        % (rhcos, unresolved), obj=driver_daemonset_name(rhcos, _named(spec)), field='dtk_images')
    _add_prepared(plan, _dtk_daemonset(spec, rhcos, build_image(spec, os_tag_value), dtk_images[rhcos]['image']),
                  rhcos)


def _add_prepared(plan, daemonset, version):
    daemonset['prepared_for'] = version
    plan['desired'].append(daemonset)
    plan['prepared'].append(daemonset['name'])


def _image_exists(image, available):
    if available is None:
        return True
    if isinstance(available, dict):
        return bool(available.get(image))
    return image in available


def prepared_kernels(prepare_versions, nodes_facts):
    """[(kernel as NFD labels it, osTag, os-release ID, VERSION_ID)] of the kernels of an upgrade (mode kernel's
    prepare_versions) for each OS the GPU nodes run, as no GPU node runs them yet: their precompiled DaemonSets."""
    systems = sorted(set((os_tag(facts), facts['os']['id'], facts['os']['version_id']) for facts in nodes_facts
                         if facts['gpu_present'] and os_tag(facts)))
    running = set((facts['kernel']['effective'], os_tag(facts)) for facts in nodes_facts if facts['gpu_present'])
    kernels = sorted(set(sanitize_label_value(kernel) for kernel in prepare_versions))
    return [(kernel, tag, os_id, version_id) for kernel in kernels
            for tag, os_id, version_id in systems if (kernel, tag) not in running]


def _precompiled_daemonset(spec, kernel, tag, os_id, version_id, image):
    return _daemonset(spec, precompiled_daemonset_name(kernel, tag, _named(spec)), {PRECOMPILED_LABEL: 'true'},
                      {KERNEL_LABEL: kernel, OS_ID_LABEL: os_id, OS_VERSION_LABEL: version_id,
                       DRIVER_DEPLOY_LABEL: 'true'}, image, tag)


def _plan_kernel(spec, nodes, dtk_images, precompiled_available, plan, prepare_versions=()):
    _require(spec, ('repository', 'branch'), 'kernel')
    missing = {}
    for kernel, tag, os_id, version_id in prepared_kernels(prepare_versions, nodes):
        # No DTK fallback for a kernel no node runs yet: its image must exist before any node boots it.
        image = precompiled_image(spec['repository'], spec.get('image') or 'driver', spec['branch'], kernel, tag)
        if not _image_exists(image, precompiled_available):
            raise PlanError('prepare_versions: kernel %s has no precompiled driver image %s, so its driver DaemonSet '
                            'cannot be prepared: publish the image first' % (kernel, image),
                            obj=precompiled_daemonset_name(kernel, tag, _named(spec)), field='prepare_versions')
        _add_prepared(plan, _precompiled_daemonset(spec, kernel, tag, os_id, version_id, image), kernel)
    for (kernel, tag), members in _groups(nodes, lambda facts: (facts['kernel']['effective'], os_tag(facts))):
        if not kernel or not tag:
            _block(plan, kernel or 'unknown', members, 'no NFD kernel-version or os-release ID/VERSION_ID labels')
            continue
        image = precompiled_image(spec['repository'], spec.get('image') or 'driver', spec['branch'], kernel, tag)
        if not _image_exists(image, precompiled_available):
            for facts in members:
                missing[facts['name']] = image
            continue
        name = precompiled_daemonset_name(kernel, tag, _named(spec))
        plan['desired'].append(_precompiled_daemonset(spec, kernel, tag, members[0]['os']['id'],
                                                      members[0]['os']['version_id'], image))
        for facts in members:
            plan['assignments'][facts['name']] = {'daemonset': name, 'build': 'precompiled', 'image': image}
        _note_mismatches(plan, members, 'kernel')
    # Beyond the GPU Operator (pods left in ImagePullBackOff): RHCOS nodes without a precompiled image
    # are built with the DTK of their version, like SRO used to.
    orphans = [facts for facts in nodes if facts['name'] in missing]
    for rhcos, members in _groups(orphans, lambda facts: facts['rhcos_version']):
        images = ', '.join(sorted(set(missing[facts['name']] for facts in members)))
        why = 'precompiled image %s does not exist; ' % images
        if rhcos is None:
            for kernel, group in _groups(members, lambda facts: facts['kernel']['effective']):
                _block(plan, kernel, group, why + 'the nodes are not RHCOS, so no DTK build can replace it: '
                                                  'publish the image, or use mode single')
        elif _add_dtk_build(spec, plan, rhcos, members, dtk_images,
                            sorted(set(facts['kernel']['effective'] for facts in members)),
                            why + 'the DTK fallback is not possible either: '):
            plan['warnings'].append(why + 'node(s) %s fall back to a DTK build (DaemonSet %s)'
                                    % (', '.join(_names(members)), driver_daemonset_name(rhcos, _named(spec))))


def _plan_single(spec, nodes, dtk_images, precompiled_available, plan, prepare_versions=()):
    _require(spec, () if spec.get('image_ref') else ('repository', 'version'), 'single')
    if not nodes:
        return
    tags = _groups(nodes, os_tag)
    if not spec.get('image_ref') and (len(tags) != 1 or tags[0][0] is None):
        runs = '; '.join('%s: %s' % (tag or 'an unknown OS', ', '.join(_names(members))) for tag, members in tags)
        _block(plan, single_daemonset_name(None, _named(spec)), nodes,
               'one DaemonSet needs one driver image, but the nodes run %s: give image_ref or use mode kernel' % runs)
        return
    image = build_image(spec, tags[0][0])
    tag = tags[0][0] if len(tags) == 1 else None
    name = single_daemonset_name(tag, _named(spec))
    plan['desired'].append(_daemonset(spec, name, {PRECOMPILED_LABEL: 'false'}, {DRIVER_DEPLOY_LABEL: 'true'}, image,
                                      tag))
    for facts in nodes:
        plan['assignments'][facts['name']] = {'daemonset': name, 'build': 'compile', 'image': image}


def _configuration_mode(mode, entry, members):
    """A configuration's grouping: precompiled images per kernel (use_precompiled), or the module's mode; a
    configuration that turns precompiled off under mode kernel builds with the DTK on RHCOS, else one DaemonSet."""
    if entry['use_precompiled']:
        return 'kernel'
    if entry['use_precompiled'] is False and mode == 'kernel':
        return 'rhcos' if members and all(facts['rhcos_version'] for facts in members) else 'single'
    return mode


def desired_driver_daemonsets(template, spec, gpu_nodes_facts, dtk_images, mode, precompiled_available=None,
                              prepare_versions=(), config_map_keys=None, configurations=None, gpudirect_images=None,
                              config_map_data=None):
    """Driver DaemonSets that must exist for the GPU nodes, each rendered from template.

    template: the text of the driver DaemonSet's template (roles/driver/templates/daemonset.yml.j2), rendered for
    each DaemonSet planned with the variables its header lists.
    spec: namespace, repository, image (name, default 'driver'), version (DTK/single builds), branch
    (precompiled), image_ref (full driver image, beats repository/image/version), image_pull_policy, env,
    resources, tolerations, image_pull_secrets (names), labels, annotations, startup_probe, liveness_probe,
    readiness_probe, service_account_name, priority_class_name, node_selector (extra), manager, trusted_ca_config_map,
    kernel_module_type (auto, open, proprietary: kernel_modules.py); GPUDirect (gpudirect.py): rdma, use_host_mofed,
    gds_image, gdrcopy_image; the ConfigMaps repo_config, cert_config, kernel_module_config and the Secret
    secret_env (configs.py).
    configurations: named driver configurations over spec (configurations.py), each planned for the GPU nodes it owns
    with its own settings and DaemonSet names; the default one (spec itself when none is default) keeps the names
    above. gpudirect_images: {gds, gdrcopy}, the images of a configuration's gds or gdrcopy.
    dtk_images: {rhcos: {status, image, message}} (resolve_dtk_images()['versions']).
    precompiled_available: set of, or {ref: bool} for, precompiled images that exist; None assumes all exist.
    prepare_versions (mode rhcos): RHCOS builds to plan a DaemonSet for even when no GPU node runs them yet (an
    upgrade's target), listed in `prepared`; one without a resolved DTK image is a PlanError. With mode kernel,
    kernels: a precompiled DaemonSet for each OS the GPU nodes run (prepared_kernels()); one without a precompiled
    image is a PlanError (there is no DTK fallback for a kernel no node runs).
    config_map_keys: {ConfigMap name: [keys]} of the ConfigMaps spec names, as read from the namespace: each key is
    mounted (configs.config_volumes()). config_map_data: {ConfigMap name: data} of the same, whose content counts in
    DRIVER_CONFIG_DIGEST (digest.config_data_digest()): a change to a module parameter rolls out as a driver change.
    A plan whose drivers would load the proprietary kernel modules where they cannot work (GPUs that need the open
    ones, GPUDirect Storage from nvidia-fs 2.17.5: kernel_modules.kernel_module_refusals) is a PlanError naming the
    nodes and what to set; so are configurations that select one node twice, or are not valid (configurations.py).
    A node whose nvidia.com/gpu.deploy.driver has a value other than 'true' ('pre-installed': host driver),
    or whose operands are switched off, gets no driver DaemonSet.

    Returns {desired: [DaemonSet], blocked: [{key, nodes, reason}], assignments: {node: {daemonset,
    build: 'dtk'|'precompiled'|'compile'|'host'|'none'|'blocked', ...}}, mismatched: [{node, label,
    effective, message}], warnings: [message], prepared: [DaemonSet names of prepare_versions no node runs],
    owners: {node: configuration}, owner_changes: configurations.owner_changes()}.
    """
    if mode not in MODES:
        raise PlanError('mode %s is not one of %s' % (mode, ', '.join(MODES)), obj='driver spec', field='mode')
    if prepare_versions and mode == 'single':
        raise PlanError('prepare_versions needs mode rhcos or kernel, not %s' % mode, obj='driver spec',
                        field='prepare_versions')
    _require(spec, ('namespace',), mode)
    spec = dict(spec, config_map_keys=config_map_keys or {}, config_map_data=config_map_data or {})
    try:
        compiled = ManifestTemplate(template, 'daemonset_template')
    except ManifestTemplateError as error:
        raise PlanError(str(error), obj='driver DaemonSet template', field='daemonset_template')
    plan = {'desired': [], 'blocked': [], 'assignments': {}, 'mismatched': [], 'warnings': [], 'prepared': []}
    eligible = []
    for facts in sorted(gpu_nodes_facts, key=lambda facts: facts['name']):
        if not facts['gpu_present']:
            continue
        value = facts['deploy_labels'].get('driver')
        if facts['deploy_labels'].get(OPERANDS_SWITCH) == 'false':
            plan['assignments'][facts['name']] = {
                'daemonset': None, 'build': 'none', 'reason': '%s%s=false' % (DEPLOY_LABEL_PREFIX, OPERANDS_SWITCH)}
        elif value not in (None, 'true'):
            plan['assignments'][facts['name']] = {
                'daemonset': None, 'build': 'host' if value == PRE_INSTALLED else 'none',
                'reason': '%s=%s' % (DRIVER_DEPLOY_LABEL, value)}
        else:
            eligible.append(facts)
    specs = configuration_specs(spec, configurations, gpudirect_images)
    plan['owners'] = node_owners(specs, eligible)
    plan['owner_changes'] = owner_changes(plan['owners'], eligible)
    planners = {'rhcos': _plan_rhcos, 'kernel': _plan_kernel, 'single': _plan_single}
    refusals = []
    for entry in specs:
        members = [facts for facts in eligible if plan['owners'][facts['name']] == entry['name']]
        configuration_mode = _configuration_mode(mode, entry, members)
        planners[configuration_mode](entry['spec'], members, dtk_images or {}, precompiled_available, plan,
                                     prepare_versions if (members or entry['default']) and configuration_mode != 'single' else ())
        found = kernel_module_refusals(entry['spec'].get('kernel_module_type'),
                                       dict((facts['name'], plan['assignments'][facts['name']]) for facts in members),
                                       members, entry['spec'].get('gds_image'))
        refusals.extend(found if not configurations else
                        ['driver configuration %s: %s' % (entry['name'], refusal) for refusal in found])
    if refusals:
        raise PlanError('; '.join(refusals), obj='driver spec', field='kernel_module_type')
    # Until here each desired DaemonSet is its template's variables.
    names = [variables['name'] for variables in plan['desired']]
    for name in set(names):
        if names.count(name) > 1:
            nodes = sorted(node for node, entry in plan['assignments'].items() if entry['daemonset'] == name)
            raise PlanError('two node groups map to DaemonSet name %s (the GPU Operator\'s naming drops the '
                            'kernel\'s architecture): nodes %s' % (name, ', '.join(nodes)),
                            obj=name, field='metadata.name')
    plan['desired'] = [_rendered(compiled, variables) for variables in plan['desired']]
    return plan
