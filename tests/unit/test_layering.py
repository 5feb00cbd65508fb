"""The package layering of DESIGN.md §3, checked on the source: lower layers never import upper
ones, and kernels compute without writing files (host effects go through caramba.compute.effects).

Imports are read from the AST, including the ones inside functions: a lazy import is still a
dependency."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "caramba"

# Everything above the compute stack: the packages that run, store, serve and describe experiments.
UPPER = {
    "train", "run", "actors", "api", "cli", "manifest", "store", "programs", "export", "pretrained",
    "generate", "diffusion", "data", "text", "cluster", "orchestrator", "assets",
}
# package -> the caramba packages it must never import
FORBIDDEN: dict[str, set[str]] = {
    "ir": UPPER | {"compiler", "compute", "backends", "autodiff", "onnx"},
    "ops": UPPER | {"compiler", "compute", "backends", "autodiff", "onnx"},
    "autodiff": UPPER | {"compiler", "compute", "backends", "onnx"},
    "compiler": UPPER | {"backends"},
    "compute": UPPER,
    "backends": UPPER,
    "onnx": UPPER - {"assets"},
}
# Where kernels live: they hand effects to the host and never touch the file system.
KERNEL_DIRS = ("backends/cpu/kernels", "backends/cpu/fused", "backends/codegen/kernels")
WRITES = {"write_bytes", "write_text", "tofile", "save", "savez", "savez_compressed", "replace", "rename",
          "unlink", "mkdir", "makedirs", "rmtree", "copyfile"}


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out += [(node.lineno, n) for n in names if n.startswith("caramba.")]
    return out


def _files(package: str) -> list[Path]:
    return sorted((SRC / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_lower_layers_do_not_import_upper_ones(package):
    bad = []
    for path in _files(package):
        for line, name in _imports(path):
            target = name.split(".")[1]
            if target in FORBIDDEN[package]:
                bad.append(f"{path.relative_to(SRC)}:{line} imports {name}")
    assert not bad, f"caramba.{package} must not import {sorted(FORBIDDEN[package])}:\n" + "\n".join(bad)


def _where(path: Path) -> str:
    return str(path.relative_to(SRC)) if path.is_relative_to(SRC) else path.name


def _writes(path: Path) -> list[str]:
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "open":
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
            if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax+"):
                bad.append(f"{_where(path)}:{node.lineno} opens a file for writing")
        elif isinstance(f, ast.Attribute) and f.attr in WRITES:
            owner = ast.unparse(f.value)
            if f.attr == "replace" and owner not in {"os", "shutil"}:
                continue  # str.replace / dataclasses.replace compute, they do not write
            if f.attr == "save" and owner not in {"np", "numpy", "safetensors"}:
                continue
            bad.append(f"{_where(path)}:{node.lineno} calls {owner}.{f.attr}")
    return bad


def test_kernels_do_not_write_files():
    bad = [b for d in KERNEL_DIRS for path in sorted((SRC / d).rglob("*.py")) for b in _writes(path)]
    assert not bad, "kernels hand effects to caramba.compute.effects instead:\n" + "\n".join(bad)


def test_the_checks_see_what_they_look_for(tmp_path):
    """The two scans find the patterns they forbid (so a green run means something)."""
    src = tmp_path / "k.py"
    src.write_text(
        "import numpy as np\nfrom caramba.train import safetensors\n"
        "def k(p, x):\n    safetensors.save(p, {'x': x}, {})\n    open(p, 'wb').write(b'')\n    np.save(p, x)\n"
        "    'a'.replace('a', 'b')\n"
    )
    assert ("caramba.train.safetensors" in [n for _, n in _imports(src)])
    found = _writes(src)
    assert len(found) == 3 and any("safetensors.save" in f for f in found) and any("opens a file" in f for f in found)
