"""CUDA C -> PTX without a GPU: NVRTC (the ``nvidia-cuda-nvrtc-cu12`` wheel, loaded through
CuPy's binding), or ``nvcc -ptx`` when NVRTC cannot be loaded and nvcc is on PATH."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from functools import lru_cache

from caramba.errors import BackendUnavailable, CarambaError

DEFAULT_ARCH = "sm_90"
OPTIONS = ("-std=c++17",)


class KernelCompileError(CarambaError):
    """NVRTC (or nvcc) rejected a generated kernel; the message carries the compiler log."""


@lru_cache(maxsize=1)
def nvrtc_version() -> str | None:
    """``"12.9"`` if NVRTC can be loaded, else None."""
    try:
        from cupy_backends.cuda.libs import nvrtc

        major, minor = nvrtc.getVersion()
        return f"{major}.{minor}"
    except Exception:
        return None


def nvcc_path() -> str | None:
    return shutil.which("nvcc")


def compiler() -> str:
    """Which compiler ``compile_ptx`` will use: ``nvrtc <version>`` or ``nvcc <path>``."""
    v = nvrtc_version()
    if v is not None:
        return f"nvrtc {v}"
    path = nvcc_path()
    if path is not None:
        return f"nvcc {path}"
    raise BackendUnavailable(
        "neither NVRTC nor nvcc is available to compile CUDA kernels", backend="cuda",
        hint="pip install nvidia-cuda-nvrtc-cu12 (or install the CUDA toolkit)",
    )


def compile_ptx(source: str, arch: str = DEFAULT_ARCH, name: str = "kernel.cu") -> str:
    """PTX for ``source`` targeting ``arch`` (``sm_90`` -> ``compute_90`` virtual arch)."""
    virtual = arch.replace("sm_", "compute_")
    if nvrtc_version() is not None:
        from cupy_backends.cuda.libs import nvrtc

        prog = nvrtc.createProgram(source, name, [], [])
        try:
            try:
                nvrtc.compileProgram(prog, [f"-arch={virtual}", *OPTIONS])
            except nvrtc.NVRTCError as exc:
                log = nvrtc.getProgramLog(prog)
                raise KernelCompileError(f"NVRTC rejected {name}: {exc}\n{log}", backend="cuda") from None
            ptx = nvrtc.getPTX(prog)
        finally:
            nvrtc.destroyProgram(prog)
        return ptx.decode() if isinstance(ptx, bytes) else ptx
    path = nvcc_path()
    if path is None:
        compiler()  # raises BackendUnavailable with the hint
    with tempfile.TemporaryDirectory(prefix="caramba-nvcc-") as tmp:
        src = os.path.join(tmp, name)
        out = os.path.join(tmp, "kernel.ptx")
        with open(src, "w") as f:
            f.write(source)
        proc = subprocess.run(
            [path, "-ptx", f"-arch={arch}", *OPTIONS, "-o", out, src], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise KernelCompileError(f"nvcc rejected {name}:\n{proc.stderr}", backend="cuda")
        with open(out) as f:
            return f.read()
