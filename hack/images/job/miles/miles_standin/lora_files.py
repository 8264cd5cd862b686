"""LoRA checkpoint files as miles writes and reads them (megatron_utils/lora_utils.py:407-621,
checkpoint.py:130-170 at 31f1ca9).

Layout of one save, ``<save>/iter_NNNNNNN/adapter/`` (checkpoint.py:159), written in this order
(lora_utils.py:445-517): the directory; every rank's ``adapter_megatron_rank<r>.pt`` (its
adapter parameters, Megatron names); rank 0's ``adapter_model.bin`` (HF PEFT names) then
``adapter_config.json`` (peft_type, r, lora_alpha, target_modules, lora_dropout, bias,
task_type: no base_model_name_or_path); every rank's ``training_state_rank<r>.pt``
({iteration, optimizer, opt_param_scheduler}).

The files are small but real: each ``.pt``/``.bin`` is a zip archive in torch.save's layout
(``<stem>/data.pkl``, ``<stem>/byteorder``, ``<stem>/version``), its pickle a dict of plain
Python values (standard library only): per tensor its name, shape and dtype, for the shapes the
model flags, LoRA rank and target modules imply (TP = PP = 1: every rank holds the whole
adapter). No tensor data, except in ``adapter_model.bin`` when the test asks (knob
``adapter_data``: a real torch.save of bf16 tensors, its storages under ``<stem>/data/<key>``, as
torch/serialization.py ``_save`` writes them; the exporter converts it): the seed's real size (36
layers, rank 64) is ~264 MB per save, too much for every test on the shared node. A real run must confirm the real names (Megatron-Bridge's
``adapter.linear_in/linear_out`` naming, the PEFT export's names), the tensor count, and that
the real files are zips as ``zipfile.is_zipfile`` sees them (the reporter's completeness test).
"""

from __future__ import annotations

import collections
import hashlib
import io
import json
import os
import pickle
import zipfile
from dataclasses import dataclass

# megatron_utils/lora_utils.py:240-290: the standard LoRA's Megatron modules and their HF names
MEGATRON_TO_HF = {
    "linear_qkv": ["q_proj", "k_proj", "v_proj"],
    "linear_proj": ["o_proj"],
    "linear_fc1": ["gate_proj", "up_proj"],
    "linear_fc2": ["down_proj"],
}
HF_TO_MEGATRON = {hf: meg for meg, hfs in MEGATRON_TO_HF.items() for hf in hfs}
ALL_LINEAR = ("all", "all-linear", "all_linear")
_ATTN = {"linear_qkv", "linear_proj"}


def iter_dir(save: str, iteration: int) -> str:
    return os.path.join(save, f"iter_{iteration:07d}", "adapter")


def megatron_modules(target_modules: str | None) -> list:
    """--target-modules (comma-separated; HF or Megatron names) -> Megatron modules, deduplicated."""
    words = [w.strip() for w in (target_modules or "all-linear").split(",") if w.strip()]
    if len(words) == 1 and words[0] in ALL_LINEAR:
        return list(MEGATRON_TO_HF)
    out = []
    for word in words:
        name = HF_TO_MEGATRON.get(word, word)
        if name not in MEGATRON_TO_HF:
            raise ValueError(f"--target-modules: unknown module {word!r} for a dense Qwen3-style model")
        if name not in out:
            out.append(name)
    return out


def _dims(args) -> dict:
    """(in, out) of each HF projection."""
    heads, groups = args.num_attention_heads, args.num_query_groups or args.num_attention_heads
    kv = args.kv_channels or args.hidden_size // heads
    h, ffn = args.hidden_size, args.ffn_hidden_size or 4 * args.hidden_size
    return {
        "q_proj": (h, heads * kv),
        "k_proj": (h, groups * kv),
        "v_proj": (h, groups * kv),
        "o_proj": (heads * kv, h),
        "gate_proj": (h, ffn),
        "up_proj": (h, ffn),
        "down_proj": (ffn, h),
    }


def native_tensors(args) -> dict:
    """Megatron adapter parameters: name -> shape (LoRA A: (r, in); B: (out, r))."""
    dims, r = _dims(args), args.lora_rank
    out = {}
    for layer in range(args.num_layers):
        for module in megatron_modules(args.target_modules):
            hfs = MEGATRON_TO_HF[module]
            d_in = dims[hfs[0]][0]
            d_out = sum(dims[x][1] for x in hfs)
            block = "self_attention" if module in _ATTN else "mlp"
            base = f"decoder.layers.{layer}.{block}.{module}.adapter"
            out[f"{base}.linear_in.weight"] = [r, d_in]
            out[f"{base}.linear_out.weight"] = [d_out, r]
    return out


def hf_tensors(args) -> dict:
    """The PEFT export's names -> shape."""
    dims, r = _dims(args), args.lora_rank
    out = {}
    for layer in range(args.num_layers):
        for module in megatron_modules(args.target_modules):
            for hf in MEGATRON_TO_HF[module]:
                block = "self_attn" if module in _ATTN else "mlp"
                base = f"base_model.model.model.layers.{layer}.{block}.{hf}"
                out[f"{base}.lora_A.weight"] = [r, dims[hf][0]]
                out[f"{base}.lora_B.weight"] = [dims[hf][1], r]
    return out


def hf_target_modules(args) -> list:
    return [hf for m in megatron_modules(args.target_modules) for hf in MEGATRON_TO_HF[m]]


def torch_file(name: str, obj) -> bytes:
    """A zip in torch.save's layout holding ``obj`` pickled (plain values only)."""
    stem = os.path.splitext(os.path.basename(name))[0]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{stem}/data.pkl", pickle.dumps(obj, protocol=2))
        z.writestr(f"{stem}/byteorder", b"little")
        z.writestr(f"{stem}/version", b"3\n")
    return buf.getvalue()


class _PlainUnpickler(pickle.Unpickler):
    """Plain values only (as torch.load(weights_only=True) allows only what it knows): no class
    or function of any module is ever looked up, so a crafted file cannot run code."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a checkpoint")


def read_torch_file(path: str):
    """What torch.load gives back for our files; a torn file fails as torch's reader does."""
    try:
        with zipfile.ZipFile(path) as z:
            pkl = next(n for n in z.namelist() if n.endswith("/data.pkl"))
            return _PlainUnpickler(io.BytesIO(z.read(pkl))).load()
    except (zipfile.BadZipFile, StopIteration):
        raise RuntimeError("PytorchStreamReader failed reading zip archive: failed finding central directory") from None


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_shard(adapter: str, rank: int, args, trained_steps: int) -> int:
    os.makedirs(adapter, exist_ok=True)
    tensors = native_tensors(args)
    obj = {name: {"shape": shape, "dtype": "torch.bfloat16"} for name, shape in tensors.items()}
    obj["__standin__"] = {"trained_steps": trained_steps, "rank": rank}
    _write(os.path.join(adapter, f"adapter_megatron_rank{rank}.pt"), torch_file(f"adapter_megatron_rank{rank}", obj))
    return len(tensors)


class _Global:
    """A global written by module and name (pickle's GLOBAL opcode), as torch's pickle names
    torch._utils._rebuild_tensor_v2 and torch.BFloat16Storage: never imported here."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, *args):
        raise TypeError(f"{self.module}.{self.name} is written by name only")


class _Storage:
    def __init__(self, key: str, numel: int):
        self.key, self.numel = key, numel


class _Tensor:
    """A contiguous bf16 tensor as torch.save pickles it: _rebuild_tensor_v2(storage, offset,
    size, stride, requires_grad, backward_hooks) (torch/_tensor.py __reduce_ex__)."""

    def __init__(self, storage: _Storage, shape: list):
        self.storage, self.shape = storage, tuple(shape)

    def __reduce__(self):
        stride = tuple(_numel(self.shape[i + 1 :]) for i in range(len(self.shape)))
        return (_Global("torch._utils", "_rebuild_tensor_v2"), (self.storage, 0, self.shape, stride, False, collections.OrderedDict()))


def _numel(shape) -> int:
    n = 1
    for x in shape:
        n *= x
    return n


class _TorchPickler(pickle._Pickler):  # the pure-Python pickler: its dispatch table takes _Global
    dispatch = dict(pickle._Pickler.dispatch)

    def _global(self, obj):
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())

    dispatch[_Global] = _global

    def persistent_id(self, obj):
        # torch/serialization.py _save: ('storage', storage type, key, location, numel)
        if isinstance(obj, _Storage):
            return ("storage", _Global("torch", "BFloat16Storage"), obj.key, "cpu", obj.numel)
        return None


def torch_tensors_file(name: str, tensors: dict, seed: bytes) -> bytes:
    """torch.save({name: bf16 tensor}) for tensors given as name -> shape; the values are
    deterministic bytes from ``seed`` and the name (a swapped tensor shows), all finite bf16."""
    stem = os.path.splitext(os.path.basename(name))[0]
    obj, blobs = {}, {}
    for i, (tensor, shape) in enumerate(tensors.items()):
        numel = _numel(shape)
        digest = hashlib.sha256(seed + tensor.encode()).digest()
        # bf16 with a small exponent (0x3c..): finite values near 0.01, as a trained LoRA's
        pattern = bytes(b for j in range(0, len(digest), 2) for b in (digest[j], 0x3C))
        blobs[str(i)] = (pattern * (numel * 2 // len(pattern) + 1))[: numel * 2]
        obj[tensor] = _Tensor(_Storage(str(i), numel), shape)
    buf = io.BytesIO()
    _TorchPickler(buf, protocol=2).dump(obj)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{stem}/data.pkl", buf.getvalue())
        z.writestr(f"{stem}/byteorder", b"little")
        for key, data in blobs.items():
            z.writestr(f"{stem}/data/{key}", data)
        z.writestr(f"{stem}/version", b"3\n")
    return out.getvalue()


def write_hf(adapter: str, args, data: bool = False, trained_steps: int = 0) -> int:
    """Rank 0's PEFT export: ``data`` writes the tensors themselves (the knob adapter_data)."""
    tensors = hf_tensors(args)
    if data:
        blob = torch_tensors_file("adapter_model", tensors, f"{trained_steps}".encode())
    else:
        blob = torch_file("adapter_model", {name: {"shape": shape, "dtype": "torch.bfloat16"} for name, shape in tensors.items()})
    _write(os.path.join(adapter, "adapter_model.bin"), blob)
    config = {
        "peft_type": "LORA",
        "r": args.lora_rank,
        "lora_alpha": args.lora_alpha,
        "target_modules": hf_target_modules(args),
        "lora_dropout": args.lora_dropout,
        "bias": "none",
        "task_type": "CAUSAL_LM",
    }
    _write(os.path.join(adapter, "adapter_config.json"), json.dumps(config, indent=2).encode())
    return len(tensors)


def write_state(adapter: str, rank: int, iteration: int, trained_steps: int, lr: float) -> None:
    state = {
        "iteration": iteration,
        "optimizer": {"state": {}, "param_groups": [{"lr": lr, "step": trained_steps}]},
        "opt_param_scheduler": {"num_steps": trained_steps, "max_lr": lr},
    }
    _write(os.path.join(adapter, f"training_state_rank{rank}.pt"), torch_file(f"training_state_rank{rank}", state))


@dataclass
class Loaded:
    loaded: bool
    iteration: int | None = None
    trained_steps: int = 0
    messages: tuple = ()  # (where, text) log lines, in order


def load(adapter_path: str, rank: int, restore_optimizer: bool = True) -> Loaded:
    """load_lora_adapter for one rank (lora_utils.py:550-621)."""
    path = adapter_path.rstrip("/")
    if not os.path.exists(path):
        return Loaded(False, messages=(("lora_utils.py:552", f"LoRA adapter path does not exist: {path}"),))
    native = os.path.join(path, f"adapter_megatron_rank{rank}.pt")
    if os.path.exists(native):
        shard = read_torch_file(native)
        count = sum(1 for k in shard if not k.startswith("__"))
        steps = int(shard.get("__standin__", {}).get("trained_steps", 0))
        msgs = [("lora_utils.py:574", f"Loaded {count} adapter tensors from Megatron-native checkpoint: {native}")]
        iteration = None
        state_path = os.path.join(path, f"training_state_rank{rank}.pt")
        if restore_optimizer and os.path.exists(state_path):
            state = read_torch_file(state_path)
            msgs.append(("lora_utils.py:612", "Restored optimizer state from LoRA checkpoint"))
            if state.get("opt_param_scheduler") is not None:
                msgs.append(("lora_utils.py:616", "Restored LR scheduler state from LoRA checkpoint"))
            iteration = state.get("iteration")
            if iteration is not None:
                msgs.append(("lora_utils.py:620", f"Resuming LoRA training from iteration {iteration}"))
        return Loaded(True, iteration, steps, tuple(msgs))
    if os.path.exists(os.path.join(path, "adapter_model.bin")):
        return Loaded(
            False,
            messages=(
                (
                    "lora_utils.py:582",
                    f"Found HF PEFT adapter at {os.path.join(path, 'adapter_model.bin')} but direct "
                    f"HF PEFT loading into Megatron is not yet supported. Please save using "
                    f"Megatron-native format (adapter_megatron_tp*_pp*.pt files) for checkpoint "
                    f"resume.",
                ),
            ),
        )
    return Loaded(False, messages=(("lora_utils.py:589", f"No adapter checkpoint found at {path}"),))
