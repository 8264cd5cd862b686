"""The chart's output against the real API server: server-side dry runs of default and
non-default renders (the API server's schema validation and admission are the oracle), and Pod
Security "restricted" admission of the operator Pod and the `helm test` Pod."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from tests.chart.helm import NAMESPACED_HA, kinds, pick, servicemonitor_crd_path
from tests.helpers import wait_for

pytestmark = pytest.mark.controlplane


def dry_run(control_plane, docs: list[dict]) -> str:
    out = control_plane.kubectl("apply", "--server-side", "--dry-run=server", "--field-manager=lorarl-chart-test", "-f", "-", input=yaml.safe_dump_all(docs))
    return out.stdout


def extra_namespaces(control_plane, base: str, *suffixes: str) -> list[str]:
    names = [f"{base}-{s}" for s in suffixes]
    for name in names:
        control_plane.kubectl("create", "namespace", name)
    return names


def test_default_render_passes_server_side_dry_run(control_plane, namespace, helm):
    docs = helm.render(namespace=namespace, release=namespace)
    out = dry_run(control_plane, docs)
    assert out.count("serverside-applied (server dry run)") == len(docs), out


def test_namespaced_ha_render_passes_server_side_dry_run(control_plane, namespace, helm):
    team_a, team_b = extra_namespaces(control_plane, namespace, "a", "b")
    try:
        values = copy.deepcopy(NAMESPACED_HA)
        values["watch"]["namespaces"] = [team_a, team_b]
        docs = helm.render(namespace=namespace, release=namespace, values=values)
        assert {"PodDisruptionBudget", "Role", "RoleBinding"} <= set(kinds(docs))
        assert {d["metadata"].get("namespace") for d in docs if d["kind"] == "Role"} == {namespace, team_a, team_b}
        out = dry_run(control_plane, docs)
        assert out.count("serverside-applied (server dry run)") == len(docs), out
    finally:
        control_plane.kubectl("delete", "namespace", team_a, team_b, "--wait=false")


def test_servicemonitor_passes_the_prometheus_operator_crd(control_plane, namespace, helm):
    """The ServiceMonitor against prometheus-operator's own CRD schema (from its Go module)."""
    control_plane.install_crds([servicemonitor_crd_path()])
    docs = helm.render(
        namespace=namespace,
        release=namespace,
        values={
            "metrics": {
                "serviceMonitor": {
                    "enabled": True,
                    "scrapeTimeout": "10s",
                    "labels": {"release": "prom"},
                    "relabelings": [{"action": "replace", "targetLabel": "cluster", "replacement": "a"}],
                }
            }
        },
    )
    monitor = pick(docs, "ServiceMonitor")
    assert "serverside-applied (server dry run)" in dry_run(control_plane, [monitor])
    # the CRD's schema is really checked: a wrong field type is refused
    broken = copy.deepcopy(monitor)
    broken["spec"]["endpoints"][0]["port"] = 9090
    bad = control_plane.kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", input=yaml.safe_dump(broken), check=False)
    assert bad.returncode != 0 and "spec.endpoints[0].port" in bad.stderr, bad.stderr


def test_operator_and_test_pods_are_admitted_under_pod_security_restricted(control_plane, namespace, helm):
    control_plane.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/warn=restricted")
    docs = helm.render(namespace=namespace, release=namespace)
    deployment = pick(docs, "Deployment")
    applied = control_plane.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all([deployment, pick(docs, "ConfigMap"), pick(docs, "Pod")]))
    assert "PodSecurity" not in applied.stderr, applied.stderr  # no "would violate" warning

    # the ReplicaSet controller creates the operator Pod: PodSecurity admission let it in
    selector = ",".join(f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items())

    def operator_pods():
        out = control_plane.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json")
        return json.loads(out.stdout)["items"]

    [pod] = wait_for(operator_pods, timeout=60, what="the Deployment's Pod")
    assert pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    test_pod = json.loads(control_plane.kubectl("get", "pod", "-n", namespace, pick(docs, "Pod")["metadata"]["name"], "-o", "json").stdout)
    assert test_pod["spec"]["automountServiceAccountToken"] is False

    # and the enforcement is live: the same Pod with privilege escalation allowed is refused
    bad = copy.deepcopy(pick(docs, "Pod"))
    bad["metadata"]["name"] += "-escalating"
    bad["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    refused = control_plane.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert refused.returncode != 0 and 'violates PodSecurity "restricted:latest"' in refused.stderr, refused.stderr
