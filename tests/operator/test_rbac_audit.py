"""The operator's RBAC is exactly what it uses, proven from the API server's audit log.

The operator runs as a real process with its own ServiceAccount token, bound to the granted rules
(the chart's, rendered by the real helm), through a scenario
that reaches every code path that calls the API. Every request that identity made, allowed or
refused, is read back from the audit log, together with the checks the API server makes inside
a request (listed in ``implied_uses``). Then:

* the API server itself (a SubjectAccessReview per use) must allow every use, and no request may
  have been refused;
* every granted (verb, group, resource) must have been used, except those in ``unreachable()``,
  each with the reason the scenario cannot reach it.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

import pytest
import yaml
from kubernetes import client as k8s
from lorarl_dev import audit
from lorarl_dev.kuberay_sim import FakeKubeRay

from tests.chart.helm import operator_rbac
from tests.helpers import (
    NAME,
    REPO,
    apply_job,
    conditions,
    end_export_pod,
    events,
    export_pod,
    exporter_report,
    job,
    phase_is,
    rayjob,
    seed_doc,
    wait_for,
)

pytestmark = pytest.mark.controlplane

SERVICE_ACCOUNT = "lorarl-operator"
CHILD_RESOURCES = {
    ("", "serviceaccounts"),
    ("rbac.authorization.k8s.io", "roles"),
    ("rbac.authorization.k8s.io", "rolebindings"),
    ("", "configmaps"),
    ("", "persistentvolumeclaims"),
    ("networking.k8s.io", "networkpolicies"),
    ("ray.io", "rayjobs"),
    ("batch", "jobs"),  # the adapter's export Job (spec.export, after Succeeded)
}
FINALIZERS_REFUSAL = "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on"


# ------------------------------------------------------------------------------ granted rules


#: How the operator is deployed: `lorarl run -n NS` (the chart's watch.namespaces) or
#: `lorarl run -A` (watch.allNamespaces, the chart's default). kopf's calls differ between them.
MODES = ("namespaced", "cluster-wide")


def scope_args(mode: str, namespace: str) -> list[str]:
    return ["-n", namespace] if mode == "namespaced" else ["-A"]


def granted_roles(helm, namespace: str, mode: str) -> list[dict]:
    """The ClusterRoles and Roles the chart renders for a release in ``namespace`` (the real helm)."""
    docs = operator_rbac(helm, namespace, release="lorarl", watch_namespaces=[namespace] if mode == "namespaced" else None)
    return [d for d in docs if d["kind"] in ("ClusterRole", "Role")]


def bind(control_plane, namespace: str, roles: list[dict]) -> None:
    """Copies of ``roles`` (test-unique names) bound to the operator's ServiceAccount: a
    ClusterRole cluster-wide, a Role in its own namespace (the chart renders into the test's)."""
    subject = {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}
    docs = []
    for i, role in enumerate(roles):
        kind = role["kind"]
        name = f"lorarl-operator-{namespace}-{i}"
        meta = {"name": name} if kind == "ClusterRole" else {"name": name, "namespace": role["metadata"].get("namespace", namespace)}
        docs.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, "rules": copy.deepcopy(role.get("rules") or [])})
        docs.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": f"{kind}Binding",
                "metadata": dict(meta),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
                "subjects": [subject],
            }
        )
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))


def without(roles: list[dict], verb: str, group: str, resource: str) -> list[dict]:
    """``roles`` minus one (verb, group, resource)."""
    roles = copy.deepcopy(roles)
    kept = []
    for role in roles:
        for rule in role.get("rules") or []:
            if group in rule.get("apiGroups", []) and resource in rule.get("resources", []) and verb in rule.get("verbs", []):
                rest = {**rule, "resources": [r for r in rule["resources"] if r != resource]}
                alone = {**rule, "resources": [resource], "verbs": [v for v in rule["verbs"] if v != verb]}
                kept += [r for r in (rest, alone) if r["resources"] and r["verbs"]]
            else:
                kept.append(rule)
        role["rules"], kept = kept, []
    return roles


@dataclass(frozen=True, order=True)
class Grant:
    verb: str
    group: str
    resource: str  # "resource" or "resource/subresource"


def grants(roles: list[dict]) -> set[Grant]:
    return {
        Grant(v, g, r)
        for role in roles
        for rule in role.get("rules") or []
        for g in rule.get("apiGroups", [])
        for r in rule.get("resources", [])
        for v in rule.get("verbs", [])
    }


def operator_elects_leader() -> bool:
    """Whether this tree's `lorarl run` has leader election (then the scenario runs with it)."""
    return "--leader-elect" in (REPO / "operator" / "lorarl" / "cli" / "__init__.py").read_text()


def unreachable(mode: str) -> dict[Grant, str]:
    """Granted verbs the scenario provably cannot reach here, each with its reason."""
    out: dict[Grant, str] = {}
    # authenticated /metrics reviews a scrape's token: this scenario serves no metrics
    # (--metrics-port 0); tests/operator/test_metrics_auth.py and tests/chart/test_chart_lifecycle.py
    # scrape an operator running with the chart's RBAC
    out[Grant("create", "authentication.k8s.io", "tokenreviews")] = "no metrics endpoint in this scenario (--metrics-port 0)"
    out[Grant("create", "authorization.k8s.io", "subjectaccessreviews")] = "no metrics endpoint in this scenario (--metrics-port 0)"
    if not operator_elects_leader():
        # the chart grants a Lease for `--leader-elect`; an operator without that flag has no
        # code that calls coordination.k8s.io at all
        for verb in ("get", "create", "update"):
            out[Grant(verb, "coordination.k8s.io", "leases")] = "this operator has no leader election (no --leader-elect)"
    return out


# Granted verbs the scenario reaches or not by timing alone: not required used, not refused used.
TIMING_DEPENDENT = {
    # a reconcile that runs while the RayJobs are still being listed after start-up reads an
    # uncached RayJob with a GET (controller.Controller.start); whether the seed job's first
    # reconcile falls in that window depends on the machine's load.
    # tests/operator/test_restart_split.py::test_before_the_rayjobs_are_listed_an_unfinished_jobs_rayjob_is_read_not_recreated
    # makes that GET on purpose
    Grant("get", "ray.io", "rayjobs"): "only while RayJobs are listed after start-up",
}


# ---------------------------------------------------------------------------- the operator


@contextlib.contextmanager
def operator_process(kubeconfig, tmp_path, namespace: str, mode: str):
    """`lorarl run` as its own ServiceAccount, deployed as ``mode`` (with the chart's leader
    election when this operator has it: a Lease in the release namespace)."""
    election = ["--leader-elect", "--leader-election-namespace", namespace] if operator_elects_leader() else []
    with open(tmp_path / f"operator-{mode}.log", "ab") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lorarl.cli",
                "run",
                *scope_args(mode, namespace),
                *election,
                "--liveness",
                "",
                "--metrics-port",
                "0",
                "--resync-seconds",
                "1",
                "--log-format",
                "plain",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        )
        try:
            yield proc
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)


def operator_user(namespace: str) -> str:
    return f"system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}"


def all_watches_closed(control_plane, user: str) -> None:
    """After the operator exits, the API server completes its watches (their audit lines)."""
    wait_for(lambda: not audit.open_watches(control_plane.audit_log_path, user), timeout=60, what=f"{user}'s watches to be closed")


@pytest.fixture
def cleanup_cluster_roles(control_plane, namespace):
    yield
    control_plane.kubectl(
        "delete", "clusterrole,clusterrolebinding", "--ignore-not-found", *[f"lorarl-operator-{namespace}-{i}" for i in range(4)], check=False
    )


# ---------------------------------------------------------------------------- the scenario


def stop_on_unhealthy(control_plane, kube, namespace) -> None:
    """spec.health.stopOnUnhealthy=Stop: the operator deletes the RayJob (DELETE, Foreground)."""
    doc = seed_doc()
    doc["metadata"]["name"] = "stopped"
    doc["spec"]["health"] = {"stopOnUnhealthy": "Stop", "maxLogprobAbsDiff": 0.02}
    apply_job(control_plane, namespace, doc)
    wait_for(lambda: rayjob(kube, namespace, "stopped"), what="the RayJob of 'stopped'")
    ray = FakeKubeRay(kube, namespace, "stopped")
    ray.initializing()
    ray.running()
    wait_for(phase_is(kube, namespace, "Running", "stopped"), what="'stopped' Running")
    kube.patch_status("lorarl.dev/v1alpha1", "LoraRLJob", namespace, "stopped", {"metrics": {"trainRolloutLogprobAbsDiffMean": 0.025, "step": 12}})
    wait_for(phase_is(kube, namespace, "Failed", "stopped"), what="'stopped' stopped as unhealthy")
    wait_for(lambda: rayjob(kube, namespace, "stopped") is None, timeout=60, what="its RayJob deleted")


def expire_after_ttl(control_plane, kube, namespace) -> None:
    """spec.ttlSecondsAfterFinished: the operator deletes the finished job (DELETE)."""
    doc = seed_doc()
    doc["metadata"]["name"] = "expiring"
    doc["spec"]["ttlSecondsAfterFinished"] = 0
    apply_job(control_plane, namespace, doc)
    wait_for(lambda: rayjob(kube, namespace, "expiring"), what="'expiring' RayJob")
    ray = FakeKubeRay(kube, namespace, "expiring")
    ray.initializing()
    ray.app_failed()
    wait_for(lambda: job(kube, namespace, "expiring") is None, timeout=60, what="'expiring' deleted after its TTL")


def every_api_path(control_plane, kube, namespace, tmp_path) -> None:
    """The seed example from apply to success, through a spec update, a deleted RayJob, suspend
    and resume, an export at a save and the final export that supersedes it; and a second job
    stopped as unhealthy. Events are posted all along."""
    apply_job(control_plane, namespace, seed_doc())
    wait_for(phase_is(kube, namespace, "Pending"), what="Pending (children applied)")
    wait_for(lambda: rayjob(kube, namespace), what="the RayJob")
    ray = FakeKubeRay(kube, namespace, NAME)
    ray.initializing()
    wait_for(phase_is(kube, namespace, "Preparing"), what="Preparing")
    ray.submitted()
    ray.running()
    wait_for(phase_is(kube, namespace, "Running"), what="Running")

    # a spec update: a new generation, all children applied again (in the reconcile that
    # writes observedGeneration)
    control_plane.kubectl("patch", "lorarljob", NAME, "-n", namespace, "--type=merge", "-p", '{"spec":{"runPolicy":{"ttlSecondsAfterFinished":900}}}')
    wait_for(lambda: rayjob(kube, namespace)["spec"]["ttlSecondsAfterFinished"] == 900, what="the update applied")
    wait_for(lambda: job(kube, namespace)["status"]["observedGeneration"] == job(kube, namespace)["metadata"]["generation"], what="observedGeneration")

    # a deleted RayJob is re-created
    old_uid = rayjob(kube, namespace)["metadata"]["uid"]
    kube.delete("ray.io/v1", "RayJob", namespace, NAME)
    wait_for(lambda: (rayjob(kube, namespace) or {}).get("metadata", {}).get("uid") not in (None, old_uid), what="a new RayJob")
    wait_for(lambda: ("Warning", "RayJobRecreated") in events(kube, namespace), what="RayJobRecreated event")
    ray = FakeKubeRay(kube, namespace, NAME)
    ray.initializing()
    ray.running()
    wait_for(phase_is(kube, namespace, "Running"), what="Running again")

    # suspend and resume
    control_plane.kubectl("patch", "lorarljob", NAME, "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    wait_for(lambda: rayjob(kube, namespace)["spec"]["suspend"] is True, what="RayJob suspended")
    ray.suspending()
    ray.suspended()
    wait_for(phase_is(kube, namespace, "Suspended"), what="Suspended")
    control_plane.kubectl("patch", "lorarljob", NAME, "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    wait_for(lambda: rayjob(kube, namespace)["spec"]["suspend"] is False, what="RayJob resumed")
    ray.initializing()
    ray.running()
    wait_for(phase_is(kube, namespace, "Running"), what="Running after resume")

    stop_on_unhealthy(control_plane, kube, namespace)
    expire_after_ttl(control_plane, kube, namespace)

    # spec.export with onSave: an export ConfigMap and Job at a complete save, followed through
    # the operator's watch (no kubelet runs its pod: the test ends it as the kubelet would)
    control_plane.kubectl(
        "patch",
        "lorarljob",
        NAME,
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"export":{"destinations":[{"claim":{"claimName":"served"}}],"onSave":true}}}',
    )
    wait_for(lambda: job(kube, namespace)["status"]["observedGeneration"] == job(kube, namespace)["metadata"]["generation"], what="export observed")
    kube.patch_status("lorarl.dev/v1alpha1", "LoraRLJob", namespace, NAME, {"checkpoints": {"latestIteration": 49}})
    at_save = wait_for(lambda: kube.get("batch/v1", "Job", namespace, f"{NAME}-export-r0000049"), what="the export Job at the save")
    end_export_pod(kube, namespace, export_pod(kube, namespace, child="export-r0000049"), exporter_report(tmp_path / "r49", rollout=49, at_save=True), ok=True)
    wait_for(lambda: ("Normal", "AdapterExportedAtSave") in events(kube, namespace), what="the AdapterExportedAtSave event")
    # after success the final export's; once it succeeded, the export Job at the save is deleted
    ray.succeeded()
    st = wait_for(phase_is(kube, namespace, "Succeeded"), what="Succeeded")
    assert conditions(st)["Succeeded"] == ("True", "Succeeded")
    wait_for(lambda: ("Normal", "Succeeded") in events(kube, namespace), what="the Succeeded event")
    wait_for(lambda: kube.get("batch/v1", "Job", namespace, f"{NAME}-export"), what="the export Job")
    wait_for(lambda: conditions(job(kube, namespace)["status"]).get("AdapterExported") == ("Unknown", "Exporting"), what="AdapterExported Unknown")
    end_export_pod(kube, namespace, export_pod(kube, namespace), exporter_report(tmp_path / "final"), ok=True)
    wait_for(lambda: ("Normal", "SavedExportDeleted") in events(kube, namespace), what="the SavedExportDeleted event")
    wait_for(
        lambda: (kube.get("batch/v1", "Job", namespace, f"{NAME}-export-r0000049") or {}).get("metadata", {}).get("uid") != at_save["metadata"]["uid"],
        what="the Job deleted",
    )
    assert kube.get("v1", "ConfigMap", namespace, f"{NAME}-export-r0000049") is None


# ---------------------------------------------------------------------------- what was used


@dataclass(frozen=True, order=True)
class Use:
    verb: str
    group: str
    resource: str  # "resource" or "resource/subresource"
    namespace: str = ""
    name: str = ""

    @property
    def grant(self) -> Grant:
        return Grant(self.verb, self.group, self.resource)


def _raw(control_plane, url: str):
    got = control_plane.kubectl("get", "--raw", url, check=False)
    return json.loads(got.stdout) if got.returncode == 0 else None


def _object_url(request: audit.Request) -> str:
    prefix = f"/apis/{request.api_group}/{request.api_version}" if request.api_group else f"/api/{request.api_version}"
    scope = f"/namespaces/{request.namespace}" if request.namespace else ""
    return f"{prefix}{scope}/{request.resource}/{request.name}"


def _plural(control_plane, api_version: str, kind: str) -> tuple[str, str]:
    group = api_version.rpartition("/")[0]
    listing = _raw(control_plane, f"/apis/{api_version}" if group else f"/api/{api_version}")
    return group, next(r["name"] for r in listing["resources"] if r["kind"] == kind and "/" not in r["name"])


def _role_uses(role: dict, namespace: str) -> set[Use]:
    return {
        Use(v, g, r, namespace, n)
        for rule in role.get("rules") or []
        for g in rule.get("apiGroups", [])
        for r in rule.get("resources", [])
        for v in rule.get("verbs", [])
        for n in (rule.get("resourceNames") or [""])
    }


def implied_uses(control_plane, request: audit.Request) -> set[Use]:
    """Authorization checks the API server makes inside one request of the operator, which the
    audit log does not list as requests of their own:

    * a server-side apply that creates the object (201) is also authorized as ``create``
      (k8s.io/apiserver pkg/endpoints/handlers/patch.go, ``createAuthorizerAttributes``);
    * a created child with ``blockOwnerDeletion: true`` needs ``update`` on its owner's
      ``finalizers`` (OwnerReferencesPermissionEnforcement, plugin/pkg/admission/gc/gc_admission.go
      ``ownerRefToDeleteAttributeRecords``), read from the live object's ownerReferences;
    * a Role (or a RoleBinding to it) is admitted only if the writer holds every permission it
      grants, unless it has ``escalate``/``bind`` (pkg/registry/rbac/role/policybased and
      rolebinding/policybased), read from the live Role.
    """
    out: set[Use] = set()
    if request.code != 201 or request.verb not in ("create", "patch") or request.subresource:
        return out
    if request.verb == "patch":
        out.add(Use("create", request.api_group, request.resource, request.namespace, request.name))
    obj = _raw(control_plane, _object_url(request)) if request.name else None
    if obj is None:  # deleted since (e.g. the stopped job's RayJob); another one of its kind counts
        return out
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("blockOwnerDeletion"):
            group, plural = _plural(control_plane, ref["apiVersion"], ref["kind"])
            out.add(Use("update", group, f"{plural}/finalizers", request.namespace, ref["name"]))
    if (request.api_group, request.resource) == ("rbac.authorization.k8s.io", "roles"):
        out |= _role_uses(obj, request.namespace)
    if (request.api_group, request.resource) == ("rbac.authorization.k8s.io", "rolebindings") and obj["roleRef"]["kind"] == "Role":
        role = _raw(control_plane, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{request.namespace}/roles/{obj['roleRef']['name']}")
        out |= _role_uses(role or {}, request.namespace)
    return out


def observed(control_plane, user: str, namespace: str) -> tuple[set[Use], set[str], list[audit.Request]]:
    """(resource uses incl. implied checks, non-resource paths, refused requests) of ``user``, in
    ``namespace`` or cluster-scoped (`-A` also reaches jobs that other tests left in namespaces
    being deleted; the same verbs, but refused there by NamespaceLifecycle)."""
    uses: set[Use] = set()
    paths: set[str] = set()
    refused: list[audit.Request] = []
    for request in audit.requests(control_plane.audit_log_path, user):
        if request.namespace not in ("", namespace):
            continue
        if request.code in (401, 403):
            refused.append(request)
        if not request.resource:
            paths.add(request.uri.split("?")[0])
            continue
        uses.add(Use(request.verb, request.api_group, request.resource_path, request.namespace, request.name))
        uses |= implied_uses(control_plane, request)
    return uses, paths, refused


def allowed(kube, namespace: str, use: Use) -> bool:
    """The API server's own answer (SubjectAccessReview) for the operator's identity."""
    resource, _, subresource = use.resource.partition("/")
    review = k8s.V1SubjectAccessReview(
        spec=k8s.V1SubjectAccessReviewSpec(
            user=operator_user(namespace),
            groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
            resource_attributes=k8s.V1ResourceAttributes(
                verb=use.verb, group=use.group, resource=resource, subresource=subresource or None, namespace=use.namespace or None, name=use.name or None
            ),
        )
    )
    return k8s.AuthorizationV1Api(kube.client).create_subject_access_review(review).status.allowed


def table(items) -> str:
    return "\n".join(f"  {i}" for i in sorted(items))


# ---------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("mode", MODES)
def test_rbac_is_exactly_what_the_operator_uses(control_plane, helm, namespace, kube, tmp_path, cleanup_cluster_roles, mode):
    roles = granted_roles(helm, namespace, mode)
    bind(control_plane, namespace, roles)
    kubeconfig = control_plane.restricted_kubeconfig(namespace, SERVICE_ACCOUNT)
    user = operator_user(namespace)

    with operator_process(kubeconfig, tmp_path, namespace, mode):
        try:
            every_api_path(control_plane, kube, namespace, tmp_path)
        except AssertionError as err:  # say why: usually a refused request
            refused = [r for r in audit.requests(control_plane.audit_log_path, user) if r.code in (401, 403)]
            log = (tmp_path / f"operator-{mode}.log").read_text(errors="replace")[-4000:]
            raise AssertionError(
                f"{err}\nrefused requests of the operator:\n" + table({f"{r.code} {r.verb} {r.uri}: {r.message}" for r in refused}) + f"\noperator log:\n{log}"
            ) from None
    all_watches_closed(control_plane, user)

    uses, paths, refused = observed(control_plane, user, namespace)
    # every child was created by the operator's own apply (and so passed
    # OwnerReferencesPermissionEnforcement with its blockOwnerDeletion)
    created = {
        (r.api_group, r.resource)
        for r in audit.requests(control_plane.audit_log_path, user)
        if r.verb == "patch" and r.code == 201 and r.namespace == namespace
    }
    assert created == CHILD_RESOURCES
    assert Use("update", "lorarl.dev", "lorarljobs/finalizers", namespace, NAME) in uses
    assert not refused, "requests of the operator the API server refused:\n" + table(f"{r.code} {r.verb} {r.uri}: {r.message}" for r in refused)
    not_allowed = {u for u in uses if not allowed(kube, namespace, u)}
    assert not not_allowed, "used, but the granted rules do not allow it:\n" + table(not_allowed)

    granted = grants(roles)
    wildcards = {g for g in granted if "*" in (g.verb, g.group, g.resource)}
    assert not wildcards, f"wildcards are not least privilege:\n{table(wildcards)}"
    used = {u.grant for u in uses}
    skip = unreachable(mode)
    print(f"{mode}: used (verb, group, resource):\n" + table(used) + "\nnon-resource paths:\n" + table(paths))
    unused = granted - used - set(skip) - set(TIMING_DEPENDENT)
    assert not unused, "granted, but nothing used it:\n" + table(unused)
    assert not set(skip) & used, "an allow-listed verb was used: drop it from unreachable()"
    # and nothing the operator needs comes from a default role rather than from its own rules
    assert used <= granted, "used, allowed only by another binding:\n" + table(used - granted)


# The checks ``implied_uses`` derives are real: without the rule, the operator's apply is refused
# with the API server's message (the first child that needs it: the ServiceAccount for the
# finalizers and for create, the Role for the Role's own permissions).
IMPLIED_CHECKS = [
    pytest.param(Grant("update", "lorarl.dev", "lorarljobs/finalizers"), FINALIZERS_REFUSAL, id="finalizers"),
    pytest.param(Grant("create", "", "serviceaccounts"), 'cannot create resource "serviceaccounts"', id="create-by-apply"),
    pytest.param(Grant("get", "lorarl.dev", "lorarljobs/status"), "is attempting to grant RBAC permissions not currently held", id="role-escalation"),
]


@pytest.mark.parametrize("missing,refusal", IMPLIED_CHECKS)
def test_without_an_implied_rule_the_apply_is_refused(control_plane, helm, namespace, kube, tmp_path, cleanup_cluster_roles, missing, refusal):
    roles = granted_roles(helm, namespace, "namespaced")
    assert missing in grants(roles)
    bind(control_plane, namespace, without(roles, missing.verb, missing.group, missing.resource))
    kubeconfig = control_plane.restricted_kubeconfig(namespace, SERVICE_ACCOUNT)
    user = operator_user(namespace)
    with operator_process(kubeconfig, tmp_path, namespace, "namespaced"):
        apply_job(control_plane, namespace, seed_doc())
        refused = wait_for(
            lambda: next((r for r in audit.requests(control_plane.audit_log_path, user) if r.code == 403 and r.verb == "patch"), None), what="a refused apply"
        )
    assert "is forbidden" in refused.message and refusal in refused.message, refused.message
    assert rayjob(kube, namespace) is None
