"""Make examples/checkpoints/tmaze_agent.safetensors: the T-maze as the parameters of
``block.active_inference.agent`` (node ``agent`` of examples/active_inference_tmaze.yml).

    python examples/checkpoints/make_tmaze_agent.py

The T-maze of pymdp's tutorial (Friston et al. 2015) as one factor: states ``s = 2 loc + ctx``,
location 0 centre, 1 left arm, 2 right arm, 3 cue, context 0 reward left, 1 reward right. Seven
outcomes: 0 centre, 1/2 the cue says left/right (a valid cue), 3/4 left arm reward/loss, 5/6
right arm reward/loss; the rewarded arm pays 98%. Action ``u`` moves to location ``u``; the arms
are absorbing. ``C`` is +3 on rewards, -3 on losses. The block's ``A = softmax(a_logits, 0)`` and
``B = softmax(b_logits, 0)``, so the logits are ``ln max(p, 1e-300)`` (softmax gives back the
columns exactly; a zero stays a zero). The committed file is what this script writes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "tmaze_agent.safetensors"


def tmaze(p_reward: float = 0.98, reward: float = 3.0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(A [7, 8], B [8, 8, 4], C [7], D [8])`` of the T-maze (``D``: at the centre, either
    context). The tests build pymdp's model from the same function
    (tests/unit/ops/test_active_inference.py)."""
    a, b = np.zeros((7, 8)), np.zeros((8, 8, 4))
    for loc in range(4):
        for ctx in range(2):
            s = 2 * loc + ctx
            if loc == 0:
                a[0, s] = 1.0
            elif loc == 3:
                a[1 + ctx, s] = 1.0
            else:
                good = (loc == 1) == (ctx == 0)
                base = 3 if loc == 1 else 5
                a[base, s], a[base + 1, s] = (p_reward, 1 - p_reward) if good else (1 - p_reward, p_reward)
            for u in range(4):
                b[2 * (loc if loc in (1, 2) else u) + ctx, s, u] = 1.0
    c = np.array([0.0, 0.0, 0.0, reward, -reward, reward, -reward])
    d = np.array([0.5, 0.5, 0, 0, 0, 0, 0, 0])
    return a, b, c, d


def main() -> None:
    from caramba.train import safetensors

    a, b, c, _ = tmaze()
    tensors = {"agent.model.a_logits": np.log(np.maximum(a, 1e-300)),
               "agent.model.b_logits": np.log(np.maximum(b, 1e-300)), "agent.model.c": c}
    safetensors.save(OUT, tensors, {"format": "caramba", "step": "0", "graph_hash": "", "manifest_hash": ""})
    print(OUT)


if __name__ == "__main__":
    main()
