"""``caramba manifest validate|render``: check a manifest end to end, or print it expanded."""

from __future__ import annotations

from pathlib import Path

import typer

SET_HELP = "override a value: PATH=VALUE (e.g. trainer.steps=50, variables.hidden=256); repeatable"


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Check and render manifests.", no_args_is_help=True)
    app.add_typer(group, name="manifest")

    @group.command("validate")
    def validate(
        manifests: list[Path] = typer.Argument(..., help="manifest files"),
        set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    ) -> None:
        """Load, expand, schema-check, bind data and lower to IR; print one line per manifest."""
        from rich.console import Console

        from caramba.manifest.compile import check

        console = Console(highlight=False)
        for path in manifests:
            prep, low = check(path, set_)
            m = prep.manifest
            kind = "experiment" if m.is_experiment else "model"
            data = ""
            if prep.datasets:
                data = "; data " + ", ".join(
                    f"{k} ({', '.join(f'{s} {d.size(s)}' for s in d.splits)})" for k, d in prep.datasets.items()
                )
            runs = sum(len(t.runs) for t in m.targets) * (len(m.tuner.arms) if m.tuner else 1)
            console.print(
                f"[green]ok[/] {path}: {kind} '{m.name}': {len(m.topology.all_nodes)} nodes -> IR {len(low.graph.nodes)} "
                f"nodes, {len(low.params)} parameters ({low.param_count():,} values){data}"
                + (f"; {runs} run(s)" if m.is_experiment else "")
            )

    @group.command("render")
    def render(
        manifest: Path = typer.Argument(..., help="manifest file"),
        set_: list[str] = typer.Option([], "--set", help=SET_HELP),
        fmt: str = typer.Option("yaml", "--format", "-f", help="yaml or json"),
        ir: bool = typer.Option(False, "--ir", help="print the lowered IR graph instead"),
        batch: int = typer.Option(None, "--batch", help="batch size for --ir (default: the trainer's)"),
    ) -> None:
        """Print the manifest after variables, includes and repeats are expanded (or its IR)."""
        import json

        from caramba.errors import ConfigError
        from caramba.manifest.compile import prepare

        if fmt not in ("yaml", "json"):
            raise ConfigError(f"--format must be yaml or json, got {fmt!r}")
        prep = prepare(manifest, set_, load_data=ir)
        if ir:
            low = prep.lower(batch=batch)
            typer.echo(low.graph.as_text())
            typer.echo("\n" + low.summary())
        elif fmt == "json":
            typer.echo(json.dumps(prep.doc.data, indent=2))
        else:
            typer.echo(prep.doc.as_yaml(), nl=False)
