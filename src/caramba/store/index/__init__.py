"""Secondary indexes of the run store, rebuilt from it by ``caramba store reindex``.

- search (``caramba.store.index.search``): full text over manifests, notes and tags, ranges
  over metrics, filters by experiment/status/tag; Elasticsearch or the embedded SQLite FTS5;
- lineage (``caramba.store.index.lineage``): manifest -> run -> checkpoint -> model version ->
  ledger entry; Neo4j or the embedded SQLite graph tables.

Both are fed only through the run store's public API and the Notary's ledger query, and both
implementations of each answer the same query objects. docs/stores.md describes them.
"""

from caramba.store.index.lineage import Neo4jLineage, SqliteLineage, open_lineage, reindex_lineage
from caramba.store.index.search import (
    Condition,
    ElasticSearch,
    SearchQuery,
    SqliteSearch,
    open_search,
    parse_where,
    reindex_search,
)
from caramba.store.index.source import IndexUnavailable, QueryError, build_graph, ledger_entries, run_docs

__all__ = ["Condition", "ElasticSearch", "IndexUnavailable", "Neo4jLineage", "QueryError", "SearchQuery", "SqliteLineage",
           "SqliteSearch", "build_graph", "ledger_entries", "open_lineage", "open_search", "parse_where", "reindex_lineage",
           "reindex_search", "run_docs"]
