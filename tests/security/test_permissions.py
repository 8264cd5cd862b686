"""docs/security.md lists every permission of the operator and of the per-job identity: the tables
must equal what the chart and the renderer grant. The API server (SubjectAccessReview, through
`kubectl auth can-i --as`) confirms what the identities cannot do."""

from __future__ import annotations

import pytest
import yaml
from lorarl.job import render

from tests.chart.helm import operator_rbac
from tests.helpers import doc_table, job_from, seed_doc


def table_grants(heading: str) -> set[tuple[str, str, str]]:
    out = set()
    for row in doc_table(heading):
        assert len(row["Why"]) > 20, row
        group = "" if row["API group"] == "core" else row["API group"]
        out |= {(verb.strip(), group, row["Resource"]) for verb in row["Verbs"].split(",")}
    return out


def rule_grants(rules) -> set[tuple[str, str, str]]:
    return {(v, g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def test_the_operator_table_is_the_charts_rbac(helm):
    granted = set()
    for watch in (None, ["team-a"]):
        docs = operator_rbac(helm, "lorarl-system", release="lorarl", watch_namespaces=watch)
        granted |= rule_grants(r for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"])
    assert table_grants("The operator's permissions") == granted
    assert not any(resource in ("secrets", "nodes", "pods/log", "pods/exec") for _, _, resource in granted)
    assert {verb for verb, _, resource in granted if resource == "pods"} == {"list", "watch"}  # seen, never touched


def test_the_per_job_table_is_the_rendered_role():
    role = render.reporter_role(job_from(seed_doc()))
    assert table_grants("The per-job identity") == rule_grants(role["rules"])
    assert all(rule.get("resourceNames") == [seed_doc()["metadata"]["name"]] for rule in role["rules"])


def can_i(control_plane, namespace, user, *args) -> str:
    out = control_plane.kubectl("auth", "can-i", *args, "-n", namespace, "--as", user, check=False)
    return out.stdout.strip()


@pytest.mark.controlplane
def test_the_operator_and_the_job_cannot_read_secrets(helm, control_plane, namespace):
    """The chart's RBAC for a namespaced release, and a job's rendered RBAC, applied to the real
    API server; every answer comes from its authorizer."""
    docs = operator_rbac(helm, namespace, release=namespace, watch_namespaces=[namespace])
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    operator = f"system:serviceaccount:{namespace}:" + next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]["name"]
    doc = seed_doc()
    doc["metadata"]["namespace"] = namespace
    job_rbac = [c for c in render.render(job_from(doc)) if c["kind"] in ("ServiceAccount", "Role", "RoleBinding")]
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(job_rbac))
    reporter = f"system:serviceaccount:{namespace}:{render.reporter_account_name(job_from(doc))}"
    try:
        # the oracle answers "yes" where the chart grants: the checks below can fail
        assert can_i(control_plane, namespace, operator, "patch", "rayjobs.ray.io") == "yes"
        assert can_i(control_plane, namespace, reporter, "patch", f"lorarljobs.lorarl.dev/{doc['metadata']['name']}", "--subresource=status") == "yes"
        for user in (operator, reporter):
            for verb in ("get", "list", "watch", "create"):
                assert can_i(control_plane, namespace, user, verb, "secrets") == "no", (user, verb)
            assert can_i(control_plane, namespace, user, "create", "pods") == "no"
            assert can_i(control_plane, namespace, user, "create", "pods", "--subresource=exec") == "no"
            assert can_i(control_plane, "kube-system", user, "get", "configmaps") == "no"
        assert can_i(control_plane, namespace, reporter, "patch", "lorarljobs.lorarl.dev/another", "--subresource=status") == "no"
        assert can_i(control_plane, namespace, reporter, "patch", f"lorarljobs.lorarl.dev/{doc['metadata']['name']}") == "no"
        assert can_i(control_plane, namespace, reporter, "list", "lorarljobs.lorarl.dev") == "no"
    finally:
        control_plane.kubectl("delete", "-f", "-", "--ignore-not-found", input=yaml.safe_dump_all([d for d in docs if d["kind"].startswith("Cluster")]))
