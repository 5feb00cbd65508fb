"""Nodes the trainer section generates (the learning-rate schedule, gradient clipping, the
optimizer update) carry the manifest line that asked for them, so an error about one (a backend
refusing the schedule's float64 cos, say) names that line and not only a node like 'cos_1'."""

from __future__ import annotations

from pathlib import Path

from caramba.ir.graph import Graph, origin_scope

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_the_trainers_nodes_point_at_its_lines():
    from caramba import train
    from caramba.manifest.compile import prepare
    from caramba.run.feed import Feeder
    from caramba.run.model import build_optimizer, manifest_model

    path = EXAMPLES / "digits_mlp.yml"
    prep = prepare(path)
    lines = path.read_text().splitlines()
    model, opt = manifest_model(prep), build_optimizer(prep, 100)
    t = prep.manifest.trainer

    def loss_fn(m, **ins):
        return m(**ins)[t.loss], {}

    g = train.TrainStep(model, loss_fn, opt, Feeder(prep, 8).specs(8), name="s").graph
    by_path = {}
    for n in g.nodes:
        if n.origin is not None and n.origin.path and n.origin.path.startswith("trainer"):
            by_path.setdefault(n.origin.path, set()).add(n.op)
    assert "math.cos" in by_path["trainer.schedule"]  # the cosine schedule
    assert "math.sqrt" in by_path["trainer.grad_clip"] or "reduce.sum" in by_path["trainer.grad_clip"]
    assert any(op.startswith("train.optimizer") for op in by_path["trainer.optimizer"])
    cos = next(n for n in g.nodes if n.op == "math.cos")
    assert lines[cos.origin.line - 1].lstrip().startswith("schedule:") and cos.origin.file.endswith("digits_mlp.yml")


def test_an_origin_scope_does_not_override_a_nodes_own_origin():
    from caramba.ir.graph import Origin

    outer, own = Origin("m.yml", 3, 1, "a"), Origin("m.yml", 9, 1, "b")
    with Graph("g") as g:
        x = g.input("x", (2,))
        with origin_scope(outer):
            a = g.call("math.neg", (x,))
            b = g.call("math.neg", (x,), origin=own)
        c = g.call("math.neg", (x,))
    assert [g.node(v.ref.node).origin for v in (a, b, c)] == [outer, own, None]
