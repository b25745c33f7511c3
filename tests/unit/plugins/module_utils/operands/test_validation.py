"""Which nodes a validation check runs on again: only those without a succeeded Job for their operand pods."""

from ansible_collections.accelerators.gpu.plugins.module_utils.operands.validation import validation_plan


def job(name, node, key, conditions=("Complete",), deleting=False):
    meta = {"name": name, "namespace": "gpu",
            "annotations": {"accelerators.gpu/node": node, "accelerators.gpu/validated-pods": key}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"succeeded": 1, "conditions": [
        {"type": condition, "status": "True"} for condition in conditions]}}


def names(plan):
    return [stale["metadata"]["name"] for stale in plan["stale"]]


def test_nothing_kept_validates_every_node():
    plan = validation_plan([], ["a", "b"], {"a": "p1", "b": "p2"})
    assert plan == {"validate": ["a", "b"], "kept": [], "stale": []}


def test_a_node_passed_for_its_current_pod_is_kept():
    plan = validation_plan([job("v-a", "a", "p1"), job("v-b", "b", "p2", conditions=["SuccessCriteriaMet"])],
                           ["a", "b"], {"a": "p1", "b": "p2"})
    assert plan == {"validate": [], "kept": ["a", "b"], "stale": []}


def test_a_replaced_pod_failed_or_running_job_is_validated_again_and_its_job_deleted():
    # v-b: a pod succeeded, but the Job has not (yet) counted as succeeded, or is failing for another pod.
    jobs = [job("v-a", "a", "old-pod"), job("v-b", "b", "p2", conditions=["SuccessCriteriaMet", "Failed"]),
            job("v-c", "c", "p3")]
    plan = validation_plan(jobs, ["a", "b", "c"], {"a": "new-pod", "b": "p2", "c": "p3"})
    assert plan["validate"] == ["a", "b"] and plan["kept"] == ["c"]
    assert names(plan) == ["v-a", "v-b"]
    assert plan["stale"][0] == {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "v-a", "namespace": "gpu"}}


def test_jobs_of_nodes_no_longer_checked_go_and_a_node_without_key_is_always_validated():
    plan = validation_plan([job("v-gone", "gone", "p9"), job("v-a", "a", "")], ["a"], {})
    assert plan == {"validate": ["a"], "kept": [], "stale": plan["stale"]}
    assert names(plan) == ["v-a", "v-gone"]


def test_a_job_being_deleted_is_not_kept_and_its_deletion_awaited():
    plan = validation_plan([job("v-a", "a", "p1", deleting=True)], ["a"], {"a": "p1"})
    assert plan["validate"] == ["a"] and plan["kept"] == [] and names(plan) == ["v-a"]
