"""``caramba store``: the run store's secondary indexes — rebuild them, search runs, follow lineage.

``reindex`` rebuilds the search index (Elasticsearch at ``search_url``, else SQLite FTS5 in
``<store>/index/search.sqlite``) and the lineage graph (Neo4j at ``lineage_uri``, else SQLite in
``<store>/index/lineage.sqlite``) from the run store and its Notary ledger; ``search`` and
``lineage`` query them. A configured server that cannot be used is an error naming its URL,
never a quiet switch to the embedded index.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import typer

from caramba.cli.research import CONFIG_HELP

STORE_HELP = "run store (default: the `store` setting); the embedded indexes live in <store>/index"
SEARCH_URL_HELP = "Elasticsearch URL (default: the `search_url` setting, CARAMBA_SEARCH_URL; empty: the embedded index)"
LINEAGE_URL_HELP = "Neo4j bolt URI (default: the `lineage_uri` setting, CARAMBA_LINEAGE_URI; empty: the embedded index)"
WHERE_HELP = "metric condition, repeatable: 'accuracy>=0.9', 'test.loss<0.2', 'best:val.loss<0.3'"


def _setup(config: str | None, store: str | None, search_url: str | None = None,
           lineage_url: str | None = None) -> tuple[Any, Any]:
    from caramba.cli.research import _store
    from caramba.config import load_settings

    s = load_settings(config, overrides={"store": store, "search_url": search_url, "lineage_uri": lineage_url})
    return _store(config, store), s


def _ask(index: Any, question: Callable[[Any], Any]) -> Any:
    """``question(index)``; the index is closed afterwards, whatever happens."""
    try:
        return question(index)
    finally:
        index.close()


def _printed_json(value: Any, as_json: bool) -> bool:
    """With ``--json``, print ``value`` as JSON and say so (the caller then prints nothing else)."""
    if as_json:
        typer.echo(json.dumps(value, indent=2, default=str))
    return as_json


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="The run store's secondary indexes: rebuild them, search runs, follow lineage.",
                        no_args_is_help=True)
    app.add_typer(group, name="store")

    @group.command("reindex")
    def reindex(
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        search_url: str = typer.Option(None, "--search-url", help=SEARCH_URL_HELP),
        lineage_url: str = typer.Option(None, "--lineage-url", help=LINEAGE_URL_HELP),
        as_json: bool = typer.Option(False, "--json", help="print what was indexed as JSON"),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """Rebuild the search index and the lineage graph from the run store and its ledger.

        Idempotent: running it twice gives the same indexes; deleted runs disappear."""
        from caramba.store.index import ledger_entries, open_lineage, open_search, reindex_lineage, reindex_search

        runs, s = _setup(config, store, search_url, lineage_url)
        search = open_search(runs, s.search_url)  # both opened (and refused) before either is written
        lineage = open_lineage(runs, s.lineage_uri)
        try:
            n = reindex_search(search, runs)
            nodes, edges = reindex_lineage(lineage, runs, ledger_entries(runs))
        finally:
            search.close()
            lineage.close()
        if as_json:
            typer.echo(json.dumps({"search": {"index": search.where, "runs": n},
                                   "lineage": {"index": lineage.where, "nodes": nodes, "edges": edges}}, indent=2))
            return
        typer.echo(f"search: {n} run(s) indexed in {search.where}")
        typer.echo(f"lineage: {nodes} node(s), {edges} edge(s) in {lineage.where}")

    @group.command("search")
    def search_cmd(
        query: str = typer.Argument("", help="words that must all occur in the run's manifest, note, tags, experiment or ID"),
        where: list[str] = typer.Option([], "--where", help=WHERE_HELP),
        experiment: str = typer.Option(None, "--experiment", help="only runs of this experiment"),
        status: str = typer.Option(None, "--status", help="only runs with this status (finished, failed, ...)"),
        tag: list[str] = typer.Option([], "--tag", help="only runs with this tag (repeatable: all of them)"),
        limit: int = typer.Option(50, "--limit", help="at most this many runs, newest first"),
        as_json: bool = typer.Option(False, "--json", help="print the hits as JSON"),
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        search_url: str = typer.Option(None, "--search-url", help=SEARCH_URL_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """Find runs by words and metric conditions (the index `caramba store reindex` built)."""
        from caramba.store.index import SearchQuery, open_search

        q = SearchQuery.parse(query, where, experiment=experiment, status=status, tags=list(tag), limit=limit)
        runs, s = _setup(config, store, search_url=search_url)
        hits = _ask(open_search(runs, s.search_url), lambda index: index.search(q))
        if _printed_json(hits, as_json):
            return
        if not hits:
            typer.echo("no runs match")
            return
        for h in hits:
            vals = {}
            for c in q.where:  # the values the conditions looked at
                source, prefix = (h.get("best", {}), "best:") if c.field == "best" else (h["metrics"], "")
                vals.update({prefix + k: v for k, v in source.items() if v is not None and (k == c.metric or k.endswith("." + c.metric))})
            extra = "  " + " ".join(f"{k}={v:.4g}" for k, v in vals.items()) if vals else ""
            tags = f"  [{', '.join(h['tags'])}]" if h["tags"] else ""
            typer.echo(f"{h['id']:<40} {h['status']:<11}{extra}{tags}")

    @group.command("lineage")
    def lineage_cmd(
        node: str = typer.Argument(..., help="a run ID (or prefix), model:NAME@VERSION, a ledger entry hash (8+ digits), "
                                             "or any node ID (manifest:SHA, checkpoint:SHA)"),
        as_json: bool = typer.Option(False, "--json", help="print the node, ancestors, descendants and edges as JSON"),
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        lineage_url: str = typer.Option(None, "--lineage-url", help=LINEAGE_URL_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """Where a node comes from and what came of it: manifest -> run -> checkpoint -> model
        version -> ledger entry. For a run, the ledger entries that back it; for a model version,
        the runs that produced it."""
        from caramba.store.index import open_lineage

        runs, s = _setup(config, store, lineage_url=lineage_url)
        out = _ask(open_lineage(runs, s.lineage_uri), lambda index: index.lineage(node))
        if _printed_json(out, as_json):
            return
        n = out["node"]
        typer.echo(f"{n['id']}  ({n['label']})")
        for title, key in (("ancestors", "ancestors"), ("descendants", "descendants"), ("runs that produced it", "runs"),
                           ("ledger entries backing it", "ledger")):
            if key not in out:
                continue
            items = out[key]
            typer.echo(f"{title}: {len(items)}")
            for item in items[:200]:
                typer.echo(f"  {item['id'][:90]:<92} {item['label']}")
            if len(items) > 200:
                typer.echo(f"  ... {len(items) - 200} more (--json lists all)")
