# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node dicts shaped like the Kubernetes API returns them, for the planning tests."""

NFD = 'feature.node.kubernetes.io/'
OSTREE = NFD + 'system-os_release.OSTREE_VERSION'
KERNEL = NFD + 'kernel-version.full'
RHCOS_416 = '416.94.202405081406-0'
RHCOS_418 = '418.94.202509100653-0'
KERNEL_416 = '5.14.0-427.33.1.el9_4.x86_64'
KERNEL_418 = '5.14.0-570.42.1.el9_6.x86_64'


def make_node(name, labels=None, os_image=None, kernel=None, runtime='cri-o://1.29.1', allocatable=None, ready=True):
    return {
        'apiVersion': 'v1',
        'kind': 'Node',
        'metadata': {'name': name, 'labels': dict(labels or {}), 'annotations': {}},
        'status': {
            'nodeInfo': {
                'osImage': os_image or '',
                'kernelVersion': kernel or '',
                'containerRuntimeVersion': runtime,
            },
            'allocatable': dict(allocatable or {'cpu': '8', 'memory': '32Gi'}),
            'conditions': [{'type': 'Ready', 'status': 'True' if ready else 'False'}],
        },
    }


def rhcos_node(name, rhcos=RHCOS_416, kernel=KERNEL_416, label_rhcos=None, ocp='4.16', gpu=True, extra=None):
    """An OCP <= 4.18 RHCOS node; label_rhcos gives a stale OSTREE_VERSION label."""
    labels = {
        NFD + 'system-os_release.ID': 'rhcos',
        NFD + 'system-os_release.VERSION_ID': ocp,
        NFD + 'system-os_release.RHEL_VERSION': '9.4',
        OSTREE: label_rhcos or rhcos,
        KERNEL: kernel.replace('+', '_'),
        NFD + 'kernel-version.major': '5',
        NFD + 'kernel-version.minor': '14',
        NFD + 'kernel-version.revision': '0',
    }
    if gpu:
        labels[NFD + 'pci-10de.present'] = 'true'
    labels.update(extra or {})
    return make_node(name, labels, 'Red Hat Enterprise Linux CoreOS %s (Plow)' % rhcos, kernel)


def layered_rhcos_node(name, rhcos='9.6.20260303-1', kernel='5.14.0-570.60.1.el9_6.x86_64', extra=None):
    """An OCP >= 4.19 node: ID=rhel, VERSION_ID is the RHEL version, OPENSHIFT_VERSION carries OCP."""
    labels = {
        NFD + 'system-os_release.ID': 'rhel',
        NFD + 'system-os_release.VERSION_ID': '9.6',
        NFD + 'system-os_release.OPENSHIFT_VERSION': '4.21',
        OSTREE: rhcos,
        KERNEL: kernel,
        NFD + 'pci-0302_10de.present': 'true',
    }
    labels.update(extra or {})
    return make_node(name, labels, 'Red Hat Enterprise Linux CoreOS %s (Plow)' % rhcos, kernel)


def ubuntu_node(name, kernel='5.15.0-100-generic', version='22.04', extra=None):
    labels = {
        NFD + 'system-os_release.ID': 'ubuntu',
        NFD + 'system-os_release.VERSION_ID': version,
        KERNEL: kernel,
        NFD + 'pci-0300_10de.present': 'true',
    }
    labels.update(extra or {})
    return make_node(name, labels, 'Ubuntu %s.4 LTS' % version, kernel, runtime='containerd://1.7.12')


def apply_label_changes(node, changes):
    """Return a copy of node with label changes applied as the API would (None removes)."""
    labels = dict(node['metadata']['labels'])
    for key, value in changes.items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    updated = dict(node, metadata=dict(node['metadata'], labels=labels))
    return updated
