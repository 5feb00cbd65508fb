"""``caramba research run|status|inspect``: run manifest experiments and look at their runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

SET_HELP = "override a manifest value: PATH=VALUE (e.g. trainer.steps=50); repeatable"
CONFIG_HELP = "config file (default: ./caramba.yml, then ~/.caramba/config.yml)"
STORE_HELP = "run store folder or URL (file://..., s3://bucket/prefix; default: the `store` setting)"


def _store(config: str | None, store: str | None) -> Any:
    from caramba.config import load_settings
    from caramba.store.runs import open_runs

    s = load_settings(config, overrides={"store": store})
    return open_runs(s.store)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


class _Bar:
    """A rich progress bar per run: step, loss, samples/s; evaluations are printed above it."""

    def __init__(self, console: Any, quiet: bool) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console, self.quiet = console, quiet
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[sps]} samples/s"),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
            console=console, transient=False, disable=quiet, auto_refresh=False,
        )
        self.task = None
        self.label = ""
        self.last = 0.0  # refreshed from the training loop at most 5 times a second: no render thread
        self.compiles = 0  # Numba compilations reported (a first run with an empty cache)

    def start(self, plan: Any, run_id: str, total: int) -> None:
        from rich.markup import escape

        self.label = plan.label
        if not self.quiet:
            self.console.print(f"[cyan]run[/] {escape(run_id)}  {escape(plan.label)}  backend {escape(plan.backend)}"
                               f"  seed {plan.run.seed}  {total} steps")
        if not self.progress.live.is_started:
            self.progress.start()
        self.task = self.progress.add_task(plan.label, total=max(total, 1), loss="-", sps="-", completed=0)

    def step(self, step: int, total: int, values: Any, sps: float) -> None:
        import time

        now = time.monotonic()
        if self.task is not None and (now - self.last > 0.2 or step == total):
            self.last = now
            self.progress.update(self.task, completed=step, loss=f"{values.get('loss_ema', values['loss']):.4f}",
                                 sps=f"{sps:,.0f}", description=self.label)
            self.progress.refresh()

    def compiling(self, what: str) -> None:
        """A cpu kernel is being compiled (first use; cached on disk after): say so on the bar."""
        from rich.markup import escape

        self.compiles += 1
        if self.quiet:
            return
        if self.compiles == 1:
            from caramba.backends.cpu.jitcache import numba_cache_dir

            self.progress.console.print(f"  compiling cpu kernels on first use (cached in {escape(str(numba_cache_dir()))})")
        text = f"{escape(self.label)} [yellow]compiling {escape(what)} (#{self.compiles})[/]"
        if self.task is not None:
            self.progress.update(self.task, description=text)
            self.progress.refresh()

    def evaluate(self, step: int, split: str, values: Any) -> None:
        if not self.quiet:
            shown = "  ".join(f"{k} {v:.4f}" for k, v in values.items())
            self.progress.console.print(f"  step {step:>6}  {split:<5} {shown}")

    def end(self, result: Any) -> None:
        from rich.markup import escape

        if self.task is not None:
            if result.status == "finished":
                self.progress.update(self.task, completed=self.progress.tasks[-1].total)
            self.progress.stop_task(self.task)
            self.progress.refresh()
        if result.status != "finished":
            self.progress.console.print(f"[red]run {escape(result.run_id)} failed:[/] {escape(result.error)}")

    def message(self, text: str) -> None:
        if not self.quiet:
            from rich.markup import escape

            self.progress.console.print(f"  {escape(text)}")

    def close(self) -> None:
        if self.progress.live.is_started:
            self.progress.stop()


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Run manifest experiments and inspect their runs.", no_args_is_help=True)
    app.add_typer(group, name="research")
    register_compare(group)
    from caramba.cli.export import register_research_export  # research export --to mlflow (issue 21)

    register_research_export(group)

    @group.command("run")
    def run(
        manifest: Path = typer.Argument(..., help="experiment manifest"),
        backend: str = typer.Option(None, "--backend", "-b", help="run every target on this backend (e.g. cpu:threads=2)"),
        target: str = typer.Option(None, "--target", "-t", help="run only this target"),
        set_: list[str] = typer.Option([], "--set", help=SET_HELP),
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
        cluster: str = typer.Option(
            None, "--cluster", help="run the runs across workers: 'ray' (a Ray cluster) or 'local' (in-process workers)"
        ),
        workers: int = typer.Option(None, "--workers", help="number of workers with --cluster (default 2)"),
    ) -> None:
        """Run every target x run (x tuner arm) of MANIFEST with a live progress bar, record runs,
        metrics and artifacts in the store, and print the comparison table."""
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        from caramba.config import load_settings
        from caramba.errors import ConfigError
        from caramba.run import Progress, ledger_root, run_experiment

        console = Console(highlight=False)
        settings = load_settings(config, overrides={"store": store, "backend": backend})
        runs = _store(config, store)
        if cluster is not None:
            if cluster not in ("ray", "local"):
                raise ConfigError(f"unknown cluster {cluster!r}; use ray or local")
            from caramba.orchestrator.run import run_cluster

            report = run_cluster(manifest, None, cluster=cluster, overrides=set_, backend=backend or None,
                                 target=target, workers=workers,
                                 # a remote store by its URL: a worker on another host opens its own replica
                                 run_store=getattr(runs, "url", None) or str(runs.root),
                                 root=str(ledger_root(runs)))  # one ledger per store, the one local runs use
            console.print(escape(report.as_text()))
            raise typer.Exit(0 if report.ok else 1)
        bar = _Bar(console, quiet)

        class CliProgress(Progress):
            start, step, evaluate, end, message = bar.start, bar.step, bar.evaluate, bar.end, bar.message

        from caramba.backends.cpu.jitcache import compiling

        try:
            with compiling(bar.compiling):
                result = run_experiment(manifest, set_, backend=backend or None, target=target, store=runs,
                                        progress=CliProgress(), default_backend=settings.backend,
                                        on_decision=lambda d: bar.progress.console.print(escape(d.line())))
        finally:
            bar.close()
        metric_cols = [c for c in result.columns() if c == "train.loss" or c.startswith(("val.", "test."))]
        cols = metric_cols + [c for c in ("samples_per_s", "seconds") if c in result.columns()]
        headers = {"samples_per_s": "samples/s", "seconds": "time (s)"}
        table = Table(title=f"{result.experiment}" + (f": ranked by {result.metric} ({result.mode})" if result.metric else ""))
        for col in ("run", "status", *cols):
            table.add_column(headers.get(col, col), overflow="fold")
        for r in result.ranked():
            status = "[green]finished[/]" if r.status == "finished" else f"[red]{r.status}[/]"
            table.add_row(escape(r.label), status, *(_fmt(r.summary.get(c)) for c in cols))
        console.print(table)
        for r in result.ranked():
            console.print(f"  {escape(r.label)}: {escape(r.run_id)}")
        base = next((v for r in result.runs for k, v in r.summary.items() if k.startswith("baseline.")), None)
        if base is not None:
            console.print(f"unigram baseline loss {base:.4f}")
        console.print(f"store {escape(str(getattr(runs, 'url', runs.root)))}; inspect with: caramba research inspect {escape(result.runs[-1].run_id)}")
        if not result.ok:
            raise typer.Exit(1)

    @group.command("resume")
    def resume(
        run_id: str = typer.Argument(..., help="an interrupted run's ID (or prefix, or latest)"),
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
    ) -> None:
        """Continue an interrupted run on the same run ID from its newest checkpoint the Notary
        accepts (same data order, random streams and schedule: it ends where an uninterrupted run
        would have). The metrics after that checkpoint are recomputed, never duplicated."""
        from rich.console import Console
        from rich.markup import escape

        from caramba.run import Progress, resume_run

        console = Console(highlight=False)
        runs = _store(config, store)
        bar = _Bar(console, quiet)

        class CliProgress(Progress):
            start, step, evaluate, end, message = bar.start, bar.step, bar.evaluate, bar.end, bar.message

        try:
            result = resume_run(run_id, runs, progress=CliProgress())
        finally:
            bar.close()
        values = "  ".join(f"{k} {_fmt(v)}" for k, v in result.summary.items()
                           if k == "train.loss" or k.startswith(("val.", "test.")))
        colour = "green" if result.status == "finished" else "red"
        console.print(f"{escape(result.run_id)}: [{colour}]{result.status}[/]  {escape(values)}")
        if result.error:
            console.print(f"[red]{escape(result.error)}[/]")
        if result.status != "finished":
            raise typer.Exit(1)

    @group.command("status")
    def status(
        run_id: str = typer.Argument(None, help="a run ID (or prefix, or latest); omit to list recent runs"),
        limit: int = typer.Option(20, "--limit", "-n", help="how many runs to list"),
        experiment: str = typer.Option(None, "--experiment", "-e", help="only runs of this experiment"),
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """List recent runs, or show one run's status and latest metrics."""
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        console = Console(highlight=False)
        runs = _store(config, store)
        if run_id is None:
            recs = runs.list(limit, experiment)
            table = Table(title=f"runs in {getattr(runs, 'url', runs.root)}")
            for col in ("id", "experiment", "run", "status", "step", "val/test", "duration"):
                table.add_column(col, overflow="fold")
            for r in recs:
                key = next((f"{k} {_fmt(r.summary[k])}" for k in ("test.accuracy", "val.accuracy", "val.loss", "test.loss")
                            if k in r.summary), "-")
                label = "/".join(p for p in (r.arm, r.target, r.run_name) if p)
                table.add_row(escape(r.id), escape(r.experiment), escape(label), r.status, f"{r.step}/{r.steps}",
                              escape(key), _duration(r.seconds))
            console.print(table)
            if not recs:
                console.print("no runs yet: caramba research run MANIFEST")
            return
        r = runs.get(run_id)
        console.print(f"[bold]{escape(r.id)}[/]  {escape(r.experiment)}  {r.status}  step {r.step}/{r.steps}  "
                      f"{_duration(r.seconds)}  backend {escape(r.backend)}  seed {r.seed}")
        if r.error:
            console.print(f"[red]{escape(r.error)}[/]")
        latest: dict[tuple[str, str], tuple[int, float]] = {}
        for step, split, name, value in runs.metrics(r.id):
            latest[(split, name)] = (step, value)
        table = Table(title="latest metrics")
        for col in ("split", "metric", "step", "value"):
            table.add_column(col)
        for (split, name), (step, value) in sorted(latest.items()):
            table.add_row(split, escape(name), str(step), _fmt(value))
        console.print(table)

    @group.command("inspect")
    def inspect(
        run_id: str = typer.Argument(..., help="a run ID (or prefix, or latest)"),
        png: Path = typer.Option(None, "--png", help="also copy the loss curve PNG here"),
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """Resolved config, metrics table, IR summary and the loss curve (saved as PNG) of one run."""
        from rich.console import Console
        from rich.markup import escape
        from rich.syntax import Syntax
        from rich.table import Table

        from caramba.run import inspect_run, ir_summary

        console = Console(highlight=False)
        runs = _store(config, store)
        info = inspect_run(run_id, runs)
        r = info["record"]
        label = "/".join(p for p in (r.arm, r.target, r.run_name) if p)
        console.rule(f"[bold]{escape(r.id)}")
        console.print(f"experiment {escape(r.experiment)}  run {escape(label)}  status {r.status}  backend "
                      f"{escape(r.backend)}  seed {r.seed}  steps {r.step}/{r.steps}  {_duration(r.seconds)}")
        if r.error:
            console.print(f"[red]{escape(r.error)}[/]")
        console.rule("resolved manifest")
        manifest = r.dir / "manifest.yml"
        if manifest.exists():
            console.print(Syntax(manifest.read_text(), "yaml", theme="ansi_dark", background_color="default"))
        if r.config.get("overrides"):
            console.print("overrides: " + escape(", ".join(r.config["overrides"])))
        if isinstance(r.config.get("tuner"), dict):  # the tuner decision that chose this run
            from caramba.run.tuner import decision_text

            console.print(escape(decision_text(r.config["tuner"])))
        console.rule("metrics")
        table = Table()
        table.add_column("metric")
        splits = [s for s in ("train", "val", "test") if s in info["final"]]
        for s in splits:
            table.add_column(s)
        names = sorted({n for s in splits for n in info["final"][s]})
        for n in names:
            table.add_row(escape(n), *(_fmt(info["final"][s].get(n)) for s in splits))
        console.print(table)
        extra = {k: v for k, v in r.summary.items() if not k.startswith(("train.", "val.", "test."))}
        if extra:
            console.print("  ".join(f"{escape(k)} {_fmt(v)}" for k, v in extra.items() if k != "graph_params"))
        console.rule("IR")
        try:
            console.print(escape(ir_summary(r)))
        except Exception as exc:  # the manifest may no longer lower (assets changed); say so, keep going
            console.print(f"[yellow]IR summary unavailable: {escape(str(exc))}[/]")
        console.rule("artifacts")
        for a in info["artifacts"]:
            console.print(f"{a.kind:<10} {escape(str(a.path))}  {a.size:,} B  sha256 {a.sha256[:12]}")
        if info["plot"] is not None:
            if png is not None:
                png.write_bytes(info["plot"].read_bytes())
            console.print(f"loss curve: {escape(str(png or info['plot']))}")


def register_compare(group: typer.Typer) -> None:
    """``caramba research compare|tag|annotate|delete`` (issue 21: the researcher's loop)."""

    @group.command("compare")
    def compare(
        runs_: list[str] = typer.Argument(None, metavar="RUN...", help="run IDs (or unique prefixes, or latest)"),
        experiment: str = typer.Option(None, "--experiment", "-e", help="every run of this experiment"),
        metric: str = typer.Option(None, "--metric", "-m", help="rank arms by this metric (split.name, e.g. val.loss)"),
        mode: str = typer.Option(None, "--mode", help="min or max (default: the tuner's, else from the metric's name)"),
        tag: list[str] = typer.Option([], "--tag", help="only runs with this tag; repeatable"),
        plot_: Path = typer.Option(None, "--plot", help="also overlay the runs' curves of the metric in this PNG "
                                   "(needs the plot extra: pip install 'caramba[plot]')"),
        x: str = typer.Option("step", "--x", help="x axis of --plot: step or seconds (wall time since each run started)"),
        log: bool = typer.Option(False, "--log", help="log y axis in --plot"),
        as_json: bool = typer.Option(False, "--json", help="print the comparison as JSON"),
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """Runs side by side: hyperparameters (tuner arm values, --set overrides, seed), final
        and best metrics, and the tuner arms ranked by the mean of the metric over seeds
        (mean ± sample std, n)."""
        import json

        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        from caramba.run.compare import compare_runs, direction, plot

        if mode is not None and mode not in ("min", "max"):
            from caramba.errors import ConfigError

            raise ConfigError(f"--mode is min or max, not {mode!r}")
        runs = _store(config, store)
        result = compare_runs(runs, runs_ or [], experiment=experiment, metric=metric, mode=mode, tags=tag)  # type: ignore[arg-type]
        if plot_ is not None:
            plot(runs, result, plot_, x=x, log=log)
        if as_json:
            typer.echo(json.dumps(result.as_dict(), indent=2, default=str))
            return
        console = Console(highlight=False)
        shown = [m for m in result.metrics if m.startswith(("val.", "test.")) or m == "train.loss"] or result.metrics
        if result.metric and result.metric not in shown:
            shown.insert(0, result.metric)
        table = Table(title=f"{len(result.runs)} runs" + (f", ranked by {result.metric} ({result.mode})" if result.metric else ""))
        from caramba.run.compare import TUNER_COLUMNS, tuner_cells

        tuned = any(r.tuner for r in result.runs)  # the tuner's decision per run (strategy, step, arm, belief)
        for col in ("run", "arm", "seed", "status", "tags", *(TUNER_COLUMNS if tuned else ()), *result.params):
            table.add_column(escape(col), overflow="fold")
        for m in shown:  # numbers are never broken over lines; the headers are
            table.add_column(escape(f"{m} final"), overflow="fold", no_wrap=True, min_width=6, justify="right")
            if direction(m):
                table.add_column(escape(f"{m} best"), overflow="fold", no_wrap=True, min_width=6, justify="right")
        for r in result.ranked_runs():
            cells = [escape(r.id), escape(r.arm or "-"), str(r.seed), r.status, escape(",".join(r.tags) or "-"),
                     *(escape(c) for c in (tuner_cells(r.tuner) if tuned else ())),
                     *(escape(_fmt(r.params.get(p))) for p in result.params)]
            for m in shown:
                cells.append(_fmt(r.final.get(m)))
                if direction(m):
                    cells.append(_fmt(r.best.get(m)))
            table.add_row(*cells)
        console.print(table)
        if result.ranking and result.metric:
            ranks = Table(title=f"arms by {result.metric} ({result.mode}): mean ± std over seeds")
            for col in ("rank", "arm", "mean ± std (n)", "seeds", "not counted"):
                ranks.add_column(col, overflow="fold")
            for a in result.ranking:
                ranks.add_row(str(a.rank), escape(a.arm or "-"), a.spread(), ",".join(map(str, a.seeds)) or "-",
                              escape(", ".join(a.excluded)) or "-")
            console.print(ranks)
        notes = [r for r in result.runs if r.note]
        for r in notes:
            console.print(f"  [bold]{escape(r.id)}[/]: {escape(r.note)}")
        if plot_ is not None:
            console.print(f"curves: {escape(str(plot_))}")

    @group.command("tag")
    def tag_(
        run_id: str = typer.Argument(..., help="a run ID (or prefix, or latest)"),
        tags: list[str] = typer.Argument(None, metavar="TAG...", help="tags to add"),
        remove: list[str] = typer.Option([], "--remove", "-r", help="a tag to remove; repeatable"),
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """Add (and with --remove, remove) tags of a run; prints the run's tags. `caramba
        research compare --tag T` compares the runs that carry T."""
        rec = _store(config, store).tag(run_id, tags or [], remove)
        typer.echo(f"{rec.id}: {' '.join(rec.tags) or '(no tags)'}")

    @group.command("annotate")
    def annotate(
        run_id: str = typer.Argument(..., help="a run ID (or prefix, or latest)"),
        text: str = typer.Argument(..., help="the note (replaces the run's note; '' clears it)"),
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """Set a run's note: free text shown by compare, the API and the web UI."""
        rec = _store(config, store).annotate(run_id, text)
        typer.echo(f"{rec.id}: {rec.note or '(no note)'}")

    @group.command("delete")
    def delete(
        run_id: str = typer.Argument(..., help="a run ID (or unique prefix)"),
        reason: str = typer.Option("", "--reason", help="why (recorded in the Notary's ledger)"),
        yes: bool = typer.Option(False, "--yes", "-y", help="do not ask for confirmation"),
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """Delete a run: its record, metrics, files and checkpoint blobs. The Notary records the
        deletion first, so `caramba notary verify` still passes and lists the run as deleted;
        checkpoints of committed model versions are kept."""
        from caramba.run.manage import delete_run

        runs = _store(config, store)
        rec = runs.get(run_id)
        if run_id == "latest" and not yes:
            typer.confirm(f"delete the latest run, {rec.id}?", abort=True)
        elif not yes:
            typer.confirm(f"delete run {rec.id} ({rec.experiment}, {rec.status})?", abort=True)
        typer.echo(delete_run(runs, rec.id, reason=reason).as_text())
