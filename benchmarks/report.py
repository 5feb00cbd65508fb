"""Render benchmark results: a console table, JSON, and docs/benchmarks.md (generated)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from benchmarks.harness import Result

REGENERATE = "caramba bench --suite full --json docs/benchmarks.json --markdown docs/benchmarks.md"


def fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _rows(results: list[Result]):
    for r in results:
        yield [
            r.impl,
            r.status,
            fmt_time(r.median_s),
            fmt_time(r.min_s),
            f"{r.gflops:.1f}" if r.gflops is not None else "-",
            f"{r.ratio:.2f}×" if r.ratio is not None else "-",
            f"{r.max_rel_err:.1e}" if r.max_rel_err is not None else "-",
            r.note,
        ]


HEADER = ["impl", "status", "median", "min", "GFLOP/s", "vs best peer", "max rel err", "note"]


def grouped(results: list[Result]):
    groups: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for r in results:
        groups[(r.workload, r.case)].append(r)
    return groups


def print_table(results: list[Result]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    by_workload: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_workload[r.workload].append(r)
    for w, rs in by_workload.items():
        t = Table(title=w, title_justify="left")
        for h in ["case", *HEADER]:
            t.add_column(h, no_wrap=h != "note", max_width=48 if h == "note" else None)
        last = None
        for r, row in zip(rs, _rows(rs), strict=True):
            style = {"fail": "bold red", "error": "red", "not yet": "yellow", "refused": "yellow", "n/a": "dim"}.get(row[1])
            t.add_row(r.case if r.case != last else "", *row, style=style)
            last = r.case
        console.print(t)
    for line in limit_rows(results):
        console.print(line)
    targets = target_rows(results)
    if targets:
        t = Table(title="targets", title_justify="left")
        for h in ("case", "ratio of medians", "this run", "target", ""):
            t.add_column(h)
        for row in targets:
            t.add_row(*(c.replace("**", "") for c in row))
        console.print(t)


def print_studies(studies: list) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for st in studies:
        if st.status != "ok":
            console.print(f"[red]study {st.name}: {st.status}[/] {st.notes[0] if st.notes else ''}")
            continue
        t = Table(title=st.title, title_justify="left")
        for h in st.columns:
            t.add_column(h)
        for row in st.rows:
            t.add_row(*(c.replace("**", "") for c in row))
        console.print(t)


def limit_rows(results: list[Result]) -> list[str]:
    """The machine's measured GEMM peak per dtype: the best any implementation reached."""
    best: dict[str, float] = {}
    for r in results:
        if r.workload == "gemm" and r.status == "ok" and r.gflops:
            dt = r.case.split()[-1]
            best[dt] = max(best.get(dt, 0.0), r.gflops)
    return [f"limit: measured GEMM peak {dt} = {v:.1f} GFLOP/s (best of all implementations)" for dt, v in sorted(best.items())]


# The targets the issues set, read off the table: (workload, case, caramba impl, peer, limit).
TARGETS: tuple[tuple[str, str, str, str, float], ...] = (
    ("dense", "256x1024x4096 +gelu float64", "caramba:cpu", "jax", 1.3),
    ("chain200", "[16] float64", "caramba:cpu", "jax", 2.0),
    ("mlp_train_step", "[128,64]→256→256→10", "caramba:cpu", "jax", 1.5),
    ("mlp_train_step", "[128,64]→256→256→10", "caramba:cpu", "torch", 1.0),
    ("mlp_train_step", "[256,784]→1024→1024→10", "caramba:cpu", "jax", 1.5),
    ("mlp_train_step", "[256,784]→1024→1024→10", "caramba:cpu", "torch", 1.0),
    # issue 20: forward norms and softmax on every listed shape, the char-GPT train step, GPT-2
    # small and ResNet-18 forwards (the backward rows are reported, not targeted)
    *(("layer_norm", f"{s} float64", "caramba:cpu", "torch", 1.5) for s in ("8x64", "32x256", "64x768", "8x16x64")),
    *(("softmax", f"{s} float64", "caramba:cpu", "torch", 1.3) for s in ("8x64", "32x128", "64x512", "8x16x64", "4x8x32x128")),
    *(("char_gpt_train_step", f"16x64 {d}", "caramba:cpu", p, lim) for d in ("float64", "float32")
      for p, lim in (("torch", 1.0), ("jax", 1.2))),
    ("gpt2_small_forward", "1x128 float32", "caramba:cpu", "torch", 1.2),
    ("gpt2_small_forward", "8x128 float32", "caramba:cpu", "torch", 1.2),
    ("resnet18_forward", "8x3x64x64 float32", "caramba:cpu", "torch", 1.3),
    ("resnet18_forward", "8x3x64x64 float64", "caramba:cpu", "torch", 1.0),
    ("resnet18_train_step", "8x3x64x64 float32", "caramba:cpu", "torch", 1.3),
    ("resnet18_train_step", "8x3x64x64 float64", "caramba:cpu", "torch", 1.0),
    ("transformer_block", "8x128x256 float64", "caramba:cpu", "jax|torch", 1.1),
    ("dense", "256x1024x4096 +gelu float32", "caramba:cpu", "jax", 1.3),
)


def _best_peer(by: dict, workload: str, case: str, peer: str) -> Result | None:
    """The peer's result; for ``"a|b"`` the fastest of those that ran (a target against the best of several)."""
    found = [r for p in peer.split("|") if (r := by.get((workload, case, p))) is not None]
    ok = [r for r in found if r.status == "ok" and r.median_s]
    if ok:
        return min(ok, key=lambda r: r.median_s)
    return found[0] if found else None


def target_rows(results: list[Result]) -> list[list[str]]:
    """Each target's ratio in this run (caramba median / the peer's median), where both ran."""
    by = {(r.workload, r.case, r.impl): r for r in results}
    rows = []
    for w, case, mine, peer, limit in TARGETS:
        a, b = by.get((w, case, mine)), _best_peer(by, w, case, peer)
        if a is None or b is None:
            continue
        if "|" in peer:
            peer = f"best of {peer.replace('|', ', ')} ({b.impl})"
        if a.status != "ok" or b.status != "ok" or not a.median_s or not b.median_s:
            rows.append([f"{w} {case}", f"{mine} / {peer}", "-", f"≤ {limit:g}", f"not measured ({a.status} / {b.status})"])
            continue
        ratio = a.median_s / b.median_s
        rows.append([f"{w} {case}", f"{mine} / {peer}", f"{ratio:.2f}×", f"≤ {limit:g}", "met" if ratio <= limit else "**missed**"])
    return rows


# Issue 7: caramba's xla and onnx backends cost at most this much over their toolkits used directly
# (the backend_overhead study; rows marked informational are not backend overhead).
OVERHEAD_LIMIT = 0.10


# Issue 20: the Quickstart's first run with empty caches, from process start to the result table.
COLD_START_LIMIT_S = 8.0


def study_target_rows(studies: list | None) -> list[list[str]]:
    """Targets read off studies: each backend overhead against OVERHEAD_LIMIT, the cold start
    against COLD_START_LIMIT_S."""
    rows = []
    for st in studies or []:
        if st.name == "cold_start" and st.status == "ok":
            secs = float(st.rows[0][1].split()[0])
            rows.append(["cold start: Quickstart run, empty caches", "wall clock", f"{secs:.1f} s",
                         f"≤ {COLD_START_LIMIT_S:g} s", "met" if secs <= COLD_START_LIMIT_S else "**missed**"])
        if st.name != "backend_overhead" or st.status != "ok":
            continue
        for case, pair, _, _, overhead in st.rows:
            if "informational" in pair:
                continue
            ratio = 1.0 + float(overhead.rstrip("%")) / 100.0
            rows.append([f"backend overhead: {case}", pair, overhead, f"≤ +{OVERHEAD_LIMIT:.0%}",
                         "met" if ratio <= 1.0 + OVERHEAD_LIMIT else "**missed**"])
    return rows


def _md_table(columns: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return out


def failures(results: list[Result]) -> list[Result]:
    return [r for r in results if r.status in ("fail", "error")]


def write_json(results: list[Result], machine: dict, suite: str, path: str | Path, studies: list | None = None) -> None:
    payload = {"suite": suite, "machine": machine, "results": [r.as_dict() for r in results],
               "studies": [s.as_dict() for s in studies or []]}
    Path(path).write_text(json.dumps(payload, indent=1, default=str) + "\n")


def write_markdown(results: list[Result], machine: dict, suite: str, path: str | Path, json_name: str | None = None,
                   studies: list | None = None) -> None:
    lines = [
        "# Benchmarks",
        "",
        "<!-- Generated by `caramba bench`; do not edit by hand. -->",
        "",
        f"Regenerate with `{REGENERATE}`.",
        "Every number below comes from one process run: caramba and its peers on the same inputs,",
        "warmed up (compile/jit excluded), median and min of several samples, the samples of a",
        "case's implementations taken in turns (so load changes land on all alike), with a pause",
        "after each sample (a thread pool that spins after its last call keeps no core from the",
        "next implementation: `harness.SETTLE_S`). Ratios are",
        "caramba's (or a peer's) median over the best peer's median in the same run; these",
        "machines are noisy (±10–35% between runs), so compare ratios, not absolute times.",
        "Every output is checked against a float64 NumPy reference; `fail` means it disagreed.",
        "Focused measurements (per-node overhead, fusion against JAX, the memory planner, the",
        "train step at one thread, backend overhead over JAX/ONNX Runtime) are in",
        "[compiler.md](compiler.md#measurements), [training.md](training.md) and `benchmarks/*.py`.",
        "",
        f"- suite: `{suite}`, date: {machine.get('date')}",
        f"- CPU: {machine.get('cpu')}, {machine.get('cores')} cores, {machine.get('platform')}",
    ]
    for b in machine.get("blas", []):
        lib = Path(b.get("filepath") or "?").name
        if b.get("user_api") == "blas":
            lines.append(f"- BLAS: {b.get('internal_api')} {b.get('version')} ({lib}), kernel {b.get('architecture')}, {b.get('num_threads')} threads")
        else:
            lines.append(f"- thread pool: {b.get('internal_api')} ({lib}), {b.get('num_threads')} threads")
    vs = ", ".join(f"{k} {v}" for k, v in machine.get("versions", {}).items())
    lines += [f"- versions: {vs}"]
    if json_name:
        lines.append(f"- raw results: [`{json_name}`]({json_name})")
    for line in limit_rows(results):
        lines.append(f"- {line}")
    fails = failures(results)
    lines += ["", f"**{len(fails)} failure(s)**" + (":" if fails else ".")]
    for r in fails:
        lines.append(f"- {r.workload} {r.case} {r.impl}: {r.status}: {r.note}")
    targets = target_rows(results) + study_target_rows(studies)
    if targets:
        lines += ["", "## Targets", "", "The ratios the project's issues set, read off the tables below (same run).", ""]
        lines += _md_table(["case", "ratio of medians", "this run", "target", ""], targets)
    for st in studies or []:
        lines += ["", f"## Study: {st.title}", ""]
        if st.status != "ok":
            lines.append(f"{st.status}: {st.notes[0] if st.notes else ''}")
            continue
        lines += _md_table(st.columns, st.rows)
        lines += ["", *st.notes]
    for (w, case), rs in grouped(results).items():
        lines += ["", f"## {w} — {case}", ""]
        lines += _md_table(HEADER, list(_rows(rs)))
    Path(path).write_text("\n".join(lines) + "\n")
