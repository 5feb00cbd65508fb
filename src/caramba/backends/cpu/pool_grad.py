"""The cpu backend's pooling backward: ``fused.max_pool2d_grad(x, y, ct)`` and
``fused.avg_pool2d_grad(ct)``, what the ``fuse`` pass makes of the nn.max_pool2d / nn.avg_pool2d
VJP chains (``compiler/fuse_pool.py``): one Numba pass over each plane's windows
(``_conv_loops.max_pool_grad`` / ``avg_pool_grad``) instead of k*k slices, compares, wheres,
padded placements and sums. The arithmetic and the order of every sum are the rule's, so the
result equals the unfused graph bit for bit. In the input's dtype; the [N*C] planes are split
over the cpu workers when the pass is large (``pool.SPLIT_MIN_READS``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from caramba.backends.cpu import pool

DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _zero(o3: np.ndarray, lo: int, hi: int) -> None:
    o3[lo:hi] = 0


def pool_grad_kernel(is_max: bool, x_shape: tuple[int, ...], ct_shape: tuple[int, ...], kernel: tuple[int, int],
                     stride: tuple[int, int], padding: tuple[int, int], dtype: np.dtype) -> Callable[..., None]:
    """``f(x, y, ct, out)`` (max) or ``f(ct, out)`` (average): writes dx [N, C, H, W] into out."""
    from caramba.backends.cpu import _conv_loops, workers

    dtype = np.dtype(dtype)
    if dtype not in DTYPES or len(x_shape) != 4:
        raise ValueError(f"pool_grad_kernel: float32/float64 [N, C, H, W], got {dtype} {x_shape}")
    n, c, h, w = x_shape
    ho, wo = ct_shape[2], ct_shape[3]
    planes = n * c
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    parts = workers.count()
    big = planes * ho * wo * kh * kw >= pool.SPLIT_MIN_READS
    ranges = workers.blocks(planes, parts) if parts > 1 and planes > 1 and big else [(0, planes)]

    def into(out):
        """(the [planes, H, W] array to write, the array it views): out itself where it is
        C-contiguous (a view of it), else a fresh one copied into out afterwards."""
        target = out if out.flags.c_contiguous else np.empty(out.shape, dtype)
        return target.reshape(planes, h, w), target

    def finish(target, out):
        if target is not out:
            out[...] = target

    if is_max:
        loop, neg_inf = _conv_loops.max_pool_grad, dtype.type(-np.inf)

        def max_grad(x, y, ct, out):
            x3 = np.ascontiguousarray(x).reshape(planes, h, w)
            y3, c3 = np.ascontiguousarray(y).reshape(planes, ho, wo), np.ascontiguousarray(ct).reshape(planes, ho, wo)
            o3, target = into(out)
            workers.run(lambda lo, hi: (_zero(o3, lo, hi), loop(x3, y3, c3, o3, lo, hi, kh, kw, sh, sw, ph, pw, neg_inf)),
                        ranges)
            finish(target, out)

        return max_grad
    loop, scale = _conv_loops.avg_pool_grad, dtype.type(1.0 / (kh * kw))

    def avg_grad(ct, out):
        c3 = np.ascontiguousarray(ct).reshape(planes, ho, wo)
        o3, target = into(out)
        workers.run(lambda lo, hi: (_zero(o3, lo, hi), loop(c3, o3, lo, hi, kh, kw, sh, sw, ph, pw, scale)), ranges)
        finish(target, out)

    return avg_grad
