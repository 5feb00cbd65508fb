"""``caramba model inspect|export``: Hugging Face checkpoints in, trained models out."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Pretrained checkpoints: inspect one, export a run's model in their format.",
                        no_args_is_help=True)
    app.add_typer(group, name="model")

    @group.command("inspect")
    def inspect(
        source: Path = typer.Argument(..., help="a Hugging Face checkpoint folder (config.json + safetensors) or file"),
        architecture: str = typer.Option(None, "--architecture", help="override config.json's architectures[0]"),
    ) -> None:
        """Architecture, parameter count and dtypes, the caramba model it maps to, and any
        checkpoint tensor no parameter reads (or parameter without a tensor)."""
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        from caramba.pretrained.inspect import inspect as run

        info = run(source, architecture=architecture)
        console = Console(highlight=False)
        console.print(f"[bold]{escape(str(info.source))}[/]: {info.tensors} tensors in {len(info.files)} file(s), "
                      f"{info.parameters:,} values, {info.bytes / 2**20:.1f} MiB "
                      f"({', '.join(f'{k} x{v}' for k, v in sorted(info.dtypes.items()))})")
        console.print(f"config.json architecture: {escape(info.config_architecture or '-')}")
        if info.architecture is not None:
            console.print(f"maps through [cyan]{info.architecture}[/] onto [cyan]{info.model}[/] "
                          f"({info.model_parameters:,} parameter values; {info.mapped} parameters bound)")
            t = Table(title="model config from config.json")
            t.add_column("name")
            t.add_column("value", overflow="fold")
            for k, v in info.variables.items():
                t.add_row(k, escape(repr(v)))
            console.print(t)
        if info.ignored:
            console.print(f"ignored (buffers, not parameters): {escape(', '.join(info.ignored[:10]))}"
                          + (f" and {len(info.ignored) - 10} more" if len(info.ignored) > 10 else ""))
        for t_name in info.unmapped[:20]:
            console.print(f"[red]unmapped tensor[/] {escape(t_name)}")
        if len(info.unmapped) > 20:
            console.print(f"[red]... and {len(info.unmapped) - 20} more unmapped tensors[/]")
        for p in info.problems:
            console.print(f"[red]problem:[/] {escape(p)}")
        console.print("[green]loads[/]" if info.loads else "[red]does not load as it is[/]")
        if not info.loads:
            raise typer.Exit(1)

    @group.command("export")
    def export(
        run_id: str = typer.Argument(..., help="a run ID (or prefix, or latest) whose model came from a checkpoint"),
        out: Path = typer.Option(..., "--out", "-o", help="folder to write (must not exist or be empty)"),
        fmt: str = typer.Option("hf", "--format", help="hf: a Hugging Face folder transformers loads"),
        dtype: str = typer.Option(None, "--dtype", help="tensor dtype (default: the parameters')"),
        lora: str = typer.Option("merge", "--lora", help="merge: adapters folded into the weights; adapter: PEFT files too"),
        store: str = typer.Option(None, "--store", help="run store folder (default: the `store` setting)"),
        config: str = typer.Option(None, "--config", help="config file (default: ./caramba.yml, then ~/.caramba/config.yml)"),
    ) -> None:
        """Write a run's trained (or fine-tuned) model back as a Hugging Face directory."""
        from caramba.config import load_settings
        from caramba.run.export import export_run
        from caramba.store.runs import open_runs

        runs = open_runs(load_settings(config, overrides={"store": store}).store)
        path = export_run(run_id, out, store=runs, fmt=fmt, dtype=dtype, lora=lora)
        typer.echo(f"wrote {path}")
