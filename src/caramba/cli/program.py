"""``caramba program run|validate PROGRAM``: runtime programs (chat, diffusion) from the
``runtime`` assets or a YAML file (docs/programs.md)."""

from __future__ import annotations

import sys

import typer

PROGRAM_HELP = "a runtime asset (chat, diffusion; `caramba asset list runtime`) or a program .yml file"


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Runtime programs: state, samplers, graphs and a program of steps.",
                        no_args_is_help=True)
    app.add_typer(group, name="program")

    def load(program: str, model: str | None, sets: list[str] | None) -> object:
        from caramba.errors import ConfigError
        from caramba.manifest.loader import parse_override
        from caramba.programs import load_program

        overrides: dict[str, object] = dict(parse_override(s) for s in sets or [])
        if model is not None:  # the program's `model` variable, or its one graph without a model
            prog = load_program(program, overrides)
            if "model" in prog.doc.variables:
                overrides["variables.model"] = model  # kept a string (a run ID like 1e5 is not a number)
            else:
                missing = [n for n, g in prog.graphs.items() if g.config.get("model") is None]
                if len(missing) != 1:
                    raise ConfigError(f"--model: {program} has no `model` variable and {len(missing)} graphs "
                                      "without a model", hint="set one with --set graphs.NAME.model=...")
                overrides[f"graphs.{missing[0]}.model"] = model
        return load_program(program, overrides)

    @group.command("run")
    def run(
        program: str = typer.Argument(..., help=PROGRAM_HELP),
        model: str = typer.Option(None, "--model", "-m", help="the model: a run ID (prefix, latest), a Hugging Face "
                                  "folder, or a manifest with a from_safetensors topology"),
        sets: list[str] = typer.Option(None, "--set", help="override a value: variables.temperature=0, "
                                       "samplers.main.top_k=40, ... (repeatable)"),
        backend: str = typer.Option("cpu", "--backend", help="backend spec (cpu, xla, ...)"),
        seed: int = typer.Option(0, "--seed", help="seed of sampling and noise"),
        max_steps: int = typer.Option(None, "--max-steps", help="stop after this many executed steps "
                                      "(default: the program's max_steps)"),
        store: str = typer.Option(None, "--store", help="run store folder (default: the `store` setting)"),
        config: str = typer.Option(None, "--config", help="config file (default: ./caramba.yml, then "
                                   "~/.caramba/config.yml)"),
    ) -> None:
        """Run a program: reads stdin where it reads lines, writes its text to stdout. Ctrl-C
        stops it cleanly (exit code 130)."""
        from caramba.programs import run_program

        prog = load(program, model, sets)
        try:
            run_program(prog, backend=backend, seed=seed, store=store, config=config, max_steps=max_steps)
        except KeyboardInterrupt:
            sys.stdout.write("\n")
            sys.stdout.flush()
            raise typer.Exit(130) from None

    @group.command("validate")
    def validate(
        program: str = typer.Argument(..., help=PROGRAM_HELP),
        sets: list[str] = typer.Option(None, "--set", help="override a value before validating (repeatable)"),
    ) -> None:
        """Check a program without running it: sections, step ops, ports, config, references and
        the order variables are assigned in; every problem is reported with its line."""
        prog = load(program, None, sets)
        steps = prog.walk()
        typer.echo(f"{prog.name}: valid ({len(steps)} steps; state: {', '.join(prog.state) or '-'}; samplers: "
                   f"{', '.join(prog.samplers) or '-'}; graphs: {', '.join(prog.graphs) or '-'})")
