"""Validate a manifest, and compile (and explain) a manifest or an IR graph for a backend."""

from __future__ import annotations

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
from caramba.errors import ConfigError

router = APIRouter(tags=["manifests"])


def includes_root(request: Request) -> Any:
    """Where ``!include`` in a submitted manifest looks: ``<store>/includes`` and nowhere else,
    so a manifest sent over HTTP cannot read files elsewhere on the server."""
    return request.app.state.caramba.store_root / "includes"


def load_manifest(request: Request, text: str, name: str, overrides: list[str] = ()) -> tuple[Any, Any]:
    """Load and validate manifest text with the manifest package; returns (document, manifest)."""
    from caramba.manifest import load_string
    from caramba.manifest.schema import validate

    doc = load_string(text, name, root=includes_root(request), overrides=list(overrides))
    return doc, validate(doc)


def summary(manifest: Any) -> dict[str, Any]:
    return {
        "name": manifest.name,
        "description": manifest.description,
        "experiment": manifest.is_experiment,
        "nodes": len(manifest.topology.nodes),
        "datasets": sorted(manifest.datasets),
        "steps": manifest.trainer.steps if manifest.trainer else None,
        "targets": [
            {"name": t.name, "backend": t.backend, "runs": [r.id for r in t.runs]} for t in manifest.targets
        ],
    }


@router.post("/manifests/validate", response_model=ValidationOut, responses=ERRORS | WRITE_ERRORS, dependencies=[AUTH])
def validate_manifest(body: ManifestIn, request: Request) -> ValidationOut:
    """Load, expand and check a manifest. A bad one is answered 422 with the file, line, column
    and dotted path of the problem."""
    doc, manifest = load_manifest(request, body.manifest, body.name, body.overrides)
    return ValidationOut(name=body.name, summary=summary(manifest), rendered=doc.as_yaml())


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
    from caramba.manifest.lower import lower_topology

    doc, manifest = load_manifest(request, body.manifest, body.name)
    dims = dict(manifest.topology.dims)
    if manifest.trainer is not None:  # the trainer binds the batch dimension when it runs
        dims.setdefault("batch", manifest.trainer.batch_size)
    dims.update(body.dims)
    return lower_topology(manifest.topology, doc, dims=dims, name=manifest.name).graph


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


def explain_manifest(request: Request, text: str, name: str, backend: str) -> dict[str, Any]:
    return explain(_graph_of(CompileIn(manifest=text, name=name, backend=backend), request), backend)


@router.post("/compile", response_model=CompileOut, responses=ERRORS | WRITE_ERRORS, dependencies=[AUTH])
def compile_(body: CompileIn, request: Request) -> dict[str, Any]:
    """Run the compiler pipeline for a backend and explain it: each pass (changed or not, its
    diagnostics, node counts, time) and the graph before and after, as text and SVG."""
    return explain(_graph_of(body, request), body.backend, body.disable, body.svg)
