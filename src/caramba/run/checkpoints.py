"""Which checkpoint a run starts from, and the digest it must have.

A run's ``checkpoint:`` is a run ID (prefix, or ``latest``: the newest finished run of a model
with these parameters) or a file. A run's checkpoints carry the sha256 recorded when they
were written; a file needs ``checkpoint_sha256`` (or ``trust_checkpoint: true`` to load bytes
nobody vouched for). Every load checks the digest before a tensor reaches a runner.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from caramba.manifest.compile import Prepared
from caramba.manifest.errors import ManifestError
from caramba.manifest.schema import Run, Target


def _where(prep: Prepared, target: Target, run: Run) -> tuple[Any, ...]:
    targets = prep.manifest.targets or []
    ti = next((i for i, t in enumerate(targets) if t.name == target.name), None)
    if ti is None:
        return ("targets",)
    ri = next((i for i, r in enumerate(target.runs) if r.id == run.id), 0)
    return ("targets", ti, "runs", ri, "checkpoint")


def resolve_checkpoint(prep: Prepared, target: Target, run: Run, store: Any) -> tuple[Path, str | None]:
    """``(path, sha256)`` of the checkpoint ``run.checkpoint`` names; sha256 is None only for a
    file loaded with ``trust_checkpoint``."""
    from caramba.data.sources import outside_roots
    from caramba.run.model import param_signature
    from caramba.store.runs import RunNotFound

    ref = run.checkpoint
    assert ref is not None
    where = _where(prep, target, run)
    base = prep.doc.base_dir
    if ref != "latest" and outside_roots(base, ref):  # one answer whether or not such a file exists
        raise prep.doc.error(where, "the checkpoint's path is outside the folders this server reads from",
                             hint="name a run ID, or a file inside the manifest's folder")
    cand = base / Path(ref).expanduser()  # relative to the manifest, like its data files
    if cand.is_file():
        if run.checkpoint_sha256:
            return cand, run.checkpoint_sha256
        if run.trust_checkpoint:
            return cand, None
        digest = hashlib.sha256(cand.read_bytes()).hexdigest()
        raise prep.doc.error(where, f"checkpoint file {ref} has no recorded digest, so a changed or damaged "
                             "file could not be told from the one you meant",
                             hint=f"if you trust this file, add `checkpoint_sha256: {digest}` to the run "
                             "(or `trust_checkpoint: true`); a run's own checkpoints are recorded")
    if store is None:
        raise prep.doc.error(where, f"checkpoint '{ref}' is not a file, and this run has no run store to look it up in")
    try:
        if ref == "latest":  # the newest finished run of a model with exactly these parameters
            sig = param_signature(prep)
            rec = next((r for r in store.list(500) if r.status == "finished" and r.summary.get("graph_params") == sig
                        and store.artifacts(r.id, "checkpoint")), None)
            if rec is None:
                raise RunNotFound("no finished run with a checkpoint of this model in the store")
        else:
            rec = store.get(ref)
    except RunNotFound as exc:
        raise prep.doc.error(where, f"checkpoint '{ref}' is neither a file nor a run with a checkpoint: {exc.message}") from None
    ckpts = store.artifacts(rec.id, "checkpoint")
    if not ckpts:
        raise ManifestError(f"run {rec.id} saved no checkpoint", loc=prep.doc.loc(where))
    newest = ckpts[-1]
    if run.checkpoint_sha256 and run.checkpoint_sha256 != newest.sha256:
        raise prep.doc.error(where, f"run {rec.id}'s newest checkpoint has sha256 {newest.sha256[:16]}…, "
                             f"not the checkpoint_sha256 {run.checkpoint_sha256[:16]}… this run asks for")
    return newest.path, newest.sha256


__all__ = ["resolve_checkpoint"]
