"""Data tables: accelerator profiles and known model architectures; a job's profile, GPUs per
node and architecture resolved from them.

A profile is data, not branches: the renderer reads the resource name, image, environment,
node labels and SGLang backends from here and never tests for a vendor.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..api.types import QWEN3_DENSE_NAME, LoraRLJob

# Set before Ray starts on every ROCm Ray container (the launcher's _set_rocm_environment plus
# what the miles ROCm image sets). ROCR_VISIBLE_DEVICES is deliberately absent: Ray >= 2.45
# raises when it is set without HIP_VISIBLE_DEVICES.
ROCM_ENV: Mapping[str, str] = MappingProxyType(
    {
        "RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES": "1",
        "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
        "NCCL_NVLS_ENABLE": "0",
        "HSA_ENABLE_IPC_MODE_LEGACY": "1",
        "HSA_NO_SCRATCH_RECLAIM": "1",
        "HIP_FORCE_DEV_KERNARG": "1",
        "SGLANG_USE_AITER": "1",
        "NCCL_MIN_NCHANNELS": "112",
        "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
        "MILES_HARDWARE_PLATFORM": "rocm",
    }
)

ROCM_IMAGE_MI350 = "rlsys/miles:MI350-355-latest"
ROCM_IMAGE_MI300 = "rlsys/miles:MI300-latest"
CUDA_IMAGE = "radixark/miles:latest"


@dataclass(frozen=True)
class HardwareProfile:
    """Everything that differs between accelerators."""

    name: str
    resource_name: str
    gpus_per_node: int
    image: str
    env: Mapping[str, str]
    # SGLang backends pinned by the profile; None = pass no flag (SGLang picks its default).
    sglang_attention_backend: str | None
    sglang_lora_backend: str | None
    # Node labels a Ray pod requires (exact values published by the device plugins' labellers).
    node_selector: Mapping[str, str] = field(default_factory=dict)


def _amd(name: str, image: str, device_id: str) -> HardwareProfile:
    return HardwareProfile(
        name=name,
        resource_name="amd.com/gpu",
        gpus_per_node=8,
        image=image,
        env=ROCM_ENV,
        sglang_attention_backend="triton",  # SGLang's CUDA-only backends do not run on ROCm
        sglang_lora_backend="triton",
        node_selector=MappingProxyType({"amd.com/gpu.device-id": device_id}),
    )


def _nvidia(name: str, product: str) -> HardwareProfile:
    return HardwareProfile(
        name=name,
        resource_name="nvidia.com/gpu",
        gpus_per_node=8,
        image=CUDA_IMAGE,
        env=MappingProxyType({}),
        sglang_attention_backend=None,
        sglang_lora_backend=None,
        node_selector=MappingProxyType({"nvidia.com/gpu.product": product}),
    )


PROFILES: Mapping[str, HardwareProfile] = MappingProxyType(
    {
        "MI300X": _amd("MI300X", ROCM_IMAGE_MI300, "74a1"),
        "MI325X": _amd("MI325X", ROCM_IMAGE_MI300, "74a5"),
        "MI350X": _amd("MI350X", ROCM_IMAGE_MI350, "75a0"),
        "MI355X": _amd("MI355X", ROCM_IMAGE_MI350, "75a3"),
        "H100": _nvidia("H100", "NVIDIA-H100-80GB-HBM3"),
        "H200": _nvidia("H200", "NVIDIA-H200"),
        "B200": _nvidia("B200", "NVIDIA-B200"),
    }
)


@dataclass(frozen=True)
class ModelShape:
    """Megatron architecture values of a known model (from its HF config.json)."""

    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    untie_embeddings: bool
    kv_channels: int = 128
    vocab_size: int = 151936
    rotary_base: int = 1000000
    norm_epsilon: str = "1e-6"  # kept as the recipe spells it
    qk_layernorm: bool = True


MODEL_PRESETS: Mapping[str, ModelShape] = MappingProxyType(
    {
        "qwen3-0.6B": ModelShape(28, 1024, 3072, 16, 8, untie_embeddings=False),
        "qwen3-1.7B": ModelShape(28, 2048, 6144, 16, 8, untie_embeddings=False),
        "qwen3-4B": ModelShape(36, 2560, 9728, 32, 8, untie_embeddings=False),
        "qwen3-8B": ModelShape(36, 4096, 12288, 32, 8, untie_embeddings=True),
        "qwen3-14B": ModelShape(40, 5120, 17408, 40, 8, untie_embeddings=True),
        "qwen3-32B": ModelShape(64, 5120, 25600, 64, 8, untie_embeddings=True),
    }
)


def fmt(value: float | int) -> str:
    """Render a number as Python's launcher does (repr), e.g. 2e-05, 0.1, 64."""
    if isinstance(value, bool):
        raise TypeError("booleans are flags, not values")
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    return str(value)


_QWEN3_NAME = re.compile(QWEN3_DENSE_NAME)


def profile_of(job: LoraRLJob) -> HardwareProfile:
    return PROFILES[job.spec.hardware.accelerator]


def gpus_per_node(job: LoraRLJob) -> int:
    return job.spec.hardware.gpus_per_node or profile_of(job).gpus_per_node


def model_shape(job: LoraRLJob) -> ModelShape:
    """The architecture: explicit, a named preset, or inferred from a Qwen3 dense model name."""
    arch = job.spec.model.architecture
    if arch is not None and arch.preset is not None:
        return MODEL_PRESETS[arch.preset]
    if arch is not None:
        layers, hidden, ffn, heads, groups = arch.num_layers, arch.hidden_size, arch.ffn_hidden_size, arch.num_attention_heads, arch.num_query_groups
        if layers is None or hidden is None or ffn is None or heads is None or groups is None:  # the CRD's rule refuses that
            raise ValueError(
                "spec.model.architecture: an explicit architecture needs numLayers, hiddenSize, ffnHiddenSize, numAttentionHeads and numQueryGroups"
            )
        return ModelShape(
            num_layers=layers,
            hidden_size=hidden,
            ffn_hidden_size=ffn,
            num_attention_heads=heads,
            num_query_groups=groups,
            untie_embeddings=arch.untie_embeddings_and_output_weights,
            kv_channels=arch.kv_channels,
            vocab_size=arch.vocab_size,
            rotary_base=arch.rotary_base,
            norm_epsilon=fmt(arch.norm_epsilon),
            qk_layernorm=arch.qk_layernorm,
        )
    match = _QWEN3_NAME.match(job.spec.model.name)
    if not match:
        raise ValueError(f"spec.model.architecture: required for {job.spec.model.name!r} (only the Qwen3 dense family is inferred)")
    return MODEL_PRESETS[f"qwen3-{match.group(1)}"]
