"""``caramba config show``: every setting, its value and where the value came from."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Settings: defaults < config file < CARAMBA_* environment < flags.", no_args_is_help=True)
    app.add_typer(group, name="config")

    @group.command("show")
    def show(
        config: str = typer.Option(None, "--config", help="config file (default: ./caramba.yml, then ~/.caramba/config.yml)"),
        json_: bool = typer.Option(False, "--json", help="print JSON"),
    ) -> None:
        """Print the resolved settings and the source of each (default, file, environment, flag)."""
        import json

        from rich.console import Console
        from rich.table import Table

        from caramba.config import config_file, load_settings

        s = load_settings(config)
        names = [k for k in s.__dataclass_fields__ if k != "sources"]
        secret = {"api_token"}
        values = {k: ("***" if k in secret and getattr(s, k) else getattr(s, k)) for k in names}
        if json_:
            typer.echo(json.dumps({k: {"value": values[k], "source": s.sources[k]} for k in names}, indent=2))
            return
        f = config_file(config)
        table = Table(title=f"caramba settings (config file: {f if f else 'none'})")
        for col in ("setting", "value", "source", "environment variable"):
            table.add_column(col, overflow="fold")
        for k in names:
            table.add_row(k, str(values[k]), s.sources[k], f"CARAMBA_{k.upper()}")
        Console().print(table)
