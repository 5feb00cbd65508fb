"""caramba.store.index.lineage: one query suite over both implementations.

The embedded stand-in (SQLite node/edge tables) always runs it; Neo4j runs the same tests when
CARAMBA_TEST_NEO4J_URI names a server (it replaces the graph labelled CarambaLineage there) and
skips otherwise. Expected answers come from the run store and from the Notary's ledger read
through its own Query, not from the index. The Neo4j adapter's Cypher and parameters are also
checked against a recording fake driver, so its code runs without a server.
"""

from __future__ import annotations

import os
import sys

import pytest

from caramba.store.index import (
    IndexUnavailable,
    Neo4jLineage,
    QueryError,
    SqliteLineage,
    build_graph,
    ledger_entries,
    open_lineage,
    reindex_lineage,
)
from caramba.store.index.lineage import CYPHER, neo4j_statements
from caramba.store.index.source import EDGE_TYPES
from caramba.store.runs import RunStore

from ._index_store import built, by_ledger_run, copy

NEO4J_URI = os.environ.get("CARAMBA_TEST_NEO4J_URI", "")
IMPLS = ["sqlite", pytest.param("neo4j", marks=pytest.mark.skipif(
    not NEO4J_URI, reason="CARAMBA_TEST_NEO4J_URI is not set: no Neo4j server to test against"))]


def _open(kind: str, tmp_path):
    return SqliteLineage(tmp_path / "lineage.sqlite") if kind == "sqlite" else Neo4jLineage(NEO4J_URI)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> RunStore:
    return RunStore(built(tmp_path_factory))


@pytest.fixture(scope="module")
def entries(store):
    return ledger_entries(store)


@pytest.fixture(params=IMPLS)
def index(request, store, entries, tmp_path):
    idx = _open(request.param, tmp_path)
    reindex_lineage(idx, store, entries)
    yield idx
    idx.close()


def ids(nodes) -> set[str]:
    return {n.id for n in nodes}


def closure(entries, start: list) -> set[str]:
    """Entry hashes of ``start`` and everything they depend on (from the ledger's own records)."""
    by_hash = {e.hash: e for e in entries}
    seen, todo = set(), [e.hash for e in start]
    while todo:
        h = todo.pop()
        if h in seen or h not in by_hash:
            continue
        seen.add(h)
        todo += by_hash[h].depends_on
    return seen


def test_which_runs_produced_a_model_version(index, store):
    assert ids(index.runs_for_model("lin", 1)) == {f"run:{by_ledger_run(store, 'lin-a')}"}
    assert ids(index.runs_for_model("lin", 2)) == {f"run:{by_ledger_run(store, 'lin-b')}"}
    assert index.runs_for_model("lin", 3) == [] and index.runs_for_model("nope", 1) == []


def test_which_ledger_entries_back_a_run(index, store, entries):
    for rec in store.list(100):
        subject = rec.config.get("ledger_run") or rec.id
        own = [e for e in entries if e.subject == subject and e.name != "identity"]
        assert own, rec.id
        want = {f"ledger:{h}" for h in closure(entries, own)}
        got = index.ledger_for_run(rec.id)
        assert ids(got) == want
        assert [n.props["seq"] for n in got] == sorted(n.props["seq"] for n in got)  # in ledger order
        assert ids(index.ledger_for_run(f"run:{rec.id}")) == want


def test_ancestors_of_a_model_version_go_back_to_its_parent_and_both_runs(index, store):
    a, b = by_ledger_run(store, "lin-a"), by_ledger_run(store, "lin-b")
    up = ids(index.ancestors("model:lin@2"))
    assert {"model:lin@1", f"run:{a}", f"run:{b}"} <= up
    ck = [c.sha256 for c in store.artifacts(b, "checkpoint")]
    final = store.get(b).summary["checkpoint"]
    assert any(f"checkpoint:{sha}" in up and sha[:12] in final for sha in ck)  # the checkpoint committed as v2
    assert not any(i.startswith("ledger:") for i in up)  # evidence is downstream of what it backs
    assert "model:lin@2" in ids(index.descendants("model:lin@1"))


def test_descendants_of_a_manifest_are_its_runs_checkpoints_and_evidence(index, store, entries):
    manifest_runs = [r for r in store.list(100) if r.manifest_sha256]
    assert len(manifest_runs) == 2 and len({r.manifest_sha256 for r in manifest_runs}) == 1
    down = ids(index.descendants(f"manifest:{manifest_runs[0].manifest_sha256}"))
    for r in manifest_runs:
        assert f"run:{r.id}" in down
        assert {f"checkpoint:{c.sha256}" for c in store.artifacts(r.id, "checkpoint")} <= down
        assert {f"ledger:{e.hash}" for e in entries if e.subject == r.id and e.name != "identity"} <= down
    assert not any(i.startswith("run:lin") or i.startswith("model:") for i in down)  # other runs are not in it


def test_the_composite_answer_and_its_edges(index, store):
    b = by_ledger_run(store, "lin-b")
    out = index.lineage("model:lin@2")
    assert out["node"]["id"] == "model:lin@2" and [r["id"] for r in out["runs"]] == [f"run:{b}"]
    assert {"src": "model:lin@1", "type": "DERIVED", "dst": "model:lin@2"} in out["edges"]
    everything = {out["node"]["id"], *(n["id"] for n in out["ancestors"]), *(n["id"] for n in out["descendants"])}
    assert all(e["src"] in everything and e["dst"] in everything and e["type"] in EDGE_TYPES for e in out["edges"])
    run = index.lineage(b)  # a bare run ID
    assert run["node"]["id"] == f"run:{b}" and run["ledger"]


def test_references_resolve_by_prefix_and_refuse_ambiguity(index, store, entries):
    rec = store.list(100)[0]
    assert index.resolve(rec.id) == f"run:{rec.id}"
    assert index.resolve(rec.id[:-1]) == f"run:{rec.id}"
    e = next(e for e in entries if e.subject == (rec.config.get("ledger_run") or rec.id))
    assert index.resolve(e.hash[:12]) == f"ledger:{e.hash}"
    assert index.resolve(f"ledger:{e.hash[:12]}") == f"ledger:{e.hash}"
    with pytest.raises(QueryError, match="several"):
        index.resolve("tinyblobs")  # two runs
    with pytest.raises(QueryError, match="no lineage node"):
        index.resolve("model:lin@9")


@pytest.mark.parametrize("ref", ["", "   ", "%", "_", "' OR 1=1 --", "run:%", pytest.param("x" * 5000, id="huge"), "run:\x00", "}) MATCH (n) DETACH DELETE n //",
                                 "$id", "model:lin@", "ledger:"])
def test_hostile_references_are_clear_errors(index, ref):
    with pytest.raises(QueryError):
        index.lineage(ref)
    assert index.runs_for_model("lin", 1)  # the graph is intact


def test_reindex_is_idempotent_and_a_deleted_run_disappears(tmp_path_factory, tmp_path):
    import sqlite3

    from caramba.run.manage import delete_run

    store = copy(tmp_path_factory)
    idx = open_lineage(store)  # no URI: the embedded index in <store>/index
    assert idx.path == store.root / "index" / "lineage.sqlite"

    def dump():
        db = sqlite3.connect(idx.path)
        try:
            return (db.execute("SELECT * FROM nodes ORDER BY id").fetchall(), db.execute("SELECT * FROM edges ORDER BY 1, 2, 3").fetchall())
        finally:
            db.close()

    reindex_lineage(idx, store)
    one = dump()
    reindex_lineage(idx, store)
    assert dump() == one
    victim = next(r.id for r in store.list(100) if r.manifest_sha256)
    delete_run(store, victim, reason="index test")
    reindex_lineage(idx, store)
    nodes, edges = dump()
    assert f"run:{victim}" not in {n[0] for n in nodes}
    assert not any(victim in (e[0] + e[2]) for e in edges)
    with pytest.raises(QueryError):
        idx.resolve(victim)
    assert idx.runs_for_model("lin", 2)  # the rest is still there


def test_a_lineage_query_before_any_reindex_says_how_to_build_it(tmp_path):
    with pytest.raises(QueryError, match="caramba store reindex"):
        SqliteLineage(tmp_path / "nope.sqlite").lineage("anything")


# ---- what the Neo4j adapter sends (a recording fake driver) --------------------------------
class FakeDriver:
    def __init__(self, replies: dict | None = None):
        self.reads: list = []
        self.writes: list = []
        self.replies = replies or {}

    def execute_query(self, cypher, params, routing_=None, **kw):
        self.reads.append((cypher, dict(params), routing_))
        name = next(k for k, v in CYPHER.items() if v == cypher)
        return type("Eager", (), {"records": self.replies.get(name, [])})()

    def session(self, **kw):
        driver = self

        class Tx:
            def run(self, cypher, params=None):
                driver.writes.append((cypher, params or {}))
                return type("R", (), {"consume": lambda self: None})()

        class Session:
            def __enter__(self):
                return self

            def __exit__(self, *a):
                return False

            def run(self, cypher, params=None):
                return Tx().run(cypher, params)

            def execute_write(self, fn):
                return fn(Tx())

        return Session()

    def close(self):
        pass


def test_the_neo4j_rebuild_replaces_the_graph_in_one_write(store, entries):
    g = build_graph(store, entries)
    fake = FakeDriver()
    Neo4jLineage("bolt://x:7687", driver=fake).rebuild(g)
    (constraint, _), (clear, _), (nodes, p), *edges = fake.writes
    assert constraint == CYPHER["constraint"] and clear == CYPHER["clear"] and nodes == CYPHER["nodes"]
    assert [n["id"] for n in p["nodes"]] == sorted(g.nodes)
    sent = set()
    for cypher, params in edges:
        t = cypher.split("[:")[1].split("]")[0]
        assert t in EDGE_TYPES and cypher == CYPHER["edges"].replace("{type}", t)
        sent |= {(e["src"], t, e["dst"]) for e in params["edges"]}
    assert sent == {(e.src, e.type, e.dst) for e in g.edges}
    assert neo4j_statements(g) == fake.writes[1:]


def test_the_neo4j_reads_send_parameters_never_spliced_text():
    hostile = "x'}) DETACH DELETE n //"
    node = {"id": "run:r1", "type": "run", "label": "r1", "props": '{"experiment": "e"}'}
    fake = FakeDriver({"node": [node], "ancestors": [], "descendants": [node], "edges_among": [],
                       "ledger_for_run": [{"id": "ledger:ab", "type": "ledger", "label": "#1", "props": '{"seq": 1}'}],
                       "runs_for_model": [node], "find": []})
    idx = Neo4jLineage("bolt://x:7687", driver=fake)
    out = idx.lineage("run:r1")
    assert out["node"]["id"] == "run:r1" and [n["id"] for n in out["ledger"]] == ["ledger:ab"]
    assert [n.id for n in idx.runs_for_model(hostile, 3)] == ["run:r1"]
    for cypher, _params, routing in fake.reads:
        assert routing == "r" and hostile not in cypher
    assert ("runs_for_model", {"id": f"model:{hostile}@3"}) in [(k, p) for c, p, _ in fake.reads for k, v in CYPHER.items() if v == c]


def test_an_unreachable_neo4j_server_is_one_error_naming_the_uri(store):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = f"bolt://neo4j:s3cret@127.0.0.1:{port}"
    idx = open_lineage(store, uri)
    with pytest.raises(IndexUnavailable) as err:
        idx.lineage("anything")
    assert f"bolt://neo4j:***@127.0.0.1:{port}" in str(err.value) and "s3cret" not in str(err.value)
    with pytest.raises(IndexUnavailable, match=f"127.0.0.1:{port}"):
        idx.rebuild(build_graph(store, []))
    idx.close()


def test_a_missing_driver_is_one_error_with_the_extra_to_install(store, monkeypatch):
    monkeypatch.setitem(sys.modules, "neo4j", None)
    with pytest.raises(IndexUnavailable, match=r"pip install 'caramba\[neo4j\]'") as err:
        open_lineage(store, "bolt://localhost:7687")
    assert "bolt://localhost:7687" in str(err.value)


@pytest.mark.parametrize("uri", ["http://localhost:7474", "localhost:7687", "bolt://", "bolt://h:port"])
def test_a_uri_that_is_not_neo4j_is_refused_not_replaced(store, uri):
    with pytest.raises(IndexUnavailable):
        open_lineage(store, uri)


@pytest.mark.slow  # two actor runs recorded in S3 (moto on loopback): ~20 s
def test_both_indexes_read_an_s3_run_store_through_the_same_api(s3_env, tmp_path):
    """The indexes read only RunStore's API and the Notary's Query: an s3:// store (its local
    replica, tests/unit/store/conftest.py's moto server) gives the same graph shape and answers."""
    pytest.importorskip("caramba.store.s3run")
    from caramba.actors.experiment import RunSpec
    from caramba.actors.services import run_experiment as run_actor
    from caramba.actors.services import start_services
    from caramba.actors.system import ActorSystem
    from caramba.run import ledger_root
    from caramba.store.index import SearchQuery, open_search, reindex_search
    from caramba.store.runs import open_runs

    bucket, _ = s3_env
    store = open_runs(f"s3://{bucket}/team")
    with ActorSystem("local") as system:
        services = start_services(system, ledger_root(store))
        for rid, base in (("lin-a", None), ("lin-b", "latest")):
            st = run_actor(system, RunSpec(run_id=rid, steps=6, checkpoint_every=3, model="lin", base_version=base),
                           services, run_store=str(store.root))
            assert st.state == "verified", st
    search, lineage = open_search(store), open_lineage(store)
    assert reindex_search(search, store) == 2
    nodes, edges = reindex_lineage(lineage, store)
    g = build_graph(store)
    assert (nodes, edges) == (len(g.nodes), len(g.edges)) and any(i.startswith("ledger:") for i in g.nodes)
    assert ids(lineage.runs_for_model("lin", 2)) == {f"run:{by_ledger_run(store, 'lin-b')}"}
    assert "model:lin@1" in ids(lineage.ancestors("model:lin@2"))
    hits = search.search(SearchQuery.parse(where=["best:train.loss<1000"], experiment="lin"))
    assert sorted(h["id"] for h in hits) == sorted(r.id for r in store.list(10))
