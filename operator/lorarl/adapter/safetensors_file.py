"""The safetensors format, written with the standard library (the job image has neither torch
nor the safetensors package). Format (huggingface/safetensors, README "Format" and
safetensors/src/tensor.rs): an unsigned little-endian 64-bit header length N, N bytes of JSON
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}`` (padded
with spaces to a multiple of 8), then the tensors' bytes, offsets relative to the end of the
header, in header order, with no gaps. The tests read our files with the real library."""

from __future__ import annotations

import json
import struct

from .torchfile import Tensor


def _header(tensors: dict[str, Tensor], metadata: dict[str, str] | None) -> bytes:
    header: dict = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        size = len(t.data) if isinstance(t.data, bytes) else t.data.nbytes
        header[name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def encode(tensors: dict[str, Tensor], metadata: dict[str, str] | None = None) -> bytes:
    return _header(tensors, metadata) + b"".join(bytes(tensors[name].data) for name in sorted(tensors))


def write(path: str, tensors: dict[str, Tensor], metadata: dict[str, str] | None = None) -> None:
    """The file, written tensor by tensor (no second copy of the weights in memory)."""
    with open(path, "wb") as f:
        f.write(_header(tensors, metadata))
        for name in sorted(tensors):
            f.write(tensors[name].data)
