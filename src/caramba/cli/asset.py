"""``caramba asset list|show``: the operation, optimizer, block, model and manifest templates."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Browse the asset registry (ops, optimizers, blocks, models, templates).",
                        no_args_is_help=True)
    app.add_typer(group, name="asset")

    @group.command("list")
    def list_(
        kind: str = typer.Argument(None, help="operation, optimizer, block, model, manifest, architecture or runtime"),
        manifest: str = typer.Option(None, "--manifest", "-m", help="also the assets/ folder beside this manifest"),
    ) -> None:
        """List assets, optionally of one kind, and where each comes from: builtin, or the folder
        of the asset search path that holds it (setting assets, CARAMBA_ASSET_PATH, --manifest)."""
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        from caramba.manifest.registry import registry

        _beside(manifest)
        assets = registry().list(kind)
        table = Table(title=f"caramba assets{f' ({kind})' if kind else ''}: {len(assets)}")
        for col in ("id", "kind", "from", "inputs", "description"):
            table.add_column(col, overflow="fold")
        for a in assets:
            ins = ", ".join(p.name + ("?" if p.optional else "") for p in a.inputs) or "-"
            desc = a.description if len(a.description) <= 90 else a.description[:87] + "..."
            table.add_row(a.op, a.kind, escape(a.source), escape(ins), escape(desc))
        Console().print(table)

    @group.command("show")
    def show(
        op: str = typer.Argument(..., help="asset ID, e.g. projection.linear or model.gpt2_small"),
        source: bool = typer.Option(False, "--source", help="print the asset's YAML file"),
        manifest: str = typer.Option(None, "--manifest", "-m", help="also the assets/ folder beside this manifest"),
    ) -> None:
        """Show one asset: ports, typed config with defaults, and for blocks and models the
        parameter count of their example."""
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        from caramba.errors import ConfigError
        from caramba.manifest.registry import registry

        _beside(manifest)
        reg = registry()
        try:
            a = reg.get(op)
        except KeyError as exc:
            raise ConfigError(exc.args[0]) from None
        console = Console(highlight=False)
        if source:
            typer.echo(a.text, nl=False)
            return
        if a.kind == "runtime":  # a runtime program is its YAML file (docs/programs.md)
            typer.echo(a.text, nl=False)
            return
        if a.kind == "manifest":  # printed as YAML (the header as comments), so `> my.yml` gives a manifest
            import textwrap

            from caramba.manifest.registry import template_text

            typer.echo(f"# {a.op}: " + "\n# ".join(textwrap.wrap(a.description, 96)))
            typer.echo(template_text(a), nl=False)
            return
        console.print(f"[bold]{escape(a.op)}[/] ({a.kind}{', ' + escape(a.category) if a.category else ''})  "
                      f"{escape(a.file)}" + ("" if a.source == "builtin" else f"  (from {escape(a.source)})"))
        console.print(escape(a.description))
        if a.kind == "architecture":  # a Hugging Face class -> a model asset (docs/pretrained.md)
            console.print(f"Hugging Face classes: {escape(', '.join(a.spec['architectures']))}; model: {a.spec['model']}")
            console.print(f"config from config.json: {escape(', '.join(map(str, a.spec['variables'])))}")
            console.print(f"{len(a.spec['tensors'])} tensor bindings; ignored: {escape(', '.join(map(str, a.spec.get('ignore') or [])) or '-')}")
            return
        if a.ir:
            console.print(f"lowers to IR op [cyan]{a.ir}[/]")
        if a.params:
            console.print(f"parameters: {', '.join(a.params)}")
        for side, ports in (("inputs", a.inputs), ("outputs", a.outputs)):
            if ports:
                console.print(f"{side}: " + escape("; ".join(
                    f"{p.name}{' (optional)' if p.optional else ''}{': ' + p.description if p.description else ''}" for p in ports)))
        if a.config:
            t = Table(title="config")
            for col in ("name", "type", "default", "description"):
                t.add_column(col, overflow="fold")
            for c in a.config:
                default = "[red]required[/]" if c.required else repr(c.default)
                desc = c.description + (f" (one of {', '.join(map(str, c.choices))})" if c.choices else "") \
                    + (f" (in {c.range})" if c.range else "")
                t.add_row(c.name, c.type, default, escape(desc))
            console.print(t)
        if a.kind in ("block", "model") and a.example:
            from caramba.manifest.lower import lower_example

            low = lower_example(a, reg)
            console.print(escape(f"example {a.example.get('config') or {}} on "
                                 + ", ".join(f"{k} {v}" for k, v in low.inputs.items()) + ":"))
            console.print(escape("  " + low.summary().replace("\n", "\n  ")))


def _beside(manifest: str | None) -> None:
    """Put the ``assets/`` folder beside ``manifest`` on the search path of this command."""
    from pathlib import Path

    from caramba.errors import ConfigError
    from caramba.manifest.registry import set_manifest_assets

    if manifest is None:
        return
    p = Path(manifest)
    if not p.is_file():
        raise ConfigError(f"manifest {manifest} does not exist")
    folder = p.parent / "assets"
    set_manifest_assets([str(folder)] if folder.is_dir() else [])
