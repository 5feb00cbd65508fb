"""`caramba compile GRAPH_OR_MANIFEST --backend NAME --explain`."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import caramba
from caramba import ir, ops
from caramba.backends.cpu import fused as cpu_fused
from caramba.cli import app

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.fixture
def graph_file(tmp_path):
    with caramba.Graph("mlp") as g:
        x = g.input("x", (16, 32))
        w = g.variable("w", (32, 64))
        b = g.variable("b", (64,))
        y = ops.gelu(x @ w + b) * 1.0
        g.output("y", ops.exp(y * 0.5) + 1.0)
    path = tmp_path / "mlp.json"
    path.write_text(ir.dumps(g))
    return path


def test_explain_prints_every_pass_and_the_memory_plan(graph_file, tmp_path):
    out_file = tmp_path / "out.json"
    res = CliRunner().invoke(app, ["compile", str(graph_file), "--backend", "cpu", "--explain", "-o", str(out_file)])
    assert res.exit_code == 0, res.output
    for name in ("verify", "canonicalize", "cse", "simplify", "fuse", "dce", "memory", "schedule", "lower"):
        assert f"  {name} " in res.output, name
    assert "mul_one (caramba.compiler.simplify:" in res.output  # the rule that fired, and where
    assert "peak bytes before" in res.output and "after" in res.output
    if cpu_fused.available():
        assert "fused.linear: activation=gelu" in res.output
        assert "fused.elementwise: add(exp(mul(in0, 0.5)), 1.0)" in res.output
    back = ir.loads(out_file.read_text())
    ir.verify(back)


def test_disable_and_print_ir(graph_file):
    res = CliRunner().invoke(app, ["compile", str(graph_file), "-b", "cpu", "--disable", "fuse", "--explain", "--print-ir"])
    assert res.exit_code == 0, res.output
    assert "fuse          (disabled)" in res.output
    assert "fused." not in res.output.split("graph mlp")[1]


def test_errors_name_the_problem(graph_file, tmp_path):
    res = CliRunner().invoke(app, ["compile", str(graph_file), "-b", "cpu", "--disable", "lower"])
    assert res.exit_code != 0 and "cannot be disabled" in str(res.exception)
    res = CliRunner().invoke(app, ["compile", str(tmp_path / "nope.json"), "-b", "cpu"])
    assert res.exit_code != 0 and "does not exist" in str(res.exception)


def test_compiles_a_manifest():
    manifest = EXAMPLES / "digits_mlp.yml"
    if not manifest.exists():
        pytest.skip("examples/digits_mlp.yml is not in this checkout")
    res = CliRunner().invoke(app, ["compile", str(manifest), "-b", "cpu", "--explain"])
    assert res.exit_code == 0, res.output
    assert "compiled 'digits-mlp' for cpu" in res.output
