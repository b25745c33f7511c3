# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG layouts in mig-parted's config format (NVIDIA/mig-parted, `version: v1`, `mig-configs`): what a named layout
makes of each GPU of a node, and the resources the device plugin then advertises under each MIG strategy.

Pure functions over the parsed config; standard library only, so that the simulator (tools/localcluster) loads this
file by its path and plays the same layouts as the playbooks expect.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

GPU_RESOURCE = 'nvidia.com/gpu'
MIG_RESOURCE_PREFIX = 'nvidia.com/mig-'
STRATEGIES = ('none', 'single', 'mixed')


class LayoutError(ValueError):
    """A layout that cannot be applied as asked: unknown name, malformed entry."""


def device_filter_id(device_id):
    """mig-parted's device-filter form of a PCI device id (20b2 -> 0x20B210DE: device id, then NVIDIA's vendor id)."""
    return '0x%s10DE' % device_id.upper()


def _filters(entry):
    value = entry.get('device-filter')
    if value is None:
        return None
    return [str(item).lower() for item in (value if isinstance(value, list) else [value])]


def gpu_layouts(config, name, gpu_count, device_id=None):
    """What the layout `name` of config (the parsed mig-parted file) makes of a node's gpu_count GPUs of PCI device
    device_id (e.g. '20b2'; None when unknown, which matches only entries without a device-filter): per GPU index,
    None for MIG disabled, else {profile: count} (empty for MIG enabled without devices). Later entries win for a
    GPU several select; a GPU no entry selects keeps MIG disabled. Raises LayoutError for an unknown name or a
    malformed entry."""
    layouts = (config or {}).get('mig-configs') or {}
    if name not in layouts:
        raise LayoutError('no MIG layout %s (known: %s)' % (name, ', '.join(sorted(layouts)) or 'none'))
    result = [None] * gpu_count
    for entry in layouts[name] or []:
        filters = _filters(entry)
        if filters is not None and (device_id is None or device_filter_id(device_id).lower() not in filters):
            continue
        devices = entry.get('devices', 'all')
        indexes = range(gpu_count) if devices == 'all' else devices
        if not isinstance(indexes, (list, range)) or not all(isinstance(index, int) for index in indexes):
            raise LayoutError('MIG layout %s: devices must be all or a list of GPU indexes, not %r' % (name, devices))
        enabled = entry.get('mig-enabled')
        if not isinstance(enabled, bool):
            raise LayoutError('MIG layout %s: mig-enabled must be true or false' % name)
        for index in indexes:
            if 0 <= index < gpu_count:
                result[index] = dict(entry.get('mig-devices') or {}) if enabled else None
    return result


def mig_resource(profile):
    """The device plugin's resource of a MIG profile under the mixed strategy (1g.10gb+me -> nvidia.com/mig-1g.10gb.me)."""
    return MIG_RESOURCE_PREFIX + profile.replace('+', '.')


def advertised_resources(layouts, strategy):
    """{resource: count} the device plugin advertises for GPUs in these layouts (gpu_layouts) under a MIG strategy:
    none: every GPU as nvidia.com/gpu; single: the MIG devices as nvidia.com/gpu when every GPU has MIG enabled with
    one profile (0 for any other mix, which the single strategy cannot serve), the GPUs when none has; mixed: the
    GPUs without MIG as nvidia.com/gpu and each profile's devices as nvidia.com/mig-<profile>."""
    if strategy not in STRATEGIES:
        raise LayoutError('MIG strategy %s is not one of %s' % (strategy, ', '.join(STRATEGIES)))
    enabled = [layout for layout in layouts if layout is not None]
    if strategy == 'none' or not enabled:
        return {GPU_RESOURCE: len(layouts)}
    if strategy == 'single':
        profiles = set(profile for layout in enabled for profile, count in layout.items() if count)
        valid = len(enabled) == len(layouts) and len(profiles) == 1
        return {GPU_RESOURCE: sum(sum(layout.values()) for layout in enabled) if valid else 0}
    resources = {GPU_RESOURCE: len(layouts) - len(enabled)}
    for layout in enabled:
        for profile, count in layout.items():
            resources[mig_resource(profile)] = resources.get(mig_resource(profile), 0) + int(count)
    return resources


def dra_devices(layouts):
    """{kind: count} of the devices the NVIDIA DRA driver publishes for GPUs in these layouts (gpu_layouts), whatever
    the MIG strategy: each GPU with MIG disabled as `gpu`, each MIG device as `mig-<profile>`."""
    devices = {'gpu': len([layout for layout in layouts if layout is None])}
    for layout in layouts:
        for profile, count in (layout or {}).items():
            devices['mig-' + profile] = devices.get('mig-' + profile, 0) + int(count)
    return devices
