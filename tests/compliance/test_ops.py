"""Every op x every dtype on every available backend, against float64 references.

Per (case, dtype): the op must accept exactly the dtypes its row lists (GraphError naming the
node otherwise); a claimed dtype must run and match the reference; an accepted dtype the
backend does not claim must be refused at compile time with UnsupportedOperation. The claimed
cases of one row and dtype run as one graph (``harness.Batches``; CARAMBA_COMPLIANCE_BATCH=0
compiles each alone), each still compared on its own.
"""

from __future__ import annotations

import re

import pytest

from caramba import ir
from caramba.errors import GraphError
from caramba.ir.dtypes import ALL

from .harness import SUBJECT, build, run_case
from .specs import load_rows

ROWS = load_rows()
SIBLINGS = {r.op: r.cases for r in ROWS}
DTYPE_ORDER = sorted(ALL, key=lambda d: list(ir.DType).index(d))

CASE_PARAMS = [
    pytest.param(case, d, id=f"{case.id}-{d.short}")
    for r in ROWS
    for case in r.cases
    for d in DTYPE_ORDER
    if d in case.dtypes
]


@pytest.mark.filterwarnings("error::RuntimeWarning")  # kernels give IEEE results, not warnings
@pytest.mark.parametrize("case, d", CASE_PARAMS)
def test_op(runner, case, d):
    run_case(runner, case, d, SIBLINGS[case.op])  # claimed cases of a row and dtype share one compilation


@pytest.mark.parametrize("r, d", [pytest.param(r, d, id=f"{r.op}-{d.short}") for r in ROWS for d in DTYPE_ORDER if r.typed or d in r.dtypes])
def test_dtype_rule(r, d):
    """The type rule accepts exactly the row's dtypes; a rejection names the node and op."""
    if d in r.dtypes:
        ir.verify(build(r.probe, d, with_values=False).graph)
        return
    with pytest.raises(GraphError) as info:
        build(r.probe, d, with_values=False)
    msg = str(info.value)
    assert f"node '{SUBJECT}'" in msg and f"op {r.op}" in msg, msg
    assert d.value in msg, msg


BAD_PARAMS = [pytest.param(r, b, id=f"{r.op}-{b.label}") for r in ROWS for b in r.bad]


@pytest.mark.parametrize("r, b", BAD_PARAMS)
def test_bad_input(r, b):
    """Shape, dtype, arity and attribute misuse raise GraphError while building, naming the node."""
    g = ir.Graph("bad")
    with g:
        ins = [g.input(f"x{i}", s, d) for i, (s, d) in enumerate(b.args)]
        with pytest.raises(GraphError) as info:
            g.call(r.op, ins, b.attrs, id=SUBJECT)
    msg = str(info.value)
    assert re.search(b.match, msg), f"{msg!r} does not match {b.match!r}"
    assert f"node '{SUBJECT}'" in msg and f"op {r.op}" in msg, msg
    assert not g.has_node(SUBJECT)  # a refused node is not added


# Rows whose probe builds a custom graph (graph/state plumbing) are covered in test_contract.
@pytest.mark.parametrize("r", [pytest.param(r, id=r.op) for r in ROWS if r.probe.build is None])
def test_unknown_attribute_lists_valid_names(r):
    d = min(r.dtypes, key=DTYPE_ORDER.index)
    case = r.probe
    bogus = dict(case.attrs_for(d), zz_not_an_attr=1)
    g = ir.Graph("bad")
    with g:
        ins = [g.input(f"x{i}", a.shape, a.dtype or d) for i, a in enumerate(case.args)]
        with pytest.raises(GraphError) as info:
            g.call(r.op, ins, bogus, id=SUBJECT)
    msg = str(info.value)
    opdef = ir.get_op(r.op)
    assert "unknown attribute 'zz_not_an_attr'" in msg and f"node '{SUBJECT}'" in msg
    if opdef.attrs:
        assert "valid:" in msg or "did you mean" in msg
        assert all(a.name in msg for a in opdef.attrs) or "did you mean" in msg
    else:
        assert "takes no attributes" in msg
