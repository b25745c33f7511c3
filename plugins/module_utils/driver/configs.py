# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver's repository, certificate and kernel-module configurations (ConfigMaps) and secret env (a Secret), as
the GPU Operator's NVIDIADriver mounts them (internal/state/driver_volumes.go getDriverAdditionalConfigs,
manifests/state-driver/0500_daemonset.yaml): pure planning of the volumes and mounts per OS, and the refusal of a
ConfigMap or Secret that does not exist."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from .names import PlanError

# Where each OS's package manager reads its repositories (RepoConfigPathMap) and its trust store its CAs
# (CertConfigPathMap), by os-release ID.
REPO_CONFIG_PATHS = {
    'centos': '/etc/yum.repos.d', 'rhcos': '/etc/yum.repos.d', 'rhel': '/etc/yum.repos.d', 'rocky': '/etc/yum.repos.d',
    'ol': '/etc/yum.repos.d', 'debian': '/etc/apt/sources.list.d', 'ubuntu': '/etc/apt/sources.list.d',
    'sles': '/etc/zypp/repos.d', 'sl-micro': '/etc/zypp/repos.d',
}
CERT_CONFIG_PATHS = {
    'centos': '/etc/pki/ca-trust/extracted/pem', 'rhcos': '/etc/pki/ca-trust/extracted/pem',
    'rhel': '/etc/pki/ca-trust/extracted/pem', 'rocky': '/etc/pki/ca-trust/extracted/pem',
    'ol': '/etc/pki/ca-trust/extracted/pem', 'debian': '/usr/local/share/ca-certificates',
    'ubuntu': '/usr/local/share/ca-certificates', 'sles': '/etc/pki/trust/anchors',
    'sl-micro': '/etc/pki/trust/anchors',
}
# Where the driver script reads module parameters (nvidia.conf, nvidia-uvm.conf, nvidia-modeset.conf,
# nvidia-peermem.conf).
KERNEL_MODULE_CONFIG_DIR = '/drivers'
# The ConfigMap settings of the driver option, with the role variable that gives each.
CONFIG_MAP_SETTINGS = (('repo_config', 'driver_repo_config'), ('cert_config', 'driver_cert_config'),
                       ('kernel_module_config', 'driver_kernel_module_config'))
SECRET_SETTING = ('secret_env', 'driver_secret_env')
_OS_ID_RE = re.compile(r'^([a-z]+(?:-[a-z]+)*)')


def os_id_of_tag(os_tag_value):
    """The os-release ID of an osTag: ubuntu of ubuntu22.04, sl-micro of sl-micro6.0; None without a tag."""
    match = _OS_ID_RE.match(os_tag_value or '')
    return match.group(1) if match else None


def _directories(spec, os_tag_value, precompiled, daemonset):
    """[(setting, ConfigMap name, directory)] of the configurations set, in the GPU Operator's order. A precompiled
    driver installs no packages: no repository or certificate configuration, as upstream."""
    wanted = []
    for setting, paths in (('repo_config', REPO_CONFIG_PATHS), ('cert_config', CERT_CONFIG_PATHS)):
        if not spec.get(setting) or precompiled:
            continue
        os_id = os_id_of_tag(os_tag_value)
        if os_id not in paths:
            raise PlanError('%s %s: the driver image of DaemonSet %s is for %s, whose path the GPU Operator does not '
                            'map (it maps %s)' % (setting, spec[setting], daemonset, os_tag_value or 'several OSes',
                                                  ', '.join(sorted(paths))), obj=daemonset, field=setting)
        wanted.append((setting, spec[setting], paths[os_id]))
    if spec.get('kernel_module_config'):
        wanted.append(('kernel_module_config', spec['kernel_module_config'], KERNEL_MODULE_CONFIG_DIR))
    return wanted


def config_volumes(spec, config_map_keys, os_tag_value, precompiled, daemonset):
    """The volumes and mounts of the configurations set for one DaemonSet: {volumes: [{name, keys}], mounts: [{name,
    mountPath, subPath}]}. As upstream, a volume is named after its ConfigMap and lists its keys (items), each key is
    mounted by subPath into the OS's directory (the image's other files stay), and a ConfigMap without keys adds
    nothing. config_map_keys: {ConfigMap name: [keys]} as read from the namespace."""
    volumes, mounts = [], []
    for setting, name, directory in _directories(spec, os_tag_value, precompiled, daemonset):
        if name not in config_map_keys:
            raise PlanError('%s: ConfigMap %s was not read' % (setting, name), obj=daemonset, field=setting)
        keys = sorted(config_map_keys[name])
        if not keys:
            continue
        if name not in [volume['name'] for volume in volumes]:
            volumes.append({'name': name, 'keys': keys})
        mounts.extend({'name': name, 'mountPath': '%s/%s' % (directory, key), 'subPath': key} for key in keys)
    return {'volumes': volumes, 'mounts': mounts}


def named_objects(spec):
    """[(kind, name, setting, role variable)] of the ConfigMaps and the Secret the driver option names."""
    named = [('ConfigMap', spec[setting], setting, variable) for setting, variable in CONFIG_MAP_SETTINGS
             if spec.get(setting)]
    setting, variable = SECRET_SETTING
    if spec.get(setting):
        named.append(('Secret', spec[setting], setting, variable))
    return named


def missing_objects_refusal(spec, namespace, found, configuration=None):
    """The refusal of a run whose driver option names a ConfigMap or Secret that does not exist, or None.
    found: the (kind, name) pairs that exist in the namespace; configuration: the named driver configuration that sets
    them (its setting is named then), None for the driver option's (its role variable is named)."""
    missing = [entry for entry in named_objects(spec) if (entry[0], entry[1]) not in found]
    if not missing:
        return None
    return ('%s. Create %s in namespace %s, or unset the setting; nothing was changed' % (
        '; '.join('%s %s (%s) does not exist in namespace %s' % (
            kind, name, 'driver.%s, role variable %s' % (setting, variable) if configuration is None
            else '%s of driver configuration %s' % (setting, configuration), namespace)
            for kind, name, setting, variable in missing),
        'it' if len(missing) == 1 else 'them', namespace))
