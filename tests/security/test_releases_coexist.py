"""Releases side by side on one real API server: two namespaced releases (one per team, each
watching its own namespace) and one cluster-wide release, all with the chart's admission policies
as the real helm renders them. Each operator writes its jobs' status; each job's own identity is
still held to the reporter's keys, whichever release's policy judges it."""

from __future__ import annotations

import random
import uuid

import pytest
import yaml

from tests.helpers import request_as, seed_doc, wait_for

pytestmark = pytest.mark.controlplane

POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def status_writer(namespace: str, name: str) -> list[dict]:
    """A ServiceAccount that may patch LoraRLJob status in ``namespace`` (as the chart's RBAC grants an operator)."""
    meta = {"name": name, "namespace": namespace}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [{"apiGroups": ["lorarl.dev"], "resources": ["lorarljobs/status"], "verbs": ["get", "patch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    ]


def write_status(control_plane, token, namespace, job, status) -> tuple[int, str]:
    path = f"/apis/lorarl.dev/v1alpha1/namespaces/{namespace}/lorarljobs/{job}/status"
    return request_as(control_plane, token, "PATCH", path, {"status": status}, "application/merge-patch+json")


def write_phase(control_plane, token, namespace, job, phase) -> tuple[int, str]:
    return write_status(control_plane, token, namespace, job, {"phase": phase})


def forged_generation_refused(control_plane, token, namespace) -> bool:
    """A write of an operator key with a new value each try (an unchanged value is no change)."""
    return write_status(control_plane, token, namespace, "job", {"observedGeneration": random.randint(2, 10**9)})[0] == 403


@pytest.fixture
def releases(helm, control_plane):
    """{namespace: the operator's ServiceAccount} for team-a's, team-b's and the cluster-wide release."""
    tail = uuid.uuid4().hex[:5]
    team_a, team_b, other = f"team-a-{tail}", f"team-b-{tail}", f"shared-{tail}"
    for ns in (team_a, team_b, other):
        control_plane.kubectl("create", "namespace", ns)
    installs = [
        (f"a-{tail}", team_a, ["--set", "watch.allNamespaces=false", "--set", f"watch.namespaces={{{team_a}}}"]),
        (f"b-{tail}", team_b, ["--set", "watch.allNamespaces=false", "--set", f"watch.namespaces={{{team_b}}}"]),
        (f"c-{tail}", other, []),  # watch.allNamespaces (the default): its policies bind everywhere
    ]
    docs, operators = [], {}
    for release, ns, values in installs:
        rendered = helm.render(*values, namespace=ns, release=release)
        operators[ns] = next(d for d in rendered if d["kind"] == "ServiceAccount")["metadata"]["name"]
        docs += [d for d in rendered if d["kind"] in POLICY_KINDS]
    assert len(docs) == 3 * 8
    text = yaml.safe_dump_all(docs)
    control_plane.kubectl("apply", "-f", "-", input=text)
    try:
        yield operators
    finally:
        control_plane.kubectl("delete", "-f", "-", "--ignore-not-found", input=text)
        for ns in (team_a, team_b, other):
            control_plane.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_namespaced_and_cluster_wide_releases_coexist(releases, control_plane):
    operators = releases
    cluster_wide_ns = list(operators)[2]
    cluster_wide = f"system:serviceaccount:{cluster_wide_ns}:{operators[cluster_wide_ns]}"
    jobs, reporter_tokens, operator_tokens = {}, {}, {}
    for ns, operator in operators.items():
        doc = seed_doc()
        doc["metadata"] |= {"name": "job", "namespace": ns}
        control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
        writers = status_writer(ns, operator) + status_writer(ns, "job-reporter")
        control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(writers))
        jobs[ns] = "job"
        operator_tokens[ns] = control_plane.service_account_token(ns, operator)
        reporter_tokens[ns] = control_plane.service_account_token(ns, "job-reporter")

    # first observe every namespace's policy in force: the job's own identity cannot write phase
    for ns in operators:
        wait_for(lambda ns=ns: forged_generation_refused(control_plane, reporter_tokens[ns], ns), timeout=60, what=f"the policy in {ns}")
    # each release's operator writes its own jobs' status, the other releases' policies in force
    for ns in operators:
        assert write_phase(control_plane, operator_tokens[ns], ns, "job", "Running") == (200, ""), ns
    # the cluster-wide operator's account is no job identity either (RBAC decides where it writes)
    team_b = list(operators)[1]
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(status_writer(team_b, "cross")))
    control_plane.kubectl(
        "create", "rolebinding", "cross-c", "-n", team_b, "--role=cross", f"--serviceaccount={cluster_wide.split(':')[2]}:{operators[cluster_wide_ns]}"
    )
    wait_for(lambda: write_phase(control_plane, operator_tokens[cluster_wide_ns], team_b, "job", "Pending") == (200, ""), timeout=30, what="RBAC")
    # and a job identity is still refused, naming the field, in every namespace
    for ns in operators:
        code, message = write_phase(control_plane, reporter_tokens[ns], ns, "job", "Failed")
        assert code == 403 and "status.phase is written only by the lorarl operator" in message, (ns, message)
