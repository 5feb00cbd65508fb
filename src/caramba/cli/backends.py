"""``caramba backends``: every backend with availability, location and build info."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("backends")
    def backends(
        verbose: bool = typer.Option(False, "--verbose", "-v", help="show every version and detail"),
    ) -> None:
        """List backends: available or not (and why), location, toolkit versions."""
        from rich.console import Console
        from rich.table import Table

        from caramba.compute import BACKENDS, build_info

        table = Table(title="caramba backends")
        for col in ("backend", "available", "location", "build info"):
            table.add_column(col)
        for name in BACKENDS:
            info = build_info(name)
            parts = [f"{k} {v}" for k, v in info.versions.items()]
            if verbose:
                parts += [f"{k}: {v}" for k, v in info.details.items()]
            if not info.available:
                parts.insert(0, f"[red]{info.reason}[/]")
                if info.install_hint:
                    parts.append(info.install_hint)
            table.add_row(
                name,
                "[green]yes[/]" if info.available else "[red]no[/]",
                info.location or "-",
                "\n".join(parts) or "-",
            )
        Console().print(table)
