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


_FREEZE_AT_EXIT: list[bool] = []


def _freeze_heap_at_exit() -> None:
    """At exit, before the interpreter's teardown, move every object out of the cyclic GC's
    reach (``gc.freeze``). Teardown runs full collections over whatever is left, and after
    Numba has compiled that is a large heap of type and IR objects: ~1 s of a 4 s Quickstart
    run here. Nothing the CLI leaves needs a collection to finish its work (stores and files
    are closed by then, and teardown still frees by reference counts); registered first, so
    it runs after every other exit handler."""
    if not _FREEZE_AT_EXIT:
        import atexit
        import gc

        atexit.register(gc.freeze)
        _FREEZE_AT_EXIT.append(True)


def main() -> None:
    _freeze_heap_at_exit()
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
