"""Studies: measurements of one caramba property that a ratio table cannot show.

The workload table compares caramba with its peers on the same work. A study measures
something else in the same ``caramba bench`` run: what a compiled node costs, what the memory
planner saves, what caramba's xla and onnx backends add on top of JAX and ONNX Runtime used
directly. Each study reuses the focused script in ``benchmarks/`` that can also be run alone
(``python -m benchmarks.<script>``) and returns a small table for the report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

MIB = float(1 << 20)


@dataclass
class StudyResult:
    name: str
    title: str
    columns: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    status: str = "ok"  # ok | n/a | error

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Study:
    name: str
    title: str
    suites: tuple[str, ...]
    needs: tuple[str, ...]  # caramba backends the study runs on
    run: Callable[[str], tuple[list[str], list[list[str]], list[str]]]


def _chain_overhead(suite: str):
    from benchmarks.chain_overhead import measure

    r = measure(16, 5 if suite == "quick" else 9)
    rows = [[v, f"{r[f'{v}: us/call']:.1f}", f"{r[f'{v}: us/node']:.2f}", str(r[f"{v}: kernels"])]
            for v in ("full pipeline", "fuse disabled", "no optional pass")]
    rows.append(["NumPy eager, the same ufunc calls", f"{r['numpy eager: us/op'] * r['nodes']:.1f}", f"{r['numpy eager: us/op']:.2f}", str(r["nodes"])])
    notes = [f"{r['nodes']} elementwise nodes on a [16] float64 vector (the `chain200` workload), best of several samples; "
             "`fuse disabled` runs one kernel per node into planned buffers."]
    return ["variant", "µs per call", "µs per node", "kernels run"], rows, notes


def _memory_plan(suite: str):
    from benchmarks.mlp_memory import measure

    rows = []
    for r in measure(256, 1024, 12):
        plan = f"{r['plan_naive'] / MIB:.1f} → {r['plan_peak'] / MIB:.1f} MiB" if r["plan_naive"] else "-"
        rows.append([r["variant"], f"{r['peak_during_call'] / MIB:.1f} MiB", f"{r['arena'] / MIB:.1f} MiB",
                     f"**{r['total'] / MIB:.1f} MiB**", plan])
    notes = ["12 layers of gelu(x @ W + b), x[256,1024] float64 (one activation = 2 MiB), cpu backend; "
             "bytes allocated while one call runs (tracemalloc) plus the arena the executable keeps; "
             "both variants' outputs agree to 1e-12."]
    return ["variant", "allocated during the call", "planned arena", "peak", "plan: no reuse → reuse"], rows, notes


def _backend_overhead(suite: str):
    from benchmarks.backend_overhead import study

    quick = suite == "quick"
    rows_raw = study(((8, 128, 256),) if quick else ((8, 128, 256), (256, 1024, 4096)),
                     ("small",) if quick else ("small", "wide"), 15 if quick else 41)
    rows = [[label, pair, f"{c * 1e6:.1f} µs", f"{p * 1e6:.1f} µs", f"{100 * (ratio - 1):+.1f}%"]
            for label, pair, c, p, ratio in rows_raw]
    notes = ["caramba's backend and its own toolkit used directly on the same work, interleaved in one process: "
             "JAX jit with resident inputs (donated state for the train step); ORT running the very model caramba "
             "exported, with IO binding bound once (its cheapest call). The overhead is caramba's per-call cost: "
             "input checks, fresh output buffers, resident-state bookkeeping. The two run in short alternating pairs "
             "(~10 ms each), taken in 5 rounds over all cases so each row samples the whole run (on small graphs "
             "the overhead follows the machine's load); the overhead is the median of the per-pair ratios, the "
             "times are the medians of the samples. Rows marked informational are not backend overhead: "
             "xla:sync is caramba's opt-in synchronous CPU client; ORT's idiomatic Gelu computes 1 + erf in float32 "
             "(12 ulps off at x=-3, 0 instead of 6e-9 at -6), where caramba's export keeps 4 ulps."]
    return ["case", "caramba backend / peer", "caramba", "peer", "overhead"], rows, notes


def _pretrained_load(suite: str):
    from benchmarks.pretrained_load import measure

    r = measure()
    rows = [["GPT-2 small shape, float32 (124M values)", f"{r['weights'] / MIB:.0f} MiB", f"{r['open_s']:.2f} s",
             f"{r['load_s']:.2f} s", f"**{r['seconds']:.2f} s**", f"{r['peak'] / MIB:.0f} MiB",
             f"**{r['peak'] / r['weights']:.2f}x**"]]
    notes = [f"A fresh process opens the checkpoint (headers, config.json, bindings) and loads it onto a cpu runner: "
             f"memory-mapped reads in blocks, one tensor on the host at a time, donated to the runner. Peak RSS is the "
             f"process's whole (ru_maxrss), interpreter included ({r['before'] / MIB:.0f} MiB before the load)."]
    return ["checkpoint", "weights", "open", "load", "total", "peak RSS", "peak / weights"], rows, notes


def _decode(suite: str):
    from benchmarks.decode import POSITIONS, measure

    rows_raw = measure(["cpu", "xla"], steps=16, threads=1)
    peer = next((v for k, v in rows_raw.items() if k.startswith("transformers")), None)
    rows = []
    for name, r in rows_raw.items():
        cells = [name]
        for p in POSITIONS:
            ratio = f" ({peer[p] / r[p]:.2f}x)" if peer is not None and not name.startswith("transformers") else ""
            cells += [f"{r[p]:.1f} ms", f"{1e3 / r[p]:.1f}{ratio}"]
        rows.append(cells)
    notes = ["GPT-2 small shape (124M, float32, random weights), batch 1, capacity 1024, greedy; one thread for "
             "caramba cpu and torch (xla uses its own). (x) is tokens/s over transformers' (torch eager with its KV "
             "cache, the same weights): above 1 is faster. caramba's decode graph attends over the cache slots up to "
             "the smallest compiled span (64, 128, ..., capacity) that holds the position, and rewrites those "
             "slots each step (the cache update is functional), which is most of the cost at long positions."]
    cols = ["model"] + [c for p in POSITIONS for c in (f"pos {p}: ms/token", "tokens/s (vs transformers)")]
    return cols, rows, notes


def _cpu_tuning(suite: str):
    from benchmarks.cpu_tuning import measure

    r = measure(budget_s=10.0 if suite == "quick" else 30.0, rounds=5 if suite == "quick" else 9)
    rows = [[label, f"{d * 1e6:.0f} µs", f"{t * 1e6:.0f} µs", f"{t / d:.2f}x"] for label, d, t in r["rows"]]
    changed = ", ".join(f"{k} {d:g} → {t:g}" for k, (d, t) in r["settings"].items() if d != t) or "none changed"
    notes = [f"settings: {r['source']}; {changed}. Each case compiled under each setting and timed in alternating "
             "samples (median); both agree with NumPy. Below 1.00x the tuned settings are faster."]
    return ["case (float64, cpu)", "default settings", "tuned settings", "tuned / default"], rows, notes


def _cold_start(suite: str):
    from benchmarks.cold_start import measure

    r = measure(1 if suite == "quick" else 3)
    rows = [["empty caches (first run after install)", f"{r['cold_s']:.1f} s", f"{r['cold_cpu_s']:.1f} s"],
            ["warm caches (every later run)", f"{r['warm_s']:.1f} s", f"{r['warm_cpu_s']:.1f} s"]]
    notes = [f"`caramba research run examples/digits_mlp.yml` (the README's first command) as a new process, from its "
             f"start to its exit after the result table; median of {r['runs']}. Empty caches: a fresh caramba cache "
             "(generated kernels) and Numba cache, a fresh run store, and caramba imported from a copy of its package "
             "with no bytecode (as after `pip install -e`; the run compiles and writes it). Load average "
             f"{r['load']:.1f} when measured (only a quiet machine gives the real number)."]
    return ["run", "wall clock", "CPU time"], rows, notes


STUDIES: tuple[Study, ...] = (
    Study("chain_overhead", "Per-node cost of a compiled 200-node elementwise chain (cpu)", ("quick", "full"), ("cpu",), _chain_overhead),
    Study("memory_plan", "Peak memory of a 12-layer MLP forward, with and without the memory planner (cpu)", ("quick", "full"), ("cpu",), _memory_plan),
    Study("pretrained_load", "Loading a Hugging Face checkpoint onto the cpu backend: time and peak memory", ("full",), ("cpu",), _pretrained_load),
    Study("decode", "Generating with a resident KV cache: ms per token at positions 16 and 1000 (GPT-2 small)", ("full",), ("cpu",), _decode),
    Study("cold_start", "Cold start: the Quickstart's first run with empty caches, and warm", ("full",), ("cpu",), _cold_start),
    Study("cpu_tuning", "The cpu backend with this machine's tuned settings (caramba backends --tune) against its defaults", ("full",), ("cpu",), _cpu_tuning),
    Study("backend_overhead", "What the xla and onnx backends cost over JAX and ONNX Runtime used directly", ("full",), ("xla", "onnx"), _backend_overhead),
)


def run_studies(suite: str, backends: Sequence[str], only: Sequence[str] | None = None,
                progress: Callable[[str], None] = lambda m: None) -> list[StudyResult]:
    """Run the studies of ``suite`` (or those named in ``only``) whose backends are selected."""
    import traceback

    have = {b.split(":")[0] for b in backends}
    out = []
    for s in STUDIES:
        if (only and s.name not in only) or (not only and suite not in s.suites):
            continue
        missing = [b for b in s.needs if b not in have]
        if missing:
            out.append(StudyResult(s.name, s.title, [], [], [f"needs backend(s) {missing}, not selected or not available"], "n/a"))
            continue
        progress(f"study {s.name}")
        try:
            cols, rows, notes = s.run(suite)
            out.append(StudyResult(s.name, s.title, cols, rows, notes))
        except Exception as exc:  # reported as a failure of the run, never hidden
            out.append(StudyResult(s.name, s.title, [], [], [f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=4)], "error"))
    return out


STUDY_NAMES = tuple(s.name for s in STUDIES)
