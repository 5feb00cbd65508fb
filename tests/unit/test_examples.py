"""The README's examples run as written."""

import runpy
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_quickstart_script_runs(capsys):
    runpy.run_path(str(EXAMPLES / "quickstart.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "rows sum to 1: True" in out
    assert "pipeline for cpu" in out


def test_causal_iv_example_recovers_the_effect(tmp_path):
    """examples/causal_iv.yml: 2SLS recovers the effect 2 of t on y; regression on w is confounded."""
    from caramba.manifest.experiment import run_experiment
    from caramba.store import RunStore

    res = run_experiment(EXAMPLES / "causal_iv.yml", store=RunStore(tmp_path))
    assert res.ok, [r.error for r in res.runs]
    s = res.runs[0].summary
    assert abs(s["test.iv_effect"] - 2.0) < 0.05, s
    assert s["test.ols_effect"] > 2.3, s


def test_hopfield_recall_example_retrieves_every_pattern(tmp_path):
    """examples/hopfield_recall.yml: one modern Hopfield update retrieves each of 20 stored bipolar
    patterns (dimension 256) from a query with ~20% of its bits flipped, every bit right."""
    from caramba.manifest.experiment import run_experiment
    from caramba.store import RunStore

    res = run_experiment(EXAMPLES / "hopfield_recall.yml", store=RunStore(tmp_path))
    assert res.ok, [r.error for r in res.runs]
    s = res.runs[0].summary
    assert 0.7 < s["test.query_mse"] < 0.9, s  # 4 x the flipped fraction (0.2)
    assert s["test.accuracy"] == 1.0 and s["test.recall_mse"] < 0.04, s  # >= 99% of bits right
