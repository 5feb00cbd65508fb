"""Images out: a batch of arrays -> one PNG grid (through Pillow: ``pip install 'caramba[image]'``)."""

from __future__ import annotations

import os
from math import ceil, isqrt
from pathlib import Path
from typing import Any

import numpy as np

from caramba.errors import ConfigError

MAX_SCALE = 64
PAD_VALUE = 128  # grey lines between the cells


def as_images(batch: Any) -> np.ndarray:
    """[n, H, W] (grey) or [n, H, W, 3] (RGB) from ``batch``: [n, H, W]; [n, C, H, W] with C 1 or 3;
    or [n, D] with D a square number (a flattened square image, like the 8x8 digits)."""
    a = np.asarray(batch)
    if a.ndim == 2:
        side = isqrt(a.shape[1])
        if side * side != a.shape[1] or side == 0:
            raise ConfigError(f"samples of {a.shape[1]} features are no square image; give [n, H, W] or [n, C, H, W]")
        return a.reshape(a.shape[0], side, side)
    if a.ndim == 3:
        return a
    if a.ndim == 4 and a.shape[1] in (1, 3):
        return a[:, 0] if a.shape[1] == 1 else np.moveaxis(a, 1, -1)
    raise ConfigError(f"cannot show a batch of shape {list(a.shape)} as images; give [n, H, W], [n, C, H, W] "
                      "(C = 1 or 3) or [n, D] with D square")


def grid_size(n: int, height: int, width: int, *, cols: int | None = None, scale: int = 1,
              pad: int = 1) -> tuple[int, int]:
    """(width, height) in pixels of the grid ``write_image`` makes of ``n`` images."""
    cols = cols or max(1, ceil(n**0.5))
    rows = ceil(n / cols)
    return cols * width * scale + (cols + 1) * pad, rows * height * scale + (rows + 1) * pad


def write_image(path: str | os.PathLike[str], images: Any, *, value_range: tuple[float, float] = (0.0, 1.0),
                cols: int | None = None, scale: int = 1, pad: int = 1) -> Path:
    """Write ``images`` (see ``as_images``) as one PNG grid at ``path`` and return the path.

    Values are mapped linearly from ``value_range`` to 0..255 (clipped); each pixel becomes a
    ``scale`` x ``scale`` block; ``cols`` images per row (default: a square-ish grid), ``pad``
    grey pixels between cells. The size is ``grid_size(n, H, W, cols=, scale=, pad=)``."""
    try:
        from PIL import Image
    except ImportError:
        raise ConfigError("writing images needs Pillow", hint="pip install 'caramba[image]'") from None
    imgs = as_images(images)
    n = imgs.shape[0]
    if n == 0:
        raise ConfigError("no images to write")
    if not 1 <= scale <= MAX_SCALE:
        raise ConfigError(f"scale must be in 1..{MAX_SCALE}, got {scale}")
    if pad < 0 or (cols is not None and cols < 1):
        raise ConfigError(f"pad must be >= 0 and cols >= 1, got pad {pad}, cols {cols}")
    lo, hi = value_range
    if not hi > lo:
        raise ConfigError(f"value_range must be (low, high) with low < high, got {value_range}")
    pix = np.clip(np.round((np.nan_to_num(imgs.astype(np.float64), nan=lo) - lo) / (hi - lo) * 255.0), 0, 255)
    pix = pix.astype(np.uint8).repeat(scale, axis=1).repeat(scale, axis=2)
    h, w = pix.shape[1:3]
    cols = cols or max(1, ceil(n**0.5))
    width, height = grid_size(n, imgs.shape[1], imgs.shape[2], cols=cols, scale=scale, pad=pad)
    canvas = np.full((height, width, *pix.shape[3:]), PAD_VALUE, np.uint8)
    for i in range(n):
        r, c = divmod(i, cols)
        y, x = pad + r * (h + pad), pad + c * (w + pad)
        canvas[y : y + h, x : x + w] = pix[i]
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(canvas).save(out, format="PNG")  # uint8 [H, W] -> L, [H, W, 3] -> RGB
    return out


__all__ = ["as_images", "grid_size", "write_image"]
