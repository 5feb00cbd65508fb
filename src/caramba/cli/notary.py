"""``caramba notary``: read the Notary's ledger — verify it end to end, list entries, audit one.

The ledger lives at ``<store>/cluster/notary`` (where ``research run --cluster`` and ``caramba
serve`` keep it). Every command opens it through the Notary actor on a local actor system, so
artifact hashes are re-checked against the same Storage the runs wrote to; nothing is written.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import typer

from caramba.cli.research import CONFIG_HELP

STORE_HELP = "run store directory (default: settings.store); the ledger is <store>/cluster/notary"


@contextmanager
def _notary(config: str | None, store: str | None):
    """Ask the Notary of ``<store>/cluster``: yields ``ask(message)``."""
    from caramba.actors.services import start_services
    from caramba.actors.system import ActorSystem
    from caramba.config import load_settings
    from caramba.errors import ConfigError

    root = Path(load_settings(config, overrides={"store": store}).store) / "cluster"
    if not (root / "notary" / "ledger.sqlite").exists():
        raise ConfigError(f"no ledger at {root / 'notary' / 'ledger.sqlite'}",
                          hint="runs record to the Notary with `caramba research run M.yml --cluster local|ray` or through `caramba serve`")
    system = ActorSystem("local")
    try:
        services = start_services(system, root)
        yield lambda msg: system.lookup(services.notary).ask(msg)
    finally:
        system.shutdown()


def register(app: typer.Typer) -> None:
    notary = typer.Typer(help="Read the Notary's ledger: verify it, list entries, audit one.", no_args_is_help=True)
    app.add_typer(notary, name="notary")

    @notary.command("verify")
    def verify(
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """Check the whole ledger: hash chain, signatures, keys, dependencies and artifact bytes.
        Exits 1 and prints each problem when anything was changed."""
        from caramba.actors.notary import VerifyLedger

        with _notary(config, store) as ask:
            report = ask(VerifyLedger())
        if report.ok:
            typer.echo(f"ledger OK: {report.entries} entries, head {report.head[:12]}")
            return
        typer.echo(f"ledger INVALID: {len(report.problems)} problem(s) in {report.entries} entries")
        for p in report.problems:
            typer.echo(f"  {p}")
        raise typer.Exit(1)

    @notary.command("log")
    def log(
        subject: str = typer.Option(None, "--subject", help="only entries about this subject (a run ID)"),
        kind: str = typer.Option(None, "--kind", help="intent | event | claim | artifact"),
        limit: int = typer.Option(50, "--limit", help="show the last N entries"),
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """List ledger entries, oldest first (sequence, hash, kind, actor, subject, name)."""
        from caramba.actors.notary import Query

        with _notary(config, store) as ask:
            entries = ask(Query(subject=subject, kind=kind)).entries
        for e in entries[-limit:] if limit > 0 else entries:
            typer.echo(f"#{e.seq:<5} {e.hash[:12]}  {e.kind:<8} {e.actor:<24} {e.subject or '-':<24} {e.name}")

    @notary.command("audit")
    def audit(
        entry: str = typer.Argument(..., help="entry hash, a unique prefix of >= 8 hex digits, or #seq"),
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """Validity of one entry with the reason chain, and every check made on its dependencies."""
        from caramba.actors.notary import AuditOf

        with _notary(config, store) as ask:
            report = ask(AuditOf(entry=entry))
        typer.echo(report.as_text())
        if not report.validity.valid:
            raise typer.Exit(1)

