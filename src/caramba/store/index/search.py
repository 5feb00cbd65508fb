"""Run search: full text over manifests, notes and tags; ranges over metrics; filters.

One query object (``SearchQuery``), two implementations that answer it the same way:

- ``SqliteSearch``: the embedded stand-in, SQLite FTS5 in ``<store>/index/search.sqlite``
  (the default when no server is configured);
- ``ElasticSearch``: an Elasticsearch index (``caramba-runs``) through the official client.

Semantics (both): the text is split into words (letters and digits; everything else, quotes,
``*``, ``:``, parentheses included, separates words) and a run matches when every word occurs
in its manifest, note, tags, experiment or ID (case- and accent-insensitive). Nothing in the
text is query syntax. A condition ``[best:]METRIC OP NUMBER`` (OP one of ``>= <= > < = !=``)
holds when the run has that metric with such a final (or, with ``best:``, best) value;
``METRIC`` is ``split.name`` (``test.accuracy``) or a bare name (``accuracy``: any split).
Hits are ordered newest first.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from caramba.errors import did_you_mean
from caramba.store.index.source import (
    IndexUnavailable,
    QueryError,
    RunDoc,
    Server,
    connect_sqlite,
    index_dir,
    redact,
    run_docs,
    split_credentials,
)

MAX_QUERY_CHARS = 2000
MAX_WORDS = 64
MAX_CONDITIONS = 32
MAX_LIMIT = 10_000
ES_INDEX = "caramba-runs"
ELASTICSEARCH = Server("search", "URL", "an Elasticsearch", "Elasticsearch client", "elasticsearch",
                       "search_url / CARAMBA_SEARCH_URL / --search-url", "http://localhost:9200")
OPS = {">=": ">=", "<=": "<=", ">": ">", "<": "<", "=": "=", "==": "=", "!=": "!="}
_WORD = re.compile(r"[^\W_]+")
_COND = re.compile(r"^\s*(?:(best|final):)?([A-Za-z][A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]+)*)\s*(>=|<=|==|!=|=|>|<)\s*"
                   r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")


def words(text: str) -> list[str]:
    """The words of ``text`` as both indexes split them (lower case)."""
    return [w.lower() for w in _WORD.findall(text)]


@dataclass(frozen=True)
class Condition:
    """``metric OP value`` over a run's ``final`` or ``best`` value of ``metric``."""

    metric: str
    op: str
    value: float
    field: str = "final"

    @property
    def by_key(self) -> bool:
        """``split.name`` (one metric) rather than a bare name (that name in any split)."""
        return "." in self.metric

    def __str__(self) -> str:
        return f"{'best:' if self.field == 'best' else ''}{self.metric}{self.op}{self.value:g}"


def parse_where(text: str) -> list[Condition]:
    """Conditions from ``--where`` text: ``accuracy>=0.9``, ``best:val.loss<0.2``; several
    separated by ``,`` or `` and ``. Anything else is a QueryError saying what is accepted."""
    if not isinstance(text, str):
        raise QueryError(f"a --where condition is text, not {type(text).__name__}")
    if len(text) > MAX_QUERY_CHARS:
        raise QueryError(f"a --where condition is at most {MAX_QUERY_CHARS} characters; this one has {len(text):,}")
    out = []
    for part in re.split(r",|\s+and\s+", text, flags=re.IGNORECASE):
        if not part.strip():
            continue
        m = _COND.match(part)
        if m is None:
            shown = part.strip() if len(part.strip()) <= 60 else part.strip()[:57] + "..."
            raise QueryError(f"--where condition {shown!r} is not METRIC OP NUMBER",
                             hint="e.g. --where 'accuracy>=0.9', --where 'best:val.loss<0.2' (OP: >= <= > < = !=; "
                                  "METRIC: split.name or a bare name)")
        value = float(m.group(4))
        if not math.isfinite(value):
            raise QueryError(f"--where condition {part.strip()!r}: {m.group(4)} is not a finite number")
        out.append(Condition(m.group(2), OPS[m.group(3)], value, m.group(1) or "final"))
    if not out:
        raise QueryError("an empty --where condition", hint="e.g. --where 'accuracy>=0.9'")
    return out


@dataclass
class SearchQuery:
    """What to find: ``text`` (words that must all occur), metric ``where`` conditions, and
    exact filters by ``experiment``, ``status`` and ``tags`` (all of them); at most ``limit`` hits."""

    text: str = ""
    where: list[Condition] = field(default_factory=list)
    experiment: str | None = None
    status: str | None = None
    tags: list[str] = field(default_factory=list)
    limit: int = 50

    @classmethod
    def parse(cls, text: str = "", where: "list[str] | tuple[str, ...]" = (), **filters: Any) -> "SearchQuery":
        conds = [c for w in where for c in parse_where(w)]
        q = cls(text=text or "", where=conds, **filters)
        q.check()
        return q

    @property
    def words(self) -> list[str]:
        return words(self.text)

    def check(self) -> None:
        """QueryError for what no index should be asked."""
        from caramba.store.runs import STATUSES, check_tag

        if not isinstance(self.text, str):
            raise QueryError("the search text must be text")
        if len(self.text) > MAX_QUERY_CHARS:
            raise QueryError(f"the search text is at most {MAX_QUERY_CHARS} characters; this one has {len(self.text):,}",
                             hint="search for a few distinctive words")
        if self.text.strip() and not self.words:
            raise QueryError(f"the search text {self.text[:60]!r} has no words (letters or digits) to look for",
                             hint="quotes, *, parentheses and other punctuation only separate words")
        if len(self.words) > MAX_WORDS:
            raise QueryError(f"the search text has {len(self.words)} words; at most {MAX_WORDS}",
                             hint="search for a few distinctive words")
        if len(self.where) > MAX_CONDITIONS:
            raise QueryError(f"{len(self.where)} --where conditions; at most {MAX_CONDITIONS}")
        if self.status is not None and self.status not in STATUSES:
            raise QueryError(f"unknown run status {self.status!r}; one of {', '.join(STATUSES)}")
        for t in self.tags:
            try:
                check_tag(t)
            except Exception as exc:  # ConfigError, said as a query problem
                raise QueryError(str(exc)) from None
        if self.experiment is not None and (not isinstance(self.experiment, str) or len(self.experiment) > 200):
            raise QueryError("--experiment is a name of at most 200 characters")
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or not 1 <= self.limit <= MAX_LIMIT:
            raise QueryError(f"--limit is a whole number from 1 to {MAX_LIMIT}, not {self.limit!r}")


def check_metrics(query: SearchQuery, keys: set[str], names: set[str]) -> None:
    """QueryError naming a condition's metric that no indexed run has."""
    for c in query.where:
        known = keys if c.by_key else names
        if c.metric not in known:
            shown = c.metric if len(c.metric) <= 60 else c.metric[:57] + "..."
            hint = did_you_mean(c.metric, sorted(keys | names)) if keys or names else "the index has no runs with metrics"
            raise QueryError(f"no indexed run has a metric {shown!r}", hint=f"{hint} (`caramba store reindex` after new runs)")


class SearchIndex(Protocol):
    where: str

    def rebuild(self, docs: list[RunDoc]) -> int: ...

    def search(self, query: SearchQuery) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...


def reindex_search(index: SearchIndex, store: Any) -> int:
    """Rebuild ``index`` from ``store``; returns the number of runs indexed."""
    return index.rebuild(run_docs(store))


# ---- the embedded stand-in: SQLite FTS5 ----------------------------------------------------
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, experiment TEXT NOT NULL, status TEXT NOT NULL, "
    "created REAL NOT NULL, hit TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS run_tags (run_id TEXT NOT NULL, tag TEXT NOT NULL, PRIMARY KEY (run_id, tag))",
    "CREATE TABLE IF NOT EXISTS metrics (run_id TEXT NOT NULL, key TEXT NOT NULL, split TEXT NOT NULL, name TEXT NOT NULL, "
    "final REAL, best REAL, PRIMARY KEY (run_id, key))",
    "CREATE INDEX IF NOT EXISTS metrics_name ON metrics(name)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS text USING fts5(id UNINDEXED, ident, tags, note, manifest, "
    "tokenize = 'unicode61 remove_diacritics 2')",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)


class SqliteSearch:
    """The search index in one SQLite file (FTS5 for the text)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.where = str(self.path)

    @classmethod
    def of(cls, store: Any) -> "SqliteSearch":
        return cls(index_dir(store) / "search.sqlite")

    def _connect(self, create: bool) -> sqlite3.Connection:
        return connect_sqlite(self.path, "search", _SCHEMA, create)

    def rebuild(self, docs: list[RunDoc]) -> int:
        db = self._connect(create=True)
        try:
            db.execute("BEGIN IMMEDIATE")  # readers see the old index or the new one, never half of it
            for table in ("runs", "run_tags", "metrics", "text"):
                db.execute(f"DELETE FROM {table}")
            for d in docs:
                db.execute("INSERT INTO runs VALUES (?,?,?,?,?)", (d.id, d.experiment, d.status, d.created, json.dumps(d.hit())))
                db.executemany("INSERT OR IGNORE INTO run_tags VALUES (?,?)", [(d.id, t) for t in d.tags])
                db.executemany("INSERT INTO metrics VALUES (?,?,?,?,?,?)",
                               [(d.id, m.key, m.split, m.name, m.final, m.best) for m in d.metrics])
                db.execute("INSERT INTO text (id, ident, tags, note, manifest) VALUES (?,?,?,?,?)",
                           (d.id, f"{d.id} {d.experiment}", " ".join(d.tags), d.note, d.manifest))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('runs', ?)", (str(len(docs)),))
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            db.execute("ROLLBACK") if db.in_transaction else None
            raise IndexUnavailable(f"the search index {self.path} cannot be written: {exc}") from None
        finally:
            db.close()
        return len(docs)

    def known_metrics(self) -> tuple[set[str], set[str]]:
        db = self._connect(create=False)
        try:
            rows = db.execute("SELECT DISTINCT key, name FROM metrics").fetchall()
        finally:
            db.close()
        return {r[0] for r in rows}, {r[1] for r in rows}

    def search(self, query: SearchQuery) -> list[dict[str, Any]]:
        query.check()
        check_metrics(query, *self.known_metrics())
        sql, args = sqlite_query(query)
        db = self._connect(create=False)
        try:
            rows = db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:  # the query is built from checked parts: this is a damaged file
            raise IndexUnavailable(f"the search index {self.path} cannot be read: {exc}",
                                   hint="rebuild it with `caramba store reindex`") from None
        finally:
            db.close()
        return [json.loads(r[0]) for r in rows]

    def close(self) -> None:
        pass


_SQL_FIELD = {"final": "m.final", "best": "m.best"}


def sqlite_query(query: SearchQuery) -> tuple[str, list[Any]]:
    """The SQL (and its parameters) that answers ``query`` in the stand-in. Every value the
    user gave is a parameter; column names and operators come from fixed tables."""
    where, args = [], []
    ws = query.words
    if ws:  # each word a quoted FTS5 string: no word holds a quote, so nothing is FTS5 syntax
        where.append("r.id IN (SELECT id FROM text WHERE text MATCH ?)")
        args.append(" AND ".join(f'"{w}"' for w in ws))
    if query.experiment is not None:
        where.append("r.experiment = ?")
        args.append(query.experiment)
    if query.status is not None:
        where.append("r.status = ?")
        args.append(query.status)
    for t in query.tags:
        where.append("EXISTS (SELECT 1 FROM run_tags t WHERE t.run_id = r.id AND t.tag = ?)")
        args.append(t)
    for c in query.where:
        col = "m.key" if c.by_key else "m.name"
        where.append(f"EXISTS (SELECT 1 FROM metrics m WHERE m.run_id = r.id AND {col} = ? "
                     f"AND {_SQL_FIELD[c.field]} {OPS[c.op]} ?)")
        args += [c.metric, c.value]
    sql = "SELECT r.hit FROM runs r" + (" WHERE " + " AND ".join(where) if where else "")
    sql += " ORDER BY r.created DESC, r.id LIMIT ?"
    args.append(int(query.limit))
    return sql, args


# ---- Elasticsearch -------------------------------------------------------------------------
ES_SETTINGS = {
    "analysis": {
        # the same words as the stand-in: runs of letters and digits, lower case, accents folded
        "tokenizer": {"caramba_words": {"type": "pattern", "pattern": "[\\W_]+", "flags": "UNICODE_CHARACTER_CLASS"}},
        "analyzer": {"caramba_words": {"type": "custom", "tokenizer": "caramba_words", "filter": ["lowercase", "asciifolding"]}},
    }
}
ES_MAPPINGS = {
    "dynamic": False,
    "properties": {
        "id": {"type": "keyword", "copy_to": "text"},
        "experiment": {"type": "keyword", "copy_to": "text"},
        "status": {"type": "keyword"},
        "created": {"type": "double"},
        "tags": {"type": "keyword", "copy_to": "text"},
        "note": {"type": "text", "analyzer": "caramba_words", "copy_to": "text"},
        "manifest": {"type": "text", "analyzer": "caramba_words", "copy_to": "text"},
        "text": {"type": "text", "analyzer": "caramba_words"},
        "metric_keys": {"type": "keyword"},
        "metric_names": {"type": "keyword"},
        "metrics": {"type": "nested", "properties": {
            "key": {"type": "keyword"}, "split": {"type": "keyword"}, "name": {"type": "keyword"},
            "final": {"type": "double"}, "best": {"type": "double"}}},
        "hit": {"type": "object", "enabled": False},
    },
}
_ES_RANGE = {">=": "gte", "<=": "lte", ">": "gt", "<": "lt"}


def es_document(d: RunDoc) -> dict[str, Any]:
    return {"id": d.id, "experiment": d.experiment, "status": d.status, "created": d.created, "tags": list(d.tags),
            "note": d.note, "manifest": d.manifest, "metric_keys": sorted({m.key for m in d.metrics}),
            "metric_names": sorted({m.name for m in d.metrics}),
            "metrics": [{"key": m.key, "split": m.split, "name": m.name, "final": m.final, "best": m.best} for m in d.metrics],
            "hit": d.hit()}


def es_condition(c: Condition) -> dict[str, Any]:
    f = f"metrics.{c.field}"
    which = {"term": {"metrics.key" if c.by_key else "metrics.name": c.metric}}
    if c.op in _ES_RANGE:
        inner: dict[str, Any] = {"filter": [which, {"range": {f: {_ES_RANGE[c.op]: c.value}}}]}
    elif c.op == "=":
        inner = {"filter": [which, {"term": {f: c.value}}]}
    else:  # != : has the metric with a value, and not this one
        inner = {"filter": [which, {"exists": {"field": f}}], "must_not": [{"term": {f: c.value}}]}
    return {"nested": {"path": "metrics", "query": {"bool": inner}}}


def es_query(query: SearchQuery) -> dict[str, Any]:
    """The body of the ``_search`` request that answers ``query`` (query DSL: no user text is
    parsed as syntax; the words go to a ``match`` query, values to ``term``/``range``)."""
    filters: list[dict[str, Any]] = []
    must: list[dict[str, Any]] = []
    if query.words:
        must.append({"match": {"text": {"query": " ".join(query.words), "operator": "and"}}})
    if query.experiment is not None:
        filters.append({"term": {"experiment": query.experiment}})
    if query.status is not None:
        filters.append({"term": {"status": query.status}})
    filters += [{"term": {"tags": t}} for t in query.tags]
    filters += [es_condition(c) for c in query.where]
    return {"query": {"bool": {"must": must or [{"match_all": {}}], "filter": filters}},
            "sort": [{"created": {"order": "desc"}}, {"id": {"order": "asc"}}],
            "size": int(query.limit), "_source": ["hit"], "track_total_hits": False}


class ElasticSearch:
    """The search index in Elasticsearch (index ``caramba-runs``), through the official client.
    ``client``: an ``elasticsearch.Elasticsearch`` to use (default: one for ``url``)."""

    def __init__(self, url: str, *, client: Any = None, index: str = ES_INDEX, timeout: float = 10.0) -> None:
        self.url, self.index = url, index
        self.where = f"Elasticsearch {redact(url)} index {index}"
        if client is None:
            try:
                from elasticsearch import Elasticsearch
            except ImportError:
                raise ELASTICSEARCH.missing_client(url) from None
            host, auth = split_credentials(url, query=False)
            client = Elasticsearch(host, basic_auth=auth, request_timeout=timeout, max_retries=0, retry_on_timeout=False)
        self.client = client

    def _call(self, what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        from elastic_transport import ApiError, TransportError

        try:
            return fn(*args, **kw)
        except TransportError as exc:  # connection refused, DNS, TLS, timeout
            raise ELASTICSEARCH.refused(self.url, f"cannot be reached ({what}): {exc}") from None
        except ApiError as exc:
            if getattr(exc, "status_code", None) == 404 and what == "search":
                raise QueryError(f"no search index {self.index} at {redact(self.url)}",
                                 hint="build it with `caramba store reindex`") from None
            raise IndexUnavailable(f"the search server {redact(self.url)} refused {what}: {exc}") from None

    def _ensure(self) -> None:
        if not self._call("index check", self.client.indices.exists, index=self.index):
            self._call("index creation", self.client.indices.create, index=self.index, settings=ES_SETTINGS,
                       mappings=ES_MAPPINGS)

    def rebuild(self, docs: list[RunDoc]) -> int:
        self._ensure()
        ops: list[dict[str, Any]] = []
        for d in docs:
            ops += [{"index": {"_index": self.index, "_id": d.id}}, es_document(d)]
        if ops:
            res = self._call("bulk indexing", self.client.bulk, operations=ops, refresh=True)
            if res.get("errors"):
                bad = [i for i in res.get("items", []) if next(iter(i.values()), {}).get("error")]
                raise IndexUnavailable(f"the search server {redact(self.url)} refused {len(bad)} run(s): "
                                       f"{json.dumps(bad[:3])[:500]}")
        # deleted runs disappear: every document not among the live runs goes
        self._call("deleting removed runs", self.client.delete_by_query, index=self.index,
                   query={"bool": {"must_not": [{"ids": {"values": [d.id for d in docs]}}]}}, refresh=True, conflicts="proceed")
        return len(docs)

    def known_metrics(self) -> tuple[set[str], set[str]]:
        res = self._call("search", self.client.search, index=self.index, size=0, aggs={
            "keys": {"terms": {"field": "metric_keys", "size": MAX_LIMIT}},
            "names": {"terms": {"field": "metric_names", "size": MAX_LIMIT}}})
        aggs = res.get("aggregations", {})
        return ({b["key"] for b in aggs.get("keys", {}).get("buckets", [])},
                {b["key"] for b in aggs.get("names", {}).get("buckets", [])})

    def search(self, query: SearchQuery) -> list[dict[str, Any]]:
        query.check()
        if query.where:
            check_metrics(query, *self.known_metrics())
        res = self._call("search", self.client.search, index=self.index, body=es_query(query))
        return [h["_source"]["hit"] for h in res.get("hits", {}).get("hits", [])]

    def close(self) -> None:
        self.client.close()


def open_search(store: Any, url: str | None = None) -> SqliteSearch | ElasticSearch:
    """The search index of ``store``: Elasticsearch at ``url`` (``http(s)://``), else the
    embedded stand-in. A URL that is set is used or refused, never replaced by the stand-in."""
    if not url:
        return SqliteSearch.of(store)
    ELASTICSEARCH.check_url(url, ("http", "https"))
    return ElasticSearch(url)
