"""Per-child applies on the real API server, the operator a real process: an edit writes only
the children whose render it changes (issue 19, finding 10), and children deleted or edited by
hand still come back.

Each test first observes that the operator reconciled the edit (the job's observedGeneration
reaches the edit's generation, and that reconcile's log line), then counts what it applied:
never a sleep followed by an assertion that nothing happened."""

from __future__ import annotations

import re

import pytest
from lorarl.control.cache import CHILDREN_DIGEST, child_digests, decode_digests
from lorarl.job import render
from lorarl.job.settings import RenderSettings
from lorarl_dev.operatorproc import OperatorProcess

from tests.helpers import CHILD_KINDS, NAME, apply_job, job, job_from, phase_is, rayjob, seed_doc, wait_for

pytestmark = pytest.mark.controlplane

APPLIED = re.compile(r"reconcile \w+ \(([\w-]+)\): phase \w+, (\d+) applied")


def applies(lines):
    """(trigger, children applied) of each reconcile log line."""
    return [(m.group(1), int(m.group(2))) for m in map(APPLIED.search, lines) if m]


def versions(kube, namespace):
    return {kind: kube.get(api_version, kind, namespace, name)["metadata"]["resourceVersion"] for api_version, kind, name in CHILD_KINDS}


def edit_and_observe(kube, operator, namespace, spec_patch):
    """Merge-patch the job's spec, wait until the operator has reconciled that generation (its
    status says so, and its log holds the reconcile), and return the reconciles logged since."""
    before = len(operator.reconciles(namespace, NAME))
    stored = kube.merge_patch("lorarl.dev/v1alpha1", "LoraRLJob", namespace, NAME, {"spec": spec_patch})
    generation = stored["metadata"]["generation"]
    wait_for(lambda: (job(kube, namespace)["status"] or {}).get("observedGeneration") == generation, what=f"observedGeneration {generation}")
    wait_for(lambda: any(t == "change" for t, _ in applies(operator.reconciles(namespace, NAME)[before:])), what="the edit's reconcile in the log")
    return applies(operator.reconciles(namespace, NAME)[before:])


def test_an_edit_that_changes_no_render_applies_no_child(control_plane, namespace, kube, operator):
    apply_job(control_plane, namespace, seed_doc())
    wait_for(phase_is(kube, namespace, "Pending"), what="Pending")
    # the reconcile's log line follows its status write: wait for it, then read it
    created = wait_for(lambda: applies(operator.reconciles(namespace, NAME)), what="the create's reconcile in the log")
    assert created[0] == ("change", 7)  # the create applied every child
    children = versions(kube, namespace)
    for seconds in (1200, 1300, 1400):
        since = edit_and_observe(kube, operator, namespace, {"runPolicy": {"startupTimeoutSeconds": seconds}})
        assert sum(n for _, n in since) == 0, since
    assert versions(kube, namespace) == children


def test_an_edit_applies_only_the_children_whose_render_changed(control_plane, namespace, kube, operator):
    apply_job(control_plane, namespace, seed_doc())
    wait_for(phase_is(kube, namespace, "Pending"), what="Pending")
    children = versions(kube, namespace)
    # the RayJob's retries: rendered into the RayJob alone (the spec's training fields are immutable)
    since = edit_and_observe(kube, operator, namespace, {"runPolicy": {"backoffLimit": 3}})
    assert [n for t, n in since if t == "change"] == [1] and sum(n for _, n in since) == 1, since
    live = rayjob(kube, namespace)
    assert live["spec"]["backoffLimit"] == 3
    # the record on the RayJob is the new render's, child by child
    assert decode_digests(live["metadata"]["annotations"][CHILDREN_DIGEST]) == child_digests(render.render(job_from(job(kube, namespace))))
    after = versions(kube, namespace)
    assert after["RayJob"] != children["RayJob"]
    assert {k: v for k, v in after.items() if k != "RayJob"} == {k: v for k, v in children.items() if k != "RayJob"}


def test_children_deleted_or_edited_by_hand_come_back(control_plane, namespace, kube, tmp_path):
    op = OperatorProcess(control_plane, namespace, tmp_path, extra_args=["--repair-seconds", "2"]).start()
    try:
        apply_job(control_plane, namespace, seed_doc())
        wait_for(phase_is(kube, namespace, "Pending"), what="Pending")
        configmap = kube.get("v1", "ConfigMap", namespace, f"{NAME}-lorarl")
        kube.delete("v1", "ConfigMap", namespace, f"{NAME}-lorarl")
        kube.delete("rbac.authorization.k8s.io/v1", "Role", namespace, f"{NAME}-reporter")
        # nothing watches them: the periodic repair (a resync applying every child) brings them back
        back = wait_for(lambda: kube.get("v1", "ConfigMap", namespace, f"{NAME}-lorarl"), what="the ConfigMap re-created")
        assert back["metadata"]["uid"] != configmap["metadata"]["uid"] and back["data"] == configmap["data"]
        wait_for(lambda: kube.get("rbac.authorization.k8s.io/v1", "Role", namespace, f"{NAME}-reporter"), what="the Role re-created")
        # the Role and ConfigMap exist before the repair's reconcile has applied the rest and logged
        wait_for(lambda: ("resync", 7) in applies(op.reconciles(namespace, NAME)), what="the repair's reconcile line (7 applied)")
        # the record on the RayJob edited by hand: every child applied again at once, the record restored
        full = sum(n == 7 for _, n in applies(op.reconciles(namespace, NAME)))
        control_plane.kubectl("annotate", "rayjob", NAME, "-n", namespace, "--overwrite", f"{CHILDREN_DIGEST}=edited")
        wanted = child_digests(render.render(job_from(job(kube, namespace))))
        wait_for(lambda: decode_digests(rayjob(kube, namespace)["metadata"]["annotations"].get(CHILDREN_DIGEST)) == wanted, what="the record restored")
        # re-applied by the edit's rayjob-event, or by a resync that read the edited record first
        wait_for(lambda: sum(n == 7 for _, n in applies(op.reconciles(namespace, NAME))) > full, what="the reconcile line of the re-apply (7 applied)")
    finally:
        op.stop()
    op.assert_no_tracebacks()


def test_the_tools_image_reaches_the_head_and_no_configmap_carries_the_reporter(control_plane, namespace, kube, tmp_path):
    """`lorarl run --tools-image`: the head's reporter init container and sidecar run that image,
    and the job's ConfigMap holds the prepare script alone (issue 19, finding 10)."""
    tools = "registry.example/team/lorarl-operator:e2e"
    op = OperatorProcess(control_plane, namespace, tmp_path, extra_args=["--tools-image", tools]).start()
    try:
        apply_job(control_plane, namespace, seed_doc())
        wait_for(phase_is(kube, namespace, "Pending"), what="Pending")
        head = rayjob(kube, namespace)["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
        images = {c["name"]: c["image"] for c in head["initContainers"] + head["containers"]}
        assert images[render.REPORTER_INSTALL_CONTAINER] == images[render.SIDECAR_CONTAINER] == tools, images
        configmap = kube.get("v1", "ConfigMap", namespace, f"{NAME}-lorarl")
        assert "binaryData" not in configmap and sorted(configmap["data"]) == ["fetch.py", "prepare.sh"]
        wanted = child_digests(render.render(job_from(job(kube, namespace)), RenderSettings(tools_image=tools)))
        assert decode_digests(rayjob(kube, namespace)["metadata"]["annotations"][CHILDREN_DIGEST]) == wanted
    finally:
        op.stop()
    op.assert_no_tracebacks()
