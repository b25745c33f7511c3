#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: cluster_facts
short_description: What the GPU stack's states need to know about the cluster, read in one call
version_added: 0.1.0
author: accelerators.gpu developers (@accelerators-gpu)
description:
  - Reads, in one module run instead of one per object, the operand namespace, whether the API server serves
    OpenShift's C(config.openshift.io) API and the OpenShift version, the container runtime of selected nodes, the
    names of labelled nodes, the DaemonSets of a name in every namespace, and which of some CustomResourceDefinitions
    and namespaces exist.
  - Never changes anything. Every result carries I(api_requests), the API requests sent, by HTTP verb, and
    I(api_response_bytes), the bytes of the answers.
options:
  namespace:
    description: Namespace to read (returned in RV(namespace), null when it does not exist).
    type: str
    required: true
  detect_openshift:
    description:
      - Find out whether the API server serves C(config.openshift.io/v1) ClusterVersions (RV(openshift_api)) and
        which OpenShift version the cluster runs (RV(openshift_version)).
    type: bool
    default: true
  runtime_label_selector:
    description:
      - Label selector of the nodes whose container runtime to report in RV(container_runtimes); an empty string
        selects every node. Omitted, no node is read.
    type: str
  labelled_nodes_selector:
    description:
      - Label selector of the nodes whose names to return in RV(labelled_nodes), such as
        C(nvidia.com/gpu.deploy.dra-driver=true). Omitted, no node is read for it.
    type: str
  daemonset_name:
    description: Name of DaemonSets to find in every namespace (RV(daemonsets)), such as C(nfd-worker).
    type: str
  crd_names:
    description: Names of CustomResourceDefinitions (C(<plural>.<group>)) whose existence to report in RV(crds).
    type: list
    elements: str
    default: []
  namespace_names:
    description: Names of other namespaces whose existence to report in RV(namespaces) (C(openshift-config-managed)...).
    type: list
    elements: str
    default: []
  cluster_role_names:
    description:
      - Names of ClusterRoles whose existence to report in RV(cluster_roles), such as that of a part deployed before
        (C(nvidia-dra-driver-kubeletplugin)).
    type: list
    elements: str
    default: []
    version_added: 0.2.0
  check_proxy:
    description:
      - Report in RV(proxy_configured) whether the C(config.openshift.io/v1) C(Proxy) named C(cluster) sets a proxy or
        a trusted CA bundle; its values, which may hold credentials, are not returned.
    type: bool
    default: false
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - accelerators.gpu.api_retry
  - accelerators.gpu.read_only
requirements:
  - kubernetes >= 24.2.0
'''

EXAMPLES = r'''
- name: Read the platform, the toolkit nodes' runtime, the namespace, an NFD running, the ServiceMonitor API
  accelerators.gpu.cluster_facts:
    namespace: nvidia-gpu-operator
    runtime_label_selector: nvidia.com/gpu.deploy.container-toolkit=true
    daemonset_name: nfd-worker
    crd_names: [servicemonitors.monitoring.coreos.com]
  register: cluster
'''

RETURN = r'''
namespace:
  description: The Namespace O(namespace) as the API returns it, or null when it does not exist.
  returned: always
  type: dict
openshift_api:
  description: Whether the API server serves C(config.openshift.io/v1) ClusterVersions.
  returned: when O(detect_openshift)
  type: bool
openshift_version:
  description:
    - The OpenShift version of the ClusterVersion C(version), its C(status.desired.version) (what the cluster runs, or
      is being upgraded to), or null without one.
  returned: when O(detect_openshift)
  type: str
  sample: "4.18.22"
container_runtimes:
  description:
    - Per selected node, its container runtime from C(status.nodeInfo.containerRuntimeVersion) without the version
      (V(containerd), V(crio) for CRI-O).
  returned: when O(runtime_label_selector) is given
  type: dict
labelled_nodes:
  description: The names of the nodes O(labelled_nodes_selector) selects, sorted.
  returned: when O(labelled_nodes_selector) is given
  type: list
  elements: str
  sample: [gpu-node-3, gpu-node-4]
daemonsets:
  description: The DaemonSets named O(daemonset_name), each as namespace and name.
  returned: when O(daemonset_name) is given
  type: list
  elements: dict
crds:
  description: The names in O(crd_names) of the CustomResourceDefinitions that exist.
  returned: always
  type: list
  elements: str
namespaces:
  description: The names in O(namespace_names) of the namespaces that exist.
  returned: always
  type: list
  elements: str
cluster_roles:
  description: The names in O(cluster_role_names) of the ClusterRoles that exist.
  returned: always
  type: list
  elements: str
proxy_configured:
  description: Whether the cluster's Proxy sets C(httpProxy), C(httpsProxy), C(noProxy) or C(trustedCA); false without one.
  returned: when O(check_proxy) is true
  type: bool
api_requests:
  description: HTTP requests sent to the API server, by verb.
  returned: always
  type: dict
api_response_bytes:
  description:
    - Bytes of the API server's answers to the module's requests (node lists come in the smallest view that carries
      what the module reads, compressed when large). C(wire) as received, C(json) once decoded.
  returned: always
  type: dict
  sample: {"wire": 2600000, "json": 36000000}
api_faults:
  description: The API server's faults (429, 5xx, lost connections) met and retried, as a warning says too.
  returned: when a request met a fault
  type: dict
  sample: {"faults": {"503": 3, "refused": 2}, "retried": 4, "given_up": 0, "seconds": 4.1}
'''

from ansible_collections.accelerators.gpu.plugins.module_utils.runner.module import run_module
from ansible_collections.accelerators.gpu.plugins.module_utils.cluster.facts import read_facts


def main():
    run_module(dict(
        namespace=dict(type='str', required=True),
        detect_openshift=dict(type='bool', default=True),
        runtime_label_selector=dict(type='str'),
        labelled_nodes_selector=dict(type='str'),
        daemonset_name=dict(type='str'),
        crd_names=dict(type='list', elements='str', default=[]),
        namespace_names=dict(type='list', elements='str', default=[]),
        cluster_role_names=dict(type='list', elements='str', default=[]),
        check_proxy=dict(type='bool', default=False),
    ), lambda module, api: dict(changed=False, **read_facts(
        api, module.params['namespace'], module.params['detect_openshift'], module.params['runtime_label_selector'],
        module.params['daemonset_name'], module.params['crd_names'], module.params['check_proxy'],
        module.params['namespace_names'], module.params['labelled_nodes_selector'],
        module.params['cluster_role_names'])))


if __name__ == '__main__':
    main()
