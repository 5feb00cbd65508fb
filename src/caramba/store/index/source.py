"""What the secondary indexes are fed with, read from the primary store only.

The run store is read through ``RunStore``'s public methods (``list``, ``metrics``,
``artifacts``) and the Notary's ledger through its public query (``Query`` to a Notary actor),
so the same code indexes any store that implements that API. Two products:

- ``run_docs(store)``: one ``RunDoc`` per live run (deleted runs are gone from ``list``): the
  text a search matches (manifest, note, tags) and the final/best value of every metric.
- ``build_graph(store)``: the lineage graph, nodes and typed edges::

      manifest:<sha256> -INSTANTIATED-> run:<id> -PRODUCED-> checkpoint:<sha256>
      checkpoint -COMMITTED_AS-> model:<name>@<version> -BACKED_BY-> ledger:<entry hash>
      run -RECORDED_IN-> ledger entry      checkpoint -RECORDED_IN-> ledger artifact entry
      model@N -DERIVED-> model@M (M was trained from N)   ledger -DEPENDS_ON-> ledger
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from caramba.errors import ConfigError

MAX_RUNS = 1_000_000
MAX_MANIFEST_CHARS = 1_000_000
NODE_TYPES = ("manifest", "run", "checkpoint", "model", "ledger")
NOT_METRICS = frozenset({"model_version"})  # numbers in a run's summary that are not measurements
EDGE_TYPES = ("INSTANTIATED", "PRODUCED", "COMMITTED_AS", "DERIVED", "BACKED_BY", "RECORDED_IN", "DEPENDS_ON")


class IndexUnavailable(ConfigError):
    """A secondary index cannot be used: its server is configured but unreachable or refuses,
    its client library is missing (``pip install 'caramba[elasticsearch]'`` / ``[neo4j]``), or
    the stand-in's file cannot be written. The message names the URL or file. caramba never
    falls back to the embedded stand-in when a server was configured."""


class QueryError(ConfigError):
    """A search or lineage query cannot be answered as given: a malformed ``--where``
    condition, an unknown metric, a query that is too long, no such node, or an index that was
    never built (``caramba store reindex`` builds it)."""


# ---- runs ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class MetricValue:
    """One metric of a run: ``key`` is ``split.name`` (``name`` alone for a summary value
    without a split); ``final`` its last value (the run's summary when it has one), ``best``
    the best logged value (min, or max for accuracy-like names; the final for lr/speed)."""

    key: str
    split: str
    name: str
    final: float | None
    best: float | None


@dataclass
class RunDoc:
    id: str
    experiment: str
    status: str
    created: float
    tags: list[str] = field(default_factory=list)
    note: str = ""
    manifest: str = ""
    manifest_sha256: str = ""
    group_id: str = ""
    arm: str = ""
    target: str = ""
    run_name: str = ""
    backend: str = ""
    metrics: list[MetricValue] = field(default_factory=list)

    def hit(self) -> dict[str, Any]:
        """What a search returns for this run."""
        return {"id": self.id, "experiment": self.experiment, "status": self.status, "created": self.created,
                "tags": list(self.tags), "metrics": {m.key: m.final for m in self.metrics},
                "best": {m.key: m.best for m in self.metrics}}


def _finite(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _manifest_text(store: Any, rec: Any) -> str:
    """The run's resolved manifest: its ``manifest`` artifact, else the text its run spec
    carries, else the parsed manifest in its config."""
    text = ""
    for art in store.artifacts(rec.id, "manifest"):
        reader = getattr(store, "read_artifact", None)  # a store whose artifacts are not local files
        try:
            data = reader(rec.id, art.name) if reader is not None else Path(art.path).read_bytes()
        except (OSError, ValueError):
            continue
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
        break
    cfg = rec.config if isinstance(rec.config, dict) else {}
    if not text:
        spec = cfg.get("spec")
        inner = spec.get("config") if isinstance(spec, dict) else None
        if isinstance(inner, dict) and isinstance(inner.get("manifest_text"), str):
            text = inner["manifest_text"]
    if not text and isinstance(cfg.get("manifest"), dict):
        text = json.dumps(cfg["manifest"], sort_keys=True, default=str)
    return text[:MAX_MANIFEST_CHARS]


def _metrics(store: Any, rec: Any) -> list[MetricValue]:
    from caramba.run.compare import direction

    series: dict[tuple[str, str], list[float]] = {}
    for _step, split, name, value in store.metrics(rec.id):
        series.setdefault((split, name), []).append(value)
    out: dict[str, MetricValue] = {}
    for (split, name), values in series.items():
        key = f"{split}.{name}" if split else name
        finite = [v for v in values if _finite(v) is not None]
        mode = direction(key)
        best = (min(finite) if mode == "min" else max(finite)) if finite and mode else _finite(values[-1])
        out[key] = MetricValue(key, split, name, _finite(values[-1]), best)
    summary = rec.summary if isinstance(rec.summary, dict) else {}
    for key, value in summary.items():
        v = _finite(value)
        if v is None or not isinstance(key, str) or not key or key in NOT_METRICS:
            continue
        split, _, name = key.rpartition(".")
        old = out.get(key)
        out[key] = MetricValue(key, split, name, v, old.best if old is not None else v)
    return [out[k] for k in sorted(out)]


def run_docs(store: Any) -> list[RunDoc]:
    """One document per live run of ``store``, oldest first."""
    docs = []
    for rec in sorted(store.list(MAX_RUNS), key=lambda r: (r.created, r.id)):
        docs.append(RunDoc(
            id=rec.id, experiment=rec.experiment, status=rec.status, created=float(rec.created),
            tags=list(rec.tags or []), note=rec.note or "", manifest=_manifest_text(store, rec),
            manifest_sha256=rec.manifest_sha256 or "", group_id=rec.group_id or "", arm=rec.arm or "",
            target=rec.target or "", run_name=rec.run_name or "", backend=rec.backend or "", metrics=_metrics(store, rec),
        ))
    return docs


# ---- the ledger ----------------------------------------------------------------------------
def ledger_file(store: Any) -> Path:
    from caramba.run.engine import ledger_root

    return ledger_root(store) / "notary" / "ledger.sqlite"


def ledger_entries(store: Any) -> list[Any]:
    """Every readable entry of the store's ledger (``[]`` when the store has none), through a
    Notary actor's ``Query``; malformed rows are skipped (``caramba notary verify`` names them)."""
    path = ledger_file(store)
    try:  # a remote store (s3://) keeps its ledger in the bucket; the Notary reads it from there
        from caramba.actors.ledger_s3 import ledger_exists
        from caramba.store.registry import remote_of

        remote = remote_of(path.parent.parent)
    except ImportError:
        remote = None
    if remote is not None:
        if not ledger_exists(remote):
            return []
    elif not path.exists() or path.stat().st_size == 0:  # no ledger: nothing to read (and none is created)
        return []
    from caramba.actors.notary import Notary, Query
    from caramba.actors.system import ActorSystem

    system = ActorSystem("local")
    try:  # the Notary alone: a query needs no Storage, and nothing else gets created
        ref = system.spawn(Notary, "notary", kwargs={"root": str(path.parent), "storage": None})
        return list(ref.ask(Query()).entries)
    finally:
        system.shutdown()


# ---- the lineage graph ---------------------------------------------------------------------
@dataclass(frozen=True)
class Node:
    id: str
    type: str
    label: str
    props: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "type": self.type, "label": self.label, "props": self.props}


@dataclass(frozen=True, order=True)
class Edge:
    src: str
    type: str
    dst: str

    def as_dict(self) -> dict[str, str]:
        return {"src": self.src, "type": self.type, "dst": self.dst}


@dataclass
class Graph:
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: set[Edge] = field(default_factory=set)

    def node(self, id: str, type: str, label: str, **props: Any) -> str:
        if id not in self.nodes:
            self.nodes[id] = Node(id, type, label, {k: v for k, v in props.items() if v not in (None, "")})
        else:  # later facts about the same node add to it
            old = self.nodes[id]
            self.nodes[id] = Node(id, type, old.label, {**{k: v for k, v in props.items() if v not in (None, "")}, **old.props})
        return id

    def edge(self, src: str, type: str, dst: str) -> None:
        assert type in EDGE_TYPES, type
        if src in self.nodes and dst in self.nodes and src != dst:
            self.edges.add(Edge(src, type, dst))


def model_id(model: str, version: int) -> str:
    return f"model:{model}@{int(version)}"


def build_graph(store: Any, entries: list[Any] | None = None) -> Graph:
    """The lineage graph of ``store``'s live runs and the model versions in its ledger.
    ``entries``: the ledger's entries (default: read through the Notary)."""
    g = Graph()
    entries = ledger_entries(store) if entries is None else entries
    by_hash = {e.hash: e for e in entries}
    by_subject: dict[str, list[Any]] = {}
    for e in entries:
        if e.subject:
            by_subject.setdefault(e.subject, []).append(e)

    def ledger_node(e: Any) -> str:
        return g.node(f"ledger:{e.hash}", "ledger", f"#{e.seq} {e.kind} {e.name}", seq=e.seq, hash=e.hash, kind=e.kind,
                      name=e.name, subject=e.subject, actor=e.actor, time=e.time)

    def with_deps(e: Any) -> str:
        """The entry's node and, transitively, the entries it depends on."""
        todo, top = [e], ledger_node(e)
        while todo:
            cur = todo.pop()
            for dep in cur.depends_on:
                d = by_hash.get(dep)
                if d is None:
                    continue
                fresh = f"ledger:{d.hash}" not in g.nodes
                ledger_node(d)
                g.edge(f"ledger:{cur.hash}", "DEPENDS_ON", f"ledger:{d.hash}")
                if fresh:
                    todo.append(d)
        return top

    def checkpoint_node(sha: str, **props: Any) -> str:
        return g.node(f"checkpoint:{sha}", "checkpoint", f"checkpoint {sha[:12]}", sha256=sha, **props)

    for rec in sorted(store.list(MAX_RUNS), key=lambda r: (r.created, r.id)):
        run = g.node(f"run:{rec.id}", "run", rec.id, experiment=rec.experiment, status=rec.status, created=rec.created,
                     arm=rec.arm, target=rec.target, seed=rec.seed)
        if rec.manifest_sha256:
            m = g.node(f"manifest:{rec.manifest_sha256}", "manifest", f"manifest {rec.experiment}",
                       sha256=rec.manifest_sha256, path=rec.manifest_path, experiment=rec.experiment)
            g.edge(m, "INSTANTIATED", run)
        for art in store.artifacts(rec.id, "checkpoint"):
            g.edge(run, "PRODUCED", checkpoint_node(art.sha256, name=art.name, size=art.size))
        cfg = rec.config if isinstance(rec.config, dict) else {}
        subject = str(cfg.get("ledger_run") or rec.id)
        for e in by_subject.get(subject, []):
            if e.kind == "event" and e.name == "identity":
                continue
            g.edge(run, "RECORDED_IN", with_deps(e))
            if e.kind == "artifact" and e.name == "checkpoint" and isinstance(e.payload.get("sha256"), str):
                ck = checkpoint_node(e.payload["sha256"], key=e.payload.get("key"), step=e.payload.get("step"))
                g.edge(run, "PRODUCED", ck)
                g.edge(ck, "RECORDED_IN", f"ledger:{e.hash}")
    # model versions: each `committed` event names one; the claim it depends on cites the checkpoint
    for e in entries:
        if not (e.kind == "event" and e.name == "committed"):
            continue
        model, version = e.payload.get("model"), e.payload.get("version")
        if not isinstance(model, str) or isinstance(version, bool) or not isinstance(version, int):
            continue
        mv = g.node(model_id(model, version), "model", f"{model} v{version}", model=model, version=version, run=e.subject)
        g.edge(mv, "BACKED_BY", with_deps(e))
        for dep in e.depends_on:
            claim = by_hash.get(dep)
            if claim is None or claim.kind != "claim":
                continue
            g.edge(mv, "BACKED_BY", f"ledger:{claim.hash}")
            ck = claim.payload.get("checkpoint")
            if isinstance(ck, dict) and isinstance(ck.get("sha256"), str):
                c = checkpoint_node(ck["sha256"], key=ck.get("key"))
                g.edge(c, "COMMITTED_AS", mv)
            base = claim.payload.get("base_version")
            if isinstance(base, int) and not isinstance(base, bool):
                parent = g.node(model_id(model, base), "model", f"{model} v{base}", model=model, version=base)
                g.edge(parent, "DERIVED", mv)
    return g


def connect_sqlite(path: Path, what: str, schema: "tuple[str, ...] | list[str]", create: bool) -> sqlite3.Connection:
    """Open an embedded index (``what``: "search", "lineage") at ``path``; ``create`` makes the
    folder and the tables, otherwise a missing file says how to build it."""
    if not create and not path.exists():
        raise QueryError(f"no {what} index at {path}", hint="build it with `caramba store reindex`")
    try:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        if create:
            for st in schema:
                db.execute(st)
    except (OSError, sqlite3.Error) as exc:
        raise IndexUnavailable(f"the {what} index {path} cannot be used: {exc}",
                               hint="point --store at a folder this process can write") from None
    return db


def index_dir(store: Any) -> Path:
    """Where the embedded stand-ins keep their files: ``<store>/index``; for a store that is not
    a local folder, its ``index_root`` attribute, else ``<cache_dir>/index/<hash of its URL>``."""
    own = getattr(store, "index_root", None)
    if own is not None:
        return Path(own)
    root = str(store.root)
    if "://" in root and not root.startswith("file://"):  # a remote store: a local folder per store URL
        import hashlib

        from caramba.config import settings

        return Path(settings().cache_dir).expanduser() / "index" / hashlib.sha256(root.encode()).hexdigest()[:16]
    return Path(root.removeprefix("file://")) / "index"


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.hostname or ""
        netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    except ValueError:
        return "<unparseable URL>"


@dataclass(frozen=True)
class Server:
    """How the messages about one index server speak of it: ``role`` (``search``), ``noun``
    (``URL``), ``kind`` with its article (``an Elasticsearch``), ``client`` (``Elasticsearch
    client``), ``extra`` (the pip extra), ``settings`` (``search_url / CARAMBA_SEARCH_URL /
    --search-url``) and an ``example`` URL."""

    role: str
    noun: str
    kind: str
    client: str
    extra: str
    settings: str
    example: str

    def check_url(self, url: str, schemes: tuple[str, ...]) -> None:
        """Refuse (IndexUnavailable) a URL that does not parse, has a bad port, another scheme
        or no host."""
        from urllib.parse import urlsplit

        try:
            p = urlsplit(url)
            p.port  # noqa: B018 - raises for a bad port
        except ValueError as exc:
            raise IndexUnavailable(f"{self.role} {self.noun} {redact(url)!r} is not a {self.noun}: {exc}") from None
        if p.scheme not in schemes or not p.hostname:
            setting = self.settings.split(" / ")[0]
            raise IndexUnavailable(f"{self.role} {self.noun} {redact(url)!r} is not {self.kind} {self.noun}",
                                   hint=f"e.g. {self.example}; leave {setting} empty for the embedded index")

    def missing_client(self, url: str) -> IndexUnavailable:
        """The error for a configured server whose client library is not installed."""
        return IndexUnavailable(f"the {self.role} server {redact(url)} is configured but the {self.client} is not "
                                f"installed", hint=f"pip install 'caramba[{self.extra}]' (or unset {self.settings} to "
                                                   "use the embedded index)")

    def refused(self, url: str, detail: str) -> IndexUnavailable:
        """The error for a server that cannot be reached or refuses (``detail``: what and why)."""
        return IndexUnavailable(f"the {self.role} server {redact(url)} {detail}",
                                hint=f"start it, or fix {self.settings}")


def split_credentials(url: str, *, query: bool = True) -> tuple[str, tuple[str, str] | None]:
    """``url`` without its user and password (and without its query unless ``query``), and
    the ``(user, password)`` it carried, if any (percent-decoded)."""
    from urllib.parse import unquote, urlsplit, urlunsplit

    p = urlsplit(url)
    auth = (unquote(p.username), unquote(p.password or "")) if p.username else None
    netloc = (p.hostname or "") + (f":{p.port}" if p.port else "")
    return urlunsplit((p.scheme, netloc, p.path, p.query if query else "", "")), auth
