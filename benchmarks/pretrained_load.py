"""Loading a GPT-2-small-shaped (124M parameters, float32) Hugging Face checkpoint onto the cpu
backend: seconds and peak memory against the size of the weights.

    python -m benchmarks.pretrained_load [--dir DIR]

The checkpoint is made here (random weights, GPT-2 small's tensor names and shapes, written with
the safetensors library), then loaded in a fresh process so its peak RSS (``ru_maxrss``) is the
load's own: ``caramba.pretrained.open`` (headers, config, bindings) and ``load`` onto a cpu
runner (memory-mapped reads, one tensor on the host at a time, in file order). The same
process measures its RSS before the load, so the table shows the interpreter's own share too.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

VOCAB, POSITIONS, WIDTH, LAYERS, HEADS = 50257, 1024, 768, 12, 12


def make_checkpoint(directory: Path) -> int:
    """GPT-2 small's tensors (random float32) as ``model.safetensors`` + ``config.json``; returns bytes."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    d = WIDTH
    shapes = {"transformer.wte.weight": (VOCAB, d), "transformer.wpe.weight": (POSITIONS, d),
              "transformer.ln_f.weight": (d,), "transformer.ln_f.bias": (d,)}
    for i in range(LAYERS):
        p = f"transformer.h.{i}."
        shapes.update({p + "ln_1.weight": (d,), p + "ln_1.bias": (d,), p + "attn.c_attn.weight": (d, 3 * d),
                       p + "attn.c_attn.bias": (3 * d,), p + "attn.c_proj.weight": (d, d), p + "attn.c_proj.bias": (d,),
                       p + "ln_2.weight": (d,), p + "ln_2.bias": (d,), p + "mlp.c_fc.weight": (d, 4 * d),
                       p + "mlp.c_fc.bias": (4 * d,), p + "mlp.c_proj.weight": (4 * d, d), p + "mlp.c_proj.bias": (d,)})
    tensors = {k: rng.standard_normal(s, dtype=np.float32) * np.float32(0.02) for k, s in shapes.items()}
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": VOCAB, "n_positions": POSITIONS,
        "n_embd": WIDTH, "n_layer": LAYERS, "n_head": HEADS, "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}))
    return sum(t.nbytes for t in tensors.values())


def _rss_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def child(directory: str) -> None:
    """In a fresh process: open + load onto cpu; print JSON {seconds, open_s, peak, before, loaded}."""
    import resource
    import time

    import caramba.compute as compute
    import caramba.pretrained as pt
    from caramba.manifest.pretrained import param_specs

    before = _rss_now()
    t0 = time.perf_counter()
    m = pt.open(directory, dtype="float32")
    params = param_specs(m.prep)
    t1 = time.perf_counter()
    runner = compute.new("cpu")
    loaded = m.load(runner, params)
    t2 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": t2 - t0, "open_s": t1 - t0, "load_s": t2 - t1, "peak": peak, "before": before,
                      "loaded": loaded, "after": _rss_now()}))


def measure(directory: str | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(directory) if directory else Path(tmp) / "gpt2-small"
        weights = make_checkpoint(d) if not (d / "model.safetensors").exists() else (d / "model.safetensors").stat().st_size
        out = subprocess.run([sys.executable, "-m", "benchmarks.pretrained_load", "--child", str(d)],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
    r["weights"] = weights
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None, help="use (or make) the checkpoint here")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    r = measure(args.dir)
    mib = float(1 << 20)
    print(f"weights {r['weights'] / mib:.0f} MiB; open {r['open_s']:.2f} s + load {r['load_s']:.2f} s = {r['seconds']:.2f} s; "
          f"peak RSS {r['peak'] / mib:.0f} MiB = {r['peak'] / r['weights']:.2f}x the weights "
          f"(interpreter before the load: {r['before'] / mib:.0f} MiB)")


if __name__ == "__main__":
    main()
