"""`import caramba` stays light: no heavy toolkit is imported until a feature needs it."""

import subprocess
import sys

HEAVY = ("jax", "jaxlib", "onnxruntime", "onnx", "torch", "cupy", "wgpu", "ray", "fastapi", "numba", "scipy")


def test_import_caramba_pulls_no_heavy_toolkit():
    code = (
        "import sys, caramba, caramba.ops, caramba.compute, caramba.compiler\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"heavy modules imported at `import caramba`: {out.stdout.strip()}"
