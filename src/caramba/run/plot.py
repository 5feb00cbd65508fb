"""Line charts as PNG with no plotting library: a tiny rasterizer, a 5x7 bitmap font and zlib.

``line_chart(series, path)`` draws one or more ``(label, xs, ys)`` series on shared axes with
ticks, grid and a legend; used for the loss curves of ``caramba research inspect``.
"""

from __future__ import annotations

import itertools
import math
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

# 5x7 glyphs, seven rows of five pixels ("#" = ink); letters are lowercase.
_FONT_SRC = {
    '0': ['.###.', '#...#', '#..##', '#.#.#', '##..#', '#...#', '.###.'],
    '1': ['..#..', '.##..', '..#..', '..#..', '..#..', '..#..', '.###.'],
    '2': ['.###.', '#...#', '....#', '...#.', '..#..', '.#...', '#####'],
    '3': ['#####', '...#.', '..#..', '...#.', '....#', '#...#', '.###.'],
    '4': ['...#.', '..##.', '.#.#.', '#..#.', '#####', '...#.', '...#.'],
    '5': ['#####', '#....', '####.', '....#', '....#', '#...#', '.###.'],
    '6': ['..##.', '.#...', '#....', '####.', '#...#', '#...#', '.###.'],
    '7': ['#####', '....#', '...#.', '..#..', '.#...', '.#...', '.#...'],
    '8': ['.###.', '#...#', '#...#', '.###.', '#...#', '#...#', '.###.'],
    '9': ['.###.', '#...#', '#...#', '.####', '....#', '...#.', '.##..'],
    '.': ['.....', '.....', '.....', '.....', '.....', '.##..', '.##..'],
    '-': ['.....', '.....', '.....', '#####', '.....', '.....', '.....'],
    '+': ['.....', '..#..', '..#..', '#####', '..#..', '..#..', '.....'],
    ':': ['.....', '.##..', '.##..', '.....', '.##..', '.##..', '.....'],
    '_': ['.....', '.....', '.....', '.....', '.....', '.....', '#####'],
    '(': ['...#.', '..#..', '.#...', '.#...', '.#...', '..#..', '...#.'],
    ')': ['.#...', '..#..', '...#.', '...#.', '...#.', '..#..', '.#...'],
    '/': ['....#', '....#', '...#.', '..#..', '.#...', '#....', '#....'],
    '%': ['##...', '##..#', '...#.', '..#..', '.#...', '#..##', '...##'],
    '=': ['.....', '.....', '#####', '.....', '#####', '.....', '.....'],
    'a': ['.....', '.....', '.###.', '....#', '.####', '#...#', '.####'],
    'b': ['#....', '#....', '#.##.', '##..#', '#...#', '#...#', '####.'],
    'c': ['.....', '.....', '.###.', '#....', '#....', '#...#', '.###.'],
    'd': ['....#', '....#', '.##.#', '#..##', '#...#', '#...#', '.####'],
    'e': ['.....', '.....', '.###.', '#...#', '#####', '#....', '.###.'],
    'f': ['..##.', '.#..#', '.#...', '###..', '.#...', '.#...', '.#...'],
    'g': ['.....', '.####', '#...#', '#...#', '.####', '....#', '.###.'],
    'h': ['#....', '#....', '#.##.', '##..#', '#...#', '#...#', '#...#'],
    'i': ['..#..', '.....', '.##..', '..#..', '..#..', '..#..', '.###.'],
    'j': ['...#.', '.....', '..##.', '...#.', '...#.', '#..#.', '.##..'],
    'k': ['#....', '#....', '#..#.', '#.#..', '##...', '#.#..', '#..#.'],
    'l': ['.##..', '..#..', '..#..', '..#..', '..#..', '..#..', '.###.'],
    'm': ['.....', '.....', '##.#.', '#.#.#', '#.#.#', '#...#', '#...#'],
    'n': ['.....', '.....', '#.##.', '##..#', '#...#', '#...#', '#...#'],
    'o': ['.....', '.....', '.###.', '#...#', '#...#', '#...#', '.###.'],
    'p': ['.....', '.....', '####.', '#...#', '####.', '#....', '#....'],
    'q': ['.....', '.....', '.##.#', '#..##', '.####', '....#', '....#'],
    'r': ['.....', '.....', '#.##.', '##..#', '#....', '#....', '#....'],
    's': ['.....', '.....', '.####', '#....', '.###.', '....#', '####.'],
    't': ['.#...', '.#...', '###..', '.#...', '.#...', '.#..#', '..##.'],
    'u': ['.....', '.....', '#...#', '#...#', '#...#', '#..##', '.##.#'],
    'v': ['.....', '.....', '#...#', '#...#', '#...#', '.#.#.', '..#..'],
    'w': ['.....', '.....', '#...#', '#...#', '#.#.#', '#.#.#', '.#.#.'],
    'x': ['.....', '.....', '#...#', '.#.#.', '..#..', '.#.#.', '#...#'],
    'y': ['.....', '.....', '#...#', '#...#', '.####', '....#', '.###.'],
    'z': ['.....', '.....', '#####', '...#.', '..#..', '.#...', '#####'],
    ' ': ['.....', '.....', '.....', '.....', '.....', '.....', '.....'],
}
_FONT = {k: np.array([[c == "#" for c in row] for row in rows], dtype=bool) for k, rows in _FONT_SRC.items()}

PALETTE = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75)]


class Canvas:
    def __init__(self, width: int, height: int, bg: tuple[int, int, int] = (255, 255, 255)) -> None:
        self.w, self.h = width, height
        self.px = np.empty((height, width, 3), dtype=np.uint8)
        self.px[:] = bg

    def dot(self, x: int, y: int, color: tuple[int, int, int], r: int = 0) -> None:
        x0, x1 = max(0, x - r), min(self.w, x + r + 1)
        y0, y1 = max(0, y - r), min(self.h, y + r + 1)
        if x0 < x1 and y0 < y1:
            self.px[y0:y1, x0:x1] = color

    def line(self, x0: float, y0: float, x1: float, y1: float, color: tuple[int, int, int], width: int = 1) -> None:
        n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        xs = np.rint(np.linspace(x0, x1, n)).astype(int)
        ys = np.rint(np.linspace(y0, y1, n)).astype(int)
        r = width // 2
        for dx in range(-r, width - r):
            for dy in range(-r, width - r):
                xx, yy = xs + dx, ys + dy
                ok = (xx >= 0) & (xx < self.w) & (yy >= 0) & (yy < self.h)
                self.px[yy[ok], xx[ok]] = color

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: tuple[int, int, int]) -> None:
        self.px[max(0, y0):max(0, y1), max(0, x0):max(0, x1)] = color

    def text(self, x: int, y: int, s: str, color: tuple[int, int, int] = (0, 0, 0), scale: int = 1,
             anchor: str = "left") -> None:
        width = text_width(s, scale)
        if anchor == "right":
            x -= width
        elif anchor == "center":
            x -= width // 2
        for ch in s.lower():
            g = _FONT.get(ch, _FONT[" "])
            for gy, gx in zip(*np.nonzero(g)):
                self.rect(x + gx * scale, y + gy * scale, x + (gx + 1) * scale, y + (gy + 1) * scale, color)
            x += 6 * scale

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + self.px[y].tobytes() for y in range(self.h))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        header = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)  # 8-bit RGB
        return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def text_width(s: str, scale: int = 1) -> int:
    return max(0, len(s) * 6 * scale - scale)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not math.isfinite(lo) or not math.isfinite(hi):
        return []
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    out, v = [], start
    while v <= hi + step * 1e-9:
        out.append(round(v, 12))
        v += step
    return out


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e4 or abs(v) < 1e-3:
        return f"{v:.1e}".replace("e+0", "e").replace("e-0", "e-")
    return f"{v:.4g}"


def line_chart(series: Sequence[tuple[str, Sequence[float], Sequence[float]]], path: str | Path | None = None,
               title: str = "", xlabel: str = "step", ylabel: str = "", width: int = 800, height: int = 480,
               baseline: tuple[str, float] | None = None) -> bytes:
    """Draw ``(label, xs, ys)`` series on one set of axes; returns the PNG bytes (and writes ``path``)."""
    c = Canvas(width, height)
    left, right, top, bottom = 78, 20, 40, 52
    pw, ph = width - left - right, height - top - bottom
    xs_all = [x for _, xs, _ in series for x in xs]
    ys_all = [y for _, _, ys in series for y in ys if math.isfinite(y)]
    if baseline is not None:
        ys_all.append(baseline[1])
    if not xs_all or not ys_all:
        c.text(width // 2, height // 2, "no data", anchor="center", scale=2)
        data = c.png()
        if path is not None:
            Path(path).write_bytes(data)
        return data
    x0, x1 = min(xs_all), max(xs_all)
    x1 = x1 if x1 > x0 else x0 + 1
    y0, y1 = min(ys_all), max(ys_all)
    pad = (y1 - y0) * 0.06 or abs(y0) * 0.1 or 1.0
    y0, y1 = y0 - pad, y1 + pad

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return top + (1 - (y - y0) / (y1 - y0)) * ph

    grid, ink = (228, 228, 228), (60, 60, 60)
    for t in nice_ticks(y0, y1, 8):
        yy = round(sy(t))
        c.line(left, yy, left + pw, yy, grid)
        c.text(left - 8, yy - 3, _fmt(t), ink, anchor="right")
    for t in nice_ticks(x0, x1, 6):
        xx = round(sx(t))
        c.line(xx, top, xx, top + ph, grid)
        c.text(xx, top + ph + 8, _fmt(t), ink, anchor="center")
    c.line(left, top + ph, left + pw, top + ph, ink)
    c.line(left, top, left, top + ph, ink)
    if baseline is not None:
        yy = sy(baseline[1])
        for xx in range(left, left + pw, 12):
            c.line(xx, yy, min(xx + 6, left + pw), yy, (150, 150, 150), 1)
    for k, (_, xs, ys) in enumerate(series):
        color = PALETTE[k % len(PALETTE)]
        pts = [(sx(x), sy(y)) for x, y in zip(xs, ys) if math.isfinite(y)]
        for (ax, ay), (bx, by) in itertools.pairwise(pts):
            c.line(ax, ay, bx, by, color, 2)
        if len(pts) <= 60:
            for px, py in pts:
                c.dot(round(px), round(py), color, 2)
    if title:
        c.text(width // 2, 12, title, (0, 0, 0), scale=2, anchor="center")
    c.text(left + pw // 2, height - 18, xlabel, ink, anchor="center")
    if ylabel:
        c.text(8, top - 16, ylabel, ink)
    labels = [(lbl, PALETTE[k % len(PALETTE)]) for k, (lbl, _, _) in enumerate(series)]
    if baseline is not None:
        labels.append((baseline[0], (150, 150, 150)))
    lx = left + pw - max(text_width(lbl) for lbl, _ in labels) - 30
    for k, (lbl, color) in enumerate(labels):
        ly = top + 8 + k * 14
        c.rect(lx, ly, lx + 14, ly + 7, color)
        c.text(lx + 20, ly, lbl, ink)
    data = c.png()
    if path is not None:
        Path(path).write_bytes(data)
    return data


def read_png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG header (tests and sanity checks)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("not a PNG")
    return struct.unpack(">II", data[16:24])
