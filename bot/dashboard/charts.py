"""Charts as inline SVG, rendered on the server: axes, labels and a legend, no script, no CDN.
Every label is escaped (a test id or a repository name is text, never markup)."""
from __future__ import annotations

import math

from markupsafe import Markup, escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def line_chart(title: str, x_labels: list[str], series: dict[str, list[float | None]], *,
               y_label: str = "", y_max: float | None = None, width: int = 700, height: int = 240,
               unit: str = "") -> Markup:
    """Lines over a shared x axis; None leaves a gap (no data that day)."""
    left, right, top, bottom = 48, 200, 26, 36
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [v for vs in series.values() for v in vs if v is not None]
    top_value = y_max if y_max is not None else _nice(max(values or [1]) or 1)
    n = max(1, len(x_labels) - 1)

    def x(i):
        return left + plot_w * i / n

    def y(v):
        return top + plot_h * (1 - v / top_value)

    out = [f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
           f'<title>{escape(title)}</title>',
           f'<text x="{left}" y="16" class="chart-title">{escape(title)}</text>']
    for k in range(5):  # y grid, ticks and labels
        v = top_value * k / 4
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid"/>')
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end" class="tick">'
                   f'{v:.0f}{escape(unit)}</text>')
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}" class="axis"/>')
    out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}" class="axis"/>')
    step = max(1, len(x_labels) // 6)
    for i, label in enumerate(x_labels):
        if i % step == 0 or i == len(x_labels) - 1:
            out.append(f'<text x="{x(i):.1f}" y="{top + plot_h + 16}" text-anchor="middle" class="tick">'
                       f'{escape(label)}</text>')
    if y_label:
        out.append(f'<text transform="rotate(-90)" x="{-(top + plot_h / 2):.1f}" y="12" text-anchor="middle" '
                   f'class="tick">{escape(y_label)}</text>')
    for s, (name, vs) in enumerate(series.items()):
        colour = PALETTE[s % len(PALETTE)]
        runs, current = [], []
        for i, v in enumerate(vs):
            if v is None:
                if current:
                    runs.append(current)
                current = []
            else:
                current.append(f"{x(i):.1f},{y(v):.1f}")
        if current:
            runs.append(current)
        for points in runs:
            if len(points) == 1:
                cx, cy = points[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="{colour}"/>')
            else:
                out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{" ".join(points)}"/>')
        ly = top + 6 + s * 16  # legend
        out.append(f'<rect x="{left + plot_w + 12}" y="{ly}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{left + plot_w + 26}" y="{ly + 9}" class="legend">{escape(name)}</text>')
    if not series:
        out.append(f'<text x="{left + plot_w / 2}" y="{top + plot_h / 2}" text-anchor="middle" class="tick">'
                   'no data</text>')
    out.append("</svg>")
    return Markup("".join(out))


def _nice(value: float) -> float:
    """The smallest of 1, 2, 4, 5, 8 x 10^k at or above `value`: y ticks at quarters stay round."""
    scale = 10 ** math.floor(math.log10(value))
    return next(step * scale for step in (1, 2, 4, 5, 8, 10) if step * scale >= value)


def sparkline(values: list[int], *, width: int = 120, height: int = 24, label: str = "") -> Markup:
    """A small bar series (failures per day), with the total in its title."""
    top = max(values or [0]) or 1
    bar = width / max(1, len(values))
    bars = "".join(
        f'<rect x="{i * bar:.1f}" y="{height - height * v / top:.1f}" width="{max(bar - 1, 1):.1f}" '
        f'height="{height * v / top:.1f}"/>' for i, v in enumerate(values) if v)
    title = escape(label or f"{sum(values)} in {len(values)} days")
    return Markup(f'<svg class="spark" role="img" aria-label="{title}" viewBox="0 0 {width} {height}" '
                  f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg"><title>{title}</title>'
                  f'<line x1="0" x2="{width}" y1="{height - 0.5}" y2="{height - 0.5}" class="axis"/>{bars}</svg>')
