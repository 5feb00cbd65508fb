"""Short trained runs of the examples in one store for the session (each is trained once)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

STEPS = {"digits_mlp": 20, "digits_cnn": 3, "char_gpt": 2}


@pytest.fixture(scope="session")
def store(tmp_path_factory):
    from caramba.store.runs import RunStore

    return RunStore(tmp_path_factory.mktemp("store"))


@pytest.fixture(scope="session")
def trained(store):
    """``trained(example)``: the run ID of a short run of ``examples/<example>.yml`` (made once)."""
    from caramba.run.engine import run_experiment

    made: dict[str, str] = {}

    def get(example: str) -> str:
        if example not in made:
            steps = STEPS[example]
            res = run_experiment(EXAMPLES / f"{example}.yml", [f"trainer.steps={steps}", f"trainer.eval_every={steps}"],
                                 store=store)
            made[example] = res.runs[-1].run_id
        return made[example]

    return get


@pytest.fixture
def caramba_forward():
    """``caramba_forward(inf, feeds)``: caramba's outputs of inference model ``inf`` (cpu backend)."""
    return _forward


def _forward(inf, feeds):
    from caramba.compute import new

    batch = next(iter(feeds.values())).shape[0]
    g = inf.graph(batch)
    runner = new("cpu")
    try:
        for k, v in inf.params.items():
            runner.state[k] = runner.upload(v)
        out = runner.execute(g, inputs={k: runner.upload(v) for k, v in feeds.items()})
        return {k: v.download() for k, v in out.items()}
    finally:
        runner.close()
