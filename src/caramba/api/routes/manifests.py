"""Validate a manifest, and compile (and explain) a manifest or an IR graph for a backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request

from caramba.api.auth import AUTH
from caramba.api.schemas import (
    BUSY,
    ERRORS,
    WRITE_ERRORS,
    CompileIn,
    CompileOut,
    GraphOut,
    ManifestIn,
    StageOut,
    ValidationOut,
)
from caramba.api.staging import staged
from caramba.errors import ConfigError

router = APIRouter(tags=["manifests"])


def _check(request: Request, job: str, text: str, name: str, args: dict[str, Any]) -> Any:
    """Stage ``text`` as ``name`` and run ``job`` on it in the sandbox (time and memory bounded,
    data read only under the submission's data roots)."""
    from caramba.api.sandbox import submission_roots

    state = request.app.state.caramba
    with staged(state.store_root, text, name) as path:
        roots = submission_roots(path.parent, state.settings)
        return state.sandbox.run(job, {"path": str(path), **args}, roots=roots, folder=path.parent)


@router.post("/manifests/validate", response_model=ValidationOut, responses=ERRORS | WRITE_ERRORS | BUSY,
             dependencies=[AUTH])
def validate_manifest(body: ManifestIn, request: Request) -> ValidationOut:
    """Everything ``caramba manifest validate`` checks: YAML, schema, references, data binding,
    and lowering to IR. A bad manifest is answered 422 with the file, line, column and dotted
    path of the problem; so is one that takes more time or memory to check than the server
    allows."""
    out = _check(request, "validate", body.manifest, body.name, {"name": body.name, "overrides": body.overrides})
    return ValidationOut(**out)


def _graph_out(graph: Any, with_svg: bool) -> GraphOut:
    from caramba.api.graphsvg import to_svg

    return GraphOut(
        name=graph.name,
        nodes=len(graph.nodes),
        text=graph.as_text(),
        svg=to_svg(graph) if with_svg else None,
    )


def _graph_of(body: CompileIn, request: Request) -> Any:
    if (body.manifest is None) == (body.graph is None):
        raise ConfigError("give exactly one of 'manifest' (YAML text) or 'graph' (caramba.ir JSON)")
    if body.graph is not None:
        from caramba.ir import from_dict, verify

        try:
            graph = from_dict(body.graph)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            from caramba.errors import CodecError

            raise CodecError(f"not a caramba.ir graph: {type(exc).__name__}: {exc}") from None
        verify(graph)
        return graph
    from caramba.ir import from_dict

    return from_dict(_check(request, "graph", body.manifest, body.name, {"dims": body.dims}))


def explain(graph: Any, backend: str, disable: list[str] = (), with_svg: bool = True) -> dict[str, Any]:
    """Run the pipeline for ``backend`` on ``graph``: the stages and the graph before and after."""
    from contextlib import ExitStack
    from ctypes import ArgumentError

    from caramba.compiler import compile_graph
    from caramba.compute import new

    with ExitStack() as stack:
        try:
            runner = stack.enter_context(new(backend))
        except (ArithmeticError, ArgumentError, TypeError, ValueError) as exc:  # an option a library refused
            raise ConfigError(f"backend {backend!r} could not be set up with these options ({type(exc).__name__})",
                              hint="GET /api/v1/backends/{name} lists each option with its kind") from None
        after, report = compile_graph(graph, runner, disable=list(disable))
    stages = [
        StageOut(
            name=s.name,
            changed=s.changed,
            skipped=s.skipped,
            diagnostics=list(s.diagnostics),
            nodes_before=s.nodes_before,
            nodes_after=s.nodes_after,
            ms=round(s.seconds * 1e3, 3),
        )
        for s in report.stages
    ]
    return CompileOut(
        backend=report.backend,
        stages=stages,
        report=report.as_text(),
        before=_graph_out(graph, with_svg),
        after=_graph_out(after, with_svg),
    ).model_dump()


def explain_recorded(path: Path, dims: dict[str, int] | None, backend: str, overrides: list[str] = ()) -> dict[str, Any]:
    """Explain the graph of a run's manifest: the expanded one it recorded (with the run's
    dims), or the file it ran (with its overrides, data bound to get the dims)."""
    from caramba.api.sandbox import model_graph
    from caramba.manifest.compile import prepare

    prep = prepare(path, list(overrides), load_data=dims is None)
    return explain(model_graph(prep, dims), backend)


@router.post("/compile", response_model=CompileOut, responses=ERRORS | WRITE_ERRORS | BUSY, dependencies=[AUTH])
def compile_(body: CompileIn, request: Request) -> dict[str, Any]:
    """Run the compiler pipeline for a backend and explain it: each pass (changed or not, its
    diagnostics, node counts, time) and the graph before and after, as text and SVG."""
    return explain(_graph_of(body, request), body.backend, body.disable, body.svg)
