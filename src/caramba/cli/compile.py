"""``caramba compile GRAPH_OR_MANIFEST --backend NAME --explain``: run the compiler pipeline and
say what each pass did, what was fused, and the memory plan (peak bytes before/after)."""

from __future__ import annotations

from pathlib import Path

import typer


def load_graph(path: Path, overrides: list[str], batch: int | None):
    """An IR graph from a codec JSON file, or lowered from a manifest (YAML)."""
    from caramba import ir
    from caramba.errors import ConfigError

    if not path.exists():
        raise ConfigError(f"{path} does not exist")
    if path.suffix == ".json":
        if overrides or batch is not None:
            raise ConfigError("--set and --batch apply to manifests, not to IR graph files")
        return ir.loads(path.read_text())
    if path.suffix not in (".yml", ".yaml"):
        raise ConfigError(f"{path}: expected an IR graph (.json) or a manifest (.yml/.yaml)")
    from caramba.manifest.compile import prepare

    return prepare(path, overrides, load_data=True).lower(batch=batch).graph


def fused_lines(graph) -> list[str]:
    """One readable line per fused node: its program, what it replaced."""
    from caramba.ops.fused import decode_expr

    out = []
    for n in graph.nodes:
        if not n.op.startswith("fused."):
            continue
        if "expr" in n.attrs:
            body = decode_expr(n.attrs["expr"]).as_text()
        else:
            body = ", ".join(f"{k}={v}" for k, v in n.attrs.items())
        src = f"  [{n.origin.note}]" if n.origin is not None and n.origin.note else ""
        out.append(f"  %{n.id} = {n.op}: {body}{src}")
    return out


def register(app: typer.Typer) -> None:
    @app.command("compile")
    def compile_(
        source: Path = typer.Argument(..., help="IR graph (.json, the caramba.ir codec) or manifest (.yml)"),
        backend: str = typer.Option(None, "--backend", "-b", help="backend spec (default: CARAMBA_BACKEND or config)"),
        explain: bool = typer.Option(False, "--explain", help="print every pass, what it changed, fusions, memory plan"),
        disable: list[str] = typer.Option([], "--disable", "-d", help="skip an optional pass by name; repeatable"),
        target: list[str] = typer.Option([], "--target", "-t", help="compile only these outputs; repeatable"),
        set_: list[str] = typer.Option([], "--set", help="manifest override PATH=VALUE; repeatable"),
        batch: int = typer.Option(None, "--batch", help="batch size when lowering a manifest"),
        print_ir: bool = typer.Option(False, "--print-ir", help="print the graph after the pipeline"),
        memory: bool = typer.Option(False, "--memory", help="print every placed buffer of the memory plan"),
        output: Path = typer.Option(None, "--output", "-o", help="write the compiled graph as IR JSON"),
    ) -> None:
        """Compile a graph for a backend (nothing runs); fails like the backend would, naming nodes."""
        from caramba import ir
        from caramba.compiler import compile_graph
        from caramba.compute import new
        from caramba.compute.registry import default_spec

        graph = load_graph(source, set_, batch)
        spec = backend or default_spec()
        with new(spec) as runner:
            after, report = compile_graph(graph, runner, targets=target or None, disable=disable)
        if explain:
            typer.echo(report.as_text())
            fused = fused_lines(after)
            if fused:
                typer.echo("fused nodes:")
                typer.echo("\n".join(fused))
        plan = report.memory
        if memory and plan is not None:
            typer.echo(plan.as_text())
        if print_ir:
            typer.echo(after.as_text())
        if output is not None:
            output.write_text(ir.dumps(after, indent=1))
        mem = f"; {plan.summary()}" if plan is not None else ""
        typer.echo(f"compiled '{graph.name}' for {report.backend}: {len(graph.nodes)} -> {len(after.nodes)} nodes{mem}")
