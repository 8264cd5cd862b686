"""docs/gitops.md: every YAML example parses, carries the settings the page says it needs, and
its LoraRLJob is valid (offline, and on the real API server with a server-side dry run)."""

from __future__ import annotations

import copy
import json
import re

import pytest
import yaml
from lorarl.admission.validation import validate

from tests.helpers import GITOPS_DOC, REPO, gitops_doc_object, gitops_doc_objects

HEALTH_LUA = REPO / "hack" / "argocd" / "lorarl.dev" / "LoraRLJob" / "health.lua"
CHART_SCHEMA = REPO / "charts" / "lorarl-operator" / "values.schema.json"


def yaml_blocks():
    return re.findall(r"```yaml\n(.*?)```", GITOPS_DOC.read_text(), flags=re.S)


objects = gitops_doc_objects
one = gitops_doc_object


def test_every_block_is_kubernetes_objects():
    objs = objects()
    assert len(yaml_blocks()) == 6
    for obj in objs:
        assert {"apiVersion", "kind", "metadata"} <= set(obj), obj
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", obj["metadata"]["name"]), obj["metadata"]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objs) == sorted(
        [
            ("LoraRLJob", "qwen3-4b-lora-amd"),
            ("ConfigMap", "argocd-cm"),
            ("Application", "kuberay-operator"),
            ("Application", "lorarl-operator"),
            ("Application", "ml-team-training"),
            ("GitRepository", "config"),
            ("Kustomization", "lorarl-infra"),
            ("Kustomization", "lorarl-operator"),
            ("Kustomization", "ml-team-training"),
            ("Namespace", "ml-team"),
            ("HelmRepository", "kuberay"),
            ("HelmRelease", "kuberay-operator"),
            ("GitRepository", "lorarl"),
            ("HelmRelease", "lorarl-operator"),
        ]
    )


def test_argocd_cm_carries_health_lua_byte_for_byte():
    cm = one("ConfigMap", "argocd-cm")
    assert cm["metadata"]["namespace"] == "argocd"
    assert cm["data"]["resource.customizations.health.lorarl.dev_LoraRLJob"] == HEALTH_LUA.read_text()


def test_argo_applications_apply_server_side_in_waves():
    apps = {name: one("Application", name) for name in ("kuberay-operator", "lorarl-operator", "ml-team-training")}
    for name, app in apps.items():
        assert "ServerSideApply=true" in app["spec"]["syncPolicy"]["syncOptions"], name
    waves = [int(apps[n]["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"]) for n in ("kuberay-operator", "lorarl-operator", "ml-team-training")]
    assert waves == sorted(waves) and len(set(waves)) == 3
    assert apps["lorarl-operator"]["spec"]["source"]["path"] == "charts/lorarl-operator"
    assert apps["ml-team-training"]["spec"]["syncPolicy"]["automated"]["prune"] is False
    assert apps["ml-team-training"]["spec"]["destination"]["namespace"] == one("LoraRLJob", "qwen3-4b-lora-amd")["metadata"]["namespace"]


def test_flux_orders_and_health_checks_the_job():
    job = one("LoraRLJob", "qwen3-4b-lora-amd")
    infra, operator, training = (one("Kustomization", name) for name in ("lorarl-infra", "lorarl-operator", "ml-team-training"))
    # dependsOn only waits for health when the dependency checks it
    assert infra["spec"]["wait"] is True and operator["spec"]["wait"] is True
    assert operator["spec"]["dependsOn"] == [{"name": "lorarl-infra"}]
    assert operator["spec"]["sourceRef"] == {"kind": "GitRepository", "name": "lorarl"}
    assert (REPO / operator["spec"]["path"] / "kustomization.yaml").exists()
    assert training["spec"]["dependsOn"] == [{"name": "lorarl-operator"}]
    assert training["spec"]["prune"] is False
    assert {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": job["metadata"]["name"], "namespace": job["metadata"]["namespace"]} in training[
        "spec"
    ]["healthChecks"]
    operator = one("HelmRelease", "lorarl-operator")
    assert operator["spec"]["dependsOn"] == [{"name": "kuberay-operator"}]
    assert operator["spec"]["chart"]["spec"]["chart"] == "./charts/lorarl-operator"
    assert operator["spec"]["chart"]["spec"]["sourceRef"] == {"kind": "GitRepository", "name": "lorarl"}
    assert job["metadata"]["namespace"] in operator["spec"]["values"]["watch"]["namespaces"]
    for release in ("kuberay-operator", "lorarl-operator"):
        spec = one("HelmRelease", release)["spec"]
        assert spec["install"]["crds"] == spec["upgrade"]["crds"] == "CreateReplace", release


def chart_values():
    argo = one("Application", "lorarl-operator")["spec"]["source"]["helm"]["valuesObject"]
    return [argo, one("HelmRelease", "lorarl-operator")["spec"]["values"]]


def test_chart_values_are_the_documented_ones():
    allowed = {("replicaCount",), ("leaderElection", "enabled"), ("watch", "allNamespaces"), ("watch", "namespaces")}

    def leaves(values, prefix=()):
        for key, value in values.items():
            if isinstance(value, dict):
                yield from leaves(value, prefix + (key,))
            else:
                yield prefix + (key,)

    for values in chart_values():
        assert set(leaves(values)) <= allowed, values


def merged(defaults, overrides):
    """Helm's merge of user values over the chart's: maps merge, everything else is replaced."""
    out = copy.deepcopy(defaults)
    for key, value in overrides.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@pytest.mark.skipif(not CHART_SCHEMA.exists(), reason="charts/lorarl-operator is not on this branch yet")
def test_chart_values_pass_the_chart_schema():
    import jsonschema

    schema = json.loads(CHART_SCHEMA.read_text())
    defaults = yaml.safe_load((CHART_SCHEMA.parent / "values.yaml").read_text())
    for values in chart_values():
        jsonschema.validate(merged(defaults, values), schema)


def test_job_is_valid_offline():
    job, problems = validate(one("LoraRLJob", "qwen3-4b-lora-amd"))
    assert problems == [] and job is not None


def test_job_passes_a_server_side_dry_run(control_plane, namespace):
    job = copy.deepcopy(one("LoraRLJob", "qwen3-4b-lora-amd"))
    job["metadata"]["namespace"] = namespace
    out = control_plane.kubectl("apply", "--server-side", "--dry-run=server", "-o", "json", "-f", "-", input=yaml.safe_dump(job), check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["spec"]["lora"]["rank"] == 64  # defaulted by the real CRD
    assert control_plane.kubectl("get", "lorarljobs", "-n", namespace, "-o", "name").stdout.strip() == ""  # a dry run stores nothing
