"""The serving examples of docs/adapters.md parse: every YAML block of its "Serve" section loads
(the real YAML parser), the lorarl one is a valid spec.serve (the real API types), the SGLang
Deployment's arguments are flags the SGLang stand-in accepts as SGLang's parser does, and each
other server's example has the fields its project documents."""

from __future__ import annotations

import re

import yaml
from lorarl.api import types as api
from lorarl_dev import sglangstub

from tests.helpers import REPO


def serve_blocks() -> list[list[dict]]:
    text = (REPO / "docs/adapters.md").read_text()
    section = text[text.index("## Serve: `spec.serve`") : text.index("## Limitations")]
    return [[d for d in yaml.safe_load_all(block) if d is not None] for block in re.findall(r"```yaml\n(.*?)```", section, re.S)]


def by_kind(kind: str) -> dict:
    return next(d for docs in serve_blocks() for d in docs if d.get("kind") == kind)


def test_every_yaml_block_parses_and_the_lorarl_one_is_a_valid_spec_serve():
    blocks = serve_blocks()
    assert len(blocks) >= 6
    spec = blocks[0][0]["spec"]
    api.ServeSpec.model_validate(spec["serve"])
    api.ExportSpec.model_validate(spec["export"])


def test_the_sglang_deployment_uses_sglangs_lora_flags():
    deployment = by_kind("Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = [a for a in container["args"] if a not in ("--host", "0.0.0.0")]  # noqa: S104 - a documented bind address
    parsed = sglangstub.parse_args(args)
    assert parsed.enable_lora and parsed.max_lora_rank == 32 and parsed.lora_target_modules == ["all"]
    assert sglangstub.parse_lora_path(parsed.lora_paths[0])["lora_name"] == "qwen3-4b-grpo"
    assert container["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "sglang-api-key"  # the key by reference only


def test_the_other_servers_examples_have_their_documented_fields():
    kserve = by_kind("LLMInferenceService")
    assert kserve["apiVersion"] == "serving.kserve.io/v1alpha1" and kserve["spec"]["model"]["lora"]["adapters"][0].keys() == {"name", "uri"}
    stack = by_kind("LoraAdapter")
    assert stack["apiVersion"] == "production-stack.vllm.ai/v1alpha1" and stack["spec"]["adapterSource"]["type"] == "local"
    kubeai = by_kind("Model")
    assert kubeai["spec"]["engine"] == "VLLM" and all(re.fullmatch(r"[a-z0-9-]+", a["name"]) for a in kubeai["spec"]["adapters"])
    vllm = next(d for docs in serve_blocks() for d in docs if "env" in d and "kind" not in d)
    assert {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"} in vllm["env"]
