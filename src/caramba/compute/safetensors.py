"""The safetensors file format, written and read with NumPy alone.

Layout: an 8-byte little-endian header length N, N bytes of JSON header
``{name: {"dtype": "F64", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {str: str}}``
(padded with spaces to a multiple of 8), then the raw little-endian tensor bytes. Files are
readable by the ``safetensors`` package and by every framework that reads it.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import struct
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from caramba.errors import CarambaError
from caramba.ir.dtypes import DType

CODES = {
    DType.float64: "F64",
    DType.float32: "F32",
    DType.float16: "F16",
    DType.bfloat16: "BF16",
    DType.int64: "I64",
    DType.int32: "I32",
    DType.int8: "I8",
    DType.uint8: "U8",
    DType.bool: "BOOL",
}
DTYPES = {v: k for k, v in CODES.items()}
MAX_HEADER = 100 * 1024 * 1024


class CheckpointError(CarambaError):
    """A checkpoint file is malformed, does not match what it is loaded into, or was written
    for another graph. The message names the file and the tensor; fix the path or the graph."""


def _dtype_of(arr: np.ndarray) -> DType:
    from caramba.ir.dtypes import dtype

    return dtype(arr.dtype)


def dumps(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> bytes:
    """Serialize ``tensors`` (sorted by name, as the safetensors package does)."""
    header: dict[str, object] = {}
    if metadata:
        bad = [k for k, v in metadata.items() if not isinstance(k, str) or not isinstance(v, str)]
        if bad:
            raise CheckpointError(f"safetensors metadata must map str to str; bad keys {bad}")
        header["__metadata__"] = dict(metadata)
    blobs = []
    offset = 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name])
        d = _dtype_of(arr)
        data = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": CODES[d], "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def save(path: "str | os.PathLike[str]", tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> Path:
    """Write atomically: a temporary file in the same directory, then a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(dumps(tensors, metadata))
    os.replace(tmp, path)
    return path


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in pairs:
        if k in out:
            raise CheckpointError(f"the header names '{k}' twice")
        out[k] = v
    return out


def _ints(v: object, n: int | None = None) -> list[int] | None:
    """``v`` as a list of ints (JSON integers, not bools or floats), or None."""
    if not isinstance(v, list) or (n is not None and len(v) != n):
        return None
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return None
    return v


MAX_RANK = 64


def loads(data: bytes, what: str = "<bytes>") -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Parse a safetensors file. Everything in the header is checked before a byte is read: a JSON
    object, no name twice, known dtypes, shapes of non-negative ints, offsets inside the data
    section that match the shape and do not overlap. Any problem is a ``CheckpointError`` naming
    ``what`` and the tensor."""
    if len(data) < 8:
        raise CheckpointError(f"{what}: too short to be a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER or 8 + n > len(data):
        raise CheckpointError(f"{what}: header length {n} is out of range")
    try:
        header = json.loads(data[8 : 8 + n], object_pairs_hook=_no_duplicates)
    except CheckpointError as exc:
        raise CheckpointError(f"{what}: {exc.message}") from None
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{what}: header is not JSON ({type(exc).__name__}: {str(exc)[:120]})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{what}: the header is a JSON {type(header).__name__}, not an object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise CheckpointError(f"{what}: __metadata__ must map str to str")
    body = memoryview(data)[8 + n :]
    spans: list[tuple[int, int, str]] = []
    entries = []
    for name, info in header.items():
        bad = CheckpointError(f"{what}: bad header entry for tensor '{name}': {str(info)[:200]}")
        if not isinstance(info, dict) or not isinstance(info.get("dtype"), str) or info["dtype"] not in DTYPES:
            raise bad
        shape, offsets = _ints(info.get("shape")), _ints(info.get("data_offsets"), 2)
        if (shape is None or offsets is None or len(shape) > MAX_RANK or any(s < 0 for s in shape)
                or math.prod(max(s, 1) for s in shape) >= 2**62):  # NumPy's limit, even for an empty array
            raise bad
        d = DTYPES[info["dtype"]]
        begin, end = offsets
        count = math.prod(shape)  # Python ints: a huge shape cannot wrap around
        if not 0 <= begin <= end <= len(body) or end - begin != count * d.itemsize:
            raise CheckpointError(f"{what}: tensor '{name}' has data offsets {begin}..{end} that do not fit {d}{list(shape)}")
        spans.append((begin, end, name))
        entries.append((name, d, tuple(shape), begin, end))
    spans.sort()
    for (_b0, e0, n0), (b1, _e1, n1) in itertools.pairwise(spans):
        if b1 < e0:
            raise CheckpointError(f"{what}: tensors '{n0}' and '{n1}' overlap in the data section")
    out: dict[str, np.ndarray] = {}
    for name, d, shape, begin, end in entries:
        np_d = d.numpy.newbyteorder("<")
        out[name] = np.frombuffer(body[begin:end], dtype=np_d).astype(d.numpy).reshape(shape)
    return out, {str(k): str(v) for k, v in meta.items()}


def load(path: "str | os.PathLike[str]") -> tuple[dict[str, np.ndarray], dict[str, str]]:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc.strerror}") from None
    return loads(data, str(path))
