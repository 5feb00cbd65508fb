"""The ``caramba`` command. Each command group lives in its own module here and registers
itself on ``app``; modules must import heavy things inside their command functions only."""

from __future__ import annotations

import importlib
import sys

import typer

from caramba.errors import CarambaError

app = typer.Typer(
    name="caramba",
    help="Write a model and an experiment once as a YAML manifest; run it on any backend.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



def _print_version(value: bool) -> None:
    if value:
        from caramba import __version__

        typer.echo(f"caramba {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="print caramba's version and exit"),
) -> None:
    """caramba: manifests in, verified graphs out, on any backend."""


# One line per command module (each defines `register(app)`).
COMMAND_MODULES = (
    "caramba.cli.backends",
    "caramba.cli.bench",
    "caramba.cli.serve",
    "caramba.cli.manifest",
    "caramba.cli.asset",
    "caramba.cli.config",
    "caramba.cli.compile",
    "caramba.cli.research",
    "caramba.cli.notary",
    "caramba.cli.model",
    "caramba.cli.generate",
    "caramba.cli.image",
    "caramba.cli.program",
    "caramba.cli.export",
    "caramba.cli.store",
    "caramba.cli.search",
    "caramba.cli.data",
)

for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:
    try:
        app()
    except CarambaError as exc:
        # Errors that teach: print the message (it names what and where), no traceback.
        from rich.console import Console
        from rich.markup import escape

        # escaped: a message's own brackets (pip install 'caramba[webgpu]', [node 'x']) are text, not markup
        Console(stderr=True).print(f"[bold red]error:[/] {type(exc).__name__}: {escape(str(exc))}", markup=True,
                                   highlight=False)
        sys.exit(2)
