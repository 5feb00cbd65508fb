"""Every case's graph survives the JSON codec unchanged, and the verifier accepts it."""

from __future__ import annotations

import json

import pytest

from caramba import ir

from .harness import build
from .specs import load_rows

ROWS = load_rows()


def _first_dtype(case):
    return min(case.dtypes, key=lambda d: list(ir.DType).index(d))


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for r in ROWS for c in r.cases if c.dtypes])
def test_codec_round_trip(case):
    g = build(case, _first_dtype(case), with_values=False).graph
    ir.verify(g)
    text = ir.dumps(g)
    back = ir.loads(text)
    assert back == g
    assert ir.dumps(back) == text  # canonical: a re-dump is byte-identical
    assert back.fingerprint() == g.fingerprint()
    ir.verify(back)
    doc = json.loads(text)
    assert doc["format"] == "caramba.ir" and doc["version"] == 1
    ops = {n["op"]: n["version"] for n in doc["nodes"]}
    assert ops[case.op] == ir.get_op(case.op).version  # op versions travel with the graph
