"""The generated CRD on the real kube-apiserver: defaults, CEL rules with their messages,
immutability, printer columns and `kubectl explain`."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from tests.api.validation_cases import CASES
from tests.helpers import seed_doc, with_spec

pytestmark = pytest.mark.controlplane

# every rule `lorarl validate` applies lives in the CRD: the API server gives the same answer
CRD_CASES = CASES


def kubectl_apply(control_plane, namespace, doc):
    doc = copy.deepcopy(doc)
    doc["metadata"]["namespace"] = namespace
    return control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc), check=False)


@pytest.mark.parametrize("overrides,field,words", CRD_CASES, ids=[c[1] + ":" + c[2][:20] for c in CRD_CASES])
def test_api_server_rejects_with_the_rules_message(control_plane, namespace, overrides, field, words):
    out = kubectl_apply(control_plane, namespace, with_spec(**overrides))
    assert out.returncode != 0, f"accepted: {overrides}"
    # the API server names the field (with its own spelling of unknown fields / enums)
    assert field.split("[")[0].split(".")[-1] in out.stderr or words in out.stderr, out.stderr
    if words not in ("should match pattern", "greater than or equal to 1", "unknown field", "MI355X"):
        assert words in out.stderr, out.stderr


def test_long_and_non_dns1035_names_rejected(control_plane, namespace):
    doc = seed_doc()
    doc["metadata"]["name"] = "a" * 48
    out = kubectl_apply(control_plane, namespace, doc)
    assert out.returncode != 0 and "at most 47 characters" in out.stderr


def test_defaults_are_the_recipe(control_plane, namespace, kube_api):
    assert kubectl_apply(control_plane, namespace, seed_doc()).returncode == 0
    stored = json.loads(control_plane.kubectl("get", "lorarljob", "qwen3-4b-lora-amd", "-n", namespace, "-o", "json").stdout)
    spec = stored["spec"]
    assert spec["lora"] == {"rank": 64, "alpha": 32, "dropout": 0.0, "targetModules": ["all-linear"], "baseCpuBackup": True}
    assert spec["rollout"]["numRollouts"] == 100 and spec["rollout"]["globalBatchSize"] == 64
    assert spec["eval"]["datasets"] == [{"name": "aime24", "repo": "zhuzilin/aime-2024"}]
    assert spec["optimizer"]["lr"] == 2e-05 and spec["hardware"]["nodes"] == 1
    # what `lorarl validate` reads offline is what the server stored
    from lorarl.admission.validation import parse_job
    from lorarl.api.problems import wire_form

    assert wire_form(parse_job(stored))["spec"] == {k: v for k, v in spec.items()}


@pytest.mark.parametrize(
    "patch,field",
    [
        ('{"spec":{"lora":{"rank":8}}}', "spec.lora"),
        ('{"spec":{"model":{"name":"Qwen/Qwen3-8B"}}}', "spec.model"),
        ('{"spec":{"hardware":{"nodes":2}}}', "spec.hardware"),
        ('{"spec":{"extraArgs":["--foo"]}}', "spec.extraArgs"),
        ('{"spec":{"scheduling":{"priorityClassName":"high"}}}', "spec.scheduling"),
        ('{"spec":{"scheduling":{"queueName":"other"}}}', "spec.scheduling"),
    ],
)
def test_training_fields_are_immutable(control_plane, namespace, patch, field):
    assert kubectl_apply(control_plane, namespace, seed_doc()).returncode == 0
    out = control_plane.kubectl("patch", "lorarljob", "qwen3-4b-lora-amd", "-n", namespace, "--type=merge", "-p", patch, check=False)
    assert out.returncode != 0 and f"{field} is immutable" in out.stderr, out.stderr


def test_mutable_fields_change(control_plane, namespace):
    assert kubectl_apply(control_plane, namespace, seed_doc()).returncode == 0
    for patch in ('{"spec":{"suspend":true}}', '{"spec":{"health":{"maxLogprobAbsDiff":0.05}}}', '{"spec":{"runPolicy":{"backoffLimit":3}}}'):
        control_plane.kubectl("patch", "lorarljob", "qwen3-4b-lora-amd", "-n", namespace, "--type=merge", "-p", patch)


def test_kubectl_explain_reads_well(control_plane):
    out = control_plane.kubectl("explain", "lorarljob.spec.lora.rank").stdout
    assert "LoRA rank." in out and "integer" in out
    out = control_plane.kubectl("explain", "lorarljob.spec.hardware").stdout
    assert "accelerator" in out and "Accelerator profile" in out


def test_short_name_and_categories(control_plane, namespace):
    assert kubectl_apply(control_plane, namespace, seed_doc()).returncode == 0
    assert "qwen3-4b-lora-amd" in control_plane.kubectl("get", "lrl", "-n", namespace).stdout
    assert "qwen3-4b-lora-amd" in control_plane.kubectl("get", "lorarl", "-n", namespace).stdout
    assert "lorarljob.lorarl.dev/qwen3-4b-lora-amd" in control_plane.kubectl("get", "all", "-n", namespace).stdout


def test_the_finished_cluster_is_held_only_on_purpose_and_the_old_name_still_admitted(control_plane, namespace):
    """runPolicy.holdGpusAfterFinishSeconds defaults to 0 (no more 600 s stored by default); the
    deprecated ttlSecondsAfterFinished alone, or equal to it, is admitted, as `lorarl validate` says."""
    from lorarl.admission.validation import validate

    assert kubectl_apply(control_plane, namespace, seed_doc()).returncode == 0
    stored = json.loads(control_plane.kubectl("get", "lorarljob", "qwen3-4b-lora-amd", "-n", namespace, "-o", "json").stdout)
    assert stored["spec"]["runPolicy"]["holdGpusAfterFinishSeconds"] == 0 and "ttlSecondsAfterFinished" not in stored["spec"]["runPolicy"]
    for i, run_policy in enumerate([{"ttlSecondsAfterFinished": 600}, {"ttlSecondsAfterFinished": 60, "holdGpusAfterFinishSeconds": 60}]):
        doc = with_spec(runPolicy=run_policy)
        doc["metadata"]["name"] = f"old-ttl-{i}"
        assert validate(doc)[1] == []
        out = kubectl_apply(control_plane, namespace, doc)
        assert out.returncode == 0, out.stderr
