"""Checkpoints: runner state to a safetensors file with metadata, and back.

Metadata: ``format`` (``caramba``), ``step``, ``graph_hash`` (fingerprint of the train-step
graph), ``manifest_hash``. Saving downloads and loading uploads explicitly; nothing else moves.

A load given the file's recorded ``sha256`` reads the bytes once, checks the digest and parses
those same bytes: a flipped bit anywhere (an exponent turned NaN, a low mantissa bit nobody
would notice) is refused before any tensor reaches a runner.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from caramba.compute.runner import Runner
from caramba.ir.graph import StateDecl
from caramba.train import safetensors
from caramba.train.safetensors import CheckpointError


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int
    graph_hash: str
    manifest_hash: str
    names: tuple[str, ...]
    metadata: dict[str, str] = field(default_factory=dict)


def save_checkpoint(path: "str | Path", runner: Runner, names: Iterable[str] | None = None, *, step: int = 0,
                    graph_hash: str = "", manifest_hash: str = "") -> Path:
    """Write the runner's state entries ``names`` (default: all) to ``path``."""
    names = list(runner.state) if names is None else list(names)
    tensors = {n: runner.state[n].download() for n in names}
    meta = {"format": "caramba", "step": str(int(step)), "graph_hash": graph_hash, "manifest_hash": manifest_hash}
    return safetensors.save(path, tensors, meta)


def verified_bytes(path: "str | Path", sha256: str) -> bytes:
    """The bytes of ``path``, provided they hash to ``sha256`` (else CheckpointError)."""
    import hashlib

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc.strerror}") from None
    got = hashlib.sha256(data).hexdigest()
    if got != sha256.lower():
        raise CheckpointError(
            f"checkpoint {path} does not match its recorded digest: sha256 {got[:16]}…, recorded {sha256[:16]}…",
            hint="the file changed after it was written (disk corruption or an edit); restore it or use another checkpoint",
        )
    return data


def read_checkpoint(path: "str | Path", sha256: str | None = None):
    """``(tensors, Checkpoint)`` from ``path`` without touching any runner; with ``sha256``
    the file must have that digest."""
    if sha256 is not None:
        tensors, meta = safetensors.loads(verified_bytes(path, sha256), str(path))
    else:
        tensors, meta = safetensors.load(path)
    if meta.get("format") != "caramba":
        raise CheckpointError(f"{path} is not a caramba checkpoint (metadata format {meta.get('format')!r})")
    try:
        step = int(meta.get("step", "0"))
    except ValueError:
        raise CheckpointError(f"{path}: metadata step {meta.get('step')!r} is not an int") from None
    info = Checkpoint(Path(path), step, meta.get("graph_hash", ""), meta.get("manifest_hash", ""), tuple(sorted(tensors)), meta)
    return tensors, info


def load_checkpoint(path: "str | Path", runner: Runner, *, expect_graph_hash: str | None = None,
                    expect: Mapping[str, StateDecl] | None = None, sha256: str | None = None) -> Checkpoint:
    """Upload a checkpoint into ``runner.state``. With ``expect_graph_hash`` it must come from
    that graph; with ``expect`` (state declarations) every tensor must match its declaration and
    every declared entry that is not zeros/ones-initialized must be present; with ``sha256``
    the file must have that digest."""
    tensors, info = read_checkpoint(path, sha256)
    if expect_graph_hash is not None and info.graph_hash != expect_graph_hash:
        raise CheckpointError(
            f"{path} was saved from graph {info.graph_hash[:12] or '?'}, not this one ({expect_graph_hash[:12]})",
            hint="load with check_graph=False to load it anyway",
        )
    if expect is not None:
        for name, arr in tensors.items():
            decl = expect.get(name)
            if decl is None:
                raise CheckpointError(f"{path}: tensor '{name}' is not state of this graph")
            if arr.shape != decl.type.shape or arr.dtype != decl.type.dtype.numpy:
                raise CheckpointError(f"{path}: tensor '{name}' is {arr.dtype}{list(arr.shape)}, the graph declares {decl.type}")
        missing = [n for n, d in expect.items() if d.init == "external" and n not in tensors]
        if missing:
            raise CheckpointError(f"{path} lacks state {missing}")
    for name, arr in tensors.items():
        runner.state[name] = runner.upload(arr)
    return info


__all__ = ["Checkpoint", "CheckpointError", "load_checkpoint", "read_checkpoint", "save_checkpoint", "verified_bytes"]
