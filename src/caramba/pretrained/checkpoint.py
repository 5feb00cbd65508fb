"""Hugging Face checkpoints on disk: one ``.safetensors`` file, or shards with an index.

``HFCheckpoint.open(source)`` reads only the headers: it checks each file's header against the
file's size (a truncated download or a file that is not safetensors is refused here, naming the
file), resolves a sharded checkpoint's ``model.safetensors.index.json``, and reads
``config.json`` when there is one. Tensor data is read later, one tensor at a time, through the
``safetensors`` library's memory-mapped reader (``TensorReader``), converted explicitly to the
dtype a parameter declares: exact upcasts always, narrowing casts only when allowed.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from caramba.errors import CarambaError
from caramba.ir.dtypes import DType

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
MAX_HEADER = 100 * 1024 * 1024  # what the safetensors library accepts
MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_SHARDS = 4096
MAX_RANK = 16
CHUNK = 8 * 2**20  # bytes of one block read (a large tensor is read in blocks of rows)

# safetensors dtype codes -> caramba dtypes (the float and int codes a checkpoint uses)
CODES = {
    "F64": DType.float64, "F32": DType.float32, "F16": DType.float16, "BF16": DType.bfloat16,
    "I64": DType.int64, "I32": DType.int32, "I8": DType.int8, "U8": DType.uint8, "BOOL": DType.bool,
}
# codes caramba cannot hold: such a tensor may be ignored, never bound to a parameter
OTHER_CODES = {"I16": 2, "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}
# exact conversions: every value of the source is a value of the target
EXACT = {
    DType.float16: {DType.float16, DType.float32, DType.float64},
    DType.bfloat16: {DType.bfloat16, DType.float32, DType.float64},
    DType.float32: {DType.float32, DType.float64},
    DType.float64: {DType.float64},
}


class CheckpointFormatError(CarambaError):
    """A Hugging Face checkpoint is malformed, incomplete, or does not fit the model it is loaded
    into. The message names the file and the tensor."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a checkpoint, from its file's header."""

    name: str
    code: str  # the safetensors dtype code (F32, BF16, ...)
    shape: tuple[int, ...]
    file: Path
    begin: int  # byte offset in the file's data section (reads go in file order)

    @property
    def dtype(self) -> DType | None:
        """The caramba dtype (None for codes caramba cannot hold, like U16)."""
        return CODES.get(self.code)

    @property
    def itemsize(self) -> int:
        d = self.dtype
        return d.itemsize if d is not None else OTHER_CODES[self.code]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize


class _Duplicate(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate(k)
        out[k] = v
    return out


def _read_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file, checked against the file's size."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointFormatError(f"{path.name}: {size} bytes is too short to be a safetensors file")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER or 8 + n > size:
                raise CheckpointFormatError(
                    f"{path.name}: the header claims {n:,} bytes but the file has {size:,}; "
                    "it is truncated or not a safetensors file")
            raw = f.read(n)
    except OSError as exc:
        raise CheckpointFormatError(f"cannot read {path}: {exc.strerror or type(exc).__name__}") from None
    try:
        header = json.loads(raw, object_pairs_hook=_no_duplicates)
    except _Duplicate as exc:
        raise CheckpointFormatError(f"{path.name}: the header names tensor '{exc.args[0]}' twice") from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise CheckpointFormatError(f"{path.name}: the header is not JSON; this is not a safetensors file") from None
    if not isinstance(header, dict):
        raise CheckpointFormatError(f"{path.name}: the header is not a JSON object")
    header["__size__"] = size - 8 - n  # bytes of the data section
    return header


def _tensors_of(path: Path) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    header = _read_header(path)
    data_size = header.pop("__size__")
    meta = header.pop("__metadata__", None) or {}
    out: dict[str, TensorInfo] = {}
    spans = []
    for name, info in header.items():
        def bad(why: str, name: str = name) -> CheckpointFormatError:
            return CheckpointFormatError(f"{path.name}: tensor '{name}' {why}")

        if not isinstance(info, dict):
            raise bad("has no header entry")
        code = info.get("dtype")
        if not isinstance(code, str) or (code not in CODES and code not in OTHER_CODES):
            raise bad(f"has dtype {code!r}, which is not a safetensors dtype")
        shape, offsets = info.get("shape"), info.get("data_offsets")
        if (not isinstance(shape, list) or len(shape) > MAX_RANK
                or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)
                or math.prod(max(s, 1) for s in shape) >= 2**62):  # NumPy's limit, even for an empty array
            raise bad(f"has a bad shape {str(shape)[:200]}")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
            raise bad(f"has bad data_offsets {offsets!r}")
        t = TensorInfo(name, code, tuple(shape), path, offsets[0])
        begin, end = offsets
        if not 0 <= begin <= end <= data_size:
            raise bad(f"lies at bytes {begin:,}..{end:,} but the data section has {data_size:,}; the file is truncated")
        if end - begin != t.nbytes:
            raise bad(f"has {end - begin:,} bytes for {code}{shape}, which needs {t.nbytes:,}")
        out[name] = t
        spans.append((begin, end, name))
    spans.sort()
    for (_b0, e0, n0), (b1, _e1, n1) in itertools.pairwise(spans):
        if b1 < e0:
            raise CheckpointFormatError(f"{path.name}: tensors '{n0}' and '{n1}' overlap")
    return out, {str(k): str(v) for k, v in meta.items()} if isinstance(meta, dict) else {}


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise CheckpointFormatError(f"{what} {path.name} is over {MAX_CONFIG_BYTES // 2**20} MiB")
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CheckpointFormatError(f"cannot read {what} {path}: {exc.strerror or type(exc).__name__}") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise CheckpointFormatError(f"{what} {path.name} is not JSON ({type(exc).__name__}: {str(exc)[:120]})") from None
    if not isinstance(data, dict):
        raise CheckpointFormatError(f"{what} {path.name} must be a JSON object")
    return data


@dataclass
class HFCheckpoint:
    """A checkpoint's tensors (from headers) and its ``config.json`` (``None`` when absent)."""

    root: Path
    files: list[Path]
    tensors: dict[str, TensorInfo]
    config: dict[str, Any] | None
    config_path: Path | None
    metadata: dict[str, str]

    @classmethod
    def open(cls, source: str | os.PathLike[str], config: str | os.PathLike[str] | None = None) -> "HFCheckpoint":
        """``source``: a directory (``model.safetensors.index.json``, else ``model.safetensors``,
        else its one ``*.safetensors`` file), an index file, or one ``.safetensors`` file."""
        src = Path(source)
        if not src.exists():
            raise CheckpointFormatError(f"checkpoint {src} does not exist")
        root = src if src.is_dir() else src.parent
        if src.is_dir():
            if (src / INDEX).is_file():
                src = src / INDEX
            elif (src / SINGLE).is_file():
                src = src / SINGLE
            else:
                found = sorted(p.name for p in src.glob("*.safetensors"))
                if len(found) != 1:
                    raise CheckpointFormatError(
                        f"{src} has {'no' if not found else len(found)} .safetensors files"
                        f"{' (' + ', '.join(found[:5]) + ')' if found else ''} and no {INDEX}; "
                        "name the file as the source")
                src = src / found[0]
        if src.name.endswith(".json"):
            files, tensors, meta = cls._sharded(src)
        else:
            tensors, meta = _tensors_of(src)
            files = [src]
        cfg_path = Path(config) if config is not None else root / "config.json"
        cfg = _read_json(cfg_path, "config") if config is not None or cfg_path.is_file() else None
        return cls(root, files, tensors, cfg, cfg_path if cfg is not None else None, meta)

    @staticmethod
    def _sharded(index: Path) -> tuple[list[Path], dict[str, TensorInfo], dict[str, str]]:
        data = _read_json(index, "index")
        weight_map = data.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointFormatError(f"{index.name} has no weight_map")
        names = sorted({str(f) for f in weight_map.values()})
        if len(names) > MAX_SHARDS:
            raise CheckpointFormatError(f"{index.name} names {len(names)} shards (limit {MAX_SHARDS})")
        files = []
        for name in names:
            if Path(name).name != name or name in (".", ".."):  # shards live beside the index, nowhere else
                raise CheckpointFormatError(f"{index.name}: shard '{name}' is not a file name in {index.parent}")
            if not (index.parent / name).is_file():
                raise CheckpointFormatError(f"{index.name}: shard {name} is missing")
            files.append(index.parent / name)
        tensors: dict[str, TensorInfo] = {}
        meta: dict[str, str] = {}
        for f in files:
            part, m = _tensors_of(f)
            meta.update(m)
            for name, info in part.items():
                if name in tensors:
                    raise CheckpointFormatError(f"tensor '{name}' is in both {tensors[name].file.name} and {f.name}")
                tensors[name] = info
        for name, file in weight_map.items():
            info = tensors.get(name)
            if info is None or info.file.name != file:
                where = f"is in {info.file.name}" if info is not None else "is in no shard"
                raise CheckpointFormatError(f"{index.name} puts tensor '{name}' in {file}, but it {where}")
        extra = sorted(set(tensors) - set(weight_map))
        if extra:
            raise CheckpointFormatError(f"{index.name}: tensor '{extra[0]}' ({tensors[extra[0]].file.name}) is not in "
                                        f"the weight_map ({len(extra)} such)")
        return files, tensors, meta

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    def digests(self) -> dict[str, str]:
        """sha256 of each file (weights and config), by file name: what a run records, so a
        resumed or re-run fine-tune can tell if the checkpoint changed under it."""
        files = [*self.files, *([self.config_path] if self.config_path is not None else [])]
        return {f.name: file_sha256(f) for f in files}


_DIGESTS: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256: hash a large file once


def file_sha256(path: Path) -> str:
    import hashlib

    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(8 * 2**20):
                h.update(block)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


@dataclass(frozen=True)
class Binding:
    """How one parameter is read from a checkpoint tensor: sliced (in the checkpoint's layout)
    along ``slice_axis`` from ``slice_start``, then transposed (2-D), then cast."""

    tensor: str
    transpose: bool = False
    slice_axis: int | None = None
    slice_start: int = 0

    def source_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The checkpoint slice a parameter of ``shape`` reads."""
        return tuple(reversed(shape)) if self.transpose else shape


def check_cast(src: DType | None, dst: DType, allow_narrowing: bool, what: str) -> None:
    if src is None or not src.is_float or not dst.is_float:
        raise CheckpointFormatError(f"{what} is {src or 'not a float tensor'}; parameters are float tensors ({dst})")
    if dst not in EXACT[src] and not allow_narrowing:
        raise CheckpointFormatError(
            f"{what} is stored as {src}; reading it as {dst} would round it",
            hint="declare the parameters' dtype as wide as the checkpoint's, or opt in with "
                 "from_safetensors.allow_narrowing: true")


class TensorReader:
    """Reads parameters from a checkpoint one at a time through ``safetensors.safe_open``
    (memory-mapped). Each file is mapped for at most ``window`` bytes of reads, then closed and
    mapped again, so the pages a load touches are released as it goes and peak memory stays
    near the size of the parameters themselves."""

    def __init__(self, ckpt: HFCheckpoint, window: int = 32 * 2**20) -> None:
        try:
            import safetensors  # noqa: F401
        except ImportError:
            raise CarambaError("reading Hugging Face checkpoints needs the safetensors package",
                               hint="pip install 'caramba[pretrained]'") from None
        self.ckpt, self.window = ckpt, window
        self._open: dict[Path, Any] = {}
        self._read: dict[Path, int] = {}

    def _handle(self, path: Path) -> Any:
        from safetensors import safe_open

        h = self._open.get(path)
        if h is not None and self._read.get(path, 0) >= self.window:
            h.__exit__(None, None, None)
            h = None
        if h is None:
            try:
                h = safe_open(str(path), framework="numpy").__enter__()
            except Exception as exc:  # the library's own SafetensorError: say which file
                raise CheckpointFormatError(f"{path.name}: {exc}") from None
            self._open[path], self._read[path] = h, 0
        return h

    def read(self, binding: Binding, shape: tuple[int, ...], dtype: DType, allow_narrowing: bool = False,
             what: str = "") -> np.ndarray:
        """The parameter of ``shape`` and ``dtype`` that ``binding`` names, as a new array.

        Read in blocks of rows of at most ``CHUNK`` bytes straight into the result (cast and, for
        a transposed binding, written as columns), so a tensor is never on the host twice and
        the mapped pages stay within the window."""
        info = self.ckpt.tensors[binding.tensor]
        label = what or f"tensor '{info.name}'"
        check_cast(info.dtype, dtype, allow_narrowing, label)
        want = binding.source_shape(shape)
        index = slice_index(binding, info.shape, want, label) or tuple(slice(0, n) for n in info.shape)
        out = np.empty(shape, dtype=dtype.numpy)
        if not want:  # a scalar
            out[...] = self._get(info, ())
            return out
        row = math.prod(want[1:]) * info.itemsize
        step = max(1, CHUNK // max(row, 1))
        first = index[0].start or 0
        for r0 in range(0, want[0], step):
            r1 = min(want[0], r0 + step)
            block = self._get(info, (slice(first + r0, first + r1), *index[1:]))
            if binding.transpose:
                out[:, r0:r1] = block.T
            else:
                out[r0:r1] = block
        return out

    def _get(self, info: TensorInfo, index: tuple) -> np.ndarray:
        h = self._handle(info.file)
        try:
            block = np.asarray(h.get_slice(info.name)[index] if index else h.get_tensor(info.name))
        except Exception as exc:
            raise CheckpointFormatError(f"{info.file.name}: cannot read tensor '{info.name}': {exc}") from None
        self._read[info.file] = self._read.get(info.file, 0) + block.nbytes
        return block

    def close(self) -> None:
        for h in self._open.values():
            h.__exit__(None, None, None)
        self._open.clear()

    def __enter__(self) -> "TensorReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def slice_index(binding: Binding, have: tuple[int, ...], want: tuple[int, ...], label: str) -> tuple | None:
    """The index a binding reads from a tensor of shape ``have`` for a slice of shape ``want``
    (None: the whole tensor); a shape that does not fit is an error naming both."""
    if binding.transpose and len(want) != 2:
        raise CheckpointFormatError(f"{label}: transpose applies to 2-D tensors; this parameter has shape {list(reversed(want))}")
    if binding.slice_axis is None:
        if have != want:
            raise CheckpointFormatError(f"{label} has shape {list(have)}; the parameter needs "
                                        f"{list(want)}{' (transposed)' if binding.transpose else ''}")
        return None
    axis = binding.slice_axis
    if not -len(have) <= axis < len(have) or len(have) != len(want):
        raise CheckpointFormatError(f"{label} has shape {list(have)}; cannot slice axis {axis} into {list(want)}")
    axis %= len(have)
    start = binding.slice_start
    if any(h != w for i, (h, w) in enumerate(zip(have, want)) if i != axis) or not 0 <= start <= have[axis] - want[axis]:
        raise CheckpointFormatError(f"{label} has shape {list(have)}; the slice from {start} along axis {axis} "
                                    f"for shape {list(want)} does not fit")
    return tuple(slice(start, start + want[axis]) if i == axis else slice(None) for i in range(len(have)))


def tensors_in_file_order(ckpt: HFCheckpoint, names: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    """``(parameter, tensor)`` pairs of ``names`` sorted by where each tensor lies on disk, so a
    load reads every file front to back once."""
    order = sorted(names.items(), key=lambda kv: (str(ckpt.tensors[kv[1]].file), ckpt.tensors[kv[1]].begin))
    yield from order


__all__ = ["EXACT", "Binding", "CheckpointFormatError", "HFCheckpoint", "TensorInfo", "TensorReader", "check_cast",
           "slice_index", "tensors_in_file_order"]
