"""Shared GPU codegen: one C-like emitter base (``cstyle``) with CUDA C and WGSL emitters, the
kernel table (``kernels``) and the launch plans they produce (``program``). No device needed."""

from caramba.backends.codegen.cstyle import Emitter, KernelWriter
from caramba.backends.codegen.cuda import CudaEmitter
from caramba.backends.codegen.kernels import BUILDERS, DTYPES, generate
from caramba.backends.codegen.program import Kernel, Launch, LibraryCall, Program, Slot, Temp
from caramba.backends.codegen.wgsl import WgslEmitter

__all__ = [
    "BUILDERS", "DTYPES", "CudaEmitter", "Emitter", "Kernel", "KernelWriter", "Launch", "LibraryCall", "Program",
    "Slot", "Temp", "WgslEmitter", "generate",
]
