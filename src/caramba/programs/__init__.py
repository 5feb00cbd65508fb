"""caramba.programs: runtime programs (chat, diffusion) as manifests of steps, and their interpreter.

    from caramba.programs import load_program, run_program
    prog = load_program("chat", overrides={"variables.model": "path/to/hf-folder"})
    run_program(prog, backend="cpu", seed=0)         # reads stdin, streams the replies to stdout

A program declares ``state`` (token buffers, KV caches, counters, token streams), ``samplers``,
``graphs`` (a language model or a denoiser, by run ID, Hugging Face folder or manifest) and a
``program`` of steps from the table in ``caramba.programs.steps``; ``load_program`` validates it
(a ManifestError with the line of every problem) and ``run_program`` interprets it with tensors
resident on the runner. Shipped programs are the ``runtime`` assets (``caramba asset list
runtime``); ``caramba program run|validate`` is the command line. docs/programs.md has the table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from caramba.programs.graphs import ProgramError
from caramba.programs.spec import Program, validate_program


def program_source(name: str | Path) -> tuple[str, str, Path]:
    """(text, display name, include root) of a program: a YAML file, or a runtime asset's ID
    (``chat`` or ``runtime.chat``)."""
    from caramba.errors import ConfigError
    from caramba.manifest.registry import asset_root, registry

    p = Path(name)
    if p.suffix in (".yml", ".yaml") or "/" in str(name) or "\\" in str(name):
        if not p.is_file():
            raise ConfigError(f"program {name} does not exist")
        return p.read_text(encoding="utf-8"), str(name), p.parent
    op = str(name) if str(name).startswith("runtime.") else f"runtime.{name}"
    try:
        asset = registry().get(op, ("runtime",))
    except KeyError as exc:
        raise ConfigError(f"{exc.args[0]} (a program is a runtime asset's name or a .yml file)") from None
    root = getattr(asset, "root", None) or asset_root()  # a user asset folder, or the packaged one
    return asset.text, asset.file, Path(root) / "runtime"


def load_program(name: str | Path, overrides: Mapping[str, Any] | Iterable[str] | None = None) -> Program:
    """Load and validate a program (a file or a runtime asset); ``overrides`` as ``--set`` takes
    them (``{"variables.model": "..."}`` or ``["samplers.main.temperature=0"]``)."""
    from caramba.manifest.loader import load_string

    text, source, root = program_source(name)
    return validate_program(load_string(text, source, root=root, overrides=overrides))


def run_program(program: Program, *, backend: str = "cpu", seed: int = 0, input: IO[str] | None = None,
                output: IO[str] | None = None, store: str | None = None, config: str | None = None,
                max_steps: int | None = None, base_dir: str | Path | None = None) -> Any:
    """Run a validated program to its end; returns a ``Result`` (steps run, telemetry, variables)."""
    from caramba.programs.runtime import Machine

    return Machine(program, backend=backend, seed=seed, input=input, output=output, store=store, config=config,
                   max_steps=max_steps, base_dir=base_dir).run()


__all__ = ["Program", "ProgramError", "load_program", "program_source", "run_program", "validate_program"]
