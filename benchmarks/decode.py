"""Decoding with a resident KV cache: a GPT-2-small-shaped model (124M parameters, float32,
random weights), batch 1, capacity 1024; milliseconds per token at positions 16 and 1000, with
transformers (torch eager attention, its own KV cache, the same weights) side by side.

    python -m benchmarks.decode [--backends cpu,xla] [--steps 32] [--threads N]

The checkpoint is ``benchmarks.pretrained_load``'s (GPT-2 small's tensor names and shapes). For
each backend, ``caramba.generate.Generator`` prefills a prompt of 16 (then 1000) tokens, runs
two warm-up decode steps and times ``steps`` more (greedy, in the graph; one int64 per step
comes back). transformers runs the same prompt through ``GPT2LMHeadModel`` (``use_cache``) and
then the same number of one-token steps with ``past_key_values``, argmax on the host.
caramba's decode graphs have static shapes: a step attends over its span of cache slots (64,
128, ... up to the capacity; masked past the position) and appends its keys/values in place
(``shape.update_rows``), so its cost grows with the position in doublings of the span.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

CAPACITY = 1024
POSITIONS = (16, 1000)


def _prompt(n: int) -> list[int]:
    return np.random.default_rng(n).integers(0, 50257, n).tolist()


def caramba_ms(directory: Path, backend: str, steps: int) -> dict[int, float]:
    """ms per decode step at each position of POSITIONS."""
    import caramba.pretrained as pt
    from caramba.generate import Generator

    out = {}
    with Generator.from_pretrained(pt.open(directory, dtype="float32"), backend=backend, capacity=CAPACITY) as gen:
        for pos in POSITIONS:
            tok = gen.prefill([_prompt(pos)])
            for _ in range(2):  # warm-up (the first decode compiles)
                tok = gen.decode(tok)
            t0 = time.perf_counter()
            for _ in range(steps):
                tok = gen.decode(tok)
            out[pos] = (time.perf_counter() - t0) / steps * 1e3
    return out


def transformers_ms(directory: Path, steps: int, threads: int | None = None) -> dict[int, float]:
    import inspect

    import torch
    import transformers

    if threads:
        torch.set_num_threads(threads)
    model = transformers.GPT2LMHeadModel.from_pretrained(directory, attn_implementation="eager").eval()
    # transformers 5.24 names the KV cache `cache` (`past_key_values` before, deprecated)
    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    out = {}
    with torch.no_grad():
        for pos in POSITIONS:
            res = model(input_ids=torch.tensor([_prompt(pos)]), use_cache=True)
            kv, tok = res[key], res.logits[:, -1].argmax(-1, keepdim=True)
            for i in range(steps + 2):
                if i == 2:
                    t0 = time.perf_counter()
                res = model(input_ids=tok, use_cache=True, **{key: kv})
                kv, tok = res[key], res.logits[:, -1].argmax(-1, keepdim=True)
            out[pos] = (time.perf_counter() - t0) / steps * 1e3
    return out


def measure(backends: list[str], steps: int = 32, directory: str | None = None,
            threads: int | None = None) -> dict[str, dict[int, float]]:
    """{row name: {position: ms per token}}; ``threads`` pins caramba cpu's and torch's threads."""
    from benchmarks.pretrained_load import make_checkpoint
    from caramba import compute

    rows: dict[str, dict[int, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(directory) if directory else Path(tmp) / "gpt2-small"
        if not (d / "model.safetensors").exists():
            make_checkpoint(d)
        for b in backends:
            if b.split(":")[0] in compute.available():
                spec = f"{b}:threads={threads}" if threads and b == "cpu" else b
                rows[f"caramba {spec}"] = caramba_ms(d, spec, steps)
        try:
            rows["transformers (torch eager" + (f", {threads} threads)" if threads else ")")] = \
                transformers_ms(d, steps, threads)
        except ImportError:
            pass
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="cpu,xla", help="comma-separated backend specs")
    ap.add_argument("--steps", type=int, default=32, help="timed decode steps per position")
    ap.add_argument("--dir", default=None, help="use (or make) the checkpoint here")
    ap.add_argument("--threads", type=int, default=None, help="threads of caramba cpu and torch (default: theirs)")
    args = ap.parse_args()
    rows = measure([b for b in args.backends.split(",") if b], args.steps, args.dir, args.threads)
    head = f"{'GPT-2 small, float32, batch 1, capacity 1024':<46}" + "".join(
        f"{f'pos {p}: ms/token':>20}{'tokens/s':>10}" for p in POSITIONS)
    print(head)
    for name, r in rows.items():
        print(f"{name:<46}" + "".join(f"{r[p]:>20.2f}{1e3 / r[p]:>10.1f}" for p in POSITIONS))


if __name__ == "__main__":
    main()
