"""Charts as inline SVG, rendered on the server: axes, labels and a legend, no script, no CDN.
Every label is escaped (a test id or a repository name is text, never markup)."""
from __future__ import annotations

import math

from markupsafe import Markup, escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def line_chart(title: str, x_labels: list[str], series: dict[str, list[float | None]], *,
               y_label: str = "", y_bounds: tuple[float, float] | None = None, width: int = 700,
               height: int = 240, unit: str = "") -> Markup:
    """Lines over a shared x axis; None leaves a gap (no data that day). The y axis is fitted to
    the data (`fitted_axis`), within `y_bounds` when given (a rate stays within 0 to 100);
    without bounds it starts at 0 (counts)."""
    left, right, top, bottom = 48, 200, 26, 36
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [v for vs in series.values() for v in vs if v is not None]
    ticks = fitted_axis(values, y_bounds) if y_bounds else fitted_axis(values + [0], (0, None))
    low, top_value = ticks[0], ticks[-1]
    n = max(1, len(x_labels) - 1)

    def x(i):
        return left + plot_w * i / n

    def y(v):
        return top + plot_h * (1 - (v - low) / (top_value - low))

    out = [f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
           f'<title>{escape(title)}</title>',
           f'<text x="{left}" y="16" class="chart-title">{escape(title)}</text>']
    out.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" class="plot"/>')
    digits = max(0, -math.floor(math.log10(ticks[1] - ticks[0]))) if len(ticks) > 1 else 0
    for v in ticks:  # y grid, ticks and labels
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid"/>')
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end" class="tick y-tick">'
                   f'{v:.{digits}f}{escape(unit)}</text>')
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


def fitted_axis(values: list[float], bounds: tuple[float | None, float | None] = (None, None),
                ticks: int = 4) -> list[float]:
    """Round tick values from just under the smallest value to just over the largest, about
    `ticks` steps of 1, 2 or 5 x 10^k, kept within `bounds`: lines spread over the plot
    instead of hugging one band of a fixed 0 to 100 axis."""
    low_bound, high_bound = bounds
    lo, hi = (min(values), max(values)) if values else (low_bound or 0.0, high_bound or 1.0)
    if hi - lo < 1e-9:  # one value: a small band around it
        pad = abs(hi) * 0.05 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / ticks
    scale = 10 ** math.floor(math.log10(raw))
    step = next(m * scale for m in (1, 2, 5, 10) if m * scale >= raw)
    start, end = math.floor(lo / step) * step, math.ceil(hi / step) * step
    if low_bound is not None:
        start = max(start, low_bound)
    if high_bound is not None:
        end = min(end, high_bound)
    count = max(1, round((end - start) / step))
    return [round(start + k * step, 10) for k in range(count + 1)]


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
