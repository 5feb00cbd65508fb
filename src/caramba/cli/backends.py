"""``caramba backends``: every backend with availability, location and build info;
``--tune`` measures and stores the cpu backend's settings for this machine."""

from __future__ import annotations

import typer

TUNE_BUDGET_S = 30.0
MAX_TUNE_BUDGET_S = 55.0  # a tuning run stays under a minute


def _tune(console, budget: float) -> None:
    from rich.markup import escape
    from rich.table import Table

    from caramba.backends.cpu import tuning

    console.print(f"measuring this machine for the cpu backend (about {budget:.0f} s) ...")
    tuning.reset()
    result = tuning.tune(budget, log=lambda m: console.print(f"  {escape(m)}"))
    where = tuning.save(result)
    base = tuning.defaults().as_dict()
    table = Table(title=f"cpu tuning for this machine ({result['fingerprint']})")
    for col in ("setting", "default", "tuned"):
        table.add_column(col)
    for k, v in result["settings"].items():
        table.add_row(k, tuning._fmt(base[k]), tuning._fmt(v))
    console.print(table)
    for note in result["notes"]:
        console.print(f"  note: {escape(note)}")
    console.print(f"stored in {escape(str(where))} ({result['measurements']['seconds']:.1f} s); "
                  "the cpu backend uses it from its next runner on")


def register(app: typer.Typer) -> None:
    @app.command("backends")
    def backends(
        verbose: bool = typer.Option(False, "--verbose", "-v", help="show every version and detail"),
        tune: bool = typer.Option(False, "--tune", help="measure this machine's cpu backend settings and store them"),
        budget: float = typer.Option(TUNE_BUDGET_S, "--budget", help=f"seconds --tune may take (at most {MAX_TUNE_BUDGET_S:.0f})"),
    ) -> None:
        """List backends: available or not (and why), location, toolkit versions."""
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        from caramba.compute import BACKENDS, build_info
        from caramba.errors import ConfigError

        console = Console(highlight=False)
        if tune:
            if not 0 < budget <= MAX_TUNE_BUDGET_S:
                raise ConfigError(f"--budget {budget:g}: expected seconds in (0, {MAX_TUNE_BUDGET_S:g}]")
            _tune(console, budget)
            return
        table = Table(title="caramba backends")
        for col in ("backend", "available", "location", "build info"):
            table.add_column(col)
        for name in BACKENDS:
            info = build_info(name)
            parts = [f"{k} {v}" for k, v in info.versions.items()]
            if verbose:
                parts += [f"{k}: {v}" for k, v in info.details.items()]
                if name == "cpu" and info.available:
                    parts += _cpu_extra()
            if not info.available:
                parts.insert(0, f"[red]{escape(info.reason)}[/]")
                if info.install_hint:
                    parts.append(info.install_hint)
            table.add_row(
                name,
                "[green]yes[/]" if info.available else "[red]no[/]",
                info.location or "-",
                "\n".join(escape(p) if not p.startswith("[red]") else p for p in parts) or "-",
            )
        console.print(table)


def _cpu_extra() -> list[str]:
    """The cpu backend's tuning and compile cache (verbose only: reading them costs a little)."""
    from caramba.backends.cpu import tuning
    from caramba.backends.cpu.jitcache import numba_cache_dir

    line = f"tuning: {tuning.describe(fresh=True)}"
    out = [line]
    if "not usable" in line:
        out.append(f"tuning warning: {tuning.path()} is damaged; `caramba backends --tune` rewrites it")
    out.append(f"machine fingerprint: {tuning.fingerprint()} ({tuning.path()})")
    out.append(f"numba cache: {numba_cache_dir()}")
    return out
