"""Inline SVG for index.html, written as text: no plotting library, no script, no font fetched.

Three pictures: the pair sweep's heatmap (the value in every measured cell, a colour scale
against the fleet median under the grid, never over it), the same pairs as a row per node
(the node, then each partner and value, for fleets too big for a grid) and a small line
chart (busbw against message size, log2 axis, its floors as dashed lines, named in a legend
under the plot). Every
text and attribute value is XML-escaped here (:func:`esc`): a node named ``<script>`` is
text in the picture. Sizes are in CSS pixels; the page lets a wide picture scroll rather
than shrink its labels.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from html import escape

from gpufleet.units import human_size

FONT = "system-ui, -apple-system, 'Segoe UI', 'DejaVu Sans', sans-serif"
LABEL_PX = 12  # node labels
CHAR_PX = 7.2  # width of a character at LABEL_PX, for laying labels out
#: colour stops of the scale, by value / reference (the fleet median): red when slow,
#: amber at the slow line, green at and above the median
RED, AMBER, GREEN = (192, 57, 43), (240, 180, 41), (46, 139, 87)
#: series colours of the line charts (colour-blind safe, Okabe-Ito)
COLOURS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000")


def esc(value: object) -> str:
    """Text or attribute value, XML-escaped (quotes too)."""
    return escape(str(value), quote=True)


def num(value: float) -> str:
    """A figure in at most four characters where it can: 412, 45.1, 3.27, 0.123."""
    v = abs(value)
    if v >= 100 or v == 0:
        return f"{value:.0f}"
    if v >= 10:
        return f"{value:.1f}"
    if v >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _mix(a: tuple[int, int, int], b: tuple[int, int, int], t: float) -> tuple[int, int, int]:
    t = min(1.0, max(0.0, t))
    return (
        round(a[0] + (b[0] - a[0]) * t),
        round(a[1] + (b[1] - a[1]) * t),
        round(a[2] + (b[2] - a[2]) * t),
    )


def scale_colour(ratio: float, slow: float) -> tuple[int, int, int]:
    """The colour of ``value / reference``: red at half the slow ratio and below, amber at the
    slow ratio, green at 1 (the median) and above."""
    if ratio <= slow:
        return _mix(RED, AMBER, (ratio - slow / 2) / (slow / 2))
    return _mix(AMBER, GREEN, (ratio - slow) / (1 - slow) if slow < 1 else 1.0)


def hex_colour(rgb: tuple[int, int, int]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def ink(rgb: tuple[int, int, int]) -> str:
    """Black or white text, whichever reads on ``rgb`` (relative luminance)."""
    lum = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]
    return "#000" if lum > 140 else "#fff"


def text_width(text: str, px: float = LABEL_PX) -> float:
    return len(text) * px * CHAR_PX / LABEL_PX


def _svg(width: float, height: float, body: Iterable[str], label: str, cls: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{esc(cls)}" role="img" '
        f'aria-label="{esc(label)}" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="{esc(FONT)}">'
        + "".join(body)
        + "</svg>"
    )


def _text(x: float, y: float, text: str, *, size: float = LABEL_PX, **attrs: object) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{esc(v)}"' for k, v in attrs.items())
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size:g}"{extra}>{esc(text)}</text>'


@dataclass(frozen=True)
class Heatmap:
    """``names`` in their order on both axes; ``cells``: {(a, b): value} (each pair once);
    ``reference``: the fleet median the colours compare with; ``slow``: the slow ratio;
    ``marked``: nodes to name (bold, red label)."""

    title: str
    names: Sequence[str]
    cells: dict[tuple[str, str], float]
    reference: float
    slow: float
    unit: str = "GB/s"
    marked: frozenset[str] = frozenset()


def heatmap(h: Heatmap) -> str:
    """The grid with the value in every measured cell, labels on the left and on top (turned),
    the title above and the colour scale below the grid."""
    n = len(h.names)
    cell = max(36, min(64, 900 // max(n, 1)))
    value_px = max(9.0, min(14.0, cell / 3.2))
    label_w = math.ceil(max((text_width(x) for x in h.names), default=0) * 1.12) + 12  # bold
    title_h = 28
    left, top = label_w, title_h + label_w
    grid = cell * n
    legend_h = 62
    width = max(left + grid + 10, text_width(h.title, 14) + 20, left + 330)
    height = top + grid + legend_h
    at = {name: i for i, name in enumerate(h.names)}
    body = [_text(4, 18, h.title, size=14, font_weight="bold")]
    body.append(
        f'<rect x="{left}" y="{top}" width="{grid}" height="{grid}" fill="#f4f4f4" stroke="#bbb"/>'
    )
    for i, name in enumerate(h.names):
        weight = "bold" if name in h.marked else "normal"
        colour = "#b0281a" if name in h.marked else "#222"
        y = top + i * cell + cell / 2 + LABEL_PX / 3
        body.append(_text(left - 6, y, name, text_anchor="end", font_weight=weight, fill=colour))
        x = left + i * cell + cell / 2 + LABEL_PX / 3
        body.append(
            _text(
                x,
                top - 6,
                name,
                transform=f"rotate(-90 {x:.1f} {top - 6:.1f})",
                font_weight=weight,
                fill=colour,
            )
        )
        body.append(
            f'<rect x="{left + i * cell}" y="{top + i * cell}" width="{cell}" height="{cell}" '
            'fill="#d9d9d9"/>'
        )
    for (a, b), value in h.cells.items():
        if a not in at or b not in at:
            continue
        ratio = value / h.reference if h.reference else 1.0
        rgb = scale_colour(ratio, h.slow)
        tip = f"{a} + {b}: {num(value)} {h.unit} ({ratio:.2f} x the median {num(h.reference)})"
        for i, j in {(at[a], at[b]), (at[b], at[a])}:
            x, y = left + j * cell, top + i * cell
            body.append(
                f'<g><title>{esc(tip)}</title><rect x="{x}" y="{y}" width="{cell}" '
                f'height="{cell}" fill="{hex_colour(rgb)}" stroke="#fff"/>'
                + _text(
                    x + cell / 2,
                    y + cell / 2 + value_px / 3,
                    num(value),
                    size=value_px,
                    text_anchor="middle",
                    fill=ink(rgb),
                )
                + "</g>"
            )
    body.append(_legend(left, top + grid + 8, h.reference, h.slow, h.unit))
    body.append(_text(left, top + grid + 58, "grey: no pair measured", size=10, fill="#555"))
    return _svg(width, height, body, h.title, "heatmap")


def _legend(x: float, y: float, reference: float, slow: float, unit: str) -> str:
    """The colour scale from half the slow ratio to the median: the slow mark above the
    strip, its two ends under it, the empty-cell note last (nothing overlaps)."""
    steps, width = 24, 300
    w = width / steps
    parts = []
    for k in range(steps):
        ratio = slow / 2 + (1 - slow / 2) * k / (steps - 1)
        parts.append(
            f'<rect x="{x + k * w:.1f}" y="{y + 12}" width="{w + 0.5:.1f}" height="10" '
            f'fill="{hex_colour(scale_colour(ratio, slow))}"/>'
        )
    slow_x = x + width * (slow - slow / 2) / (1 - slow / 2)
    parts.append(
        f'<line x1="{slow_x:.1f}" y1="{y + 8}" x2="{slow_x:.1f}" y2="{y + 24}" stroke="#000"/>'
    )
    parts.append(
        _text(slow_x, y + 6, f"slow below {slow:g} x median", size=11, text_anchor="middle")
    )
    parts.append(_text(x, y + 36, f"{slow / 2:g} x", size=11))
    parts.append(
        _text(x + width, y + 36, f"median {num(reference)} {unit}", size=11, text_anchor="end")
    )
    return "".join(parts)


def pair_rows(
    title: str,
    rows: Sequence[tuple[str, Sequence[tuple[str, float]]]],
    reference: float,
    slow: float,
    unit: str = "GB/s",
    marked: frozenset[str] = frozenset(),
) -> str:
    """The pair sweep as one row per node: the node, then a cell per pair it is in (the
    partner and the value, coloured as the heatmap); rows in blocks side by side so that 64
    nodes fit a laptop screen."""
    per_row = max((len(p) for _, p in rows), default=1) or 1
    blocks = min(4, max(1, math.ceil(len(rows) / 22)))
    tall = math.ceil(len(rows) / blocks)
    label_w = math.ceil(max((text_width(n) for n, _ in rows), default=0) * 1.12) + 12  # bold
    cell_w = (
        max((text_width(f"{p} {num(v)}", 11) for _, ps in rows for p, v in ps), default=40) + 12
    )
    row_h, top = 20, 30
    block_w = label_w + per_row * cell_w + 18
    width = max(block_w * blocks, text_width(title, 14) + 20, 340)
    height = top + tall * row_h + 56
    body = [_text(4, 18, title, size=14, font_weight="bold")]
    for k, (node, partners) in enumerate(rows):
        bx, y = (k // tall) * block_w, top + (k % tall) * row_h
        weight, colour = ("bold", "#b0281a") if node in marked else ("normal", "#222")
        body.append(
            _text(
                bx + label_w - 6, y + 14, node, text_anchor="end", font_weight=weight, fill=colour
            )
        )
        for j, (partner, value) in enumerate(partners):
            ratio = value / reference if reference else 1.0
            rgb = scale_colour(ratio, slow)
            x = bx + label_w + j * cell_w
            tip = f"{node} + {partner}: {num(value)} {unit} ({ratio:.2f} x the median "
            tip += f"{num(reference)})"
            body.append(
                f'<g><title>{esc(tip)}</title><rect x="{x:.1f}" y="{y + 1}" '
                f'width="{cell_w - 2:.1f}" height="{row_h - 2}" fill="{hex_colour(rgb)}"/>'
                + _text(x + 5, y + 14, f"{partner} {num(value)}", size=11, fill=ink(rgb))
                + "</g>"
            )
    body.append(_legend(label_w, top + tall * row_h + 8, reference, slow, unit))
    return _svg(width, height, body, title, "pairs")


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[tuple[int, float]]  # (message size in bytes, busbw)


@dataclass(frozen=True)
class Band:
    """The spread of many series: per size the lowest, the median and the highest value."""

    label: str
    points: Sequence[tuple[int, float, float, float]]  # size, low, median, high


@dataclass(frozen=True)
class Floor:
    value: float
    label: str


@dataclass(frozen=True)
class LineChart:
    title: str
    series: Sequence[Series]
    floors: Sequence[Floor] = ()
    band: Band | None = None
    unit: str = "GB/s"
    notes: Sequence[str] = field(default_factory=tuple)


def _ticks(top: float) -> list[float]:
    """About five round ticks from 0 to ``top``."""
    if top <= 0:
        return [0.0, 1.0]
    step = 10 ** math.floor(math.log10(top / 5))
    for m in (1, 2, 2.5, 5, 10):
        if top / (step * m) <= 6:
            step *= m
            break
    return [k * step for k in range(int(top / step) + 2)]


def line_chart(c: LineChart) -> str:
    """busbw against message size (log2 axis): each series a line with points, the band as a
    shaded area with its median, each floor a dashed red line; the legend under the plot."""
    sizes = sorted(
        {x for s in c.series for x, _ in s.points}
        | {p[0] for p in (c.band.points if c.band else [])}
    )
    ys = [y for s in c.series for _, y in s.points]
    ys += [p[3] for p in (c.band.points if c.band else [])]
    ys += [f.value for f in c.floors]
    ticks = _ticks(max(ys, default=1.0) * 1.08)
    left, top, plot_w, plot_h = 52, 30, 330, 170
    legend = [
        *(s.label for s in c.series),
        *([c.band.label] if c.band else []),
        *(f.label for f in c.floors),
        *c.notes,
    ]
    width = max(left + plot_w + 20, max((text_width(t, 11) for t in legend), default=0) + 40)
    height = top + plot_h + 34 + 16 * len(legend)
    lo, hi = (math.log2(sizes[0]), math.log2(sizes[-1])) if sizes else (0.0, 1.0)
    span = (hi - lo) or 1.0

    def px(size: int) -> float:
        return left + plot_w * ((math.log2(size) - lo) / span if sizes and hi > lo else 0.5)

    def py(value: float) -> float:
        return top + plot_h - plot_h * value / ticks[-1]

    body = [_text(4, 18, c.title, size=13, font_weight="bold")]
    body.append(
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fafafa" '
        'stroke="#999"/>'
    )
    for t in ticks:
        body.append(
            f'<line x1="{left}" y1="{py(t):.1f}" x2="{left + plot_w}" y2="{py(t):.1f}" '
            'stroke="#e3e3e3"/>'
        )
        body.append(_text(left - 4, py(t) + 4, num(t), size=10, text_anchor="end"))
    step = max(1, math.ceil(len(sizes) / 6))
    for s in sizes[::step]:
        body.append(_text(px(s), top + plot_h + 14, human_size(s), size=10, text_anchor="middle"))
    body.append(
        _text(
            4, top + plot_h / 2, c.unit, size=10, transform=f"rotate(-90 10 {top + plot_h / 2:.1f})"
        )
    )
    body.append(
        _text(
            left + plot_w,
            top + plot_h + 28,
            "message size",
            size=10,
            text_anchor="end",
            fill="#555",
        )
    )
    if c.band:
        upper = " ".join(f"{px(p[0]):.1f},{py(p[3]):.1f}" for p in c.band.points)
        lower = " ".join(f"{px(p[0]):.1f},{py(p[1]):.1f}" for p in reversed(c.band.points))
        body.append(f'<polygon points="{upper} {lower}" fill="#999" fill-opacity="0.3"/>')
        mid = " ".join(f"{px(p[0]):.1f},{py(p[2]):.1f}" for p in c.band.points)
        body.append(f'<polyline points="{mid}" fill="none" stroke="#777" stroke-width="2"/>')
    for f in c.floors:
        body.append(
            f'<line x1="{left}" y1="{py(f.value):.1f}" x2="{left + plot_w}" '
            f'y2="{py(f.value):.1f}" stroke="#c0392b" stroke-width="1.5" '
            'stroke-dasharray="6 4"/>'
        )
    for k, line in enumerate(c.series):
        colour = COLOURS[k % len(COLOURS)]
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in line.points)
        body.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="2"/>')
        body += [
            f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{colour}"/>'
            for x, y in line.points
        ]
    y = top + plot_h + 46
    swatches = [(COLOURS[k % len(COLOURS)], "") for k in range(len(c.series))]
    swatches += [("#999", "")] if c.band else []
    swatches += [("#c0392b", "6 4")] * len(c.floors)
    for (colour, dash), label in zip(swatches, legend, strict=False):
        body.append(
            f'<line x1="{left - 30}" y1="{y - 4}" x2="{left - 8}" y2="{y - 4}" '
            f'stroke="{colour}" stroke-width="2.5" stroke-dasharray="{dash or "none"}"/>'
        )
        body.append(_text(left, y, label, size=11))
        y += 16
    for note in c.notes:
        body.append(_text(left, y, note, size=11, fill="#555"))
        y += 16
    return _svg(width, height, body, c.title, "chart")
