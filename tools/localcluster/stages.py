"""kwok Stage documents: kwok plays the node agents' heartbeat and pod deletion, and holds the heartbeat off a
rebooting node.

Pod status (image pulls, readiness, Job outcomes) is written by the simulator, which knows the
simulated hardware and registry; kwok therefore gets no pod-ready or pod-complete stage.
"""

import textwrap

# Nodes the simulated machine-config operator is rebooting carry this annotation; kwok must not
# mark them Ready again until the reboot is over.
REBOOTING_ANNOTATION = "sim.accelerators.gpu/rebooting"
# A pod the simulated DRA kubelet plugin prepared claims for, until it unprepares them (dra.PREPARED): kwok must not
# delete it before.
DRA_PREPARED_ANNOTATION = "sim.accelerators.gpu/dra-prepared"


def _node_conditions(now_var="$now"):
    return """conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ %s | Quote }}
  lastTransitionTime: {{ $lastTransitionTime | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
""" % now_var


_NODE_INITIALIZE_STATUS = """{{ $now := Now }}
{{ $lastTransitionTime := Now }}
""" + _node_conditions() + """
addresses:
{{ with .status.addresses }}
{{ YAML . 1 }}
{{ else }}
- address: {{ NodeIP | Quote }}
  type: InternalIP
- address: {{ NodeName | Quote }}
  type: Hostname
{{ end }}
""" + "".join("""%s:
{{ with .status.%s }}
{{ YAML . 1 }}
{{ else }}
  cpu: "64"
  memory: 512Gi
  pods: "250"
{{ end }}
""" % (field, field) for field in ("allocatable", "capacity")) + """{{ $nodeInfo := .status.nodeInfo }}
nodeInfo:
  architecture: {{ or $nodeInfo.architecture "amd64" }}
  bootID: {{ or $nodeInfo.bootID `""` }}
  containerRuntimeVersion: {{ or $nodeInfo.containerRuntimeVersion "containerd://1.7.0" }}
  kernelVersion: {{ or $nodeInfo.kernelVersion `""` }}
  kubeProxyVersion: {{ or $nodeInfo.kubeProxyVersion "v1.34.0" }}
  kubeletVersion: {{ or $nodeInfo.kubeletVersion "v1.34.0" }}
  machineID: {{ or $nodeInfo.machineID `""` }}
  operatingSystem: {{ or $nodeInfo.operatingSystem "linux" }}
  osImage: {{ or $nodeInfo.osImage `""` }}
  systemUUID: {{ or $nodeInfo.systemUUID `""` }}
phase: Running
"""


# A heartbeat lands on the node kwok rendered it from, or not at all: its resourceVersion in the patch makes the API
# server refuse it (409) once anything else wrote the node. kwok cancels a queued heartbeat only once it has read the
# node's change, so one that came due before kwok read that the reboot had started (kwok short of CPU), or was being
# written then, marked the rebooting node Ready over the simulator's NotReady. A real kubelet writes nothing once its
# machine is down.
_HEARTBEAT = """{{ $now := Now }}
{{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
metadata:
  resourceVersion: {{ .metadata.resourceVersion | Quote }}
status:
""" + textwrap.indent(_node_conditions(), "  ")


def stage_documents(heartbeat_seconds=30):
    not_rebooting = {"key": '.metadata.annotations["%s"]' % REBOOTING_ANNOTATION, "operator": "DoesNotExist"}
    node_ready_is = '.status.conditions.[] | select( .type == "Ready" ) | .status'
    return [
        {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "node-initialize"},
         "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Node"},
                  "selector": {"matchExpressions": [
                      {"key": node_ready_is, "operator": "NotIn", "values": ["True"]}, not_rebooting]},
                  "next": {"statusTemplate": _NODE_INITIALIZE_STATUS}}},
        {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "node-heartbeat"},
         "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Node"},
                  "selector": {"matchExpressions": [
                      {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                      {"key": node_ready_is, "operator": "In", "values": ["True"]}, not_rebooting]},
                  "delay": {"durationMilliseconds": heartbeat_seconds * 1000,
                            "jitterDurationMilliseconds": heartbeat_seconds * 1500},
                  "next": {"patches": [{"subresource": "status", "template": _HEARTBEAT}]},
                  "immediateNextStage": True}},
        # Does nothing, but matching is what cancels the heartbeat kwok queued while the node was Ready: a node that
        # matches no stage keeps it (kwok 0.7's NodeController.preprocess), and the API server would refuse it
        # (_HEARTBEAT), as it refuses one kwok took off its queue before it saw the reboot start.
        {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "node-rebooting"},
         "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Node"},
                  "selector": {"matchExpressions": [
                      {"key": '.metadata.annotations["%s"]' % REBOOTING_ANNOTATION, "operator": "Exists"}]},
                  "next": {}}},
        {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "pod-delete"},
         "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Pod"},
                  # A pod whose DRA claims are not unprepared yet stays (dra.py).
                  "selector": {"matchExpressions": [
                      {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
                      {"key": '.metadata.annotations["%s"]' % DRA_PREPARED_ANNOTATION, "operator": "DoesNotExist"}]},
                  "next": {"finalizers": {"empty": True}, "delete": True}}},
    ]
