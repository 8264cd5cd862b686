"""One export: choose the newest save, refuse it unless it is complete and matches the spec, and
lay out what is exported (docs/adapters.md). Pure apart from reading the save and writing the
staging directory; the stores (stores.py) only copy what this wrote. It reads the export plan
(lorarl.job.export_plan: plain JSON the operator renders from the spec), so that the export pod needs the
standard library only, not the API's types."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any

from ..reporter import attempts, checkpoints, launcher
from . import safetensors_file, torchfile

MANIFEST = "lorarl-adapter.json"
WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
FORMAT = "peft-safetensors"

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


def choose_save(save_root: str, ranks: int, rollout: int | None = None) -> checkpoints.Save:
    """The newest save of any attempt (or the save of ``rollout``, for an export at a save while
    the run goes on, when newer saves may be being written); refused unless complete
    (reporter.checkpoints' rules)."""
    saves = checkpoints.scan(launcher.save_dirs(save_root, attempts.read_all(save_root)), ranks) or []
    if rollout is not None:
        saves = [s for s in saves if s.rollout <= rollout]  # a newer save does not make it complete
        if not any(s.rollout == rollout for s in saves):
            raise Refused("NoCompleteSave", f"no save of rollout {rollout} under {save_root}")
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


def check_config(plan: dict, config: dict) -> None:
    lora = plan["lora"]
    for key, field in (("r", "rank"), ("lora_alpha", "alpha")):
        if config.get(key) != lora[field]:
            raise Refused("ConfigMismatch", f"adapter_config.json {key} is {config.get(key)!r}, spec.lora.{field} is {lora[field]}")
    want_modules = set(plan["model"]["hfTargetModules"])
    got = config.get("target_modules")
    if not isinstance(got, list) or set(got) != want_modules:
        raise Refused("ConfigMismatch", f"adapter_config.json target_modules is {got!r}, spec.lora.targetModules means {sorted(want_modules)}")


def check_tensors(plan: dict, tensors: dict[str, torchfile.Tensor]) -> None:
    layers, dims = plan["model"]["layers"], plan["model"]["dims"]
    r = plan["lora"]["rank"]
    modules = set(plan["model"]["hfTargetModules"])
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
        want = (r, int(d_in)) if ab == "A" else (int(d_out), r)
        if t.shape != want:
            raise Refused(
                "TensorMismatch", f"tensor {name!r} has shape {list(t.shape)}, expected {list(want)} (spec.lora.rank {r}, {plan['baseModel']['name']})"
            )
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


def build(plan: dict, status: dict, save_root: str, staging: str, now: datetime.datetime) -> Package:
    """Choose, check and convert the newest complete save into ``staging`` (created, must not exist)."""
    save = choose_save(save_root, int(plan["ranks"]), plan.get("rollout"))
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
    check_config(plan, config)
    try:
        tensors = torchfile.read_state_dict(bin_path)
    except torchfile.UnreadableError as err:
        raise Refused("UnreadableAdapter", f"{bin_path}: {err}") from None
    check_tensors(plan, tensors)

    os.makedirs(staging)
    base = plan["baseModel"]
    config = {**config, "base_model_name_or_path": base["name"]}
    if base.get("revision"):
        config["revision"] = base["revision"]
    safetensors_file.write(os.path.join(staging, WEIGHTS), tensors, {"format": "pt"})
    with open(os.path.join(staging, CONFIG), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    files: list[dict[str, Any]] = [
        {"name": n, "size": os.path.getsize(os.path.join(staging, n)), "sha256": _sha256(os.path.join(staging, n))} for n in (CONFIG, WEIGHTS)
    ]
    manifest = {
        "apiVersion": "lorarl.dev/v1alpha1",
        "kind": "AdapterManifest",
        "format": FORMAT,
        "files": files,
        "baseModel": dict(base),
        "lora": dict(plan["lora"]),
        "job": dict(plan["job"]),
        "rollout": save.rollout,
        "metrics": _at_rollout(status, save.rollout),
        "exportTime": now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    raw = json.dumps(manifest, indent=2, sort_keys=True).encode()
    with open(os.path.join(staging, MANIFEST), "wb") as f:
        f.write(raw)
    size = sum(x["size"] for x in files) + len(raw)
    return Package(staging, manifest, "sha256:" + hashlib.sha256(raw).hexdigest(), size, save.rollout, save.adapter)


def relative_dir(plan: dict, rollout: int) -> str:
    """Where a run's adapter goes under a destination's prefix: one directory per job and rollout."""
    return f"{plan['job']['namespace']}/{plan['job']['name']}/rollout-{rollout:07d}/"
