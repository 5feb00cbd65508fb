"""The suite covers the registry: every op has a spec row, every claim of a backend has a case
that runs, and the spec tables are well formed."""

from __future__ import annotations

from collections import Counter

import pytest

from caramba import ir
from caramba.compute import BACKENDS, build_info

from .harness import claimed
from .specs import families, load_rows

ROWS = load_rows()
BY_OP = {r.op: r for r in ROWS}


def test_every_registered_op_has_compliance_cases():
    missing = sorted(set(ir.all_ops()) - set(BY_OP))
    assert not missing, f"ops with no compliance row (add them to tests/compliance/specs/<family>.py): {missing}"


def test_rows_name_registered_ops_once():
    unknown = sorted(set(BY_OP) - set(ir.all_ops()))
    assert not unknown, f"spec rows for unknown ops: {unknown}"
    twice = [op for op, n in Counter(r.op for r in ROWS).items() if n > 1]
    assert not twice, f"ops with more than one row: {twice}"


def test_rows_live_in_their_family_module():
    import importlib

    for fam in families():
        mod = importlib.import_module(f"{__package__}.specs.{fam}")
        wrong = [r.op for r in mod.ROWS if r.op.split(".")[0] != fam]
        assert not wrong, f"specs/{fam}.py holds rows of other families: {wrong}"


@pytest.mark.parametrize("r", [pytest.param(r, id=r.op) for r in ROWS])
def test_row_is_well_formed(r):
    assert r.cases, f"{r.op} has no cases"
    assert r.dtypes, f"{r.op} lists no dtypes"
    for c in r.cases:
        assert c.dtypes, f"{c.id} runs for no dtype of its row"
        assert c.ref is not None or c.check is not None, f"{c.id} has neither a reference nor a check"
    ids = [c.id for c in r.cases]
    assert len(ids) == len(set(ids)), f"{r.op} has duplicate case labels"
    covered = frozenset().union(*(c.dtypes for c in r.cases))
    assert covered == r.dtypes, f"{r.op}: no case runs for {sorted(d.value for d in r.dtypes - covered)}"


def test_backends_are_listed_with_build_info():
    """Every registered backend reports build info (unavailable ones say why)."""
    for name in BACKENDS:
        info = build_info(name)
        assert info.available or info.reason, f"backend {name} is unavailable without a reason"


def test_every_claim_has_a_case_that_runs(runner):
    """Each (op, dtype) a backend claims, where the op takes that dtype, has a case that the
    backend's capabilities let run; those cases are in test_ops and must pass there."""
    caps = runner.capabilities
    registry = ir.all_ops()
    unknown = sorted(op for op in caps.ops if op not in registry)
    assert not unknown, f"{runner.location} claims ops that are not registered: {unknown}"
    gaps = []
    for op in sorted(caps.ops):
        r = BY_OP.get(op)
        if r is None:
            gaps.append(f"{op}: no row")
            continue
        for d in sorted(caps.dtypes(op) & r.dtypes, key=lambda x: x.value):
            if not any(d in c.dtypes and claimed(c, d, caps) for c in r.cases):
                gaps.append(f"{op} {d.value}: claimed, but no case can run (an input/output dtype it needs is not claimed?)")
    assert not gaps, f"{runner.location}:\n  " + "\n  ".join(gaps)
