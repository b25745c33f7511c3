# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG layouts of nodes through the MIG manager's labels: which nodes can take one (MIG-capable, by GPU feature
discovery's labels), the label patches that ask for one, what the MIG manager's state label and the node's
allocatable resources say of it, and the labels this collection set (for the uninstall).

The MIG manager (NVIDIA/mig-parted cmd/nvidia-mig-manager) applies the layout that the node label
nvidia.com/mig.config names and reports in nvidia.com/mig.config.state: pending, rebooting, success or failed.

On a node of the DRA stack (nvidia.com/gpu.deploy.dra-driver=true) the layout is served by the NVIDIA DRA driver's
kubelet plugin, whatever the MIG strategy: each MIG device its own device in the node's ResourceSlice. The plugin
enumerates the devices once, when it starts, and the MIG manager does not stop it around a change (it stops the
device plugin, GPU feature discovery and the DCGM ones, by their deploy labels): once the layout is applied, the
plugin pod is restarted here so that it publishes the new devices. The MIG manager also sets the deploy labels of the
clients it stops back to true, absent ones too, which would start the device plugin beside the kubelet plugin: the
device plugin's label is pinned to false for the change (the MIG manager leaves false as it is) and removed after.

A node under GPU remediation (remediation.state.under_remediation) is another owner's: its layout is neither changed
nor checked (its GPUs may be in a reset or gone), and it is named in the result.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import time

from ..dra import API as RESOURCE_API, DRIVER, published_kinds
from ..k8s.errors import TaskError
from ..nodes.facts import DEPLOY_LABEL_PREFIX, DEVICE_PLUGIN, DRA_DRIVER
from ..nodes.gfd_labels import COUNT, MIG_CAPABLE, PCI_DEVICES, gpu_summary
from ..operands.waiter import Lost
from ..remediation.state import under_remediation
from .parted import GPU_RESOURCE, MIG_RESOURCE_PREFIX, LayoutError, advertised_resources, dra_devices, gpu_layouts

CONFIG_LABEL = 'nvidia.com/mig.config'
STATE_LABEL = 'nvidia.com/mig.config.state'
# The value of nvidia.com/mig.config this collection set on the node: the uninstall removes the label only while it
# still has that value (an admin's choice made since stays).
SET_ANNOTATION = 'accelerators.gpu/mig.config'
# Deploy labels of GPU clients the MIG manager stops and restarts around a change (mig-parted sets them to
# paused-for-mig-change, then true, absent ones too) that no state of this collection sets. The uninstall removes those
# the node lacked when the collection first asked it for a layout, recorded in this annotation.
MIG_MANAGER_LABELS = ('nvidia.com/gpu.deploy.dcgm', 'nvidia.com/gpu.deploy.nvsm')
MIG_MANAGER_LABELS_ANNOTATION = 'accelerators.gpu/mig-manager-labels'
# On a DRA node: the device plugin's deploy label, pinned to false for a change where it was absent (this annotation
# records it), and the kubelet plugin's pods, restarted once the layout is applied.
DRA_LABEL = DEPLOY_LABEL_PREFIX + DRA_DRIVER
DEVICE_PLUGIN_LABEL = DEPLOY_LABEL_PREFIX + DEVICE_PLUGIN
PINNED_ANNOTATION = 'accelerators.gpu/mig.device-plugin-pinned'
KUBELET_PLUGIN_SELECTOR = 'app.kubernetes.io/component=nvidia-dra-driver-kubelet-plugin'
DEVICE_OF_PRODUCT = dict((product, device) for device, (product, _memory, _capable) in PCI_DEVICES.items())


def _metadata(node):
    return node.get('metadata') or {}


def _labels(node):
    return _metadata(node).get('labels') or {}


def in_dra_mode(node):
    """Whether the node runs the DRA driver's kubelet plugin instead of the device plugin."""
    return _labels(node).get(DRA_LABEL) == 'true'


def refusals(nodes, names):
    """Why the named nodes (Node dicts in nodes) cannot take a MIG layout: each one missing, whose GPU is not
    MIG-capable (naming it) or whose MIG capability is unknown (no GPU feature discovery labels). [] when all can."""
    by_name = dict((_metadata(node).get('name'), node) for node in nodes)
    found = []
    for name in names:
        if name not in by_name:
            found.append('node %s not found' % name)
            continue
        summary = gpu_summary(_labels(by_name[name]))
        if summary['mig_capable'] is None:
            found.append('node %s: MIG capability of its GPU %s unknown (no nvidia.com/mig.capable label from GPU '
                         'feature discovery)' % (name, summary['product'] or 'none found'))
        elif not summary['mig_capable']:
            found.append('node %s: GPU %s is not MIG-capable' % (name, summary['product']))
    return found


def left_alone(nodes, names):
    """The named nodes (Node dicts in nodes; missing ones are refusals' to name) under GPU remediation, each in words:
    ['node gpu-1: under GPU remediation (accelerators.gpu/gpu-remediation-state=reset-required), its MIG layout not
    changed'], in the order of names, and their names."""
    by_name = dict((_metadata(node).get('name'), node) for node in nodes)
    words = [(name, under_remediation(_labels(by_name[name]))) for name in names if name in by_name]
    left = [(name, why) for name, why in words if why]
    return (['node %s: %s, its MIG layout not changed' % (name, why) for name, why in left],
            [name for name, _why in left])


def strategy_refusal(layouts_by_node, layout, strategy):
    """Why a layout cannot be served under the MIG strategy, or None: under none, the nodes where it enables MIG
    (layouts_by_node: node: gpu_layouts; nodes of the device plugin, the DRA driver serves any) would keep
    advertising whole GPUs, and no MIG device would appear."""
    enabling = sorted(name for name, layouts in layouts_by_node.items() if any(gpu is not None for gpu in layouts))
    if strategy != 'none' or not enabling:
        return None
    return ('MIG layout %s enables MIG on node(s) %s, but the MIG strategy is none: the device plugin would keep '
            'advertising whole GPUs (nvidia.com/gpu) and no MIG device would appear. Set common_mig_strategy '
            '(mig_strategy) to single or mixed, as the deploy gave it to the device plugin and GPU feature discovery '
            '(deploy again after changing it); nothing changed' % (layout, ', '.join(enabling)))


def node_gpus(node):
    """(GPU count, PCI device id or None) of a node, from GPU feature discovery's labels."""
    labels = _labels(node)
    product = gpu_summary(labels)['product'] or ''
    try:
        count = int(labels.get(COUNT, '0'))
    except ValueError:
        count = 0
    return count, DEVICE_OF_PRODUCT.get(product)


def node_layouts(node, config, layout):
    """What the layout makes of each of the node's GPUs (parted.gpu_layouts); advertised_resources of it is what
    the node advertises once the layout is applied, under a MIG strategy."""
    count, device = node_gpus(node)
    return gpu_layouts(config, layout, count, device)


def expected_devices(node, layouts, strategy):
    """What the node serves once its GPUs have layouts: on a DRA node the devices its ResourceSlice publishes
    (parted.dra_devices), elsewhere the resources it advertises under the MIG strategy."""
    return dra_devices(layouts) if in_dra_mode(node) else advertised_resources(layouts, strategy)


def config_patch(node, layout, only_unlabelled=False):
    """The metadata merge patch asking the MIG manager for layout on the node ({} when it already has it; with
    only_unlabelled, also when the node names any layout): the config label, the state label set back to pending
    (so that a state of the previous layout is not taken for this one's), and the annotation recording that this
    collection set it; on a DRA node (not for a default layout) the device plugin's deploy label pinned to false where
    it is absent."""
    labels, annotations = _labels(node), _metadata(node).get('annotations') or {}
    if labels.get(CONFIG_LABEL) == layout or (only_unlabelled and CONFIG_LABEL in labels):
        return {}
    patch = {'metadata': {'labels': {CONFIG_LABEL: layout, STATE_LABEL: 'pending'},
                          'annotations': {SET_ANNOTATION: layout}}}
    if not only_unlabelled and in_dra_mode(node) and DEVICE_PLUGIN_LABEL not in labels:
        patch['metadata']['labels'][DEVICE_PLUGIN_LABEL] = 'false'
        patch['metadata']['annotations'][PINNED_ANNOTATION] = 'true'
    if MIG_MANAGER_LABELS_ANNOTATION not in annotations:
        patch['metadata']['annotations'][MIG_MANAGER_LABELS_ANNOTATION] = ','.join(
            key for key in MIG_MANAGER_LABELS if key not in labels)
    return patch


def removal_patch(node):
    """The patch removing what this collection set: nvidia.com/mig.config while it has the value the collection set,
    with the MIG manager's state label, and the annotation. {} when there is nothing."""
    labels, annotations = _labels(node), _metadata(node).get('annotations') or {}
    if SET_ANNOTATION not in annotations:
        return {}
    patch = {'metadata': {'annotations': {SET_ANNOTATION: None}, 'labels': {}}}
    if labels.get(CONFIG_LABEL) == annotations[SET_ANNOTATION]:
        patch['metadata']['labels'].update((key, None) for key in (CONFIG_LABEL, STATE_LABEL) if key in labels)
    if MIG_MANAGER_LABELS_ANNOTATION in annotations:
        patch['metadata']['annotations'][MIG_MANAGER_LABELS_ANNOTATION] = None
        added = annotations[MIG_MANAGER_LABELS_ANNOTATION].split(',')
        patch['metadata']['labels'].update((key, None) for key in added if key in labels)
    _merge(patch, unpin_patch(node))
    if not patch['metadata']['labels']:
        del patch['metadata']['labels']
    return patch


def unpin_patch(node):
    """The patch removing the device plugin's label pinned to false for a change on a DRA node ({} when none is)."""
    labels, annotations = _labels(node), _metadata(node).get('annotations') or {}
    if PINNED_ANNOTATION not in annotations:
        return {}
    patch = {'metadata': {'annotations': {PINNED_ANNOTATION: None}, 'labels': {}}}
    if labels.get(DEVICE_PLUGIN_LABEL) == 'false':
        patch['metadata']['labels'][DEVICE_PLUGIN_LABEL] = None
    return patch


def _merge(patch, more):
    for key, values in (more.get('metadata') or {}).items():
        patch['metadata'].setdefault(key, {}).update(values)


def gpu_allocatable(node):
    """The node's allocatable nvidia.com/gpu and nvidia.com/mig-* resources, as numbers."""
    allocatable = (node.get('status') or {}).get('allocatable') or {}
    return dict((key, int(value)) for key, value in allocatable.items()
                if key == GPU_RESOURCE or key.startswith(MIG_RESOURCE_PREFIX))


def layout_progress(node, layout, expected, published=None):
    """('success', None), ('failed', why) or ('waiting', why) of a node asked for layout, by the MIG manager's state
    label, what the node serves (expected, expected_devices of node_layouts; what is not expected must be 0: the
    resources advertised, or on a DRA node published, the published_kinds of its ResourceSlices) and GPU feature
    discovery's labels, back once the GPU clients the MIG manager stopped for the change run again."""
    labels = _labels(node)
    name = _metadata(node).get('name')
    state = labels.get(STATE_LABEL)
    if labels.get(CONFIG_LABEL) != layout:
        return 'waiting', 'node %s: %s=%s, not %s' % (name, CONFIG_LABEL, labels.get(CONFIG_LABEL), layout)
    if state == 'failed':
        return 'failed', 'node %s: %s=failed applying %s (see the nvidia-mig-manager pod log)' % (
            name, STATE_LABEL, layout)
    if state != 'success':
        return 'waiting', 'node %s: %s=%s' % (name, STATE_LABEL, state or '(none)')
    what, served = ('ResourceSlice devices', published or {}) if in_dra_mode(node) else (
        'allocatable', gpu_allocatable(node))
    wrong = sorted('%s=%s' % (key, served.get(key, 0)) + (' (expected %d)' % expected.get(key, 0))
                   for key in set(served) | set(expected) if served.get(key, 0) != expected.get(key, 0))
    if wrong:
        return 'waiting', 'node %s: %s=success, %s %s' % (name, STATE_LABEL, what, ', '.join(wrong))
    if MIG_CAPABLE not in labels:
        return 'waiting', 'node %s: %s=success, no GPU feature discovery labels yet' % (name, STATE_LABEL)
    return 'success', None


def _read_config(api, namespace, name):
    import yaml  # only the modules that read the ConfigMap need PyYAML
    config_map = api.read_optional('/api/v1/namespaces/%s/configmaps/%s' % (namespace, name))[0]
    if config_map is None:
        raise TaskError('ConfigMap %s/%s of the MIG layouts not found: deploy the mig_manager role first '
                        '(ansible-playbook -i localhost, accelerators.gpu.deploy --tags mig_manager)' % (namespace, name))
    try:
        return yaml.safe_load((config_map.get('data') or {}).get('config.yaml') or '') or {}
    except yaml.YAMLError as error:
        raise TaskError('ConfigMap %s/%s: config.yaml is not YAML: %s' % (namespace, name, error))


def _selected_nodes(api, params):
    nodes = list(api.list_nodes(params['label_selector']))
    names = params['nodes'] or sorted(_metadata(node)['name'] for node in nodes)
    return nodes, names


def _patch_each(api, params, plan, leave=False):
    """Patch each node as plan(node) says ({} for nothing); the nodes patched. With leave, the nodes under GPU
    remediation are not, and are reported in words (left_alone): a layout asked for would change their GPUs."""
    nodes, names = _selected_nodes(api, params)
    by_name = dict((_metadata(node)['name'], node) for node in nodes)
    missing = [name for name in names if name not in by_name]
    if missing:
        raise TaskError('nodes not found: %s' % ', '.join(missing))
    words, left = left_alone(nodes, names) if leave else ([], [])
    patches = dict((name, plan(by_name[name])) for name in names if name not in left)
    patched = [name for name in names if patches.get(name)]
    for name in patched:
        api.patch_node(name, patches[name])
    result = {'changed': bool(patched), 'nodes': patched}
    if leave:
        result['remediation'] = words
    return result


def _check(api, params):
    """The nodes, the names of those to act on, each one's expected resources and the words on those left alone, under
    GPU remediation (left_alone); fails before any change when a node cannot take the layout or the layout is
    unknown."""
    nodes, names = _selected_nodes(api, params)
    words, left = left_alone(nodes, names)
    names = [name for name in names if name not in left]
    problems = refusals(nodes, names)
    if problems:
        raise TaskError('MIG layout %s refused, nothing changed: %s' % (params['config'], '; '.join(problems)),
                        refused=problems)
    config = _read_config(api, params['namespace'], params['config_map'])
    by_name = dict((_metadata(node)['name'], node) for node in nodes)
    try:
        layouts = dict((name, node_layouts(by_name[name], config, params['config'])) for name in names)
        expected = dict((name, expected_devices(by_name[name], layouts[name], params['mig_strategy']))
                        for name in names)
    except LayoutError as error:
        raise TaskError('%s, nothing changed' % error)
    refusal = strategy_refusal(dict((name, found) for name, found in layouts.items() if not in_dra_mode(by_name[name])),
                               params['config'], params['mig_strategy'])
    if refusal:
        raise TaskError(refusal, refused=[refusal])
    return by_name, names, expected, words


def read_slices(api, nodes):
    """The ResourceSlices of the NVIDIA DRA driver where a node of nodes runs it, [] where none does (no read)."""
    if not any(in_dra_mode(node) for node in nodes):
        return []
    return api.list_items(RESOURCE_API + '/resourceslices', field_selector='spec.driver=' + DRIVER)


def restart_kubelet_plugin(api, namespace, node):
    """Deletes the DRA kubelet plugin pods of the node (its DaemonSet starts a new one, which finds the node's MIG
    devices anew); the names of those deleted."""
    pods = [pod for pod in api.list_pods(namespace, KUBELET_PLUGIN_SELECTOR)
            if (pod.get('spec') or {}).get('nodeName') == node and not _metadata(pod).get('deletionTimestamp')]
    for pod in pods:
        api.delete_pod(namespace, _metadata(pod)['name'], _metadata(pod).get('uid'))
    return sorted('%s/%s' % (namespace, _metadata(pod)['name']) for pod in pods)


def _wait(api, names, layout, expected, params, clock, sleep):
    """Waits until every node applied the layout and serves it; on a DRA node whose MIG manager reported success,
    unpins the device plugin's label and restarts the kubelet plugin once. Returns the kubelet plugin pods
    restarted."""
    deadline = clock() + params['timeout']
    lost = Lost(clock)
    restarted = {}

    def read():
        nodes = [api.read_node(name) for name in names]
        return nodes, read_slices(api, nodes)
    while True:
        seen, found = lost.attempt(api, read, deadline)
        if not seen:
            # The API server out of reach: the layout's progress is unknown, not failed; wait on, to the deadline.
            if clock() >= deadline:
                raise TaskError('MIG layout %s: the state of %s unknown after %d s%s' % (
                    layout, ', '.join(names), params['timeout'], lost.words()), waiting=list(names))
            sleep(params['poll_interval'])
            continue
        nodes, slices = found
        published = dict((name, published_kinds(slices, name)) for name in names)
        progress = dict((name, layout_progress(node, layout, expected[name], published[name]))
                        for name, node in zip(names, nodes))
        for name, node in zip(names, nodes):
            # Applied on a DRA node: the device plugin's label unpinned, the kubelet plugin restarted (once) while it
            # publishes other devices than the layout's.
            if in_dra_mode(node) and _labels(node).get(STATE_LABEL) == 'success' and _labels(node).get(
                    CONFIG_LABEL) == layout:
                unpin = unpin_patch(node)
                if unpin:
                    api.patch_node(name, unpin)
                if published[name] != dict((key, count) for key, count in expected[name].items() if count) and \
                        name not in restarted:
                    restarted[name] = restart_kubelet_plugin(api, params['namespace'], name)
        failed = sorted(why for state, why in progress.values() if state == 'failed')
        if failed:
            raise TaskError('MIG layout %s failed on %s: %s' % (layout, ', '.join(
                name for name in names if progress[name][0] == 'failed'), '; '.join(failed)),
                failed_nodes=[name for name in names if progress[name][0] == 'failed'])
        waiting = [progress[name][1] for name in names if progress[name][0] != 'success']
        if not waiting:
            return sorted(pod for pods in restarted.values() for pod in pods)
        if clock() >= deadline:
            raise TaskError('MIG layout %s not applied within %d s: %s%s' % (
                layout, params['timeout'], '; '.join(waiting), lost.words()),
                waiting=[name for name in names if progress[name][0] != 'success'])
        sleep(params['poll_interval'])


def run(module, api, clock=time.monotonic, sleep=time.sleep):
    """The module's work, by action: check (refuse nodes and layouts that cannot be, change nothing; return the nodes
    whose layout would change), apply (label and wait for the MIG manager and the advertised resources), default
    (label the nodes naming no layout) or remove (the uninstall's removal). All but remove leave the nodes under GPU
    remediation as they are and name them in 'remediation'."""
    params = module.params
    action = params['action']
    if action == 'remove':
        return _patch_each(api, params, removal_patch)
    if action == 'default':
        return _patch_each(api, params, functools.partial(config_patch, layout=params['config'], only_unlabelled=True),
                           leave=True)
    by_name, names, expected, words = _check(api, params)
    slices = read_slices(api, [by_name[name] for name in names])
    changing = [name for name in names if layout_progress(
        by_name[name], params['config'], expected[name], published_kinds(slices, name))[0] != 'success']
    result = {'nodes': names, 'changing': changing, 'expected': expected, 'remediation': words}
    if action == 'check':
        return dict(result, changed=False)
    for name in changing:
        patch = config_patch(by_name[name], params['config'])
        if patch:
            api.patch_node(name, patch)
    if not module.check_mode:
        result['restarted'] = _wait(api, changing, params['config'], expected, params, clock, sleep)
    return dict(result, changed=bool(changing))
