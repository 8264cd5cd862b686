"""miles LoRA saves for the adapter tests, written as miles writes them (the layout of
megatron_utils/lora_utils.py:445-517 at 31f1ca9, as hack/images/job/miles/miles_standin/lora_files.py
reproduces it), except that the PEFT export ``adapter_model.bin`` holds real tensors in
torch.save's own format (torch/serialization.py ``_save``: a zip of ``<prefix>/data.pkl``, pickled
with protocol 2, each storage as the persistent id ``('storage', torch.<X>Storage, key, 'cpu',
numel)`` and its bytes in ``<prefix>/data/<key>``; a tensor as ``torch._utils._rebuild_tensor_v2``
with an empty ``collections.OrderedDict`` of backward hooks). torch is not installed here: the
pickler below writes those globals by name."""

from __future__ import annotations

import collections
import hashlib
import io
import json
import os
import pickle
import zipfile

from lorarl.adapter import package

TINY_ARCH = {"numLayers": 2, "hiddenSize": 64, "ffnHiddenSize": 96, "numAttentionHeads": 4, "numQueryGroups": 2, "kvChannels": 16}


def tiny_job_doc(name: str = "tiny-lora", **spec) -> dict:
    """A LoraRLJob for a two-layer model (explicit architecture), rank 8, with spec overrides."""
    doc = {
        "apiVersion": "lorarl.dev/v1alpha1",
        "kind": "LoraRLJob",
        "metadata": {"name": name, "namespace": "ml", "uid": "0f6b2c1e-0000-4000-8000-000000000021"},
        "spec": {
            "model": {"name": "lorarl-test/tiny-base", "revision": "v1", "architecture": dict(TINY_ARCH)},
            "hardware": {"accelerator": "MI355X", "gpusPerNode": 2},
            "lora": {"rank": 8, "alpha": 16},
            "rollout": {"globalBatchSize": 64},
        },
    }
    doc["spec"].update(spec)
    return doc


class _Global:
    """A global written by module and name (pickle's GLOBAL opcode), like torch's own classes."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, *args):  # never called: pickle only asks that a reduce's function be callable
        raise TypeError(f"{self.module}.{self.name} is written by name only")


class _StorageRef:
    def __init__(self, key: str, storage: str, numel: int):
        self.key, self.storage, self.numel = key, storage, numel


class _TensorRef:
    def __init__(self, storage: _StorageRef, shape: tuple, stride: tuple | None = None):
        self.storage, self.shape = storage, shape
        self.stride = stride or tuple(int(_prod(shape[i + 1 :])) for i in range(len(shape)))

    def __reduce__(self):
        return (_Global("torch._utils", "_rebuild_tensor_v2"), (self.storage, 0, self.shape, self.stride, False, collections.OrderedDict()))


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


class _TorchPickler(pickle._Pickler):  # the pure-Python pickler: its dispatch table can take _Global
    dispatch = dict(pickle._Pickler.dispatch)

    def _save_global_ref(self, obj):
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())

    dispatch[_Global] = _save_global_ref

    def persistent_id(self, obj):
        if isinstance(obj, _StorageRef):
            return ("storage", _Global("torch", obj.storage), obj.key, "cpu", obj.numel)
        return None


def tensor_bytes(name: str, numel: int, itemsize: int = 2) -> bytes:
    """Deterministic, name-dependent contents (so a swapped tensor shows)."""
    seed = hashlib.sha256(name.encode()).digest()
    return (seed * (numel * itemsize // len(seed) + 1))[: numel * itemsize]


def torch_save(path: str, tensors: dict[str, tuple], storage: str = "BFloat16Storage", extra_globals: dict | None = None, stride=None) -> None:
    """torch.save({name: tensor}) of bf16 tensors given as name -> shape."""
    itemsize = 4 if storage == "FloatStorage" else 2
    obj, blobs = {}, {}
    for i, (name, shape) in enumerate(tensors.items()):
        ref = _StorageRef(str(i), storage, _prod(shape))
        blobs[str(i)] = tensor_bytes(name, _prod(shape), itemsize)
        obj[name] = _TensorRef(ref, tuple(shape), stride)
    if extra_globals:
        obj.update(extra_globals)
    buf = io.BytesIO()
    _TorchPickler(buf, protocol=2).dump(obj)
    stem = "archive"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{stem}/data.pkl", buf.getvalue())
        z.writestr(f"{stem}/byteorder", b"little")
        for key, data in blobs.items():
            z.writestr(f"{stem}/data/{key}", data)
        z.writestr(f"{stem}/version", b"3\n")


def _zip(path: str, payload: dict) -> None:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps(payload, protocol=2))


def peft_tensors(rank: int = 8, layers: int = 2, modules=None) -> dict[str, tuple]:
    """The PEFT export's names and shapes for TINY_ARCH (A: (r, in), B: (out, r))."""
    h, ffn, heads, groups, kv = 64, 96, 4, 2, 16
    dims = {
        "q_proj": (h, heads * kv),
        "k_proj": (h, groups * kv),
        "v_proj": (h, groups * kv),
        "o_proj": (heads * kv, h),
        "gate_proj": (h, ffn),
        "up_proj": (h, ffn),
        "down_proj": (ffn, h),
    }
    out = {}
    for layer in range(layers):
        for mod in modules or dims:
            block = "self_attn" if mod in package.ATTENTION else "mlp"
            base = f"base_model.model.model.layers.{layer}.{block}.{mod}"
            out[f"{base}.lora_A.weight"] = (rank, dims[mod][0])
            out[f"{base}.lora_B.weight"] = (dims[mod][1], rank)
    return out


def write_save(
    save_dir: str, iteration: int, ranks: int = 2, *, hf: bool = True, config: dict | None = None, tensors: dict | None = None, states: bool = True
) -> str:
    """One iter_NNNNNNN/adapter save in miles' order: shards, the PEFT export, the training states."""
    adapter = os.path.join(save_dir, f"iter_{iteration:07d}", "adapter")
    os.makedirs(adapter, exist_ok=True)
    for r in range(ranks):
        _zip(os.path.join(adapter, f"adapter_megatron_rank{r}.pt"), {"rank": r})
    if hf:
        torch_save(os.path.join(adapter, "adapter_model.bin"), tensors if tensors is not None else peft_tensors())
        cfg = {
            "peft_type": "LORA",
            "r": 8,
            "lora_alpha": 16,
            "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
            "lora_dropout": 0.0,
            "bias": "none",
            "task_type": "CAUSAL_LM",
        }
        cfg.update(config or {})
        with open(os.path.join(adapter, "adapter_config.json"), "w") as f:
            json.dump(cfg, f)
    if states:
        for r in range(ranks):
            _zip(os.path.join(adapter, f"training_state_rank{r}.pt"), {"iteration": iteration})
    return adapter


STATUS = {
    "history": {
        "reward": [[0, 0.1], [49, 0.4], [99, 0.7]],
        "eval": [{"name": "aime", "points": [[0, 0.1], [39, 0.2], [79, 0.3], [100, 0.9]]}],
    }
}
