# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The options of a wait for operands, shared by operand_status and operand (module_utils/operands/wait.py);
    each module documents wait_for itself."""

    DOCUMENTATION = r'''
options:
  namespace:
    description: Namespace of the DaemonSets, Deployments, Jobs or Subscription. Required for all but V(allocatable).
    type: str
  names:
    description:
      - Names of the DaemonSets, Deployments or Jobs, or of the Subscription. A name that does not exist fails the wait
        at once.
    type: list
    elements: str
    default: []
  label_selectors:
    description:
      - Label selectors (C(key=value), all must match) of the DaemonSets, Deployments or Jobs, in addition to O(names).
      - When nothing matches (and O(names) is empty) the wait fails at once.
    type: list
    elements: str
    default: []
  nodes:
    description: Names of the nodes that must advertise O(resource) (V(allocatable)).
    type: list
    elements: str
    default: []
  node_label_selectors:
    description:
      - Label selectors (all must match) of the nodes that must advertise O(resource) (V(allocatable)), when O(nodes)
        is empty.
    type: list
    elements: str
    default: []
  resource:
    description:
      - Allocatable resource names or shell-style patterns (V(nvidia.com/mig-*)), in order of preference; a node
        passes when it advertises more than zero of any. C(allocatable) sums, per node, the resources matching the
        first pattern it advertises; C(node_resources) names the one of them a workload on that node can request
        (the first by name), as the GPU Operator's validator picks a MIG resource under the C(mixed) strategy.
    type: list
    elements: str
    default: [nvidia.com/gpu]
  allocatable_on_ready_nodes:
    description:
      - With V(daemonsets), once the DaemonSets are ready, wait as V(allocatable) does (for at most O(timeout) seconds
        more) until every node in C(ready_nodes) advertises O(resource), in the same call.
    type: bool
    default: false
  node_labels:
    description:
      - With V(daemonsets), once the DaemonSets are ready (and their nodes advertise O(resource) when
        O(allocatable_on_ready_nodes)), wait for at most O(timeout) seconds more until every node in C(ready_nodes)
        carries each of these labels, well-formed (GPU feature discovery's numeric labels decimal, its boolean ones
        V(true) or V(false), a product not empty), and with the value O(node_label_values) gives, if any. The failure
        names each node and what it lacks; C(label_problems) returns the same.
    type: list
    elements: str
    default: []
  node_label_values:
    description: Values some of O(node_labels) must have, by label.
    type: dict
    default: {}
  service:
    description:
      - With V(daemonsets), once the DaemonSets are ready, wait (for at most O(service_timeout) seconds more) until
        every node in C(ready_nodes) has a ready endpoint in the EndpointSlices of this Service of O(namespace), as
        the endpoint controller follows pod readiness; when one has none, the failure names it and the Service's
        newest Warning event.
    type: str
  service_timeout:
    description: Seconds the endpoints of O(service) may take.
    type: int
    default: 10
  validation_check:
    description:
      - With V(daemonsets), once the wait succeeded, read the Jobs of this validation check in O(namespace)
        (C(app.kubernetes.io/component=gpu-validation), C(accelerators.gpu/validation=<check>)) and return the plan
        of the check as C(validation), in the same call as the wait for the operand it checks.
      - A node of C(ready_nodes) whose Job succeeded for its current C(ready_pods) is kept; the other nodes are to
        validate, and the check's other Jobs (failed, outdated, of nodes no longer ready) are stale.
    type: str
  accept_outdated:
    description:
      - With V(daemonsets), a ready pod of an C(OnDelete) DaemonSet that runs an older revision counts as ready, as its
        node is served until a rollout (M(accelerators.gpu.driver_upgrade)) replaces the pod. Such nodes are returned
        in C(outdated_nodes).
      - Without it the wait waits for those pods to be replaced, which nothing but a rollout does.
    type: bool
    default: false
  timeout:
    description: Seconds to wait at most.
    type: int
    default: 300
  poll_interval:
    description: Seconds between two looks at the cluster.
    type: float
    default: 2
  grace:
    description:
      - Seconds a pod may stay unschedulable, a DaemonSet fall short of creating its pods, or a pod wait in Init on a
        node opted out of the driver (C(nvidia.com/gpu.deploy.driver=false), so no driver pod comes there, and none is
        known on the host, which C(pre-installed) would say), before the wait fails naming the node and what to do.
      - Image pull failures, crash loops and failed Jobs fail the wait at once.
    type: int
    default: 20
  event_limit:
    description: Warning events returned per pod not ready, newest first.
    type: int
    default: 5
'''
