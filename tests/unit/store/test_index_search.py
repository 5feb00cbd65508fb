"""caramba.store.index.search: one query suite over both implementations.

The embedded stand-in (SQLite FTS5) always runs it; Elasticsearch runs the same tests when
CARAMBA_TEST_ELASTICSEARCH_URL names a server (in its own throwaway index) and skips otherwise.
Expected answers are computed from the run store itself (RunStore.get / metrics), not from the
index. The Elasticsearch adapter's requests (query DSL, mappings, bulk, delete) are also checked
against a recording fake transport under the official client, so its code runs without a server.
"""

from __future__ import annotations

import json
import math
import os
import sys

import pytest

from caramba.errors import CarambaError
from caramba.store.index import (
    ElasticSearch,
    IndexUnavailable,
    QueryError,
    SearchQuery,
    SqliteSearch,
    open_search,
    parse_where,
    reindex_search,
    run_docs,
)
from caramba.store.index.search import ES_MAPPINGS, es_query, sqlite_query
from caramba.store.runs import RunStore

from ._index_store import NOTE, TAGS, built, copy, unique

ES_URL = os.environ.get("CARAMBA_TEST_ELASTICSEARCH_URL", "")
IMPLS = ["sqlite", pytest.param("elasticsearch", marks=pytest.mark.skipif(
    not ES_URL, reason="CARAMBA_TEST_ELASTICSEARCH_URL is not set: no Elasticsearch server to test against"))]


def _open(kind: str, store: RunStore, tmp_path):
    if kind == "sqlite":
        return SqliteSearch(tmp_path / "search.sqlite")
    return ElasticSearch(ES_URL, index=unique("caramba-test"))


def _drop(index) -> None:
    if isinstance(index, ElasticSearch):
        index.client.indices.delete(index=index.index, ignore_unavailable=True)
    index.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> RunStore:
    return RunStore(built(tmp_path_factory))


@pytest.fixture(params=IMPLS)
def index(request, store, tmp_path):
    idx = _open(request.param, store, tmp_path)
    reindex_search(idx, store)
    yield idx
    _drop(idx)


def ids(hits) -> list[str]:
    return [h["id"] for h in hits]


def newest_first(store: RunStore, keep=lambda rec: True) -> list[str]:
    recs = [r for r in store.list(1000) if keep(r)]
    return [r.id for r in sorted(recs, key=lambda r: (-r.created, r.id))]


def final(rec, key: str) -> float | None:
    v = rec.summary.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


# ---- the shared query suite ----------------------------------------------------------------
def test_no_words_no_conditions_lists_every_run_newest_first(index, store):
    assert ids(index.search(SearchQuery())) == newest_first(store)
    assert len(ids(index.search(SearchQuery(limit=2)))) == 2


def test_words_match_the_manifest_note_and_tags(index, store):
    with_manifest = newest_first(store, lambda r: bool(store.artifacts(r.id, "manifest")))
    assert len(with_manifest) == 2
    assert ids(index.search(SearchQuery(text="mlp_classifier cross_entropy"))) == with_manifest
    assert ids(index.search(SearchQuery(text="MLP Classifier"))) == with_manifest  # case-insensitive
    tagged = newest_first(store, lambda r: r.tags == TAGS)
    assert len(tagged) == 1
    assert ids(index.search(SearchQuery(text="warmup divergence"))) == tagged  # the note
    assert ids(index.search(SearchQuery(text="fig2"))) == tagged  # a tag's word
    assert ids(index.search(SearchQuery(text="mlp_classifier nosuchwordanywhere"))) == []  # every word must occur


def test_filters_by_experiment_status_and_tags(index, store):
    assert ids(index.search(SearchQuery(experiment="tinyblobs"))) == newest_first(store, lambda r: r.experiment == "tinyblobs")
    assert ids(index.search(SearchQuery(experiment="lin"))) == newest_first(store, lambda r: r.experiment == "lin")
    assert ids(index.search(SearchQuery(status="finished"))) == newest_first(store, lambda r: r.status == "finished")
    assert ids(index.search(SearchQuery(status="failed"))) == []
    assert ids(index.search(SearchQuery(tags=TAGS))) == newest_first(store, lambda r: set(TAGS) <= set(r.tags))
    assert ids(index.search(SearchQuery(tags=["baseline", "other"]))) == []  # all tags must be there
    assert ids(index.search(SearchQuery(experiment="tiny"))) == []  # exact, not a prefix


@pytest.mark.parametrize("op", [">=", "<=", ">", "<", "=", "!="])
def test_range_over_a_final_metric(index, store, op):
    recs = store.list(1000)
    values = sorted({final(r, "test.accuracy") for r in recs if final(r, "test.accuracy") is not None})
    assert values
    cut = values[0]
    ops = {">=": cut.__le__, "<=": cut.__ge__, ">": cut.__lt__, "<": cut.__gt__, "=": cut.__eq__, "!=": cut.__ne__}
    want = newest_first(store, lambda r: final(r, "test.accuracy") is not None and ops[op](final(r, "test.accuracy")))
    q = SearchQuery.parse(where=[f"test.accuracy{op}{cut!r}"])
    assert ids(index.search(q)) == want


def test_a_bare_metric_name_matches_any_split_and_best_is_the_best_logged_value(index, store):
    # accuracy >= 0 holds for a run with an accuracy in any split: the manifest runs, not the linear ones
    want = newest_first(store, lambda r: any(final(r, f"{s}.accuracy") is not None for s in ("train", "val", "test")))
    assert len(want) == 2
    assert ids(index.search(SearchQuery.parse(where=["accuracy>=0"]))) == want
    # best train.loss: the minimum of the logged rows, from the store's metric rows
    best = {r.id: min(v for _, s, n, v in store.metrics(r.id) if s == "train" and n == "loss") for r in store.list(1000)}
    cut = sorted(best.values())[1]
    want = newest_first(store, lambda r: best[r.id] <= cut)
    assert ids(index.search(SearchQuery.parse(where=[f"best:train.loss<={cut!r}"]))) == want
    # several conditions: all of them
    both = SearchQuery.parse(where=[f"best:train.loss<={cut!r}", "accuracy>=0"])
    assert ids(index.search(both)) == [i for i in want if i in ids(index.search(SearchQuery.parse(where=["accuracy>=0"])))]


def test_words_filters_and_conditions_together(index, store):
    tagged = newest_first(store, lambda r: r.tags == TAGS)
    q = SearchQuery.parse("warmup", ["test.loss>=0", "accuracy>=0"], experiment="tinyblobs", status="finished", tags=["baseline"])
    assert ids(index.search(q)) == tagged
    hit = index.search(q)[0]
    rec = store.get(tagged[0])
    assert hit["tags"] == TAGS and hit["status"] == rec.status and hit["experiment"] == rec.experiment
    assert math.isclose(hit["metrics"]["test.loss"], rec.summary["test.loss"])


@pytest.mark.parametrize("text", ['"', '"mlp', 'mlp"', "mlp*", "*", 'mlp" OR "lin', "NEAR(", "NEAR(mlp classifier, 2)",
                                  "mlp AND NOT classifier", "mlp:", "{mlp}", "^mlp", "mlp -classifier", "'; DROP TABLE runs; --",
                                  "ident:tinyblobs", "\x00mlp", "mlp\ud800"])
def test_fts_syntax_is_matched_literally_or_refused(index, store, text):
    """Quotes, *, NEAR(, column filters, boolean words: each word is a literal; no traceback."""
    try:
        hits = ids(index.search(SearchQuery(text=text)))
    except QueryError as exc:
        assert "no words" in str(exc), exc
        return
    from caramba.store.index.search import words

    ws = words(text)
    want = newest_first(store, lambda r: set(ws) <= _doc_words(store, r.id))
    assert hits == want, (text, ws)


def _doc_words(store: RunStore, run_id: str) -> set[str]:
    from caramba.store.index.search import words

    d = next(d for d in run_docs(store) if d.id == run_id)
    return set(words(" ".join([d.id, d.experiment, " ".join(d.tags), d.note, d.manifest])))


def test_near_in_a_note_is_a_word(index, store):
    tagged = newest_first(store, lambda r: r.tags == TAGS)
    assert "NEAR" in NOTE
    assert ids(index.search(SearchQuery(text="NEAR("))) == tagged
    assert ids(index.search(SearchQuery(text='"run log'))) == tagged  # an unbalanced quote


@pytest.mark.parametrize("where", ["accuracy>=0.9; DROP TABLE runs", "accuracy>=0 OR 1=1", "x' OR '1'='1",
                                   "accuracy>=0.9)) UNION SELECT hit FROM runs --", "accuracy >= nan", "accuracy>=inf",
                                   "accuracy>=1e999", "accuracy", ">=0.9", "accuracy=>0.9", "accuracy>=0x10",
                                   "best:best:loss<1", "accuracy>=0.9 and", "", "  ,  "])
def test_hostile_where_is_a_clear_error(index, where):
    with pytest.raises(QueryError) as err:
        index.search(SearchQuery.parse(where=[where]))
    assert "Traceback" not in str(err.value)
    assert index.search(SearchQuery())  # the index is intact


def test_unknown_metric_is_named_with_a_suggestion(index):
    with pytest.raises(QueryError, match="acurracy") as err:
        index.search(SearchQuery.parse(where=["acurracy>=0.9"]))
    assert "accuracy" in (err.value.hint or "")
    with pytest.raises(QueryError, match="nosuch.loss"):
        index.search(SearchQuery.parse(where=["nosuch.loss<1"]))


@pytest.mark.parametrize("query", [pytest.param(dict(text="a " * 5000), id="huge"), dict(text="w " * 65), dict(status="done"), dict(tags=["bad tag"]),
                                   dict(limit=0), dict(limit=10**9), dict(experiment="x" * 500)])
def test_huge_or_invalid_queries_are_refused(index, query):
    with pytest.raises(QueryError):
        index.search(SearchQuery(**query))


@pytest.mark.parametrize("kind", IMPLS)
def test_reindex_is_idempotent_and_deleted_runs_disappear(kind, tmp_path_factory, tmp_path):
    from caramba.run.manage import delete_run

    store = copy(tmp_path_factory)
    idx = _open(kind, store, tmp_path)
    try:
        assert reindex_search(idx, store) == 4
        first = idx.search(SearchQuery())
        assert reindex_search(idx, store) == 4
        assert idx.search(SearchQuery()) == first
        victim = next(r.id for r in store.list(100) if r.tags == TAGS)
        delete_run(store, victim, reason="index test")
        assert victim in ids(idx.search(SearchQuery()))  # a secondary index: stale until rebuilt
        assert reindex_search(idx, store) == 3
        assert victim not in ids(idx.search(SearchQuery()))
        assert ids(idx.search(SearchQuery(text="warmup"))) == []
        assert ids(idx.search(SearchQuery(tags=["baseline"]))) == []
    finally:
        _drop(idx)


def test_the_stand_in_file_is_the_same_after_a_second_reindex(tmp_path_factory, tmp_path):
    import sqlite3

    store = copy(tmp_path_factory)
    idx = open_search(store)  # no URL: the embedded index in <store>/index
    assert idx.path == store.root / "index" / "search.sqlite"

    def dump() -> list:
        db = sqlite3.connect(idx.path)
        try:
            return [db.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in ("runs", "run_tags", "metrics")] + [
                db.execute("SELECT id, ident, tags, note, manifest FROM text ORDER BY id").fetchall()]
        finally:
            db.close()

    reindex_search(idx, store)
    one = dump()
    reindex_search(idx, store)
    assert dump() == one and len(one[0]) == 4


def test_a_search_before_any_reindex_says_how_to_build_it(tmp_path):
    with pytest.raises(QueryError, match="caramba store reindex"):
        SqliteSearch(tmp_path / "nope.sqlite").search(SearchQuery())


# ---- query translation (what the Elasticsearch adapter sends) ------------------------------
def test_sqlite_query_binds_every_user_value():
    q = SearchQuery.parse('x" OR 1=1 --', ["test.accuracy>=0.9", "best:loss<0.2"], experiment="e'x", status="finished",
                          tags=["a"], limit=7)
    sql, args = sqlite_query(q)
    assert "e'x" not in sql and "0.9" not in sql and "OR 1" not in sql
    assert args == ['"x" AND "or" AND "1" AND "1"', "e'x", "finished", "a", "test.accuracy", 0.9, "loss", 0.2, 7]


def test_es_query_dsl():
    q = SearchQuery.parse('NEAR( "mlp*', ["test.accuracy>=0.9", "best:loss<0.2", "val.loss!=1"], experiment="tinyblobs",
                          status="finished", tags=["baseline"], limit=5)
    body = es_query(q)
    assert body == {
        "query": {"bool": {
            "must": [{"match": {"text": {"query": "near mlp", "operator": "and"}}}],
            "filter": [
                {"term": {"experiment": "tinyblobs"}},
                {"term": {"status": "finished"}},
                {"term": {"tags": "baseline"}},
                {"nested": {"path": "metrics", "query": {"bool": {"filter": [
                    {"term": {"metrics.key": "test.accuracy"}}, {"range": {"metrics.final": {"gte": 0.9}}}]}}}},
                {"nested": {"path": "metrics", "query": {"bool": {"filter": [
                    {"term": {"metrics.name": "loss"}}, {"range": {"metrics.best": {"lt": 0.2}}}]}}}},
                {"nested": {"path": "metrics", "query": {"bool": {
                    "filter": [{"term": {"metrics.key": "val.loss"}}, {"exists": {"field": "metrics.final"}}],
                    "must_not": [{"term": {"metrics.final": 1.0}}]}}}},
            ]}},
        "sort": [{"created": {"order": "desc"}}, {"id": {"order": "asc"}}],
        "size": 5, "_source": ["hit"], "track_total_hits": False,
    }
    assert es_query(SearchQuery())["query"]["bool"]["must"] == [{"match_all": {}}]


class FakeNode:
    """An elastic_transport node that answers from a table and records every request."""

    log: list = []
    replies: dict = {}

    def __init__(self, config):
        from elastic_transport import BaseNode

        self._base = BaseNode(config)
        self.config = config

    def __getattr__(self, name):
        return getattr(self._base, name)

    def perform_request(self, method, target, body=None, headers=None, request_timeout=None):
        from elastic_transport import ApiResponseMeta, HttpHeaders
        from elastic_transport._node import NodeApiResponse

        path = target.split("?")[0]
        text = body.decode() if body else ""
        try:
            parsed = json.loads(text) if text else None
        except ValueError:  # ndjson (bulk)
            parsed = [json.loads(line) for line in text.splitlines() if line]
        FakeNode.log.append((method, path, parsed))
        status, reply = FakeNode.replies.get((method, path.rsplit("/", 1)[-1]), (200, {}))
        meta = ApiResponseMeta(status=status, http_version="1.1", headers=HttpHeaders({
            "x-elastic-product": "Elasticsearch", "content-type": "application/json"}), duration=0.0, node=self.config)
        return NodeApiResponse(meta, json.dumps(reply).encode())

    def close(self):
        pass


def _fake_es(replies: dict) -> ElasticSearch:
    from elasticsearch import Elasticsearch

    FakeNode.log, FakeNode.replies = [], replies
    client = Elasticsearch("http://es.invalid:9200", node_class=FakeNode, max_retries=0)
    return ElasticSearch("http://es.invalid:9200", client=client)


def test_the_es_adapter_builds_its_index_with_the_official_client(store):
    es = _fake_es({("HEAD", "caramba-runs"): (404, {}), ("PUT", "caramba-runs"): (200, {"acknowledged": True}),
                   ("PUT", "_bulk"): (200, {"errors": False, "items": []}),
                   ("POST", "_delete_by_query"): (200, {"deleted": 1})})
    assert es.rebuild(run_docs(store)) == 4
    calls = [(m, p) for m, p, _ in FakeNode.log]
    assert calls[:2] == [("HEAD", "/caramba-runs"), ("PUT", "/caramba-runs")]
    create = FakeNode.log[1][2]
    assert create["mappings"] == ES_MAPPINGS and create["settings"]["analysis"]["analyzer"]["caramba_words"]
    bulk = next(b for m, p, b in FakeNode.log if p.endswith("_bulk"))
    assert [op["index"]["_id"] for op in bulk[0::2]] == [d.id for d in run_docs(store)]
    doc = bulk[1]
    assert doc["hit"]["id"] == doc["id"] and {m["key"] for m in doc["metrics"]} == set(doc["metric_keys"])
    delete = next(b for m, p, b in FakeNode.log if p.endswith("_delete_by_query"))
    assert delete["query"] == {"bool": {"must_not": [{"ids": {"values": [d.id for d in run_docs(store)]}}]}}


def test_the_es_adapter_searches_with_the_dsl_and_reads_the_hits(store):
    hit = run_docs(store)[0].hit()
    es = _fake_es({("POST", "_search"): (200, {
        "hits": {"hits": [{"_id": hit["id"], "_source": {"hit": hit}}]},
        "aggregations": {"keys": {"buckets": [{"key": "test.accuracy"}]}, "names": {"buckets": [{"key": "accuracy"}]}}})})
    q = SearchQuery.parse("mlp", ["accuracy>=0.5"], limit=3)
    assert es.search(q) == [hit]
    (m1, p1, aggs), (m2, p2, body) = FakeNode.log
    assert (m1, p1) == ("POST", "/caramba-runs/_search") and set(aggs["aggs"]) == {"keys", "names"}
    assert (m2, p2) == ("POST", "/caramba-runs/_search") and body == es_query(q)
    with pytest.raises(QueryError, match="acurracy"):  # unknown metric: refused before the search
        es.search(SearchQuery.parse(where=["acurracy>=0.5"]))


def test_the_es_adapter_says_when_the_index_was_never_built():
    es = _fake_es({("POST", "_search"): (404, {"error": {"type": "index_not_found_exception"}, "status": 404})})
    with pytest.raises(QueryError, match="caramba store reindex"):
        es.search(SearchQuery())


def test_an_unreachable_es_server_is_one_error_naming_the_url(store):
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://elastic:s3cret@127.0.0.1:{port}"
    idx = open_search(store, url)
    with pytest.raises(IndexUnavailable) as err:
        idx.rebuild(run_docs(store))
    assert f"http://elastic:***@127.0.0.1:{port}" in str(err.value) and "s3cret" not in str(err.value)
    with pytest.raises(IndexUnavailable, match=f"127.0.0.1:{port}"):
        idx.search(SearchQuery())


def test_a_missing_client_is_one_error_with_the_extra_to_install(store, monkeypatch):
    monkeypatch.setitem(sys.modules, "elasticsearch", None)
    with pytest.raises(IndexUnavailable, match=r"pip install 'caramba\[elasticsearch\]'") as err:
        open_search(store, "http://localhost:9200")
    assert "http://localhost:9200" in str(err.value)


@pytest.mark.parametrize("url", ["ftp://host", "localhost:9200", "http://", "http://h:notaport", "bolt://host:7687"])
def test_a_url_that_is_not_elasticsearch_is_refused_not_replaced(store, url):
    with pytest.raises(IndexUnavailable):
        open_search(store, url)


def test_parse_where_accepts_the_documented_forms():
    assert [str(c) for c in parse_where("accuracy>=0.9, test.loss<0.2 and best:val.loss<=.3")] == [
        "accuracy>=0.9", "test.loss<0.2", "best:val.loss<=0.3"]
    assert parse_where("acc == -1e-3")[0].value == -0.001 and parse_where("acc == 1")[0].op == "="
    with pytest.raises(CarambaError):
        parse_where("x" * 3000 + ">=1")
