"""One source of truth: the committed CRD and API docs are what the model generates."""

from __future__ import annotations

from lorarl.admission import crdgen
from lorarl_dev import docsgen

from tests.helpers import REPO

CRD_PATH = REPO / "crds" / crdgen.CRD_FILE
API_DOC = REPO / "docs" / "api.md"


def test_crd_has_not_drifted():
    assert CRD_PATH.read_text() == crdgen.crd_yaml(), "crds/ is stale: run `lorarl crd > crds/lorarl.dev_lorarljobs.yaml`"


def test_known_fields_have_not_drifted():
    """The controller's lenient read prunes by this file instead of generating the CRD."""
    path = REPO / "operator" / "lorarl" / "control" / "known_fields.json"
    assert path.read_text() == crdgen.known_fields_json(), f"{path} is stale: run `make generate`"


def test_api_doc_has_not_drifted():
    assert API_DOC.read_text() == docsgen.api_markdown(), "docs/api.md is stale: run `lorarl-dev docs -o docs/api.md`"


# the vendored core/v1 schema (KubeRay's CRD, which carries no descriptions) is embedded as is
EMBEDDED = ("spec.hardware.affinity",)


def walk(schema, path="", into_embedded=False):
    yield path, schema
    if not into_embedded and path in EMBEDDED:
        return
    for name, sub in schema.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}", into_embedded)
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]", into_embedded)
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}", into_embedded)


def test_every_spec_string_list_and_map_is_bounded():
    """What the API server admits must fit etcd, the children that copy it and kopf's bookkeeping,
    and keep the CEL cost estimate within the server's budget."""
    spec = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    unbounded = []
    for path, schema in walk(spec, "spec", into_embedded=True):
        kind = schema.get("type")
        if kind == "string" and "enum" not in schema and "maxLength" not in schema:
            unbounded.append(path)
        if kind == "array" and "maxItems" not in schema:
            unbounded.append(path)
        if kind == "object" and "properties" not in schema and "maxProperties" not in schema:
            unbounded.append(path)
    assert unbounded == []


def test_affinity_is_the_vendored_core_v1_schema():
    spec = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    affinity = spec["properties"]["hardware"]["properties"]["affinity"]
    assert set(affinity["properties"]) == {"nodeAffinity", "podAffinity", "podAntiAffinity"}
    assert "x-kubernetes-preserve-unknown-fields" not in affinity


def test_every_spec_and_status_field_is_described_and_typed():
    root = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in ("spec", "status"):
        for path, schema in walk(root["properties"][part], part):
            assert schema.get("type") or schema.get("x-kubernetes-preserve-unknown-fields"), path
            if not path.endswith(("[]", "{}")):
                assert schema.get("description"), f"{path} has no description"
            assert "$ref" not in schema and "anyOf" not in schema and "title" not in schema, path


def test_structural_schema_basics():
    crd = crdgen.crd()
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    names = crd["spec"]["names"]
    assert names["shortNames"] == ["lrl"] and names["categories"] == ["all", "lorarl"]
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns[0] == "Phase" and columns[-1] == "Age"
    assert [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")] == ["Phase", "Reason", "Rollout", "Reward", "Age"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["required"] == ["model", "hardware"]
    # nested objects default to the recipe's values, so the API server fills them in
    assert spec["properties"]["lora"]["default"] == {"rank": 64, "alpha": 32, "dropout": 0.0, "targetModules": ["all-linear"], "baseCpuBackup": True}
    assert spec["properties"]["lora"]["properties"]["rank"]["default"] == 64


def test_status_schema_declares_what_writers_send():
    """Anything the operator or the reporter writes must be in the schema or it is pruned."""
    status = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert set(status) >= {
        "phase",
        "conditions",
        "observedGeneration",
        "rayJob",
        "progress",
        "metrics",
        "eval",
        "checkpoints",
        "tracking",
        "startTime",
        "completionTime",
    }
    assert set(status["progress"]["properties"]) == {"rollout", "total", "percent", "etaSeconds", "lastUpdateTime", "attempts", "trainedRollouts", "gpuHours"}
    assert set(status["metrics"]["properties"]) == {
        "step",
        "rawReward",
        "trainRolloutLogprobAbsDiff",
        "trainRolloutLogprobAbsDiffMean",
        "kl",
        "loss",
        "responseLengthMean",
        "truncatedRatio",
        "nonFinite",
    }
    assert set(status["checkpoints"]["properties"]) == {"latestIteration", "latestPath", "count", "saving"}
    assert set(status["eval"]["items"]["properties"]) == {"name", "latest", "latestRollout", "best", "bestRollout"}
    assert set(status["tracking"]["properties"]) == {"wandbRunURL"}
    # and every leaf the reporter really sends is declared
    from lorarl.reporter import kubeapi
    from lorarl.reporter.logparse import Event
    from lorarl.reporter.summary import Summary

    summary = Summary(10)
    for event in (
        Event("rollout", 0, {"rollout/raw_reward": 0.5, "rollout/response_len/mean": 9.0, "rollout/truncated_ratio": 0.1}),
        Event("step", 0, {"train/loss": 1.0, "train/ppo_kl": 0.1, "train/train_rollout_logprob_abs_diff": 0.01}),
        Event("eval", 0, {"eval/aime24": 0.5}),
        Event("saving", 0, {}, "/s/iter_0000000/adapter"),
        Event("wandb", 0, {}, "https://wandb.ai/t/p/runs/x"),
    ):
        summary.apply(event)
    sent = kubeapi.patch_body(summary.status())["status"]
    sent["checkpoints"].update(latestIteration=0, latestPath="/s", count=1)
    for field, value in sent.items():
        declared = status[field]["items" if field == "eval" else "properties"]
        keys = set().union(*map(set, value)) if isinstance(value, list) else set(value)
        assert keys <= set(declared.get("properties", declared)), field


def _documented_flags(model, seen=None):
    """Every train.py flag the API docs promise (field metadata `flag`)."""
    from lorarl.admission.crdgen import model_in

    flags = set()
    for field in model.model_fields.values():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        flags |= {f.strip() for f in extra.get("flag", "").split("/") if f.strip()}
        sub = model_in(field.annotation)
        if sub is not None and sub is not model:
            flags |= _documented_flags(sub)
    return flags


def test_documented_flags_are_what_the_renderer_emits():
    """docs/api.md names a flag per field: each must really appear in a command that sets it."""
    from lorarl.api import types as api
    from lorarl.job import command

    from tests.helpers import job_from, with_spec

    doc = with_spec(
        model={
            "name": "acme/x",
            "architecture": {
                "numLayers": 2,
                "hiddenSize": 8,
                "ffnHiddenSize": 16,
                "numAttentionHeads": 2,
                "numQueryGroups": 1,
                "untieEmbeddingsAndOutputWeights": True,
            },
        },
        tracking={"wandb": {"team": "t", "group": "g", "apiKeySecretRef": {"name": "w", "key": "k"}}},
    )
    words = set(command.train_argv(job_from(doc)))
    # --lora-adapter-path is appended at run time by the reporter (resume), not rendered
    assert _documented_flags(api.LoraRLJobSpec) - words == {"--lora-adapter-path"}


def test_vendored_core_schema_is_kuberays():
    """operator/lorarl/admission/schemas/core_v1_affinity.json is what hack/schemas/vendor_core_v1.py
    extracts from the KubeRay CRD the tests run against."""
    import json
    import subprocess
    import sys

    vendored = (REPO / "operator" / "lorarl" / "admission" / "schemas" / "core_v1_affinity.json").read_text()
    fresh = subprocess.run(
        [sys.executable, str(REPO / "hack" / "schemas" / "vendor_core_v1.py"), "--stdout"], check=True, capture_output=True, text=True
    ).stdout
    assert fresh == vendored, "stale: run hack/schemas/vendor_core_v1.py"
    assert "ray-operator@" in json.loads(vendored)["source"]


def test_crd_yaml_has_no_aliases():
    assert "&id0" not in crdgen.crd_yaml()  # shared Python objects would become YAML anchors
