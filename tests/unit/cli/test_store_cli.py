"""`caramba store reindex|search|lineage` against a real store (runs made by the run engine)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from caramba.cli import app
from caramba.store.index import IndexUnavailable, QueryError
from caramba.store.runs import RunStore

from ..store._index_store import TAGS, by_ledger_run, copy

MAIN = "import sys; from caramba.cli import main; sys.argv = ['caramba', *sys.argv[1:]]; main()"


def invoke(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "CARAMBA_SEARCH_URL": "", "CARAMBA_LINEAGE_URI": "",
                                                    **(env or {})})


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> RunStore:
    s = copy(tmp_path_factory)
    r = invoke("store", "reindex", "--store", str(s.root), "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["search"]["runs"] == 4 and out["search"]["index"] == str(s.root / "index" / "search.sqlite")
    assert out["lineage"]["nodes"] > 10 and out["lineage"]["index"] == str(s.root / "index" / "lineage.sqlite")
    return s


def test_reindex_twice_prints_the_same(store):
    a = invoke("store", "reindex", "--store", str(store.root))
    b = invoke("store", "reindex", "--store", str(store.root))
    assert a.exit_code == b.exit_code == 0 and a.output == b.output and "search: 4 run(s)" in a.output


def test_search_with_where_and_json(store):
    want = sorted((r.id for r in store.list(100) if isinstance(r.summary.get("test.accuracy"), float)
                   and r.summary["test.accuracy"] >= 0.5), key=lambda i: -store.get(i).created)
    r = invoke("store", "search", "--where", "test.accuracy>=0.5", "--json", "--store", str(store.root))
    assert r.exit_code == 0, r.output
    assert [h["id"] for h in json.loads(r.output)] == want
    r = invoke("store", "search", "mlp", "--where", "accuracy>=0", "--tag", "baseline", "--store", str(store.root))
    tagged = next(x.id for x in store.list(100) if x.tags == TAGS)
    assert r.exit_code == 0 and tagged in r.output and "accuracy=" in r.output and "baseline" in r.output
    r = invoke("store", "search", "nosuchword", "--store", str(store.root))
    assert r.exit_code == 0 and "no runs match" in r.output


@pytest.mark.parametrize("args,match", [(["--where", "accuracy>=0.9; DROP TABLE runs"], "METRIC OP NUMBER"),
                                        (["--where", "acurracy>=0.9"], "acurracy"),
                                        (['"*('], "no words"), (["x " * 100], "words"),
                                        (["--status", "done"], "unknown run status")])
def test_bad_searches_are_caramba_errors(store, args, match):
    r = invoke("store", "search", *args, "--store", str(store.root))
    assert isinstance(r.exception, QueryError) and match in str(r.exception), r.exception


def test_lineage_of_a_model_version_and_of_a_run(store):
    r = invoke("store", "lineage", "model:lin@2", "--json", "--store", str(store.root))
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert [n["id"] for n in out["runs"]] == [f"run:{by_ledger_run(store, 'lin-b')}"]
    assert "model:lin@1" in [n["id"] for n in out["ancestors"]]
    run = by_ledger_run(store, "lin-a")
    r = invoke("store", "lineage", run[:-1], "--store", str(store.root))
    assert r.exit_code == 0 and f"run:{run}" in r.output and "ledger entries backing it:" in r.output
    r = invoke("store", "lineage", "' OR 1=1 --", "--store", str(store.root))
    assert isinstance(r.exception, QueryError)


def test_a_configured_server_is_used_or_refused_never_replaced(store, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = invoke("store", "search", "mlp", "--search-url", f"http://127.0.0.1:{port}", "--store", str(store.root))
    assert isinstance(r.exception, IndexUnavailable) and f"127.0.0.1:{port}" in str(r.exception)
    r = invoke("store", "lineage", "model:lin@1", "--store", str(store.root), env={"CARAMBA_LINEAGE_URI": f"bolt://127.0.0.1:{port}"})
    assert isinstance(r.exception, IndexUnavailable) and f"bolt://127.0.0.1:{port}" in str(r.exception)
    cfg = tmp_path / "caramba.yml"
    cfg.write_text(f"search_url: http://127.0.0.1:{port}\n")
    r = invoke("store", "reindex", "--store", str(store.root), "--config", str(cfg), env={"CARAMBA_SEARCH_URL": None})
    assert isinstance(r.exception, IndexUnavailable) and f"127.0.0.1:{port}" in str(r.exception)


@pytest.mark.slow  # a fresh interpreter imports the command line (~5 s)
def test_the_command_prints_one_error_line_not_a_traceback(store):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.run([sys.executable, "-c", MAIN, "store", "reindex", "--store", str(store.root),
                        "--lineage-url", f"bolt://neo4j:pw@127.0.0.1:{port}"], capture_output=True, text=True, timeout=120,
                       env={"COLUMNS": "300", "PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and f"bolt://neo4j:***@127.0.0.1:{port}" in p.stderr and "pw@" not in p.stderr
    assert p.stderr.startswith("error: IndexUnavailable")
