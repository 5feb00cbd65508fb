"""Build a small MLP graph, compile it for the cpu backend and run it.

This is what every caramba experiment does under the hood: a typed graph, a backend that
checked it can run every node, explicit upload and download.
"""

import numpy as np

import caramba
from caramba import ops
from caramba.compute import new


def mlp(x, w1, b1, w2, b2):
    h = ops.gelu(x @ w1 + b1)
    return ops.softmax(h @ w2 + b2)


def main() -> None:
    rng = np.random.default_rng(0)
    graph = caramba.trace(mlp, (32, 16), (16, 64), (64,), (64, 10), (10,))
    print(graph.as_text())
    with new("cpu") as runner:
        exe = runner.compile(graph)
        print(exe.report.as_text())
        arrays = {
            "x": rng.normal(size=(32, 16)),
            "w1": rng.normal(size=(16, 64)) / 4,
            "b1": np.zeros(64),
            "w2": rng.normal(size=(64, 10)) / 8,
            "b2": np.zeros(10),
        }
        inputs = {k: runner.upload(v) for k, v in arrays.items()}
        probs = exe.run(inputs)["out"].download()
    print(f"output {probs.shape} {probs.dtype}; rows sum to 1: {np.allclose(probs.sum(axis=1), 1.0)}")
    print("predicted classes:", probs.argmax(axis=1)[:10].tolist())


if __name__ == "__main__":
    main()
