"""The cpu backend's transposed convolution: ``fused.conv_transpose(ct, w)``, the input gradient
of ``nn.conv1d`` / ``nn.conv2d`` (what the ``fuse`` pass makes of the VJP's dilate / pad / flip /
convolve / crop chain, ``compiler/fuse_conv.py``).

As PyTorch computes it: per group, the columns ``w_g^T [C/g*K, O/g] @ ct_g [O/g, Ho*Wo]`` (one
BLAS GEMM), scattered back and summed into the zeroed input by ``col2im`` (the adjoint of the
forward pass's ``im2col``): no zeros inserted for the stride, no padded copy, any stride,
padding, dilation and groups. The layouts are the forward pass's (``conv.py``): ``batched`` (one
GEMM per image, the images split over the cpu workers with one BLAS thread each) from
``CONV_BATCH_MIN_PIXELS`` cotangent pixels per image, else ``flat`` (one GEMM over the whole
batch, whose columns the workers scatter image by image). In the input's dtype (float32 stays
float32). Each input element sums its taps in kernel order; the unfused chain sums the same
products in BLAS's order, so the two agree to rounding, not bitwise.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from caramba.backends.cpu import conv

DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# weight-gradient elements (O/g * C/g*K) up to which it is computed transposed (conv_weight_grad_kernel)
WEIGHT_GRAD_SWAP_MAX = 1 << 18


def conv_transpose_kernel(ct_shape: tuple[int, ...], w_shape: tuple[int, ...], size: tuple[int, ...],
                          stride: tuple[int, ...], padding: tuple[int, ...], dilation: tuple[int, ...], groups: int,
                          dtype: np.dtype, algorithm: str | None = None) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    """``f(ct, w, out)``: writes into ``out`` [N, C, *size] the gradient with respect to x of a
    convolution of x with w [O, C/g, *K] (1 or 2 spatial axes) whose output cotangent is ct
    [N, O, *S]. ``algorithm``: ``batched`` or ``flat`` to force one (tests); None chooses."""
    from caramba.backends.cpu import _conv_loops as loops

    dtype = np.dtype(dtype)
    if dtype not in DTYPES or len(ct_shape) not in (3, 4):
        raise ValueError(f"conv_transpose_kernel: float32/float64 [N, O, *S] with 1 or 2 spatial axes, got {dtype} {ct_shape}")
    if len(ct_shape) == 3:  # as a 2-D transposed convolution over [N, O, 1, L]
        inner = conv_transpose_kernel((*ct_shape[:2], 1, ct_shape[2]), (*w_shape[:2], 1, w_shape[2]), (1, size[0]),
                                      (1, stride[0]), (0, padding[0]), (1, dilation[0]), groups, dtype, algorithm)
        n, o, length = ct_shape
        oc, cg, k = w_shape

        def conv_transpose1d(ct, w, out):
            inner(ct.reshape(n, o, 1, length), w.reshape(oc, cg, 1, k), out.reshape(n, groups * cg, 1, size[0]))

        return conv_transpose1d
    return _conv_transpose2d(loops, ct_shape, w_shape, size, stride, padding, dilation, groups, dtype, algorithm)


def _conv_transpose2d(loops, ct_shape, w_shape, size, stride, padding, dilation, groups, dtype, algorithm):
    from caramba.backends.cpu import blas, workers

    n, o, ho, wo = ct_shape
    _, cg, kh, kw = w_shape
    h, wd = size
    if n == 0 or o == 0 or cg == 0:  # nothing to scatter: the gradient is zeros
        def empty(ct, w, out):
            out[...] = 0

        return empty
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    og, r, p, c = o // groups, cg * kh * kw, ho * wo, groups * cg
    chosen = algorithm or ("batched" if p >= conv.CONV_BATCH_MIN_PIXELS else "flat")
    col2im = loops.col2im
    parts = workers.count()
    big = n * r * p * og >= 1 << 20
    ranges = workers.blocks(n, parts) if parts > 1 and n > 1 and big else None
    flat_mm = blas.matmul_for((r, og), (og, n * p), (r, n * p), None) if chosen == "flat" else None

    def scatter(cols, csr, csm, xf, lo, hi, g):
        col2im(cols, csr, csm, xf, c * h * wd, h * wd, h, wd, lo, hi, g * cg, cg, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo)

    def run(blocks, fn):
        if ranges is None:
            fn(0, n)
        else:
            blocks()
            workers.run(fn, ranges)

    if chosen == "batched":
        def batched(ct, w, out):
            target = out if out.flags.c_contiguous else np.empty(out.shape, dtype)
            xf = target.reshape(-1)
            ct4 = np.ascontiguousarray(ct).reshape(n, groups, og, p)
            wt = [m.T for m in np.asarray(w).reshape(groups, og, r)]  # [r, og] views: BLAS reads them transposed

            def images(lo, hi):
                xf[lo * c * h * wd:hi * c * h * wd] = 0
                cols = np.empty((r, p), dtype)
                cf = cols.reshape(-1)
                for i in range(lo, hi):
                    for g in range(groups):
                        np.matmul(wt[g], ct4[i, g], cols)
                        scatter(cf, p, 0, xf, i, i + 1, g)

            run(blas.one_thread, images)
            if target is not out:
                out[...] = target

        return batched

    def flat(ct, w, out):
        target = out if out.flags.c_contiguous else np.empty(out.shape, dtype)
        xf = target.reshape(-1)
        xf[:] = 0
        ct4 = np.asarray(ct).reshape(n, groups, og, p)
        w3 = np.asarray(w).reshape(groups, og, r)
        for g in range(groups):
            ctg = np.ascontiguousarray(ct4[:, g].transpose(1, 0, 2)).reshape(og, n * p)
            cols = flat_mm(w3[g].T, ctg)  # [r, N*P]; the transposed weight is read in place
            cf = np.ascontiguousarray(cols).reshape(-1)
            # col2im reads image n's columns at (n - lo) * p: the block's view starts at image lo
            run(lambda: None, lambda lo, hi, cf=cf, g=g: scatter(cf[lo * p:], n * p, p, xf, lo, hi, g))
        if target is not out:
            out[...] = target

    return flat


def conv_weight_grad_kernel(x_shape: tuple[int, ...], ct_shape: tuple[int, ...], kernel: tuple[int, ...],
                            stride: tuple[int, ...], padding: tuple[int, ...], dilation: tuple[int, ...], groups: int,
                            dtype: np.dtype) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    """``f(x, ct, out)``: writes into ``out`` [O, C/g, *K] the gradient with respect to w of the
    convolution of x [N, C, *S] (1 or 2 spatial axes) whose output cotangent is ct [N, O, *So]:
    per group ``ct_g [O/g, N*So] @ im2col(x)_g^T [N*So, C/g*K]``, one BLAS GEMM written in the
    weight's layout (no taps beyond the kernel; the gather split over the cpu workers by
    channels); a weight of up to ``WEIGHT_GRAD_SWAP_MAX`` elements as ``im2col(x)_g @ ct_g^T``
    instead, its product copied transposed into the weight (sgemm is faster that way round)."""
    from caramba.backends.cpu import _conv_loops as loops
    from caramba.backends.cpu import blas

    dtype = np.dtype(dtype)
    if dtype not in DTYPES or len(x_shape) not in (3, 4):
        raise ValueError(f"conv_weight_grad_kernel: float32/float64 [N, C, *S] with 1 or 2 spatial axes, got {dtype} {x_shape}")
    if len(x_shape) == 3:  # as a 2-D one over [N, C, 1, L]
        n, c, length = x_shape
        o, lo = ct_shape[1], ct_shape[2]
        inner = conv_weight_grad_kernel((n, c, 1, length), (n, o, 1, lo), (1, kernel[0]), (1, stride[0]), (0, padding[0]),
                                        (1, dilation[0]), groups, dtype)

        def weight_grad1d(x, ct, out):
            inner(x.reshape(n, c, 1, length), ct.reshape(n, o, 1, lo), out.reshape(o, c // groups, 1, kernel[0]))

        return weight_grad1d
    n, c, h, wd = x_shape
    o, ho, wo = ct_shape[1], ct_shape[2], ct_shape[3]
    kh, kw = kernel
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    cg, og, p = c // groups, o // groups, ho * wo
    r = cg * kh * kw
    # a small weight (128x128x3x3 and below): im2col(x)_g [C/g*K, N*So] @ ct_g^T, the product copied transposed into
    # the weight's layout (sgemm ran ct_g @ im2col^T, a transposed right operand, 10-25% slower:
    # 64x16x16 batch 8, 2.05 -> 1.6 ms); a large one: the copy would cost more than that
    swap = og * r <= WEIGHT_GRAD_SWAP_MAX
    mm = blas.matmul_for((r, n * p), (n * p, og), (r, og), None) if swap else blas.matmul_for((og, n * p), (n * p, r), (og, r), None)
    zero = dtype.type(0)
    from caramba.backends.cpu import workers

    parts = workers.count()  # the gather split over the workers by channels, as conv.py's flat layout
    chan_ranges = workers.blocks(cg, parts) if parts > 1 and cg > 1 and n * r * p >= conv.GATHER_SPLIT_MIN else None

    def weight_grad(x, ct, out):
        target = out if out.flags.c_contiguous else np.empty(out.shape, dtype)
        o3 = target.reshape(groups, og, r)
        cols = np.empty((r, n, p), dtype)
        (xf, sn, sc), cf = conv.flat_view(x), cols.reshape(-1)
        ct4 = np.asarray(ct).reshape(n, groups, og, p)
        for g in range(groups):
            def gather(lo, hi, g=g):
                loops.im2col(xf, sn, sc, h, wd, cf[lo * kh * kw * n * p:], n * p, p, 0, n, g * cg + lo, hi - lo,
                             kh, kw, sh, sw, ph, pw, dh, dw, ho, wo, zero)

            if chan_ranges is None:
                gather(0, cg)
            else:
                workers.run(gather, chan_ranges)
            ctg = np.ascontiguousarray(ct4[:, g].transpose(1, 0, 2)).reshape(og, n * p)
            if swap:
                o3[g] = mm(cols.reshape(r, n * p), ctg.T).T
            else:
                mm(ctg, cols.reshape(r, n * p).T, o3[g])
        if target is not out:
            out[...] = target

    return weight_grad
