"""The cpu backend's convolution: im2col (a Numba gather) and one BLAS GEMM per group.

``nn.conv1d`` and ``nn.conv2d`` (and their gradients where autodiff's convolutions are not
fused: the input gradient a stride-1 convolution of the dilated, padded cotangent with the
flipped kernel, the weight gradient a convolution of the input with the cotangent as its kernel;
with Numba the fuse pass makes them ``fused.conv_transpose`` / ``fused.conv_weight_grad``,
``conv_grad.py``) run as

- ``batched``: columns [N, C/g*KH*KW, Ho*Wo], one GEMM per image (``np.matmul`` broadcasting the
  [O, C/g*KH*KW] weight matrix), written straight into the [N, O, Ho*Wo] output; or
- ``flat``: columns [C/g*KH*KW, N*Ho*Wo], one GEMM for the whole batch, then the [O, N, Ho*Wo]
  product transposed into the output: better when each image has few output pixels (deep
  layers), where per-image GEMMs are too thin for BLAS;
- ``rows``: the transposed columns [N*Ho*Wo, C/g*KH*KW] (gathered in runs along the kernel's
  width), for a kernel with more taps than the output has pixels (the weight gradient, whose
  kernel is the cotangent; ResNet's 3x3 layers on 2x2 images): im2col's runs along the output's
  width would be a few elements each. The product is the flat layout's, ``w @ rows^T`` (BLAS
  reads the transposed operand in place), so it too runs in row blocks of output channels on
  the cpu workers: as ``rows @ w^T`` its few rows (N*Ho*Wo) could not be split and ran on
  OpenBLAS's own pool, whose threads then spun against the workers (ResNet-18 float32 forward
  on 2 cores: 37 -> 24 ms).

im2col at stride 1 with the output as wide as the input (3x3 padding 1) copies each tap's
columns as one run of the shifted input plane, then zeroes the padding's columns (64x16x16:
0.40 -> 0.17 ms for batch 8). The flat and rows gathers are split over the cpu workers
(channels, images) from ``GATHER_SPLIT_MIN`` column elements.

The layout is chosen from the shapes when the kernel is made: ``batched`` from
``CONV_BATCH_MIN_PIXELS`` output pixels per image (``caramba backends --tune`` measures this
machine's crossover: ``tuning.py``'s ``conv_batch_min_pixels``; ``caramba backends -v`` shows
it). Both layouts compute every output element as the same dot product of the same columns
with the same weights, in the input's dtype (float32 stays float32, on sgemm). With more than
one cpu worker the batched layout splits the images over the workers (one BLAS thread each).
Without Numba, or for other dtypes, the NumPy ``sliding_window_view`` + ``einsum`` form computes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

# Output pixels per image from which the batched layout is used (``tuning.py`` may change it).
CONV_BATCH_MIN_PIXELS = 64
# Column elements (N * C/g*KH*KW * Ho*Wo) from which the flat and rows layouts gather them on the
# cpu workers (channels, images) instead of on the calling thread alone.
GATHER_SPLIT_MIN = 1 << 16

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def out_size(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


def layout(pixels: int, min_pixels: int | None = None, taps: int = 1) -> str:
    """``batched`` or ``flat`` for images of ``pixels`` output pixels, ``rows`` where the
    kernel has more ``taps`` than the output pixels (module docstring)."""
    if taps > pixels:
        return "rows"
    return "batched" if pixels >= (CONV_BATCH_MIN_PIXELS if min_pixels is None else min_pixels) else "flat"


def flat_view(x: np.ndarray) -> tuple[np.ndarray, int, int]:
    """(a 1-D view over x [N, C, H, W]'s memory from its first element, the element strides of an
    image and a channel) for the im2col loops, without a copy where each [H, W] plane is
    C-contiguous and the image and channel strides are positive (a transposed view, as the
    weight gradient's convolution gets); else of a C-contiguous copy."""
    n, c, h, w = x.shape
    size = x.itemsize
    st = x.strides
    if x.flags.c_contiguous:
        return x.reshape(-1), c * h * w, h * w
    if st[3] == size and st[2] == w * size and st[0] > 0 and st[1] > 0 and st[0] % size == 0 and st[1] % size == 0:
        sn, sc = st[0] // size, st[1] // size
        extent = (n - 1) * sn + (c - 1) * sc + h * w
        return np.lib.stride_tricks.as_strided(x, shape=(extent,), strides=(size,), writeable=False), sn, sc
    xc = np.ascontiguousarray(x)
    return xc.reshape(-1), c * h * w, h * w


def _loops() -> Any:
    try:
        from caramba.backends.cpu import _conv_loops
    except ImportError:  # Numba is optional: NumPy computes the same convolution
        return None
    return _conv_loops


def conv_kernel(x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: tuple[int, ...],
                padding: tuple[int, ...], dilation: tuple[int, ...], groups: int, dtype: np.dtype,
                algorithm: str | None = None) -> Callable[..., np.ndarray]:
    """``f(x, w, b=None)``: the cross-correlation of x [N, C, *S] with w [O, C/g, *K] over 1 or
    2 spatial axes, symmetric zero padding. ``algorithm``: ``batched``, ``flat``,
    ``rows`` or ``numpy`` to force one (tests, the tuner); None chooses (module docstring)."""
    nd = len(x_shape) - 2
    dtype = np.dtype(dtype)
    loops = _loops() if algorithm != "numpy" else None
    if loops is None or dtype not in _DTYPES or nd not in (1, 2) or 0 in x_shape or 0 in w_shape:
        from caramba.backends.cpu.kernels.nn import conv_nd

        return lambda x, w, b=None: conv_nd(x, w, b, stride, padding, dilation, groups)
    if nd == 1:  # as a 2-D convolution over [N, C, 1, L]
        inner = conv_kernel((*x_shape[:2], 1, x_shape[2]), (*w_shape[:2], 1, w_shape[2]), (1, stride[0]),
                            (0, padding[0]), (1, dilation[0]), groups, dtype, algorithm)
        n, c, length = x_shape
        o, cg, k = w_shape

        def conv1d(x, w, b=None):
            y = inner(x.reshape(n, c, 1, length), w.reshape(o, cg, 1, k), b)
            return y.reshape(y.shape[0], y.shape[1], y.shape[3])

        return conv1d
    return _conv2d(loops, x_shape, w_shape, stride, padding, dilation, groups, dtype, algorithm)


def _conv2d(loops, x_shape, w_shape, stride, padding, dilation, groups, dtype, algorithm):
    from caramba.backends.cpu import blas, workers

    n, c, h, wd = x_shape
    o, cg, kh, kw = w_shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    ho, wo = out_size(h, kh, sh, ph, dh), out_size(wd, kw, sw, pw, dw)
    og, r, p = o // groups, cg * kh * kw, ho * wo
    chosen = algorithm or layout(p, taps=kh * kw)
    zero = dtype.type(0)
    im2col = loops.im2col
    # a 1x1 kernel at stride 1 without padding: the input already is the columns
    direct = kh == kw == 1 and sh == sw == 1 and ph == pw == 0 and chosen == "batched"
    parts = workers.count()
    ranges = workers.blocks(n, parts) if chosen == "batched" and parts > 1 and n > 1 and n * r * p * og >= 1 << 20 else None
    # flat and rows: one GEMM [og, r] x [r, N*P] (row blocks of output channels on the workers,
    # never OpenBLAS's own pool); their gathers split over the workers too (channels, images)
    one_mm = blas.matmul_for((og, r), (r, n * p), (og, n * p), None) if chosen in ("flat", "rows") else None
    gather_split = parts > 1 and n * r * p >= GATHER_SPLIT_MIN
    chan_ranges = workers.blocks(cg, parts) if chosen == "flat" and gather_split and cg > 1 else None
    image_ranges = workers.blocks(n, parts) if chosen == "rows" and gather_split and n > 1 else None

    def bias(out, b):
        if b is not None:
            out += b.reshape(1, o, 1, 1)
        return out

    if chosen == "batched":
        def batched(x, w, b=None):
            out = np.empty((n, o, ho, wo), dtype)
            o3 = out.reshape(n, o, p)
            w3 = np.ascontiguousarray(w).reshape(groups, og, r)
            xf, sn, sc = flat_view(x)
            x3 = np.ascontiguousarray(x).reshape(n, c, h * wd) if direct else None

            def images(lo, hi):
                cols = None if direct else np.empty((hi - lo, r, p), dtype)
                for g in range(groups):
                    if direct:
                        src = x3[lo:hi, g * cg:(g + 1) * cg]
                    else:
                        im2col(xf, sn, sc, h, wd, cols.reshape(-1), p, r * p, lo, hi, g * cg, cg,
                               kh, kw, sh, sw, ph, pw, dh, dw, ho, wo, zero)
                        src = cols
                    if groups == 1:
                        np.matmul(w3[0], src, o3[lo:hi])
                    else:
                        o3[lo:hi, g * og:(g + 1) * og] = np.matmul(w3[g], src)

            blas.one_thread()  # small products, or one block per worker: never OpenBLAS's own pool
            if ranges is None:
                images(0, n)
            else:
                workers.run(images, ranges)
            return bias(out, b)

        return batched

    if chosen == "rows":
        def rows(x, w, b=None):
            out = np.empty((n, o, ho, wo), dtype)
            o4 = out.reshape(n, groups, og, p)
            w3 = np.ascontiguousarray(w).reshape(groups, og, r)
            cols = np.empty((n * p, r), dtype)
            (xf, sn, sc), cf = flat_view(x), cols.reshape(-1)
            for g in range(groups):
                def gather(lo, hi, g=g):
                    loops.im2row(xf, sn, sc, h, wd, cf[lo * p * r:], lo, hi, g * cg, cg, kh, kw, sh, sw, ph, pw,
                                 dh, dw, ho, wo, zero)

                if image_ranges is None:
                    gather(0, n)
                else:
                    workers.run(gather, image_ranges)
                prod = one_mm(w3[g], cols.T)  # [og, N*P]
                o4[:, g] = prod.reshape(og, n, p).transpose(1, 0, 2)
            return bias(out, b)

        return rows

    def flat(x, w, b=None):
        out = np.empty((n, o, ho, wo), dtype)
        o4 = out.reshape(n, groups, og, p)
        w3 = np.ascontiguousarray(w).reshape(groups, og, r)
        cols = np.empty((r, n, p), dtype)
        (xf, sn, sc), cf = flat_view(x), cols.reshape(-1)
        for g in range(groups):
            def gather(lo, hi, g=g):
                im2col(xf, sn, sc, h, wd, cf[lo * kh * kw * n * p:], n * p, p, 0, n, g * cg + lo, hi - lo,
                       kh, kw, sh, sw, ph, pw, dh, dw, ho, wo, zero)

            if chan_ranges is None:
                gather(0, cg)
            else:
                workers.run(gather, chan_ranges)
            prod = one_mm(w3[g], cols.reshape(r, n * p))
            o4[:, g] = prod.reshape(og, n, p).transpose(1, 0, 2)
        return bias(out, b)

    return flat
