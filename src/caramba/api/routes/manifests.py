"""Validate a manifest, and compile (and explain) a manifest or an IR graph for a backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request

from caramba.api.auth import AUTH
from caramba.api.schemas import (
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


def store_root(request: Request) -> Path:
    return request.app.state.caramba.store_root


def summary(prep: Any, low: Any | None = None) -> dict[str, Any]:
    m = prep.manifest
    out = {
        "name": m.name,
        "description": m.description,
        "experiment": m.is_experiment,
        "nodes": len(m.topology.nodes),
        "datasets": sorted(m.datasets),
        "steps": m.trainer.steps if m.trainer else None,
        "targets": [{"name": t.name, "backend": t.backend, "runs": [r.id for r in t.runs]} for t in m.targets],
        "arms": [a.id for a in m.tuner.arms] if m.tuner else [],
        "dims": dict(prep.dims),
    }
    if low is not None:
        out.update(graph_nodes=len(low.graph.nodes), params=low.param_count())
    return out


@router.post("/manifests/validate", response_model=ValidationOut, responses=ERRORS | WRITE_ERRORS, dependencies=[AUTH])
def validate_manifest(body: ManifestIn, request: Request) -> ValidationOut:
    """Everything ``caramba manifest validate`` checks: YAML, schema, references, data binding,
    and lowering to IR. A bad manifest is answered 422 with the file, line, column and dotted
    path of the problem."""
    from caramba.manifest.compile import check

    with staged(store_root(request), body.manifest, body.name) as path:
        prep, low = check(path, body.overrides)
        return ValidationOut(name=body.name, summary=summary(prep, low), rendered=prep.doc.as_yaml())


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
    from caramba.manifest.compile import check

    with staged(store_root(request), body.manifest, body.name) as path:
        prep, _ = check(path)
        return model_graph(prep, body.dims)


def model_graph(prep: Any, dims: dict[str, int] | None = None) -> Any:
    """The model as an inference graph (no training behaviour), with ``dims`` bound."""
    from caramba.manifest.lower import lower_topology

    bound = {**prep.dims, **(dims or {})}
    return lower_topology(prep.manifest.topology, prep.doc, dims=bound, name=prep.manifest.name).graph


def explain(graph: Any, backend: str, disable: list[str] = (), with_svg: bool = True) -> dict[str, Any]:
    """Run the pipeline for ``backend`` on ``graph``: the stages and the graph before and after."""
    from caramba.compiler import compile_graph
    from caramba.compute import new

    with new(backend) as runner:
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
    from caramba.manifest.compile import prepare

    prep = prepare(path, list(overrides), load_data=dims is None)
    return explain(model_graph(prep, dims), backend)


@router.post("/compile", response_model=CompileOut, responses=ERRORS | WRITE_ERRORS, dependencies=[AUTH])
def compile_(body: CompileIn, request: Request) -> dict[str, Any]:
    """Run the compiler pipeline for a backend and explain it: each pass (changed or not, its
    diagnostics, node counts, time) and the graph before and after, as text and SVG."""
    return explain(_graph_of(body, request), body.backend, body.disable, body.svg)
