"""Pure: the compare page's charts: two revisions' decode rate over time, before and after, and their
spread."""

from __future__ import annotations

from typing import Any

from packages_app import report_metrics
from packages_app.charts.common import (
    TPS_AXIS,
    Figure,
    as_float,
    as_int,
    figure_layout,
    plain,
    plotly_time,
)

BEFORE_COLOUR = "#868e96"
AFTER_COLOUR = "#1c7ed6"


def comparison_timeline_figure(lines: list[tuple[str, list[dict[str, Any]]]], bucket: str = "day") -> Figure:
    """Both revisions' median decode rate per bucket on one time axis, a line each (before grey, after
    blue). ``lines`` is [(label, points)], points as throughput.Point's fields. Everything in one
    bucket is drawn as one bar per revision, never as a sub-second axis."""
    colours = [BEFORE_COLOUR, AFTER_COLOUR]
    moments = sorted({plotly_time(p.get("bucket")) for _, points in lines for p in points})
    y_title = TPS_AXIS
    if not moments:
        return {
            "data": [],
            "layout": figure_layout("Decode throughput: no reports yet", "Time (UTC)", y_title),
        }
    if len(moments) == 1:
        labelled = [(label, points[0]) for label, points in lines if points]
        values = [as_float(point.get("tps")) for _, point in labelled]
        bars = {
            "type": "bar",
            "x": [plain(label) for label, _ in labelled],
            "y": values,
            "text": [f"{v:.2f}" if v is not None else "" for v in values],
            "textposition": "outside",
            "width": [0.4] * len(labelled),
            "customdata": [as_int(point.get("reports")) for _, point in labelled],
            "marker": {"color": [colours[i % 2] for i in range(len(labelled))]},
            "hovertemplate": "%{x}: %{y:.2f} tok/s from %{customdata} reports<extra></extra>",
            "name": "median decode tokens/s",
        }
        title = f"Decode throughput: every report in the {bucket} of {moments[0]} UTC"
        return {"data": [bars], "layout": figure_layout(title, "Revision", y_title, showlegend=False)}
    data = []
    for index, (label, points) in enumerate(lines):
        ordered = sorted(points, key=lambda p: plotly_time(p.get("bucket")))
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": plain(label),
                "x": [plotly_time(p.get("bucket")) for p in ordered],
                "y": [as_float(p.get("tps")) for p in ordered],
                "customdata": [as_int(p.get("reports")) for p in ordered],
                "hovertemplate": "%{x}<br>%{y:.2f} tok/s from %{customdata} reports"
                "<extra>%{fullData.name}</extra>",
                "line": {"color": colours[index % 2]},
                "marker": {"size": 7},
            }
        )
    layout = figure_layout(
        f"Decode throughput per {bucket}, both revisions", "Time (UTC)", y_title, showlegend=True
    )
    layout["xaxis"]["type"] = "date"
    return {"data": data, "layout": layout}


def distribution_figure(boxes: list[tuple[str, dict[str, float] | None, int]]) -> Figure:
    """Each revision's decode-rate spread from its sketch, drawn as a box plot with the basic bundle's
    traces: a floating bar from p25 to p75, the median as a bar across it, whiskers (error bars) to p5
    and p95. ``boxes`` is [(label, sketch.summary(...), reports)]; a revision without reports is left
    out."""
    colours = [BEFORE_COLOUR, AFTER_COLOUR]
    data = []
    for index, (label, spread, reports) in enumerate(boxes):
        if not spread:
            continue
        name = plain(f"{label} ({reports} reports)")
        p5, p25, p50, p75, p95 = (round(spread[k], 3) for k in ("p5", "p25", "p50", "p75", "p95"))
        hover = f"p5 {p5:.2f} · p25 {p25:.2f} · median {p50:.2f} · p75 {p75:.2f} · p95 {p95:.2f} tok/s"
        colour = colours[index % 2]
        data.append(
            {
                "type": "bar",
                "name": name,
                "x": [name],
                "base": [p25],
                "y": [round(p75 - p25, 3)],
                "width": [0.45],
                "marker": {"color": colour, "opacity": 0.45, "line": {"color": colour, "width": 2}},
                "hovertext": [hover],
                "hoverinfo": "text",
            }
        )
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": f"{name} median",
                "x": [name],
                "y": [p50],
                "marker": {"symbol": "line-ew", "size": 44, "line": {"color": colour, "width": 3}},
                "error_y": {
                    "type": "data",
                    "symmetric": False,
                    "array": [round(p95 - p50, 3)],
                    "arrayminus": [round(p50 - p5, 3)],
                    "color": colour,
                    "thickness": 2,
                    "width": 14,
                },
                "hovertext": [hover],
                "hoverinfo": "text",
                "customdata": [[p5, p25, p50, p75, p95]],
            }
        )
    layout = figure_layout(
        "Decode rate spread: box p25-p75, whiskers p5-p95",
        "Revision",
        report_metrics.BY_NAME["predicted_per_second"].label,
        showlegend=False,
    )
    return {"data": data, "layout": layout}
