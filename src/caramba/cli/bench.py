"""``caramba bench``: workloads through caramba and its peers, reported as ratios."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("bench")
    def bench(
        suite: str = typer.Option("quick", "--suite", help="quick (< 5 min) or full (< 20 min)"),
        backend: list[str] = typer.Option(None, "--backend", "-b", help="caramba backend spec(s); default: every available backend"),
        only: list[str] = typer.Option(None, "--only", help="run only these workloads or studies"),
        peer: list[str] = typer.Option(None, "--peer", help="limit peers (numpy, jax, torch, onnxruntime)"),
        json_out: str = typer.Option(None, "--json", help="write raw results as JSON"),
        markdown: str = typer.Option(None, "--markdown", help="write a generated Markdown report (docs/benchmarks.md)"),
    ) -> None:
        """Benchmark caramba side by side with NumPy, JAX, PyTorch and ONNX Runtime."""
        import os
        from pathlib import Path

        from rich.console import Console

        from benchmarks.harness import run_workloads
        from benchmarks.machine import machine_info
        from benchmarks.report import failures, print_studies, print_table, write_json, write_markdown
        from benchmarks.studies import STUDY_NAMES, run_studies
        from benchmarks.workloads import by_name
        from caramba.compute import available, parse_spec
        from caramba.errors import ConfigError

        if suite not in ("quick", "full"):
            raise ConfigError(f"unknown suite {suite!r}; use quick or full")
        os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
        workloads = by_name(only, STUDY_NAMES)  # unknown names fail before anything runs
        console = Console(stderr=True)
        specs = list(backend) if backend else _default_backends(available(), console)
        for s in specs:
            parse_spec(s)
        with console.status("benchmarking") as status:
            results = run_workloads(workloads, suite, specs, peer or None, progress=lambda m: status.update(m)) if workloads else []
            studies = run_studies(suite, specs, only, progress=lambda m: status.update(m))
        print_table(results)
        print_studies(studies)
        info = machine_info()
        if json_out:
            write_json(results, info, suite, json_out, studies)
        if markdown:
            write_markdown(results, info, suite, markdown, Path(json_out).name if json_out else None, studies)
        bad = [f"{r.workload} {r.case} {r.impl}" for r in failures(results)] + [f"study {s.name}" for s in studies if s.status == "error"]
        if bad:
            console.print(f"[bold red]{len(bad)} failure(s)[/]: " + "; ".join(bad))
            raise typer.Exit(1)


def _default_backends(names: list[str], console) -> list[str]:
    """Every available backend except software GPU adapters (WebGPU on lavapipe emulates a GPU
    on the CPU: its timings say nothing about a GPU, and its large cases take minutes). Name
    one with --backend to include it anyway."""
    from caramba.compute import build_info

    keep = []
    for name in names:
        if build_info(name).details.get("adapter_type") == "CPU":
            console.print(f"[dim]{name}: software adapter ({build_info(name).details.get('adapter')}); "
                          f"not benchmarked unless named with --backend {name}[/]")
            continue
        keep.append(name)
    return keep
