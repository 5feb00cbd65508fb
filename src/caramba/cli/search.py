"""``caramba search``: nearest neighbours in a vector collection (``caramba.store.vectors``).

    caramba search digits --like <run>:test:12 --k 10
    caramba search digits --vector query.npy --filter run=<run> --json

The query is a point already in the collection (``--like RUN:SPLIT:INDEX``, the point itself
left out of the results), a vector in a ``.npy`` file (``--vector``), or the mean of both.
The store is ``--vectors`` (a folder or http(s)://host:6333), else the ``vectors`` setting,
else ``<store>/vectors``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from caramba.cli.research import CONFIG_HELP

MAX_NPY_BYTES = 64 * 2**20
VECTORS_HELP = "vector store: a folder (Qdrant local mode) or http(s)://host:6333 (default: setting vectors, else <store>/vectors)"


def _run_id(ref: str, store_root: str) -> str:
    """A run ID prefix or ``latest`` resolved in the run store (a folder or a URL), when there is
    one; else as given."""
    if "://" not in store_root and not (Path(store_root) / "runs.sqlite").is_file():
        return ref
    from caramba.errors import CarambaError
    from caramba.store.runs import open_runs

    try:
        return open_runs(store_root).get(ref).id
    except CarambaError:
        return ref


def _load_npy(path: Path) -> Any:
    import numpy as np

    from caramba.errors import ConfigError

    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ConfigError(f"cannot read --vector {path}: {exc.strerror}") from None
    if size > MAX_NPY_BYTES:
        raise ConfigError(f"--vector {path} is {size / 2**20:.1f} MiB; a query vector file may be at most "
                          f"{MAX_NPY_BYTES // 2**20} MiB")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise ConfigError(f"--vector {path} is not a NumPy .npy array: {str(exc)[:200]}",
                          hint="write one with numpy.save('query.npy', vector)") from None


def parse_like(like: str) -> tuple[str, str, int]:
    from caramba.errors import ConfigError

    parts = like.rsplit(":", 2)
    if len(parts) != 3 or not parts[0] or parts[1] not in ("train", "val", "test"):
        raise ConfigError(f"--like {like!r:.80} is not RUN:SPLIT:INDEX", hint="e.g. --like <run id>:test:12")
    try:
        index = int(parts[2])
    except ValueError:
        raise ConfigError(f"--like {like!r:.80}: the index {parts[2]!r:.20} is not a whole number") from None
    if index < 0:
        raise ConfigError(f"--like {like!r:.80}: the index must be >= 0")
    return parts[0], parts[1], index


def search_command(collection: str, like: str | None = None, vector: Path | None = None, k: int = 10,
                   filters: list[str] | None = None, vectors: str | None = None, store: str | None = None,
                   config: str | None = None) -> dict[str, Any]:
    """What ``caramba search`` prints, as data: ``{collection, location, query, neighbours}``."""
    import numpy as np

    from caramba.config import load_settings
    from caramba.errors import ConfigError
    from caramba.store.vectors import check_collection, check_k, open_vectors, parse_filter, query_vector

    check_collection(collection)
    check_k(k)
    if like is None and vector is None:
        raise ConfigError("give the query: --like RUN:SPLIT:INDEX (a point of the collection) and/or --vector FILE.npy")
    where = parse_filter(filters or [])
    s = load_settings(config, overrides={"store": store, "vectors": vectors})
    store_root = s.store[len("file://"):] if s.store.startswith("file://") else s.store
    if "://" in store_root and not s.vectors:  # a remote run store: no local folder is meant
        raise ConfigError(f"the run store is {store_root}; say where vectors are with --vectors or the `vectors` "
                          "setting", hint="--vectors http://host:6333 (a Qdrant server) or a folder (local mode)")
    if "run" in where and isinstance(where["run"], str):
        where["run"] = _run_id(where["run"], store_root)
    queries, exclude, query_info = [], [], {}
    if vector is not None:
        queries.append(query_vector(_load_npy(Path(vector)), f"--vector {vector}"))
        query_info["vector"] = str(vector)
    with open_vectors(s.vectors or None, store_root) as vs:
        if like is not None:
            run, split, index = parse_like(like)
            run = _run_id(run, store_root)
            match = {"run": run, "split": split, "index": index}
            if "output" in where:
                match["output"] = where["output"]
            pid, vec, payload = vs.find(collection, match)
            queries.append(vec)
            exclude.append(pid)
            query_info["like"] = {"id": pid, **payload}
        if len(queries) == 2 and len(queries[0]) != len(queries[1]):
            raise ConfigError(f"--vector has {len(queries[0])} numbers; the --like point has {len(queries[1])}")
        q = queries[0] if len(queries) == 1 else np.mean(queries, axis=0)
        hits = vs.search(collection, q, k, where, exclude)
        location = vs.where
    return {"collection": collection, "location": location, "query": query_info, "k": k, "filter": where,
            "neighbours": [h.to_json() for h in hits]}


def _table(result: dict[str, Any]) -> str:
    rows = [["#", "score", "run", "split", "index", "label", "output", "step", "experiment"]]
    for i, h in enumerate(result["neighbours"], 1):
        p = h["payload"]
        rows.append([str(i), f"{h['score']:.4f}", str(p.get("run", "-")), str(p.get("split", "-")),
                     str(p.get("index", "-")), str(p.get("label", "-")), str(p.get("output", "-")),
                     str(p.get("checkpoint_step", "-")), str(p.get("experiment", "-"))])
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    head = f"{len(result['neighbours'])} nearest in '{result['collection']}' ({result['location']})"
    like = result["query"].get("like")
    if like:
        head += f", like {like.get('run')}:{like.get('split')}:{like.get('index')}"
    return "\n".join([head, *lines])


def register(app: typer.Typer) -> None:
    @app.command("search")
    def search(
        collection: str = typer.Argument(..., metavar="COLLECTION",
                                         help="the vector collection (embeddings.collection of a manifest)"),
        like: str = typer.Option(None, "--like", metavar="RUN:SPLIT:INDEX", help="query: a point of the collection"),
        vector: Path = typer.Option(None, "--vector", metavar="FILE.npy", help="query: a vector saved with numpy.save"),
        k: int = typer.Option(10, "--k", help="how many neighbours (1 to 1000)"),
        filters: list[str] = typer.Option(None, "--filter", metavar="KEY=VALUE",
                                          help="only points whose provenance matches (run=<id>, split=test, label=3); "
                                               "repeatable"),
        as_json: bool = typer.Option(False, "--json", help="print JSON"),
        vectors: str = typer.Option(None, "--vectors", metavar="URL", help=VECTORS_HELP),
        store: str = typer.Option(None, "--store", help="run store directory (default: settings.store)"),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """Nearest neighbours in a vector collection, with the run, split and example of each."""
        result = search_command(collection, like, vector, k, filters, vectors, store, config)
        if as_json:
            import json

            typer.echo(json.dumps(result, indent=2, default=str))
        else:
            typer.echo(_table(result))
