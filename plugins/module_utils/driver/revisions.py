# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a driver pod of an older DaemonSet revision runs differently from the DaemonSet's current pod template:
pure functions.

The driver DaemonSets use OnDelete, so a pod keeps the template of the revision it was created from until a rollout
deletes it. A new revision does not always change what a running pod does, and replacing a driver pod evicts the
node's GPU workloads, so these parts of a template are not compared:
- DRIVER_CONFIG_DIGEST (digest.py), when one of the two has none (a pod of a collection from before it): a hash of
  the other settings, which are compared themselves. When both have one it counts: it also covers the content of the
  ConfigMaps the pod mounts, which the template does not show;
- an env entry whose value is what the container uses when it is unset (UNSET_DEFAULTS);
- node selection (nodeSelector, affinity): a pod whose node no longer matches is deleted by the DaemonSet controller
  anyway, and one whose node still matches runs as before.
Everything else counts: image, command, env, mounts, volumes, resources, probes, tolerations, labels, annotations.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from .changes import is_subset
from .digest import DIGEST_ENV

# {container: {env name: the value the container's scripts use when the variable is unset}}. NVIDIA's driver
# containers (gpu-driver-container: every nvidia-driver script has KERNEL_MODULE_TYPE=${KERNEL_MODULE_TYPE:-auto}).
UNSET_DEFAULTS = {'nvidia-driver-ctr': {'KERNEL_MODULE_TYPE': 'auto'}}
NODE_SELECTION = ('nodeSelector', 'affinity')


def revision_template(revision):
    """The pod template a DaemonSet's ControllerRevision records (data.spec.template, without its '$patch'), or None
    when it records none."""
    template = (((revision or {}).get('data') or {}).get('spec') or {}).get('template')
    if template is None:
        return None
    return dict((key, value) for key, value in template.items() if key != '$patch')


def _env_that_counts(container, digest):
    defaults = UNSET_DEFAULTS.get(container.get('name'), {})
    return [entry for entry in container.get('env') or [] if (digest or entry.get('name') != DIGEST_ENV) and not (
        'valueFrom' not in entry and entry.get('name') in defaults and entry.get('value') == defaults[entry['name']])]


def _has_digest(template):
    spec = (template or {}).get('spec') or {}
    return any(entry.get('name') == DIGEST_ENV for kind in ('initContainers', 'containers')
               for container in spec.get(kind) or [] for entry in container.get('env') or [])


def runtime_template(template, digest=False):
    """A copy of a pod template without what does not change what a running pod does (see above); digest: keep
    DRIVER_CONFIG_DIGEST (both templates compared have one)."""
    template = copy.deepcopy(template or {})
    spec = template.get('spec') or {}
    for key in NODE_SELECTION:
        spec.pop(key, None)
    for kind in ('initContainers', 'containers'):
        for container in spec.get(kind) or []:
            container['env'] = _env_that_counts(container, digest)
    return template


def runs_differently(pod_template, template):
    """True when a pod created from pod_template (its ControllerRevision's; None when that is unknown) does something
    differently from one of template. Both as the API server returns them (defaults filled in)."""
    if pod_template is None:
        return True
    digest = _has_digest(pod_template) and _has_digest(template)
    old, new = runtime_template(pod_template, digest), runtime_template(template, digest)
    return not (is_subset(new, old) and is_subset(old, new))


def would_run_differently(desired_template, existing_template):
    """True when applying desired_template (as rendered: the server fills in its defaults) over existing_template
    (as the API server returns it) changes what the DaemonSet's pods do."""
    digest = _has_digest(desired_template) and _has_digest(existing_template)
    return not is_subset(runtime_template(desired_template, digest), runtime_template(existing_template, digest))
