"""One export: choose the newest save, refuse it unless it is complete and matches the spec, and
lay out what is exported (docs/adapters.md). Pure apart from reading the save and writing the
staging directory; the stores (stores.py) only copy what this wrote."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
from dataclasses import dataclass

from ..api.types import LoraRLJob
from ..job import profiles
from ..reporter import checkpoints, launcher
from . import safetensors_file, torchfile

MANIFEST = "lorarl-adapter.json"
WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
FORMAT = "peft-safetensors"

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
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
_TENSOR_RE = re.compile(r"base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.([a-z_]+)\.lora_([AB])\.weight")


class Refused(Exception):
    """The save is not exported; reason is the AdapterExported condition's reason."""

    def __init__(self, reason: str, message: str):
        super().__init__(f"{reason}: {message}")
        self.reason, self.message = reason, message


@dataclass(frozen=True)
class Package:
    """What was laid out in the staging directory."""

    directory: str
    manifest: dict
    digest: str  # sha256:<hex> of the manifest's bytes
    size: int  # bytes of every file, the manifest included
    rollout: int
    source: str  # the save's adapter directory


def hf_target_modules(target_modules: list[str]) -> set[str]:
    """spec.lora.targetModules -> the HF projection names miles' PEFT export carries."""
    words = [w for t in target_modules for w in t.split(",") if w]
    if len(words) == 1 and words[0] in ALL_LINEAR:
        return set(HF_TO_MEGATRON)
    out: set[str] = set()
    for word in words:
        module = HF_TO_MEGATRON.get(word, word)
        if module not in MEGATRON_TO_HF:
            raise Refused("ConfigMismatch", f"spec.lora.targetModules: {word!r} is not a module of a dense Qwen3-style model")
        out.update(MEGATRON_TO_HF[module])
    return out


def projection_dims(job: LoraRLJob) -> tuple[int, dict[str, tuple[int, int]]]:
    """(layers, HF projection -> (in, out)) of the base model."""
    shape = profiles.model_shape(job)
    heads, groups, kv = shape.num_attention_heads, shape.num_query_groups, shape.kv_channels
    h, ffn = shape.hidden_size, shape.ffn_hidden_size
    dims = {
        "q_proj": (h, heads * kv),
        "k_proj": (h, groups * kv),
        "v_proj": (h, groups * kv),
        "o_proj": (heads * kv, h),
        "gate_proj": (h, ffn),
        "up_proj": (h, ffn),
        "down_proj": (ffn, h),
    }
    return shape.num_layers, dims


def choose_save(save_root: str, ranks: int) -> checkpoints.Save:
    """The newest save of any attempt; refused unless complete (reporter.checkpoints' rules)."""
    from ..reporter import attempts

    saves = checkpoints.scan(launcher.save_dirs(save_root, attempts.read_all(save_root)), ranks) or []
    if not saves:
        raise Refused("NoCompleteSave", f"no save under {save_root}")
    newest = max(saves, key=lambda s: (s.rollout, s.attempt))
    if newest not in checkpoints.judge(saves).complete:
        raise Refused(
            "SaveIncomplete",
            f"the newest save {newest.adapter} (rollout {newest.rollout}) is not complete: a rank's adapter_megatron_rank<r>.pt "
            f"or training_state_rank<r>.pt of {ranks} is missing or torn",
        )
    return newest


def check_config(job: LoraRLJob, config: dict) -> None:
    lora = job.spec.lora
    for key, want in (("r", lora.rank), ("lora_alpha", lora.alpha)):
        if config.get(key) != want:
            field = "rank" if key == "r" else "alpha"
            raise Refused("ConfigMismatch", f"adapter_config.json {key} is {config.get(key)!r}, spec.lora.{field} is {want}")
    want_modules = hf_target_modules(lora.target_modules)
    got = config.get("target_modules")
    if not isinstance(got, list) or set(got) != want_modules:
        raise Refused("ConfigMismatch", f"adapter_config.json target_modules is {got!r}, spec.lora.targetModules means {sorted(want_modules)}")


def check_tensors(job: LoraRLJob, tensors: dict[str, torchfile.Tensor]) -> None:
    layers, dims = projection_dims(job)
    r = job.spec.lora.rank
    modules = hf_target_modules(job.spec.lora.target_modules)
    seen = set()
    for name, t in tensors.items():
        m = _TENSOR_RE.fullmatch(name)
        if not m:
            raise Refused("TensorMismatch", f"tensor {name!r} is not a PEFT LoRA weight of a decoder layer")
        layer, block, module, ab = int(m.group(1)), m.group(2), m.group(3), m.group(4)
        if module not in modules or block != ("self_attn" if module in ATTENTION else "mlp"):
            raise Refused("TensorMismatch", f"tensor {name!r}: {module} is not a target module in {block} (spec.lora.targetModules)")
        if layer >= layers:
            raise Refused("TensorMismatch", f"tensor {name!r}: layer {layer}, the base model has {layers}")
        d_in, d_out = dims[module]
        want = (r, d_in) if ab == "A" else (d_out, r)
        if t.shape != want:
            raise Refused("TensorMismatch", f"tensor {name!r} has shape {list(t.shape)}, expected {list(want)} (spec.lora.rank {r}, {job.spec.model.name})")
        seen.add((layer, module, ab))
    missing = [(layer, mod, ab) for layer in range(layers) for mod in sorted(modules) for ab in "AB" if (layer, mod, ab) not in seen]
    if missing:
        layer, mod, ab = missing[0]
        raise Refused("TensorMismatch", f"{len(missing)} LoRA weights missing, e.g. layer {layer} {mod} lora_{ab}")


def _at_rollout(status: dict, rollout: int) -> dict:
    """rollout/raw_reward and eval scores at the exported rollout, from status.history."""
    history = status.get("history") or {}
    out: dict = {}
    reward = [p for p in history.get("reward") or [] if p[0] == rollout]
    if reward:
        out["rawReward"] = reward[-1][1]
    evals = []
    for curve in history.get("eval") or []:
        before = [p for p in curve.get("points") or [] if p[0] <= rollout]
        if before:
            evals.append({"name": curve["name"], "score": before[-1][1], "rollout": int(before[-1][0])})
    if evals:
        out["eval"] = evals
    return out


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build(job: LoraRLJob, status: dict, save_root: str, ranks: int, staging: str, now: datetime.datetime) -> Package:
    """Choose, check and convert the newest complete save into ``staging`` (created, must not exist)."""
    save = choose_save(save_root, ranks)
    bin_path, config_path = os.path.join(save.adapter, "adapter_model.bin"), os.path.join(save.adapter, CONFIG)
    if not (os.path.isfile(bin_path) and os.path.isfile(config_path)):
        raise Refused("NoPeftExport", f"{save.adapter} has no adapter_model.bin and adapter_config.json (miles' HF PEFT export failed for that save)")
    try:
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as err:
        raise Refused("UnreadableAdapter", f"{config_path}: {err}") from None
    if not isinstance(config, dict):
        raise Refused("UnreadableAdapter", f"{config_path}: not a JSON object")
    check_config(job, config)
    try:
        tensors = torchfile.read_state_dict(bin_path)
    except torchfile.UnreadableError as err:
        raise Refused("UnreadableAdapter", f"{bin_path}: {err}") from None
    check_tensors(job, tensors)

    os.makedirs(staging)
    model = job.spec.model
    config = {**config, "base_model_name_or_path": model.name}
    if model.revision:
        config["revision"] = model.revision
    with open(os.path.join(staging, WEIGHTS), "wb") as f:
        f.write(safetensors_file.encode(tensors, {"format": "pt"}))
    with open(os.path.join(staging, CONFIG), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    files = [{"name": n, "size": os.path.getsize(os.path.join(staging, n)), "sha256": _sha256(os.path.join(staging, n))} for n in (CONFIG, WEIGHTS)]
    lora = job.spec.lora
    manifest = {
        "apiVersion": "lorarl.dev/v1alpha1",
        "kind": "AdapterManifest",
        "format": FORMAT,
        "files": files,
        "baseModel": {"name": model.name, **({"revision": model.revision} if model.revision else {})},
        "lora": {"rank": lora.rank, "alpha": lora.alpha, "dropout": lora.dropout, "targetModules": list(lora.target_modules)},
        "job": {"namespace": job.metadata.namespace, "name": job.metadata.name, "uid": job.metadata.uid},
        "rollout": save.rollout,
        "metrics": _at_rollout(status, save.rollout),
        "exportTime": now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    raw = json.dumps(manifest, indent=2, sort_keys=True).encode()
    with open(os.path.join(staging, MANIFEST), "wb") as f:
        f.write(raw)
    size = sum(x["size"] for x in files) + len(raw)
    return Package(staging, manifest, "sha256:" + hashlib.sha256(raw).hexdigest(), size, save.rollout, save.adapter)


def relative_dir(job: LoraRLJob, rollout: int) -> str:
    """Where a run's adapter goes under a destination's prefix: one directory per job and rollout."""
    return f"{job.metadata.namespace}/{job.metadata.name}/rollout-{rollout:07d}/"
