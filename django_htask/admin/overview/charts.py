"""Inline SVG for the admin's overview page: stacked bars, lines, an area with marked
peaks, and a strip of run marks. Drawn here, in Python, so the page needs no script,
no CDN and no library: each function returns escaped, safe markup.

Every shape carries a ``<title>`` (its value, shown on hover and read by screen
readers) and every chart a ``role="img"`` with an ``aria-label``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

__all__ = [
    "COLOURS",
    "Series",
    "area_chart",
    "line_chart",
    "run_strip",
    "stacked_bars",
]

#: The colour of each run outcome (also used by the legend and the strips).
COLOURS = {
    "succeeded": "#2e8540",
    "failed": "#c9302c",
    "missed": "#e08a00",
    "skipped": "#8a94a0",
    "snoozed": "#7b5ea7",
    "running": "#2f6fb7",
    "p50": "#2f6fb7",
    "p99": "#c9302c",
    "occurrences": "#417690",
    "peak": "#c9302c",
}

# The attributes of every label (a constant, safe as it is).
_FONT = mark_safe('font-family="sans-serif" font-size="11" fill="currentColor"')
_LEFT, _BOTTOM, _TOP, _RIGHT = 44, 22, 10, 8


@dataclass(frozen=True)
class Series:
    """A named row of values (None: no value there) and its colour."""

    name: str
    values: Sequence[float | None]
    colour: str


def _join(parts: Sequence[SafeString]) -> SafeString:
    return mark_safe("".join(parts))  # every part is escaped by format_html


def _nice(top: float) -> float:
    """A round number at or above ``top`` for the y axis (1, 2 or 5 times a power of ten)."""
    if top <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(top))
    for factor in (1, 2, 5, 10):
        if top <= factor * power:
            return factor * power
    return 10 * power


def _px(value: float) -> str:
    """A coordinate, to a tenth of a pixel (format_html escapes before formatting, so
    numbers are formatted here)."""
    return f"{value:.1f}"


def _number(value: float) -> str:
    if value >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.2g}" if value < 1 else f"{value:.1f}"


def _frame(
    chart_id: str,
    label: str,
    width: int,
    height: int,
    top: float,
    unit: str,
    x_labels: Sequence[tuple[float, str]],
    body: Sequence[SafeString],
) -> SafeString:
    """The SVG around ``body``: axes, the y maximum and the x labels."""
    parts = _axes(width, height, top, unit)
    for x, text in x_labels:
        parts.append(
            format_html(
                '<text x="{}" y="{}" text-anchor="middle" {}>{}</text>',
                _px(x),
                height - 6,
                _FONT,
                text,
            )
        )
    return format_html(
        '<svg id="{}" class="htask-chart" xmlns="http://www.w3.org/2000/svg" width="{}" '
        'height="{}" viewBox="0 0 {} {}" role="img" aria-label="{}">{}{}</svg>',
        chart_id,
        width,
        height,
        width,
        height,
        label,
        _join(parts),
        _join(body),
    )


def _axes(width: int, height: int, top: float, unit: str) -> list[SafeString]:
    """The x axis, a dashed line at the y maximum, and the y axis's two labels."""
    bottom = height - _BOTTOM
    return [
        format_html(
            '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#999" stroke-width="1"/>',
            _LEFT,
            bottom,
            width - _RIGHT,
            bottom,
        ),
        format_html(
            '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#ddd" stroke-dasharray="3 3"/>',
            _LEFT,
            _TOP,
            width - _RIGHT,
            _TOP,
        ),
        format_html(
            '<text x="{}" y="{}" text-anchor="end" {}>{}{}</text>',
            _LEFT - 4,
            _TOP + 4,
            _FONT,
            _number(top),
            unit,
        ),
        format_html(
            '<text x="{}" y="{}" text-anchor="end" {}>0</text>',
            _LEFT - 4,
            bottom + 4,
            _FONT,
        ),
    ]


def _column_labels(columns: Sequence[str], slot: float, every: int) -> list[tuple[float, str]]:
    """Every ``every``-th column's label, under the middle of its ``slot``."""
    return [
        (_LEFT + i * slot + slot / 2, column) for i, column in enumerate(columns) if i % every == 0
    ]


def stacked_bars(
    chart_id: str,
    label: str,
    columns: Sequence[str],
    series: Sequence[Series],
    *,
    width: int = 720,
    height: int = 200,
    every: int = 3,
) -> SafeString:
    """One bar per column, the series stacked bottom up; a column label every
    ``every`` columns."""
    plot_w = width - _LEFT - _RIGHT
    plot_h = height - _TOP - _BOTTOM
    totals = [sum(row.values[i] or 0 for row in series) for i in range(len(columns))]
    top = _nice(max(totals, default=0))
    slot = plot_w / max(1, len(columns))
    bar = max(1.0, slot * 0.8)
    body: list[SafeString] = []
    for i, column in enumerate(columns):
        y = float(height - _BOTTOM)
        x = _LEFT + i * slot + (slot - bar) / 2
        for row in series:
            value = row.values[i] or 0
            if not value:
                continue
            bar_height = value / top * plot_h
            y -= bar_height
            body.append(
                format_html(
                    '<rect class="htask-bar" data-series="{}" data-column="{}" '
                    'data-value="{}" x="{}" y="{}" width="{}" height="{}" '
                    'fill="{}"><title>{}: {} {}</title></rect>',
                    row.name,
                    column,
                    _number(value),
                    _px(x),
                    _px(y),
                    _px(bar),
                    _px(bar_height),
                    row.colour,
                    column,
                    _number(value),
                    row.name,
                )
            )
    labels = _column_labels(columns, slot, every)
    return _frame(chart_id, label, width, height, top, "", labels, body)


#: Where a value of a column (by its index) is drawn: ``(x, y)``.
_Place = Callable[[int, float], tuple[float, float]]


def line_chart(
    chart_id: str,
    label: str,
    columns: Sequence[str],
    series: Sequence[Series],
    *,
    unit: str = "s",
    width: int = 720,
    height: int = 160,
    every: int = 3,
) -> SafeString:
    """One line per series over the columns; a missing value breaks the line."""
    plot_w = width - _LEFT - _RIGHT
    plot_h = height - _TOP - _BOTTOM
    values = [value for row in series for value in row.values if value is not None]
    top = _nice(max(values, default=0))
    slot = plot_w / max(1, len(columns))

    def point(i: int, value: float) -> tuple[float, float]:
        return _LEFT + i * slot + slot / 2, height - _BOTTOM - value / top * plot_h

    body: list[SafeString] = []
    for row in series:
        body.extend(_lines(row, point))
        body.extend(_points(row, columns, unit, point))
    labels = _column_labels(columns, slot, every)
    return _frame(chart_id, label, width, height, top, unit, labels, body)


def _lines(row: Series, point: _Place) -> list[SafeString]:
    """A polyline for each stretch of ``row`` with no missing value (a lone value
    draws none: its point shows it)."""
    stretches: list[list[tuple[float, float]]] = [[]]
    for i, value in enumerate(row.values):
        if value is None:
            stretches.append([])
            continue
        stretches[-1].append(point(i, value))
    return [
        format_html(
            '<polyline class="htask-line" data-series="{}" points="{}" fill="none" '
            'stroke="{}" stroke-width="2"/>',
            row.name,
            " ".join(f"{x:.1f},{y:.1f}" for x, y in stretch),
            row.colour,
        )
        for stretch in stretches
        if len(stretch) > 1
    ]


def _points(row: Series, columns: Sequence[str], unit: str, point: _Place) -> list[SafeString]:
    """A dot for each value of ``row``, its value in its title."""
    dots: list[SafeString] = []
    for i, value in enumerate(row.values):
        if value is None:
            continue
        x, y = point(i, value)
        dots.append(
            format_html(
                '<circle class="htask-point" data-series="{}" data-column="{}" '
                'data-value="{}" cx="{}" cy="{}" r="2.5" fill="{}">'
                "<title>{}: {} {}{}</title></circle>",
                row.name,
                columns[i],
                _number(value),
                _px(x),
                _px(y),
                row.colour,
                columns[i],
                row.name,
                _number(value),
                unit,
            )
        )
    return dots


def area_chart(
    chart_id: str,
    label: str,
    values: Sequence[int],
    *,
    peaks: Sequence[tuple[int, str]] = (),
    x_labels: Sequence[tuple[int, str]] = (),
    width: int = 720,
    height: int = 180,
) -> SafeString:
    """An area over many points (one a minute), with the ``peaks`` (index, label)
    marked by a dot and their label."""
    plot_w = width - _LEFT - _RIGHT
    plot_h = height - _TOP - _BOTTOM
    top = _nice(max(values, default=0))
    step = plot_w / max(1, len(values))
    bottom = height - _BOTTOM

    def xy(i: int, value: float) -> tuple[float, float]:
        return _LEFT + i * step + step / 2, bottom - value / top * plot_h

    body: list[SafeString] = []
    if values:
        points = [xy(i, v) for i, v in enumerate(values)]
        path = f"M{points[0][0]:.1f},{bottom} " + " ".join(f"L{x:.1f},{y:.1f}" for x, y in points)
        path += f" L{points[-1][0]:.1f},{bottom} Z"
        body.append(
            format_html(
                '<path class="htask-area" d="{}" fill="{}" fill-opacity="0.35" stroke="{}" '
                'stroke-width="1"/>',
                path,
                COLOURS["occurrences"],
                COLOURS["occurrences"],
            )
        )
    for rank, (i, text) in enumerate(peaks):
        x, y = xy(i, values[i])
        body.append(
            format_html(
                '<g class="htask-peak" data-index="{}" data-value="{}"><circle cx="{}" '
                'cy="{}" r="3.5" fill="{}"/><text x="{}" y="{}" '
                'text-anchor="middle" {}>{}</text><title>{}: {} occurrences</title></g>',
                i,
                values[i],
                _px(x),
                _px(y),
                COLOURS["peak"],
                _px(x),
                _px(max(_TOP + 10, y - 6 - 11 * (rank % 2))),
                _FONT,
                text,
                text,
                values[i],
            )
        )
    labels = [(_LEFT + i * step, text) for i, text in x_labels]
    return _frame(chart_id, label, width, height, top, "", labels, body)


def run_strip(
    marks: Sequence[tuple[str, str, str]],
    *,
    slots: int = 20,
    size: int = 10,
    gap: int = 2,
) -> SafeString:
    """A row of ``slots`` squares, the oldest left; each mark is ``(status, href,
    title)`` and links to ``href``. Empty slots come first, drawn faint."""
    width = slots * (size + gap)
    parts: list[SafeString] = []
    empty = slots - len(marks)
    for i in range(max(0, empty)):
        parts.append(
            format_html(
                '<rect x="{}" y="0" width="{}" height="{}" rx="2" fill="#e5e5e5"/>',
                i * (size + gap),
                size,
                size,
            )
        )
    for j, (status, href, title) in enumerate(marks[-slots:]):
        x = (max(0, empty) + j) * (size + gap)
        parts.append(
            format_html(
                '<a class="htask-mark" data-status="{}" href="{}"><rect x="{}" y="0" '
                'width="{}" height="{}" rx="2" fill="{}"/><title>{}</title></a>',
                status,
                href,
                x,
                size,
                size,
                COLOURS.get(status, "#444"),
                title,
            )
        )
    label = ", ".join(m[0] for m in marks) or "no runs"
    return format_html(
        '<svg class="htask-strip" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" '
        'viewBox="0 0 {} {}" role="img" aria-label="last runs, oldest first: {}">{}</svg>',
        width,
        size,
        width,
        size,
        label,
        _join(parts),
    )
