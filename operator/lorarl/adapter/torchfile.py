"""A safe reader of the files torch.save writes, for state dicts of tensors (no torch needed).

torch.save (torch/serialization.py ``_save``, zip format since torch 1.6) writes a zip whose
records share one prefix: ``<prefix>/data.pkl`` (the object, pickled with protocol 2; every
storage pickled by ``persistent_id`` as ``('storage', <torch.XStorage>, key, location, numel)``),
``<prefix>/data/<key>`` (each storage's raw bytes, little-endian), ``<prefix>/byteorder``,
``<prefix>/version``. A tensor is ``torch._utils._rebuild_tensor_v2(storage, offset, size,
stride, requires_grad, backward_hooks[, metadata])``.

Unpickling with the standard pickle would call whatever global the file names, so this reader
resolves only what torch's ``weights_only`` unpickler allows for such a dict
(torch/_weights_only_unpickler.py: ``collections.OrderedDict``, ``torch._utils._rebuild_tensor_v2``,
the storage types) and refuses every other global. Only contiguous tensors are read.
"""

from __future__ import annotations

import collections
import io
import math
import pickle
import zipfile
from dataclasses import dataclass

# torch's legacy typed storages -> (safetensors dtype, bytes per element)
STORAGE_DTYPES = {
    "FloatStorage": ("F32", 4),
    "HalfStorage": ("F16", 2),
    "BFloat16Storage": ("BF16", 2),
    "DoubleStorage": ("F64", 8),
}


class UnreadableError(ValueError):
    """Not a torch.save file this reader can read safely."""


@dataclass(frozen=True)
class Tensor:
    dtype: str  # safetensors' name: F32, F16, BF16, F64
    shape: tuple[int, ...]
    data: bytes | memoryview  # a view into its storage's bytes: no copy per tensor


@dataclass(frozen=True)
class _StorageType:
    name: str


@dataclass
class _Storage:
    dtype: str
    itemsize: int
    data: bytes


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None):
    if not isinstance(storage, _Storage):
        raise UnreadableError("a tensor without a storage")
    shape, stride = tuple(int(x) for x in size), tuple(int(x) for x in stride)
    if len(stride) != len(shape) or any(s != c for s, c, d in zip(stride, _contiguous_strides(shape), shape, strict=True) if d != 1):
        raise UnreadableError(f"a non-contiguous tensor (shape {list(shape)}, stride {list(stride)})")
    start = int(storage_offset) * storage.itemsize
    end = start + math.prod(shape) * storage.itemsize
    if end > len(storage.data):
        raise UnreadableError(f"a tensor of shape {list(shape)} runs past its storage ({len(storage.data)} bytes)")
    return Tensor(storage.dtype, shape, memoryview(storage.data)[start:end])


_ALLOWED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    **{("torch", name): _StorageType(name) for name in STORAGE_DTYPES},
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str):
        super().__init__(io.BytesIO(data))
        self._archive, self._prefix = archive, prefix

    def find_class(self, module, name):
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise UnreadableError(f"it names {module}.{name}, which a state dict of tensors never needs") from None

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _StorageType)):
            raise UnreadableError(f"an unknown persistent id {str(pid)[:80]}")
        _, storage_type, key, _location, numel = pid
        dtype, itemsize = STORAGE_DTYPES[storage_type.name]
        try:
            data = self._archive.read(f"{self._prefix}data/{key}")
        except KeyError:
            raise UnreadableError(f"storage {key} is missing from the archive") from None
        if len(data) < int(numel) * itemsize:
            raise UnreadableError(f"storage {key} is short: {len(data)} bytes for {numel} elements")
        return _Storage(dtype, itemsize, data)


def read_state_dict(path: str) -> dict[str, Tensor]:
    """name -> Tensor of a torch.save'd dict of tensors; UnreadableError says why not."""
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
            if len(pickles) != 1:
                raise UnreadableError("not a torch.save archive (no single <prefix>/data.pkl)")
            prefix = pickles[0][: -len("data.pkl")]
            obj = _Unpickler(archive.read(pickles[0]), archive, prefix).load()
    except (zipfile.BadZipFile, OSError) as err:
        raise UnreadableError(f"not a whole zip archive ({err})") from None
    except (pickle.UnpicklingError, EOFError, TypeError, ValueError, AttributeError, IndexError) as err:
        if isinstance(err, UnreadableError):
            raise
        raise UnreadableError(f"its pickle cannot be read ({type(err).__name__}: {err})") from None
    if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, Tensor) for k, v in obj.items()):
        raise UnreadableError("it holds something other than a dict of tensor names to tensors")
    return dict(obj)
