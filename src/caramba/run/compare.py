"""Compare runs: their hyperparameters, final and best metrics, and tuner arms ranked over seeds.

``compare_runs(store, ["RUN", ...])`` or ``compare_runs(store, experiment="NAME")`` reads the run
store only (records and metric rows); ``caramba research compare`` prints it, the API's
``GET /api/v1/compare`` returns it, and the web UI's runs page draws it.

- **Hyperparameters** of a run: the values its tuner arm sets (``tuner.arms[].set``), the
  ``--set`` overrides it ran with, and its seed.
- **final** of a metric ``split.name`` is its value at the run's last recorded step; **best** is
  its minimum, or its maximum for a metric where higher is better (``direction``).
- **Ranking**: runs grouped by tuner arm; each arm's score is the mean over its finished runs
  (one per seed) of the metric's final value, with the sample standard deviation (n - 1 in the
  denominator; none for a single run) and n. Arms are ordered by mean, best first.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from caramba.errors import ConfigError

Mode = Literal["min", "max"]

# Logged values that are not a quality to rank by (no "best" for them).
NOT_RANKED = frozenset({"lr", "samples_per_s", "loss_ema", "grad_norm", "seconds", "steps", "tokens_per_s"})
# Metric names (or their parts) where higher is better; everything else (losses, errors) is minimized.
MAXIMIZED = ("accuracy", "acc", "f1", "precision", "recall", "auc", "auroc", "score", "bleu", "rouge", "r2",
             "iou", "top1", "top5", "reward", "return")
# The metric to rank by when neither the caller nor a tuner names one, in this order.
DEFAULT_METRICS = ("val.loss", "test.loss", "train.loss")
MAX_RUNS = 1000


def direction(metric: str) -> Mode | None:
    """Whether a smaller (``min``) or larger (``max``) value of ``metric`` (``split.name`` or
    ``name``) is better; None for logged values that are not a quality (learning rate, speed)."""
    name = metric.rsplit(".", 1)[-1].lower()
    if name in NOT_RANKED:
        return None
    parts = name.replace("-", "_").split("_")
    return "max" if any(p in MAXIMIZED for p in parts) or name in MAXIMIZED else "min"


@dataclass
class RunRow:
    """One run in a comparison."""

    id: str
    experiment: str
    status: str
    arm: str = ""
    target: str = ""
    run: str = ""
    seed: int = 0
    backend: str = ""
    group_id: str = ""
    created: float = 0.0
    started: float | None = None
    finished: float | None = None
    step: int = 0
    steps: int = 0
    tags: list[str] = field(default_factory=list)
    note: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    final: dict[str, float] = field(default_factory=dict)
    best: dict[str, float] = field(default_factory=dict)
    best_step: dict[str, int] = field(default_factory=dict)
    # the tuner's decision that started the run: {strategy, step, arm, reason, belief} (belief: the
    # chosen arm's posterior {n, mean, std, G, q} for active_inference, else absent); {} without one
    tuner: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return "/".join(p for p in (self.arm, self.target, self.run) if p) or self.id

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "label": self.label, "final": _finite(self.final), "best": _finite(self.best)}


@dataclass
class ArmRank:
    """One tuner arm's score: mean and sample standard deviation of ``metric`` over ``n`` runs."""

    arm: str
    metric: str
    mean: float | None
    std: float | None
    n: int
    values: list[float] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)  # runs of the arm that did not finish or lack the metric
    rank: int = 0

    def spread(self) -> str:
        if self.mean is None:
            return "-"
        std = "-" if self.std is None else f"{self.std:.4g}"
        return f"{self.mean:.4g} ± {std} (n={self.n})"

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "spread": self.spread()}


@dataclass
class Comparison:
    """Runs side by side (``runs``), the parameter and metric columns they have, and the arm
    ranking by ``metric`` (best first)."""

    runs: list[RunRow]
    metric: str | None
    mode: Mode
    ranking: list[ArmRank]
    params: list[str]
    metrics: list[str]
    arms: list[dict[str, Any]] = field(default_factory=list)  # the tuner's arms: {id, set, description}

    def ranked_runs(self) -> list[RunRow]:
        """Runs in ranking order: by their arm's rank, then by their own value of the metric."""
        order = {a.arm: a.rank for a in self.ranking}
        sign = 1.0 if self.mode == "min" else -1.0

        def key(r: RunRow) -> tuple[float, float, str]:
            v = r.final.get(self.metric) if self.metric else None
            own = sign * v if isinstance(v, float) and math.isfinite(v) else math.inf
            return (order.get(r.arm, math.inf), own, r.id)

        return sorted(self.runs, key=key)

    def table(self, metrics: Sequence[str] | None = None) -> str:
        """The comparison as plain text: the runs, then the arm ranking."""
        cols = list(metrics) if metrics is not None else self.metrics
        tuned = any(r.tuner for r in self.runs)
        header = ["run", "arm", "seed", "status", *(TUNER_COLUMNS if tuned else ()), *self.params,
                  *(f"{m} final" for m in cols), *(f"{m} best" for m in cols if direction(m))]
        rows = [header]
        for r in self.ranked_runs():
            rows.append([r.id, r.arm or "-", str(r.seed), r.status, *(tuner_cells(r.tuner) if tuned else ()),
                         *(_fmt(r.params.get(p)) for p in self.params),
                         *(_fmt(r.final.get(m)) for m in cols), *(_fmt(r.best.get(m)) for m in cols if direction(m))])
        out = [_grid(rows)]
        if self.ranking and self.metric:
            out.append("")
            out.append(f"arms ranked by {self.metric} ({self.mode}), mean ± std over seeds:")
            out.append(_grid([["rank", "arm", self.metric, "seeds"],
                              *([str(a.rank), a.arm or "-", a.spread(), ",".join(map(str, a.seeds))] for a in self.ranking)]))
        return "\n".join(out)

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "mode": self.mode, "params": self.params, "metrics": self.metrics,
                "runs": [r.as_dict() for r in self.ranked_runs()], "ranking": [a.as_dict() for a in self.ranking],
                "arms": self.arms}


def compare_runs(store: Any, refs: Iterable[str] = (), *, experiment: str | None = None, metric: str | None = None,
                 mode: Mode | None = None, tags: Iterable[str] = ()) -> Comparison:
    """Compare runs named by ``refs`` (IDs, unique prefixes or ``latest``) and/or every run of
    ``experiment``, optionally only those carrying all ``tags``. ``metric`` (``split.name``)
    ranks the arms (default: the runs' tuner metric, else the first of val.loss, test.loss,
    train.loss they have); ``mode`` overrides its direction."""
    from caramba.errors import did_you_mean

    recs: dict[str, Any] = {}
    for ref in refs:
        rec = store.get(ref)
        recs.setdefault(rec.id, rec)
    if experiment is not None:
        found = store.list(MAX_RUNS, experiment=experiment)
        if not found and not recs:
            names = sorted({r.experiment for r in store.list(MAX_RUNS)})
            raise ConfigError(f"no runs of experiment '{experiment}' in the store; {did_you_mean(experiment, names)}")
        for rec in found:
            recs.setdefault(rec.id, rec)
    if not recs:
        raise ConfigError("nothing to compare: name runs or an experiment",
                          hint="caramba research compare RUN RUN ... or --experiment NAME (`caramba research status` lists runs)")
    want = list(tags)
    rows = [_row(store, rec) for rec in recs.values() if all(t in rec.tags for t in want)]
    if not rows:
        raise ConfigError(f"none of the {len(recs)} runs carries the tags {', '.join(want)}")
    metrics = _metric_columns(rows)
    tuner = _tuner(recs.values())
    if metric is None:
        candidates = ([tuner[0]] if tuner else []) + list(DEFAULT_METRICS)
        metric = next((m for m in candidates if any(m in r.final for r in rows)), None)
    elif not any(metric in r.final for r in rows):
        raise ConfigError(f"no run of the comparison has metric '{metric}'; {did_you_mean(metric, metrics)}",
                          hint="metrics are named split.name, e.g. val.loss or test.accuracy")
    if mode is None:
        mode = tuner[1] if tuner and metric == tuner[0] else (direction(metric) if metric else None) or "min"
    if mode not in ("min", "max"):
        raise ConfigError(f"mode must be min or max, not {mode!r}")
    params = sorted({k for r in rows for k in r.params})
    ranking = rank_arms(rows, metric, mode) if metric else []
    return Comparison(rows, metric, mode, ranking, params, metrics, tuner_arms(recs.values()))


def rank_arms(rows: Sequence[RunRow], metric: str, mode: Mode) -> list[ArmRank]:
    """Group ``rows`` by tuner arm and score each by the mean of ``metric``'s final value over
    its finished runs (sample std, n); best mean first, arms with no value last."""
    arms: dict[str, ArmRank] = {}
    for r in rows:
        a = arms.setdefault(r.arm, ArmRank(r.arm, metric, None, None, 0))
        v = r.final.get(metric)
        if r.status != "finished" or v is None or not math.isfinite(v):
            a.excluded.append(r.id)
            continue
        a.values.append(v)
        a.seeds.append(r.seed)
        a.runs.append(r.id)
    for a in arms.values():
        if a.values:  # listed by seed
            a.seeds, a.values, a.runs = map(list, zip(*sorted(zip(a.seeds, a.values, a.runs))))
        a.n = len(a.values)
        if a.n:
            a.mean = statistics.fmean(a.values)
            a.std = statistics.stdev(a.values) if a.n > 1 else None
    sign = 1.0 if mode == "min" else -1.0
    ordered = sorted(arms.values(), key=lambda a: (a.mean is None, sign * a.mean if a.mean is not None else 0.0, a.arm))
    for i, a in enumerate(ordered, 1):
        a.rank = i
    return ordered


def curves(store: Any, run_ids: Sequence[str], metric: str) -> list[dict[str, Any]]:
    """Each run's series of ``metric`` (``split.name``): steps, values and seconds since the
    run started (wall time), in step order."""
    split, _, name = metric.partition(".")
    if not name:
        raise ConfigError(f"metric '{metric}' is not split.name (e.g. train.loss, val.accuracy)")
    out = []
    for run_id in run_ids:
        rec = store.get(run_id)
        rows = store.timed_series(rec.id, name, split)
        t0 = rec.started if rec.started is not None else (rows[0][2] if rows else rec.created)
        out.append({"run": rec.id, "label": "/".join(p for p in (rec.arm, rec.target, rec.run_name) if p) or rec.id,
                    "steps": [s for s, _, _ in rows], "values": [v for _, v, _ in rows],
                    "seconds": [max(0.0, t - t0) for _, _, t in rows]})
    return out


def plot(store: Any, comparison: Comparison, path: str | Path, metric: str | None = None, *, x: str = "step",
         log: bool = False) -> Path:
    """Overlay the runs' curves of ``metric`` (default: the comparison's) in one PNG through
    matplotlib (the ``plot`` extra); one colour per arm, one line style per seed."""
    metric = metric or comparison.metric
    if not metric:
        raise ConfigError("no metric to plot: the runs have none of val.loss, test.loss, train.loss",
                          hint="pass --metric split.name")
    if x not in ("step", "seconds"):
        raise ConfigError(f"the x axis is step or seconds, not {x!r}")
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot draws with matplotlib, which is not installed",
                          hint="pip install 'caramba[plot]'  (or: pip install matplotlib)") from None
    path = Path(path)
    series = curves(store, [r.id for r in comparison.ranked_runs()], metric)
    arms = list(dict.fromkeys(r.arm for r in comparison.ranked_runs()))
    by_id = {r.id: r for r in comparison.runs}
    styles = ("-", "--", ":", "-.")
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=100)
    try:
        for s in series:
            r = by_id[s["run"]]
            colour = f"C{arms.index(r.arm) % 10}"
            xs = s["steps"] if x == "step" else s["seconds"]
            ax.plot(xs, s["values"], styles[r.seed % len(styles)], color=colour, label=f"{r.label} ({r.id[-4:]})")
        ax.set_xlabel("step" if x == "step" else "seconds since start")
        ax.set_ylabel(metric)
        if log:
            ax.set_yscale("log")
        ax.set_title(f"{metric} of {len(series)} run(s)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
    return path


# ---- one run ----------------------------------------------------------------------------------
def _row(store: Any, rec: Any) -> RunRow:
    final: dict[str, float] = {}
    best: dict[str, float] = {}
    best_step: dict[str, int] = {}
    for step, split, name, value in store.metrics(rec.id):  # in step order
        key = f"{split}.{name}"
        final[key] = value
        way = direction(key)
        if way is None or not math.isfinite(value):
            continue
        old = best.get(key)
        if old is None or (value < old if way == "min" else value > old):
            best[key], best_step[key] = value, step
    overrides = _overrides(rec)
    params = {**_parse_overrides(overrides), **_arm_set(rec)}
    return RunRow(id=rec.id, experiment=rec.experiment, status=rec.status, arm=rec.arm, target=rec.target, run=rec.run_name,
                  seed=rec.seed, backend=rec.backend, group_id=rec.group_id, created=rec.created, started=rec.started,
                  finished=rec.finished, step=rec.step, steps=rec.steps, tags=list(rec.tags), note=rec.note,
                  params=params, overrides=overrides, final=final, best=best, best_step=best_step,
                  tuner=tuner_decision(rec))


TUNER_COLUMNS = ("tuner", "tuner step", "chosen arm", "belief")


def tuner_decision(rec: Any) -> dict[str, Any]:
    """The tuner's decision recorded with run ``rec`` (``config.tuner``, written by
    ``caramba.run.engine.run_tuned``): strategy, step, chosen arm, reason, and for
    ``active_inference`` the chosen arm's belief at the time; ``{}`` for a run no tuner chose."""
    cfg = _config(rec).get("tuner")
    if not isinstance(cfg, dict) or not isinstance(cfg.get("strategy"), str):
        return {}
    out: dict[str, Any] = {"strategy": cfg["strategy"], "arm": str(cfg.get("arm", "")), "reason": str(cfg.get("reason", ""))}
    step = cfg.get("step")
    out["step"] = step if isinstance(step, int) and not isinstance(step, bool) else None
    beliefs = cfg.get("beliefs")
    belief = beliefs.get(out["arm"]) if isinstance(beliefs, dict) else None
    if isinstance(belief, dict):
        out["belief"] = {k: (v if isinstance(v, int) else float(v) if math.isfinite(v) else None)
                         for k, v in belief.items() if k in ("n", "mean", "std", "G", "q")
                         and isinstance(v, int | float) and not isinstance(v, bool)}
    return out


def tuner_cells(dec: dict[str, Any]) -> list[str]:
    """The ``TUNER_COLUMNS`` cells of one run."""
    if not dec:
        return ["-", "-", "-", "-"]
    b = dec.get("belief") or {}
    if b:
        parts = [f"mean {_fmt(b.get('mean'))} ± {_fmt(b.get('std'))}" if "mean" in b else "",
                 f"G {_fmt(b.get('G'))}" if "G" in b else "", f"q {_fmt(b.get('q'))}" if "q" in b else ""]
        belief = ", ".join(p for p in parts if p)
    else:
        belief = dec.get("reason") or "-"
    step = dec.get("step")
    return [dec["strategy"], "-" if step is None else str(step), dec.get("arm") or "-", belief]


def _config(rec: Any) -> dict[str, Any]:
    return rec.config if isinstance(rec.config, dict) else {}


def _spec_config(rec: Any) -> dict[str, Any]:
    spec = _config(rec).get("spec")
    cfg = spec.get("config") if isinstance(spec, dict) else None
    return cfg if isinstance(cfg, dict) else {}


def _overrides(rec: Any) -> list[str]:
    """The ``--set`` items the run was started with (without those of its tuner arm)."""
    items = _spec_config(rec).get("overrides")
    if not isinstance(items, list):
        items = _config(rec).get("overrides")
    return [str(i) for i in items] if isinstance(items, list) else []


def _parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep:
            continue
        try:
            out[key.strip()] = _plain(yaml.safe_load(text))
        except yaml.YAMLError:
            out[key.strip()] = text
    return out


def _plain(v: Any) -> Any:
    """``v`` as JSON data (a YAML date, set or binary value becomes its text)."""
    import json

    try:
        return json.loads(json.dumps(v, allow_nan=False))
    except (TypeError, ValueError):
        return str(v)


def _manifest(rec: Any) -> dict[str, Any]:
    data = _config(rec).get("manifest")
    if isinstance(data, dict):
        return data
    text = _spec_config(rec).get("manifest_text")
    if isinstance(text, str):
        import yaml

        class _Lenient(yaml.SafeLoader):  # !include and friends: read as plain values, only the tuner matters
            pass

        _Lenient.add_multi_constructor("!", lambda loader, suffix, node: None)
        try:
            data = yaml.load(text, Loader=_Lenient)  # a SafeLoader subclass: builds no objects
        except yaml.YAMLError:
            return {}
        return data if isinstance(data, dict) else {}
    return {}


def _arm_set(rec: Any) -> dict[str, Any]:
    """What the run's tuner arm sets (``tuner.arms[id == arm].set``)."""
    if not rec.arm:
        return {}
    tuner = _manifest(rec).get("tuner")
    arms = tuner.get("arms") if isinstance(tuner, dict) else None
    for a in arms if isinstance(arms, list) else []:
        if isinstance(a, dict) and a.get("id") == rec.arm and isinstance(a.get("set"), dict):
            return {str(k): _plain(v) for k, v in a["set"].items()}
    return {}


def tuner_arms(recs: Iterable[Any]) -> list[dict[str, Any]]:
    """The tuner arms (``{id, set, description}``) of the first of ``recs`` whose manifest has a tuner."""
    for rec in recs:
        tuner = _manifest(rec).get("tuner")
        listed = tuner.get("arms") if isinstance(tuner, dict) else None
        if isinstance(listed, list):
            return [{"id": str(a.get("id", "")), "set": {str(k): _plain(v) for k, v in a["set"].items()}
                     if isinstance(a.get("set"), dict) else {},
                     "description": str(a.get("description") or "")} for a in listed if isinstance(a, dict)]
    return []


def _tuner(recs: Iterable[Any]) -> tuple[str, Mode] | None:
    for rec in recs:
        tuner = _manifest(rec).get("tuner")
        if isinstance(tuner, dict):
            m = tuner.get("metric", "val.loss")
            mode = tuner.get("mode", "min")
            if isinstance(m, str) and mode in ("min", "max"):
                return m, mode
    return None


def _metric_columns(rows: Sequence[RunRow]) -> list[str]:
    keys = {k for r in rows for k in r.final}
    order = ("train.loss", "val.loss", "val.accuracy", "test.loss", "test.accuracy")
    quality = [k for k in keys if direction(k) is not None]
    return sorted(quality, key=lambda k: (order.index(k) if k in order else len(order), k))


def _finite(values: dict[str, float]) -> dict[str, float | None]:
    return {k: (v if math.isfinite(v) else None) for k, v in values.items()}


def _fmt(v: Any) -> str:
    from caramba.run.engine import _fmt as fmt  # one way to print a table cell

    return fmt(v)


def _grid(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


__all__ = ["ArmRank", "Comparison", "RunRow", "compare_runs", "curves", "direction", "plot", "rank_arms", "tuner_arms"]
