"""``caramba notary``: read the Notary's ledger — verify it end to end, export its signed tree
head, list entries, audit one.

The ledger lives at ``<store>/cluster/notary`` (``caramba.run.ledger_root``: local and cluster
runs of a store record to it); a ledger at ``<store>/notary`` is read too. Every
command opens it through the Notary actor on a local actor system, so artifact hashes are
re-checked against the same Storage the runs wrote to; nothing is written.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import typer

from caramba.cli.research import CONFIG_HELP

STORE_HELP = "run store folder or URL (file://, s3://bucket/prefix; default: settings.store); the ledger is <store>/cluster/notary"
AGAINST_HELP = "a tree head kept earlier (a file written by `caramba notary head --out`, or its JSON): fail if the ledger no longer extends it"


def _root(config: str | None, store: str | None) -> Path:
    """The services root whose ``notary/ledger.sqlite`` is the store's ledger."""
    from caramba.actors.notary import NO_LEDGER_HINT
    from caramba.config import load_settings
    from caramba.errors import ConfigError
    from caramba.store.registry import local_root, remote_of

    base = local_root(load_settings(config, overrides={"store": store}).store)  # an s3:// store: its replica folder
    remote = remote_of(base)
    if remote is not None:  # the ledger is in the bucket; reading it never starts a new one
        from caramba.actors.ledger_s3 import ledger_exists

        if not ledger_exists(remote):
            raise ConfigError(f"no ledger in {remote.split('?')[0]}ledger/", hint=NO_LEDGER_HINT)
        return base / "cluster"
    for root in (base / "cluster", base):
        if (root / "notary" / "ledger.sqlite").exists():
            return root
    raise ConfigError(f"no ledger at {base / 'cluster' / 'notary' / 'ledger.sqlite'}", hint=NO_LEDGER_HINT)


@contextmanager
def _notary(config: str | None, store: str | None):
    """Ask the Notary of the store: yields ``ask(message)``."""
    from caramba.actors.services import start_services
    from caramba.actors.system import ActorSystem

    root = _root(config, store)
    system = ActorSystem("local")
    try:
        services = start_services(system, root)
        yield lambda msg: system.lookup(services.notary).ask(msg)
    finally:
        system.shutdown()


def register(app: typer.Typer) -> None:
    notary = typer.Typer(help="Read the Notary's ledger: verify it, export its tree head, list entries, audit one.",
                         no_args_is_help=True)
    app.add_typer(notary, name="notary")

    @notary.command("verify")
    def verify(
        against: str = typer.Option(None, "--against", metavar="HEAD", help=AGAINST_HELP),
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """Check the whole ledger end to end; exit 1 naming each problem.

        The database file, hash chain, receipts, signatures, bound keys, dependencies and artifact
        bytes; with --against, also that no entry the kept head covers was removed or rewritten.
        Each problem names the row, the kept head or the file."""
        from caramba.actors.ledger import TreeHead
        from caramba.actors.notary import verify_ledger

        head = TreeHead.load(against) if against else None
        report = verify_ledger(_root(config, store), against=head)
        typer.echo(report.as_text())
        if not report.ok:
            raise typer.Exit(1)

    @notary.command("head")
    def head(
        out: Path = typer.Option(None, "--out", help="also write the head's JSON to this file (keep it elsewhere)"),
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """Print the ledger's signed tree head as JSON (--out FILE: also write it).

        The head is the Merkle root over the entries, their number and the Notary's signature.
        Keep it somewhere the ledger's writers cannot reach; later, `caramba notary verify
        --against FILE` proves the ledger still extends it."""
        from caramba.actors.notary import TreeHeadOf

        with _notary(config, store) as ask:
            text = ask(TreeHeadOf()).model_dump_json(indent=2)
        if out is not None:
            out.write_text(text + "\n")
        typer.echo(text)

    @notary.command("log")
    def log(
        subject: str = typer.Option(None, "--subject", help="only entries about this subject (a run ID)"),
        kind: str = typer.Option(None, "--kind", help="intent | event | claim | artifact"),
        limit: int = typer.Option(50, "--limit", help="show the last N entries"),
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """List ledger entries, oldest first (sequence, hash, kind, actor, subject, name).

        Rows that cannot be read are named at the end."""
        from caramba.actors.notary import Query

        with _notary(config, store) as ask:
            found = ask(Query(subject=subject, kind=kind))
        for e in found.entries[-limit:] if limit > 0 else found.entries:
            typer.echo(f"#{e.seq:<5} {e.hash[:12]}  {e.kind:<8} {e.actor:<24} {e.subject or '-':<24} {e.name}")
        for r in found.malformed:
            typer.echo(f"malformed {r}")

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
        if report.validity.verdict == "UNKNOWN" and any(r.seq < 0 for r in report.validity.reasons):
            from caramba.errors import ConfigError

            raise ConfigError(f"no entry '{entry}' in the ledger",
                              hint="give an entry hash, a unique prefix of >= 8 hex digits, or #seq "
                                   "(`caramba notary log` lists them)")
        typer.echo(report.as_text())
        if not report.validity.valid:
            raise typer.Exit(1)
