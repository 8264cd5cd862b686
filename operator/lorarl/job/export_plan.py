"""The export plan: what the export pod needs to know of the job, rendered from the typed spec
as plain JSON (the pod reads it with the standard library; docs/adapters.md)."""

from __future__ import annotations

from typing import Any

from ..api.types import LoraRLJob
from . import profiles

# miles' Megatron modules and the HF projections its PEFT export names for them
# (megatron_utils/lora_utils.py:240-290 at 31f1ca9, as hack/images/job/miles/miles_standin/lora_files.py reads them)
MEGATRON_TO_HF = {
    "linear_qkv": ("q_proj", "k_proj", "v_proj"),
    "linear_proj": ("o_proj",),
    "linear_fc1": ("gate_proj", "up_proj"),
    "linear_fc2": ("down_proj",),
}
HF_TO_MEGATRON = {hf: meg for meg, hfs in MEGATRON_TO_HF.items() for hf in hfs}
ALL_LINEAR = ("all", "all-linear", "all_linear")


class PlanError(ValueError):
    """The spec names something the exporter cannot check (the message names the field)."""


def hf_target_modules(target_modules: list[str]) -> list[str]:
    """spec.lora.targetModules -> the HF projection names miles' PEFT export carries."""
    words = [w for t in target_modules for w in t.split(",") if w]
    if len(words) == 1 and words[0] in ALL_LINEAR:
        return list(HF_TO_MEGATRON)
    out: list[str] = []
    for word in words:
        module = HF_TO_MEGATRON.get(word, word)
        if module not in MEGATRON_TO_HF:
            raise PlanError(f"spec.lora.targetModules: {word!r} is not a module of a dense Qwen3-style model")
        out += [hf for hf in MEGATRON_TO_HF[module] if hf not in out]
    return out


def projection_dims(job: LoraRLJob) -> tuple[int, dict[str, list[int]]]:
    """(layers, HF projection -> [in, out]) of the base model (its preset or explicit shape)."""
    shape = profiles.model_shape(job)
    heads, groups, kv = shape.num_attention_heads, shape.num_query_groups, shape.kv_channels
    h, ffn = shape.hidden_size, shape.ffn_hidden_size
    return shape.num_layers, {
        "q_proj": [h, heads * kv],
        "k_proj": [h, groups * kv],
        "v_proj": [h, groups * kv],
        "o_proj": [heads * kv, h],
        "gate_proj": [h, ffn],
        "up_proj": [h, ffn],
        "down_proj": [ffn, h],
    }


def export_plan(job: LoraRLJob) -> dict[str, Any]:
    export = job.spec.export
    if export is None:
        raise PlanError("spec.export: not set")
    model, lora = job.spec.model, job.spec.lora
    layers, dims = projection_dims(job)
    return {
        "job": {"namespace": job.metadata.namespace, "name": job.metadata.name, "uid": job.metadata.uid},
        "baseModel": {"name": model.name, **({"revision": model.revision} if model.revision else {})},
        "lora": {"rank": lora.rank, "alpha": lora.alpha, "dropout": lora.dropout, "targetModules": list(lora.target_modules)},
        "model": {"layers": layers, "dims": dims, "hfTargetModules": hf_target_modules(lora.target_modules)},
        "ranks": job.spec.hardware.nodes * profiles.gpus_per_node(job),
        "destinations": [d.model_dump(by_alias=True, exclude_none=True, exclude_defaults=False) for d in export.destinations],
    }
