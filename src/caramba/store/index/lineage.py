"""The lineage graph: manifest -> run -> checkpoint -> model version -> ledger entry.

Nodes and typed edges come from ``caramba.store.index.source.build_graph`` (the run store and
the Notary's ledger); two implementations store and query them the same way:

- ``SqliteLineage``: the embedded stand-in, a node table and an edge table in
  ``<store>/index/lineage.sqlite`` (recursive SQL for ancestors/descendants);
- ``Neo4jLineage``: a Neo4j graph (label ``CarambaLineage``) through the official driver.

Queries: ``ancestors(id)`` / ``descendants(id)`` (every node an edge path leads from / to),
``runs_for_model(model, version)`` (the runs whose checkpoint was committed as that version),
``ledger_for_run(run)`` (the entries recorded about the run and those they depend on), and
``resolve(ref)`` (a node from its ID, an unambiguous prefix of it, or of the part after the type).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from caramba.store.index.source import (
    EDGE_TYPES,
    NODE_TYPES,
    Edge,
    Graph,
    IndexUnavailable,
    Node,
    QueryError,
    Server,
    build_graph,
    connect_sqlite,
    index_dir,
    model_id,
    redact,
    split_credentials,
)

MAX_REF_CHARS = 300
MAX_DEPTH = 10_000  # the longest edge path Neo4j follows (the stand-in has no bound; real graphs are far shallower)
LABEL = "CarambaLineage"
NEO4J = Server("lineage", "URI", "a Neo4j", "Neo4j driver", "neo4j", "lineage_uri / CARAMBA_LINEAGE_URI / --lineage-url",
               "bolt://neo4j:password@localhost:7687")


def _order(nodes: list[Node]) -> list[Node]:
    """Nodes in a stable order: by type (manifest, run, checkpoint, model, ledger), then ledger
    sequence, then ID."""
    rank = {t: i for i, t in enumerate(NODE_TYPES)}
    return sorted(nodes, key=lambda n: (rank.get(n.type, 99), n.props.get("seq", -1) if n.type == "ledger" else 0, n.id))


class LineageBase:
    """What both implementations share: resolving a reference and the composite answer."""

    where: str

    def find(self, prefix: str, limit: int = 6) -> list[str]:
        raise NotImplementedError

    def node(self, id: str) -> Node | None:
        raise NotImplementedError

    def resolve(self, ref: str) -> str:
        """The node ID ``ref`` names: an ID (``run:tiny-...``, ``model:lin@2``, ``ledger:<hash>``),
        a unique prefix of one, or of the part after the type (a run ID, an entry hash prefix)."""
        if not isinstance(ref, str) or not ref.strip():
            raise QueryError("an empty lineage node", hint="give a run ID, model:NAME@VERSION, or a ledger entry hash")
        if len(ref) > MAX_REF_CHARS or any(ord(c) < 32 for c in ref):
            raise QueryError(f"a lineage node is at most {MAX_REF_CHARS} printable characters",
                             hint="give a run ID, model:NAME@VERSION, or a ledger entry hash")
        typed = ref.split(":", 1)[0] in NODE_TYPES
        if self.node(ref) is not None:
            return ref
        found = self.find(ref) if typed else sorted({i for t in NODE_TYPES for i in self.find(f"{t}:{ref}")})
        if len(found) == 1:
            return found[0]
        shown = ref if len(ref) <= 80 else ref[:77] + "..."
        if not found:
            raise QueryError(f"no lineage node {shown!r} in {self.where}",
                             hint="give a run ID (or prefix), model:NAME@VERSION, a ledger entry hash (or 8+ digit "
                                  "prefix); `caramba store reindex` after new runs")
        raise QueryError(f"{shown!r} names several lineage nodes: {', '.join(found[:5])}; give more of it")

    def lineage(self, ref: str) -> dict[str, Any]:
        """The node ``ref`` names with its ancestors, descendants and the edges among them; for a
        run the ledger entries that back it, for a model version the runs that produced it."""
        id = self.resolve(ref)
        node = self.node(id)
        assert node is not None
        up, down = self.ancestors(id), self.descendants(id)
        ids = [id, *(n.id for n in up), *(n.id for n in down)]
        out: dict[str, Any] = {"node": node.as_dict(), "ancestors": [n.as_dict() for n in up],
                               "descendants": [n.as_dict() for n in down],
                               "edges": [e.as_dict() for e in sorted(self.edges_among(ids))]}
        if node.type == "run":
            out["ledger"] = [n.as_dict() for n in self.ledger_for_run(id)]
        if node.type == "model":
            model, _, version = id[len("model:"):].rpartition("@")
            out["runs"] = [n.as_dict() for n in self.runs_for_model(model, int(version))]
        return out

    # implemented by each index
    def ancestors(self, id: str) -> list[Node]:
        raise NotImplementedError

    def descendants(self, id: str) -> list[Node]:
        raise NotImplementedError

    def edges_among(self, ids: list[str]) -> set[Edge]:
        raise NotImplementedError

    def runs_for_model(self, model: str, version: int) -> list[Node]:
        raise NotImplementedError

    def ledger_for_run(self, run: str) -> list[Node]:
        raise NotImplementedError


def _run_id(run: str) -> str:
    return run if run.startswith("run:") else f"run:{run}"


def reindex_lineage(index: Any, store: Any, entries: list[Any] | None = None) -> tuple[int, int]:
    """Rebuild ``index`` from ``store`` (and its ledger); returns (nodes, edges)."""
    g = build_graph(store, entries)
    index.rebuild(g)
    return len(g.nodes), len(g.edges)


# ---- the embedded stand-in: two SQLite tables ----------------------------------------------
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS nodes (id TEXT PRIMARY KEY, type TEXT NOT NULL, label TEXT NOT NULL, props TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS edges (src TEXT NOT NULL, type TEXT NOT NULL, dst TEXT NOT NULL, PRIMARY KEY (src, type, dst))",
    "CREATE INDEX IF NOT EXISTS edges_dst ON edges(dst)",
)


class SqliteLineage(LineageBase):
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.where = str(self.path)

    @classmethod
    def of(cls, store: Any) -> "SqliteLineage":
        return cls(index_dir(store) / "lineage.sqlite")

    def _connect(self, create: bool = False) -> sqlite3.Connection:
        return connect_sqlite(self.path, "lineage", _SCHEMA, create)

    def _rows(self, sql: str, args: list[Any] | tuple[Any, ...] = ()) -> list[tuple]:
        db = self._connect()
        try:
            return db.execute(sql, tuple(args)).fetchall()
        except sqlite3.Error as exc:
            raise IndexUnavailable(f"the lineage index {self.path} cannot be read: {exc}",
                                   hint="rebuild it with `caramba store reindex`") from None
        finally:
            db.close()

    def rebuild(self, g: Graph) -> None:
        db = self._connect(create=True)
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute("DELETE FROM nodes")
            db.execute("DELETE FROM edges")
            db.executemany("INSERT INTO nodes VALUES (?,?,?,?)",
                           [(n.id, n.type, n.label, json.dumps(n.props, sort_keys=True, default=str)) for n in g.nodes.values()])
            db.executemany("INSERT INTO edges VALUES (?,?,?)", [(e.src, e.type, e.dst) for e in sorted(g.edges)])
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise IndexUnavailable(f"the lineage index {self.path} cannot be written: {exc}") from None
        finally:
            db.close()

    @staticmethod
    def _node(r: tuple) -> Node:
        return Node(r[0], r[1], r[2], json.loads(r[3]))

    def node(self, id: str) -> Node | None:
        rows = self._rows("SELECT id, type, label, props FROM nodes WHERE id = ?", (id,))
        return self._node(rows[0]) if rows else None

    def find(self, prefix: str, limit: int = 6) -> list[str]:
        return [r[0] for r in self._rows("SELECT id FROM nodes WHERE substr(id, 1, ?) = ? ORDER BY id LIMIT ?",
                                         (len(prefix), prefix, limit))]

    def _closure(self, id: str, up: bool) -> list[Node]:
        a, b = ("dst", "src") if up else ("src", "dst")
        rows = self._rows(
            f"WITH RECURSIVE reach(id) AS (SELECT e.{b} FROM edges e WHERE e.{a} = ? "
            f"UNION SELECT e.{b} FROM edges e JOIN reach ON e.{a} = reach.id) "
            "SELECT n.id, n.type, n.label, n.props FROM nodes n JOIN reach ON n.id = reach.id WHERE n.id != ?", (id, id))
        return _order([self._node(r) for r in rows])

    def ancestors(self, id: str) -> list[Node]:
        return self._closure(id, up=True)

    def descendants(self, id: str) -> list[Node]:
        return self._closure(id, up=False)

    def edges_among(self, ids: list[str]) -> set[Edge]:
        want = set(ids)
        out: set[Edge] = set()
        chunk = 400
        for i in range(0, len(ids), chunk):
            part = ids[i:i + chunk]
            marks = ",".join("?" * len(part))
            for r in self._rows(f"SELECT src, type, dst FROM edges WHERE src IN ({marks})", part):
                if r[2] in want:
                    out.add(Edge(*r))
        return out

    def runs_for_model(self, model: str, version: int) -> list[Node]:
        rows = self._rows(
            "SELECT DISTINCT n.id, n.type, n.label, n.props FROM edges c JOIN edges p ON p.dst = c.src AND p.type = 'PRODUCED' "
            "JOIN nodes n ON n.id = p.src AND n.type = 'run' WHERE c.type = 'COMMITTED_AS' AND c.dst = ?",
            (model_id(model, version),))
        return _order([self._node(r) for r in rows])

    def ledger_for_run(self, run: str) -> list[Node]:
        rows = self._rows(
            "WITH RECURSIVE back(id) AS (SELECT dst FROM edges WHERE src = ? AND type = 'RECORDED_IN' "
            "UNION SELECT e.dst FROM edges e JOIN back ON e.src = back.id AND e.type = 'DEPENDS_ON') "
            "SELECT n.id, n.type, n.label, n.props FROM nodes n JOIN back ON n.id = back.id WHERE n.type = 'ledger'",
            (_run_id(run),))
        return _order([self._node(r) for r in rows])

    def close(self) -> None:
        pass


# ---- Neo4j ---------------------------------------------------------------------------------
_RETURN = "RETURN DISTINCT {v}.id AS id, {v}.type AS type, {v}.label AS label, {v}.props AS props"
CYPHER = {
    "constraint": f"CREATE CONSTRAINT caramba_lineage_id IF NOT EXISTS FOR (n:{LABEL}) REQUIRE n.id IS UNIQUE",
    "clear": f"MATCH (n:{LABEL}) DETACH DELETE n",
    "nodes": f"UNWIND $nodes AS n CREATE (:{LABEL} {{id: n.id, type: n.type, label: n.label, props: n.props}})",
    # a relationship type cannot be a parameter: one statement per type, from the fixed EDGE_TYPES
    "edges": (f"UNWIND $edges AS e MATCH (a:{LABEL} {{id: e.src}}), (b:{LABEL} {{id: e.dst}}) "
              "CREATE (a)-[:{type}]->(b)"),
    "node": f"MATCH (n:{LABEL} {{id: $id}}) " + _RETURN.format(v="n"),
    "find": f"MATCH (n:{LABEL}) WHERE n.id STARTS WITH $prefix RETURN n.id AS id ORDER BY id LIMIT $limit",
    "ancestors": (f"MATCH (n:{LABEL} {{id: $id}})<-[*1..{MAX_DEPTH}]-(a:{LABEL}) WHERE a.id <> $id "
                  + _RETURN.format(v="a")),
    "descendants": (f"MATCH (n:{LABEL} {{id: $id}})-[*1..{MAX_DEPTH}]->(a:{LABEL}) WHERE a.id <> $id "
                    + _RETURN.format(v="a")),
    "edges_among": (f"MATCH (a:{LABEL})-[r]->(b:{LABEL}) WHERE a.id IN $ids AND b.id IN $ids "
                    "RETURN a.id AS src, type(r) AS type, b.id AS dst"),
    "runs_for_model": (f"MATCH (r:{LABEL} {{type: 'run'}})-[:PRODUCED]->(:{LABEL} {{type: 'checkpoint'}})"
                       f"-[:COMMITTED_AS]->(:{LABEL} {{id: $id}}) " + _RETURN.format(v="r")),
    "ledger_for_run": (f"MATCH (:{LABEL} {{id: $id}})-[:RECORDED_IN]->(e:{LABEL})-[:DEPENDS_ON*0..{MAX_DEPTH}]->"
                       f"(d:{LABEL} {{type: 'ledger'}}) " + _RETURN.format(v="d")),
}


def neo4j_statements(g: Graph) -> list[tuple[str, dict[str, Any]]]:
    """The write transaction that replaces the whole graph with ``g`` (atomic: readers see the
    old graph or the new one)."""
    stmts: list[tuple[str, dict[str, Any]]] = [(CYPHER["clear"], {})]
    nodes = [{"id": n.id, "type": n.type, "label": n.label, "props": json.dumps(n.props, sort_keys=True, default=str)}
             for n in sorted(g.nodes.values(), key=lambda n: n.id)]
    if nodes:
        stmts.append((CYPHER["nodes"], {"nodes": nodes}))
    for t in EDGE_TYPES:
        edges = [{"src": e.src, "dst": e.dst} for e in sorted(g.edges) if e.type == t]
        if edges:
            stmts.append((CYPHER["edges"].replace("{type}", t), {"edges": edges}))
    return stmts


class Neo4jLineage(LineageBase):
    """The lineage graph in Neo4j through the official driver. The URI may carry the user and
    password (``bolt://neo4j:secret@host:7687``); ``driver``: a driver to use instead."""

    def __init__(self, uri: str, *, driver: Any = None, database: str | None = None, timeout: float = 10.0) -> None:
        self.uri, self.database = uri, database
        self.where = f"Neo4j {redact(uri)}"
        if driver is None:
            try:
                import neo4j
            except ImportError:
                raise NEO4J.missing_client(uri) from None
            bare, auth = split_credentials(uri)
            try:
                driver = neo4j.GraphDatabase.driver(bare, auth=auth, connection_timeout=timeout,
                                                    connection_acquisition_timeout=timeout,
                                                    max_transaction_retry_time=0)  # unreachable: say so at once
            except (ValueError, neo4j.exceptions.ConfigurationError) as exc:
                raise IndexUnavailable(f"lineage URI {redact(uri)!r} is not a Neo4j URI: {exc}",
                                       hint="e.g. bolt://neo4j:password@localhost:7687 or neo4j://host:7687") from None
        self.driver = driver

    def _guard(self, what: str, fn: Any) -> Any:
        try:
            import neo4j.exceptions as nx

            errors: tuple[type[BaseException], ...] = (nx.Neo4jError, nx.DriverError, OSError)
        except ImportError:
            errors = (OSError,)
        try:
            return fn()
        except errors as exc:  # unreachable, refused, authentication, a server-side error
            raise NEO4J.refused(self.uri, f"cannot be used ({what}): {type(exc).__name__}: {exc}") from None

    def _read(self, name: str, **params: Any) -> list[Any]:
        kw = {"database_": self.database} if self.database else {}
        res = self._guard(name, lambda: self.driver.execute_query(CYPHER[name], params, routing_="r", **kw))
        return list(res.records if hasattr(res, "records") else res[0])

    def rebuild(self, g: Graph) -> None:
        stmts = neo4j_statements(g)

        def work(tx: Any) -> None:
            for cypher, params in stmts:
                tx.run(cypher, params).consume()

        def go() -> None:
            kw = {"database": self.database} if self.database else {}
            with self.driver.session(**kw) as s:
                s.run(CYPHER["constraint"]).consume()
                s.execute_write(work)

        self._guard("rebuilding the graph", go)

    @staticmethod
    def _node(r: Any) -> Node:
        return Node(r["id"], r["type"], r["label"], json.loads(r["props"] or "{}"))

    def node(self, id: str) -> Node | None:
        rows = self._read("node", id=id)
        return self._node(rows[0]) if rows else None

    def find(self, prefix: str, limit: int = 6) -> list[str]:
        return [r["id"] for r in self._read("find", prefix=prefix, limit=limit)]

    def ancestors(self, id: str) -> list[Node]:
        return _order([self._node(r) for r in self._read("ancestors", id=id)])

    def descendants(self, id: str) -> list[Node]:
        return _order([self._node(r) for r in self._read("descendants", id=id)])

    def edges_among(self, ids: list[str]) -> set[Edge]:
        return {Edge(r["src"], r["type"], r["dst"]) for r in self._read("edges_among", ids=list(ids))}

    def runs_for_model(self, model: str, version: int) -> list[Node]:
        return _order([self._node(r) for r in self._read("runs_for_model", id=model_id(model, version))])

    def ledger_for_run(self, run: str) -> list[Node]:
        return _order([self._node(r) for r in self._read("ledger_for_run", id=_run_id(run))])

    def close(self) -> None:
        self.driver.close()


def open_lineage(store: Any, uri: str | None = None) -> SqliteLineage | Neo4jLineage:
    """The lineage index of ``store``: Neo4j at ``uri`` (``bolt://``, ``neo4j://`` and their
    ``+s``/``+ssc`` forms), else the embedded stand-in. A URI that is set is used or refused,
    never replaced by the stand-in."""
    if not uri:
        return SqliteLineage.of(store)
    NEO4J.check_url(uri, ("bolt", "bolt+s", "bolt+ssc", "neo4j", "neo4j+s", "neo4j+ssc"))
    return Neo4jLineage(uri)
