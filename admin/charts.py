"""Small server-rendered SVG charts (pure): numbers in, markup out.

Only numbers and fixed strings reach the markup (labels are formatted numbers), so a chart
needs no escaping and no script; the page embeds it inline.
"""

from __future__ import annotations

from collections.abc import Sequence


def _fmt(v: float) -> str:
    return f"{v:.1f}"


def line_chart(
    series: Sequence[tuple[str, str, Sequence[float | None]]],
    *,
    width: int = 480,
    height: int = 134,
    unit: str = "s",
    title: str = "",
    x_labels: tuple[str, str] = ("-60 min", "now"),
) -> str:
    """One polyline per ``(css class, legend, values)``; ``None`` values break the line.
    All series share the x axis (one point per slot) and a y axis from 0 to the maximum."""
    slots = max((len(v) for _, _, v in series), default=0)
    peak = max((x for _, _, v in series for x in v if x is not None), default=0.0)
    top = peak if peak > 0 else 1.0
    pad_l, pad_b, pad_t = 44, 30, 8
    w, h = width - pad_l - 4, height - pad_b - pad_t

    def xy(i: int, v: float) -> str:
        x = pad_l + (w * i / max(1, slots - 1))
        y = pad_t + h - (h * v / top)
        return f"{_fmt(x)},{_fmt(y)}"

    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" xmlns="http://www.w3.org/2000/svg">'
    ]
    if title:
        parts.append(f"<title>{_escape(title)}</title>")
    parts.append(
        f'<line class="axis" x1="{pad_l}" y1="{pad_t + h}" x2="{pad_l + w}" y2="{pad_t + h}"/>'
    )
    parts.append(
        f'<text class="tick" x="{pad_l - 4}" y="{pad_t + 8}" text-anchor="end">'
        f"{_number(top)}{_escape(unit)}</text>"
    )
    parts.append(f'<text class="tick" x="{pad_l - 4}" y="{pad_t + h}" text-anchor="end">0</text>')
    parts.append(
        f'<text class="tick" x="{pad_l}" y="{pad_t + h + 11}">{_escape(x_labels[0])}</text>'
    )
    parts.append(
        f'<text class="tick" x="{pad_l + w}" y="{pad_t + h + 11}" text-anchor="end">'
        f"{_escape(x_labels[1])}</text>"
    )
    for css, _legend, values in series:
        run: list[str] = []
        for i, v in enumerate(values):
            if v is None:
                if run:
                    parts.append(_poly(css, run))
                run = []
            else:
                run.append(xy(i, v))
        if run:
            parts.append(_poly(css, run))
    ly = height - 2
    lx = pad_l
    for css, legend, _ in series:
        parts.append(
            f'<text class="legend {_escape(css)}" x="{lx}" y="{ly}">{_escape(legend)}</text>'
        )
        lx += 12 + 7 * len(legend)
    parts.append("</svg>")
    return "".join(parts)


def _poly(css: str, points: list[str]) -> str:
    if len(points) == 1:
        x, y = points[0].split(",")
        return f'<circle class="{_escape(css)}" cx="{x}" cy="{y}" r="2"/>'
    return f'<polyline class="{_escape(css)}" fill="none" points="{" ".join(points)}"/>'


def _number(v: float) -> str:
    if v >= 100:
        return f"{v:.0f}"
    if v >= 1:
        return f"{v:.1f}"
    return f"{v:.3g}"


def _escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
