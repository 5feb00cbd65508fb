"""Gradients of a loaded model by finite differences, in float64."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from caramba import compute


def check_directional(model: Any, params: Mapping[str, Any], graph: Any, names: Sequence[str],
                      feed: Mapping[str, np.ndarray], rng: np.random.Generator, directions: int = 2,
                      rtol: float = 1e-6) -> None:
    """``graph`` outputs a scalar ``L`` and ``grad:<name>`` for each of ``names``; with the
    checkpoint's weights loaded (``model.load``), each gradient's directional derivative along
    random directions over the whole parameter matches central differences of ``L``."""
    runner = compute.new("cpu")
    try:
        model.load(runner, params)
        feed_t = {k: runner.upload(v) for k, v in feed.items()}
        got = {k: t.download() for k, t in runner.compile(graph).run(feed_t).items()}
        loss = runner.compile(graph, targets=["L"])
        for name in names:
            w = runner.state[name].download()
            grad = got[f"grad:{name}"]
            h = 1e-5 * max(float(np.max(np.abs(w))), 1.0)
            fd, an = [], []
            for _ in range(directions):
                v = rng.standard_normal(w.shape)
                runner.state[name] = runner.upload(w + h * v)
                plus = float(loss.run(feed_t)["L"].download())
                runner.state[name] = runner.upload(w - h * v)
                minus = float(loss.run(feed_t)["L"].download())
                fd.append((plus - minus) / (2 * h))
                an.append(float(np.sum(grad * v)))
            runner.state[name] = runner.upload(w)
            assert np.max(np.abs(np.subtract(fd, an))) <= rtol * np.max(np.abs(an)), (name, fd, an)
    finally:
        runner.close()
