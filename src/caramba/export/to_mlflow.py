"""Recorded runs into an MLflow tracking store (a file store folder), written by MLflow's client.

Per caramba run, one MLflow run in the MLflow experiment of the same name:

- params: the run's seed, backend, target, arm and run name, its ``--set`` overrides
  (``override.<path>``), the resolved trainer section (``trainer.<key>``, nested keys dotted)
  and the bound dims (``dims.<name>``);
- metrics: every recorded value with its step, as ``<split>.<name>`` (``train.loss``,
  ``val.accuracy``, ...), the same keys the run's summary uses;
- tags: ``caramba.run_id``, status, group, manifest digest, the run's tags and note;
- artifacts: the run's stored files (manifest, checkpoints, IR, plots) under their store names.

A caramba run already in the store (tag ``caramba.run_id``) is skipped, so exporting again
adds only new runs. MLflow >= 3 keeps the file store in maintenance mode and refuses it unless
``MLFLOW_ALLOW_FILE_STORE=true``; the export sets that for its own client only while it writes
(readers set it too, or migrate the folder with ``mlflow migrate-filestore``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from caramba.errors import ConfigError

STATUS = {"finished": "FINISHED", "failed": "FAILED", "running": "RUNNING", "interrupted": "KILLED",
          "queued": "SCHEDULED"}
MAX_PARAM = 6000  # MLflow's limit on a param value's length
BATCH = 1000  # MLflow's limit on metrics per log_batch


@dataclass
class MlflowExport:
    """What an export wrote: caramba run ID -> MLflow run ID, and the runs already there."""

    uri: str
    written: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def as_text(self) -> str:
        lines = [f"{k} -> mlflow run {v}" for k, v in self.written.items()]
        lines += [f"{k} already in the store (mlflow run {v}); skipped" for k, v in self.skipped.items()]
        return "\n".join([*lines, f"{len(self.written)} run(s) written to {self.uri}"])


@contextmanager
def allow_file_store() -> Iterator[None]:
    """``MLFLOW_ALLOW_FILE_STORE=true`` while the block runs, restored after."""
    old = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)
        else:
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = old


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}", v, out)
    elif value is not None:
        out[prefix] = value if isinstance(value, str) else json.dumps(value)


def params_of(rec: Any) -> dict[str, str]:
    """MLflow params for caramba run record ``rec`` (values as text, at most 6,000 characters)."""
    cfg = rec.config or {}
    out: dict[str, str] = {"seed": str(rec.seed), "backend": rec.backend, "target": rec.target,
                           "arm": rec.arm, "run_name": rec.run_name}
    for item in cfg.get("overrides") or []:
        if isinstance(item, str) and "=" in item:
            k, v = item.split("=", 1)
            out[f"override.{k.strip()}"] = v.strip()
    manifest = cfg.get("manifest")
    if isinstance(manifest, Mapping):
        _flatten("trainer", manifest.get("trainer"), out)
    if isinstance(cfg.get("dims"), Mapping):
        _flatten("dims", cfg["dims"], out)
    return {_key(k): v[:MAX_PARAM] for k, v in out.items() if v != ""}


def _key(name: str) -> str:
    """An MLflow key: letters, digits, ``_ - . / space`` only (others become ``_``), 250 at most."""
    return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", name)[:250]


def metric_key(split: str, name: str) -> str:
    return _key(f"{split}.{name}")


def _runs(store: Any, refs: Sequence[str], experiment: str | None) -> list[Any]:
    if refs and experiment:
        raise ConfigError("give run IDs or --experiment, not both")
    if experiment:
        recs = store.list(limit=100_000, experiment=experiment)
        if not recs:
            raise ConfigError(f"the store has no runs of experiment '{experiment}'",
                              hint="`caramba research status` lists the runs")
        return list(reversed(recs))  # oldest first: MLflow lists newest first
    if not refs:
        raise ConfigError("name the runs to export (RUN... or --experiment NAME)")
    return [store.get(r) for r in dict.fromkeys(refs)]


def export_mlflow(target: str | os.PathLike[str], refs: Sequence[str] = (), *, experiment: str | None = None,
                  store: Any = None, artifacts: bool = True) -> MlflowExport:
    """Write runs ``refs`` (or every run of ``experiment``) of ``store`` into the MLflow file
    store at folder ``target`` (created if missing)."""
    try:
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise ConfigError("exporting to MLflow needs the mlflow package",
                          hint="pip install 'caramba[mlflow]' (installs mlflow-skinny)") from None
    from caramba.store.runs import open_runs

    store = store if store is not None else open_runs()
    recs = _runs(store, refs, experiment)
    root = Path(target).expanduser().resolve()
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{root} is a file; give a folder for the MLflow store")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the MLflow store folder {root}: {exc.strerror or exc}") from None
    uri = root.as_uri()
    result = MlflowExport(uri)
    with allow_file_store():
        client = MlflowClient(tracking_uri=uri)
        for rec in recs:
            exp = client.get_experiment_by_name(rec.experiment)
            exp_id = exp.experiment_id if exp is not None else client.create_experiment(rec.experiment)
            found = client.search_runs([exp_id], filter_string=f"tags.`caramba.run_id` = '{rec.id}'", max_results=1)
            if found:
                result.skipped[rec.id] = found[0].info.run_id
                continue
            result.written[rec.id] = _write_run(client, exp_id, rec, store, artifacts, Metric, Param, RunTag)
    return result


def _ms(t: float | None) -> int | None:
    return None if t is None else int(t * 1000)


def _write_run(client: Any, exp_id: str, rec: Any, store: Any, artifacts: bool, Metric: Any, Param: Any,
               RunTag: Any) -> str:
    tags = {"caramba.run_id": rec.id, "caramba.status": rec.status, "caramba.group_id": rec.group_id,
            "caramba.manifest_sha256": rec.manifest_sha256, "caramba.experiment": rec.experiment}
    for t in getattr(rec, "tags", None) or []:
        tags[f"caramba.tag.{t}"] = "true"
    note = getattr(rec, "note", "")
    if note:
        tags["mlflow.note.content"] = note
    if rec.error:
        tags["caramba.error"] = rec.error[:MAX_PARAM]
    start = _ms(rec.started or rec.created)
    run = client.create_run(exp_id, start_time=start, tags={k: v for k, v in tags.items() if v},
                            run_name=rec.id)
    rid = run.info.run_id
    params = [Param(k, v) for k, v in params_of(rec).items()]
    for i in range(0, len(params), 100):
        client.log_batch(rid, params=params[i:i + 100])
    metrics = [Metric(metric_key(split, name), float(value), start or 0, int(step))
               for step, split, name, value in store.metrics(rec.id)]
    for i in range(0, len(metrics), BATCH):
        client.log_batch(rid, metrics=metrics[i:i + BATCH])
    if artifacts:
        for a in store.artifacts(rec.id):
            if a.path.is_file():
                parent = str(Path(a.name).parent)
                client.log_artifact(rid, str(a.path), None if parent == "." else parent)
    status = STATUS.get(rec.status, "FINISHED" if rec.finished else "RUNNING")
    if status != "RUNNING":
        client.set_terminated(rid, status, end_time=_ms(rec.finished))
    return rid


__all__ = ["MlflowExport", "allow_file_store", "export_mlflow", "metric_key", "params_of"]
