"""The simulated machine-config operator (MCO): rolls the nodes of MachineConfigPools into new RHCOS builds.

The pool side follows the real node controller (openshift/machine-config-operator, pkg/controller/node and
pkg/controller/common/layered_node_state.go):
- a pool targets `spec.configuration.name`, a rendered MachineConfig; what a node boots into is read from that
  config's annotations (fleet.RHCOS_OF_CONFIG, KERNEL_OF_CONFIG, RELEASE_OF_CONFIG);
- a node is done when its currentConfig equals its desiredConfig and its state is Done; it is unavailable when it
  is NotReady or unschedulable, or not done (unless its update failed: state Degraded or Unreconcilable);
- while a pool is not paused, up to maxUnavailable (an int, or a percentage of the pool rounded down; at least 1,
  default 1) minus the unavailable nodes get the target as desiredConfig, oldest first. Cordoned or NotReady nodes
  are never picked (so a node cordoned before the update is left alone, and stays cordoned). Pausing stops new
  picks; nodes already updating finish;
- pool status: machineCount, updatedMachineCount, readyMachineCount, unavailableMachineCount,
  degradedMachineCount, conditions Updated, Updating, NodeDegraded, RenderDegraded, Degraded;
- a node selected by a custom pool and by `worker` belongs to the custom pool; one selected by two custom pools
  to none.

The machine-config daemon's part, per node: state Working; cordon; evict every pod but DaemonSet pods through the
Eviction API (an eviction a PodDisruptionBudget refuses, 429, is retried every second), and wait until they are
gone; reboot: the node is NotReady (stages.REBOOTING_ANNOTATION holds kwok's heartbeat off; the annotation's value
is when the node boots) for the pool's fleet.REBOOT_SECONDS; boot: osImage, kernelVersion and bootID change, the
node is Ready and uncordoned, currentConfig = desiredConfig, state Done. Every pod on it restarts: the simulator
reports them anew, so a driver pod built for the old build crash-loops.
nfd-worker relabels the node fleet.NFD_LAG_SECONDS after the boot (its sleepInterval), independently of the pool,
which moves on as soon as the node is done: the real MCO does not wait for NFD either.

Faults of a node's hardware: `never_returns` (it stays NotReady, its update never completes),
`stale_nfd_after_upgrade` (the OSTREE_VERSION label keeps the old build).
"""

import datetime
import hashlib
import json
import logging
import time

from kubernetes.client.rest import ApiException

from . import fleet, gpu_faults
from .stages import REBOOTING_ANNOTATION

LOG = logging.getLogger("mco")
POOLS = fleet.MCO_API + ("machineconfigpools",)
CONFIGS = fleet.MCO_API + ("machineconfigs",)
DEFAULT_REBOOT_SECONDS = 10.0
DEFAULT_NFD_LAG_SECONDS = 5.0
DRAIN_RETRY_SECONDS = 1.0
FAILED_STATES = ("Degraded", "Unreconcilable")
MCD_REASON = "machineconfiguration.openshift.io/reason"
NEVER = "never"  # REBOOTING_ANNOTATION's value for a node that never comes back
# nfd-worker's next pass over a booted node: JSON {"at": epoch seconds, "labels": the NFD labels it will set}.
NFD_RELABEL_ANNOTATION = "sim.accelerators.gpu/nfd-relabel"
OSTREE_LABEL = fleet.NFD + "system-os_release.OSTREE_VERSION"
WORKER_POOL = "worker"


def annotations(obj):
    return obj["metadata"].get("annotations") or {}


def hardware(node):
    return json.loads(annotations(node).get(fleet.HARDWARE_ANNOTATION) or "{}")


def condition_status(node, kind):
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition.get("status")
    return None


def ready_and_schedulable(node):
    """The MCO's IsNodeReady."""
    return condition_status(node, "Ready") == "True" and not (node.get("spec") or {}).get("unschedulable")


def is_done(node):
    current = annotations(node).get(fleet.CURRENT_CONFIG)
    return bool(current) and current == annotations(node).get(fleet.DESIRED_CONFIG) and \
        annotations(node).get(fleet.MCD_STATE) == "Done"


def is_failing(node):
    values = annotations(node)
    return values.get(fleet.CURRENT_CONFIG) != values.get(fleet.DESIRED_CONFIG) and \
        values.get(fleet.MCD_STATE) in FAILED_STATES


def is_unavailable(node):
    if not ready_and_schedulable(node):
        return True
    return not is_done(node) and not is_failing(node)


def is_updating(node):
    values = annotations(node)
    return bool(values.get(fleet.DESIRED_CONFIG)) and values.get(fleet.DESIRED_CONFIG) != values.get(
        fleet.CURRENT_CONFIG) and values.get(fleet.MCD_STATE) not in FAILED_STATES


def max_unavailable(pool, machine_count):
    """spec.maxUnavailable scaled to the pool: a percentage rounds down; never less than 1."""
    value = (pool.get("spec") or {}).get("maxUnavailable")
    if value is None:
        return 1
    if isinstance(value, str) and value.endswith("%"):
        return max(1, int(value[:-1]) * machine_count // 100)
    return max(1, int(value))


def selects(selector, labels):
    """Whether a LabelSelector selects these labels (a missing selector selects nothing)."""
    if selector is None:
        return False
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        if (operator == "In" and labels.get(key) not in values) or \
                (operator == "NotIn" and key in labels and labels[key] in values) or \
                (operator == "Exists" and key not in labels) or (operator == "DoesNotExist" and key in labels):
            return False
    return True


def pool_seconds(pool, annotation, default):
    value = annotations(pool).get(annotation)
    return float(value) if value else default


def stamp(epoch=None):
    return datetime.datetime.fromtimestamp(epoch or time.time(), datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


class MachineConfigOperator:
    """Driven by the simulator's loop: start() adds its informers, reconcile() is one pass over every pool."""

    def __init__(self, simulator):
        self.sim = simulator
        self.core = simulator.core
        self.custom = simulator.custom
        self.pools = {}
        self.configs = {}
        # Annotations written and not yet seen by the node informer, laid over what it shows: a stale cache must
        # not make an updating node look available, or a pool would take more than maxUnavailable.
        self.expected = {}
        self.eviction_tried = {}  # pod uid -> when its eviction was last asked for
        self.wakes = {}  # node name -> when the simulator will next wake it for us

    def start(self):
        self.sim.informer("machineconfigpools", self.sim._lister(*POOLS), _name, self.pools)
        self.sim.informer("machineconfigs", self.sim._lister(*CONFIGS), _name, self.configs)

    # -- one pass ------------------------------------------------------------------------------
    def reconcile(self):
        now = time.time()
        nodes = self.fake_nodes()
        self.eviction_tried = {uid: when for uid, when in self.eviction_tried.items() if now - when < 60}
        for pool, members in self.members(dict(self.pools), nodes):
            self.sim._guard(self.reconcile_pool, pool, members, now)
        for node in nodes.values():
            if NFD_RELABEL_ANNOTATION in annotations(node):
                self.sim._guard(self.relabel_when_due, node, now)

    def fake_nodes(self):
        """{name: node} of the simulated nodes, with the annotations written and not yet seen laid over."""
        nodes = {name: self.view(node) for name, node in list(self.sim.nodes.items())
                 if annotations(node).get("kwok.x-k8s.io/node") == "fake"}
        self.expected = {name: values for name, values in self.expected.items() if name in nodes}
        return nodes

    @staticmethod
    def members(pools, nodes):
        """[(pool, its nodes)], the nodes oldest first as the real controller picks them."""
        found = {name: [] for name in pools}
        for node in sorted(nodes.values(), key=lambda n: (n["metadata"].get("creationTimestamp") or "",
                                                          n["metadata"]["name"])):
            labels = node["metadata"].get("labels") or {}
            matching = [name for name, pool in pools.items()
                        if selects((pool.get("spec") or {}).get("nodeSelector"), labels)]
            custom = [name for name in matching if name != WORKER_POOL]
            if len(custom) > 1:
                continue
            if custom or matching:
                found[(custom or matching)[0]].append(node)
        return [(pools[name], members) for name, members in found.items()]

    def view(self, node):
        pending = self.expected.get(node["metadata"]["name"])
        if not pending:
            return node
        current = annotations(node)
        if all(current.get(key) == value for key, value in pending.items()):
            del self.expected[node["metadata"]["name"]]
            return node
        merged = dict(current)
        for key, value in pending.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        return dict(node, metadata=dict(node["metadata"], annotations=merged))

    def refreshed(self, nodes):
        return [self.view(self.sim.nodes[n["metadata"]["name"]]) for n in nodes if n["metadata"]["name"] in
                self.sim.nodes]

    # -- the pool ------------------------------------------------------------------------------
    def reconcile_pool(self, pool, nodes, now):
        spec = pool.get("spec") or {}
        target = (spec.get("configuration") or {}).get("name")
        for node in nodes:
            if is_updating(node):
                self.sim._guard(self.update_node, node, pool, now)
        problem = None
        if target and target not in self.configs:
            problem = "rendered MachineConfig %s not found" % target
        elif target and not spec.get("paused"):
            self.pick(pool, self.refreshed(nodes), target)
        self.write_status(pool, self.refreshed(nodes), problem)

    def pick(self, pool, nodes, target):
        capacity = max_unavailable(pool, len(nodes)) - sum(1 for n in nodes if is_unavailable(n))
        # Nodes that failed to reach this target count against availability too, as in the real controller.
        capacity -= sum(1 for n in nodes if annotations(n).get(fleet.DESIRED_CONFIG) == target and is_failing(n))
        if capacity <= 0:
            return
        candidates = [n for n in nodes if annotations(n).get(fleet.DESIRED_CONFIG) != target
                      and ready_and_schedulable(n)]
        for node in candidates[:capacity]:
            self.annotate(node["metadata"]["name"], {fleet.DESIRED_CONFIG: target, fleet.MCD_STATE: "Working"})
            LOG.info("pool %s: node %s targeted to %s", pool["metadata"]["name"], node["metadata"]["name"], target)

    def write_status(self, pool, nodes, problem):
        spec = pool.get("spec") or {}
        old = pool.get("status") or {}
        target = (spec.get("configuration") or {}).get("name")
        updated = [n for n in nodes if is_done(n) and annotations(n).get(fleet.DESIRED_CONFIG) == target]
        ready = [n for n in updated if ready_and_schedulable(n)]
        unavailable = [n for n in nodes if is_unavailable(n)]
        degraded = [n for n in nodes if annotations(n).get(fleet.DESIRED_CONFIG)
                    and annotations(n).get(fleet.MCD_STATE) in FAILED_STATES]
        all_updated = len(updated) == len(ready) == len(nodes) and not unavailable
        line = "MachineConfig %s" % target
        if all_updated:
            updating = ("False", "")
        elif spec.get("paused"):
            updating = ("False", "Pool is paused; will not update to " + line)
        else:
            updating = ("True", "All nodes are updating to " + line)
        node_degraded = "; ".join("Node %s is reporting: %r" % (n["metadata"]["name"], annotations(n).get(
            MCD_REASON, "")) for n in degraded)
        wanted = [("Updated", ("True", "All nodes are updated with " + line) if all_updated else ("False", "")),
                  ("Updating", updating),
                  ("NodeDegraded", ("True", node_degraded) if degraded else ("False", "")),
                  ("RenderDegraded", ("True", problem) if problem else ("False", "")),
                  ("Degraded", ("True", problem or node_degraded) if degraded or problem else ("False", ""))]
        previous = {c.get("type"): c for c in old.get("conditions") or []}
        conditions = []
        for kind, (status, message) in wanted:
            before = previous.get(kind) or {}
            changed = before.get("status") != status
            conditions.append({"type": kind, "status": status, "reason": "", "message": message,
                               "lastTransitionTime": stamp() if changed else before.get("lastTransitionTime")})
        status = {"observedGeneration": pool["metadata"].get("generation"), "machineCount": len(nodes),
                  "updatedMachineCount": len(updated), "readyMachineCount": len(ready),
                  "unavailableMachineCount": len(unavailable), "degradedMachineCount": len(degraded),
                  "configuration": spec.get("configuration") if all_updated else old.get("configuration") or {},
                  "conditions": conditions}
        if status != {key: old.get(key) for key in status}:
            self.custom.patch_cluster_custom_object_status(*POOLS, pool["metadata"]["name"], {"status": status})

    # -- the machine-config daemon on one node -------------------------------------------------
    def update_node(self, node, pool, now):
        name = node["metadata"]["name"]
        values = annotations(node)
        config = self.configs.get(values[fleet.DESIRED_CONFIG])
        if config is None:
            return  # nothing to boot into: the pool reports its missing target
        if fleet.RHCOS_OF_CONFIG not in annotations(config):
            self.annotate(name, {fleet.MCD_STATE: "Degraded", MCD_REASON: "%s names no RHCOS build (%s)" % (
                values[fleet.DESIRED_CONFIG], fleet.RHCOS_OF_CONFIG)})
            return
        if values.get(fleet.MCD_STATE) != "Working":
            self.annotate(name, {fleet.MCD_STATE: "Working"})
        if values.get(REBOOTING_ANNOTATION) is None:
            if self.drained(node, now):
                self.reboot(node, pool, now)
        elif self.boot_due(node, now, values[fleet.DESIRED_CONFIG]):
            self.boot(node, config, pool, now)

    def boot_due(self, node, now, into):
        """A rebooting node: True once its boot is due; until then it stays NotReady and is woken when it is."""
        name = node["metadata"]["name"]
        rebooting = annotations(node)[REBOOTING_ANNOTATION]
        if rebooting != NEVER and now >= float(rebooting):
            return True
        if condition_status(node, "Ready") == "True":
            self.set_ready(name, False, "rebooting into %s" % into)
        if rebooting != NEVER:
            self.wake(name, float(rebooting), now)
        return False

    def drained(self, node, now):
        """Cordons the node and asks for its pods' eviction; True once only DaemonSet pods are left."""
        name = node["metadata"]["name"]
        if not (node.get("spec") or {}).get("unschedulable"):
            self.core.patch_node(name, {"spec": {"unschedulable": True}})
            LOG.info("node %s: cordoned, draining", name)
        left = [pod for pod in list(self.sim.pods.values()) if pod["spec"].get("nodeName") == name
                and not any(ref.get("kind") == "DaemonSet" for ref in pod["metadata"].get("ownerReferences") or [])]
        for pod in left:
            uid = pod["metadata"]["uid"]
            if pod["metadata"].get("deletionTimestamp") or now - self.eviction_tried.get(uid, 0) < DRAIN_RETRY_SECONDS:
                continue
            self.eviction_tried[uid] = now
            pod_name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
            try:
                self.core.create_namespaced_pod_eviction(pod_name, namespace, {
                    "apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": pod_name, "namespace": namespace}})
                LOG.info("node %s: evicted %s/%s", name, namespace, pod_name)
            except ApiException as error:
                if error.status == 429:
                    LOG.info("node %s: eviction of %s/%s refused by a disruption budget; retrying", name, namespace,
                             pod_name)
                elif error.status != 404:
                    raise
        if left:
            self.wake(name, now + DRAIN_RETRY_SECONDS, now)
        return not left

    def reboot(self, node, pool, now):
        desired = annotations(node)[fleet.DESIRED_CONFIG]
        self.go_down(node, pool_seconds(pool, fleet.REBOOT_SECONDS, DEFAULT_REBOOT_SECONDS), now, desired)

    def go_down(self, node, seconds, now, into):
        """The reboot starts: NotReady (kwok's heartbeat held off) until now + seconds, or for ever with the node's
        never_returns fault."""
        name = node["metadata"]["name"]
        never = bool((hardware(node).get("faults") or {}).get("never_returns"))
        # Annotated first: kwok must stop heartbeating before the node is marked NotReady (a heartbeat it rendered before
        # the annotation is refused: stages._HEARTBEAT).
        self.annotate(name, {REBOOTING_ANNOTATION: NEVER if never else "%.3f" % (now + seconds)})
        self.set_ready(name, False, "rebooting into %s" % into)
        if not never:
            self.wake(name, now + seconds, now)
        LOG.info("node %s: rebooting into %s%s", name, into, " (never returns: injected fault)" if never else "")

    def boot(self, node, config, pool, now):
        name = node["metadata"]["name"]
        payload = annotations(config)
        rhcos = payload[fleet.RHCOS_OF_CONFIG]
        release, os_image, kernel = fleet.booted_os(rhcos, payload.get(fleet.RELEASE_OF_CONFIG),
                                                    payload.get(fleet.KERNEL_OF_CONFIG))
        desired = annotations(node)[fleet.DESIRED_CONFIG]
        self.come_up(node, now, pool_seconds(pool, fleet.NFD_LAG_SECONDS, DEFAULT_NFD_LAG_SECONDS), release, kernel,
                     {"osImage": os_image}, {fleet.CURRENT_CONFIG: desired, fleet.MCD_STATE: "Done"},
                     rhcos=rhcos, unschedulable=False)
        LOG.info("node %s: booted %s (kernel %s), uncordoned, at %s", name, rhcos, kernel, desired)

    def come_up(self, node, now, lag, release, kernel, node_info, values, rhcos=None, unschedulable=None):
        """The boot: kernel (and node_info) and bootID change, the node is Ready, its pods restart (the simulator
        reports them anew), `values` annotated, its GPUs' faults cleared but the permanent ones and the boot recorded
        (gpu_faults.after_boot); nfd-worker relabels it for release and kernel `lag` seconds later."""
        name = node["metadata"]["name"]
        hw = hardware(node)
        stale = (OSTREE_LABEL,) if (hw.get("faults") or {}).get("stale_nfd_after_upgrade") else ()
        labels_after = fleet.relabelled_for_os(hw.get("nfd_labels") or {}, release, kernel, keep=stale)
        hw.update(kernel=kernel, **({"rhcos": rhcos} if rhcos else {}))
        for pod in list(self.sim.pods.values()):
            if pod["spec"].get("nodeName") == name:
                self.sim.written.pop(pod["metadata"]["uid"], None)
        boot_id = hashlib.md5(("%s-%f" % (name, now)).encode()).hexdigest()
        values = dict(values, **gpu_faults.after_boot(annotations(node), boot_id, now))
        self.core.patch_node_status(name, {"status": {
            "nodeInfo": dict(node_info, kernelVersion=kernel, bootID=boot_id),
            "conditions": [self.ready_condition(True, "kubelet is posting ready status")]}})
        self.annotate(name, dict(values, **{
            REBOOTING_ANNOTATION: None, fleet.HARDWARE_ANNOTATION: json.dumps(hw, sort_keys=True),
            NFD_RELABEL_ANNOTATION: json.dumps({"at": now + lag, "labels": labels_after}, sort_keys=True)}),
            unschedulable=unschedulable)
        self.wake(name, now + lag, now)

    def relabel_when_due(self, node, now):
        """nfd-worker's pass after the boot: the new os-release and kernel labels (where NFD labels the node)."""
        name = node["metadata"]["name"]
        pending = json.loads(annotations(node)[NFD_RELABEL_ANNOTATION])
        if now < pending["at"]:
            self.wake(name, pending["at"], now)
            return
        hw = hardware(node)
        before, after = hw.get("nfd_labels") or {}, pending["labels"]
        hw["nfd_labels"] = after
        labels = node["metadata"].get("labels") or {}
        change = None
        if any(key in labels for key in before):
            change = {key: value for key, value in after.items() if labels.get(key) != value}
            change.update({key: None for key in before if key not in after and key in labels})
        self.annotate(name, {fleet.HARDWARE_ANNOTATION: json.dumps(hw, sort_keys=True), NFD_RELABEL_ANNOTATION: None},
                      labels=change)
        LOG.info("node %s: NFD relabelled (%s)", name,
                 ", ".join("%s=%s" % (key.rsplit("/", 1)[-1], value) for key, value in sorted((change or {}).items())))

    # -- writes --------------------------------------------------------------------------------
    def annotate(self, name, values, labels=None, unschedulable=None):
        body = {"metadata": {"annotations": values}}
        if labels:
            body["metadata"]["labels"] = labels
        if unschedulable is not None:
            body["spec"] = {"unschedulable": unschedulable}
        self.core.patch_node(name, body)
        self.expected.setdefault(name, {}).update(values)

    def set_ready(self, name, ready, message):
        self.core.patch_node_status(name, {"status": {"conditions": [self.ready_condition(ready, message)]}})

    @staticmethod
    def ready_condition(ready, message):
        now = stamp()
        return {"type": "Ready", "status": "True" if ready else "False",
                "reason": "KubeletReady" if ready else "KubeletNotReady", "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now}

    def wake(self, name, when, now):
        if now < self.wakes.get(name, 0) <= when:
            return  # an earlier wake-up is pending; that pass asks again
        self.wakes[name] = when
        self.sim.wake_at(when, name)


def _name(obj):
    return obj["metadata"]["name"]
