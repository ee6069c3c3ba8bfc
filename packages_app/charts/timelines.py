"""Pure: a package's throughput charts: decode rate over time per strategy and topology, with the served
revision's markers, MTP on against off, and rate and acceptance per strategy."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from packages_app.charts.common import (
    INK,
    MTP_COLOUR,
    SERIES_COLOURS,
    TPS_AXIS,
    Figure,
    as_float,
    as_int,
    figure_layout,
    plain,
    plotly_time,
)


def throughput_timeline_figure(
    series: list[dict[str, Any]], bucket: str = "hour", served: Iterable[tuple[str, datetime]] = ()
) -> Figure:
    """Median decode tokens/s per time bucket, one line per (strategy, topology), each with a band from
    its buckets' p25 to p75 (the points' ``p25``/``p75``, from the sketch), and a dashed vertical line
    where each of ``served`` [(label, first served)] started being served, when that falls on the axis.

    When every report falls in one ``bucket`` (an hour, a day) there is no time axis to draw: plotly would
    stretch one instant over a few milliseconds. That bucket is shown as one bar per line instead.
    """
    lines: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for point in series:
        key = (str(point.get("strategy") or "unknown"), str(point.get("topology") or ""))
        lines.setdefault(key, []).append(point)
    moments = sorted({plotly_time(p.get("bucket")) for p in series})
    if not moments:
        title = "Decode throughput: no report in this time range"
        return {"data": [], "layout": figure_layout(title, "Time (UTC)", TPS_AXIS)}
    if len(moments) == 1:
        return _one_bucket_figure(sorted(lines.items()), moments[0], bucket)
    data = []
    for i, (key, points) in enumerate(sorted(lines.items())):
        band = _band_trace(key, points, i)
        data += [band, _timeline_trace(key, points, i)] if band else [_timeline_trace(key, points, i)]
    shapes, annotations = _served_markers(served, moments[0], moments[-1], bucket)
    layout = figure_layout(
        "Decode throughput over time (band: p25 to p75)",
        "Time (UTC)",
        TPS_AXIS,
        showlegend=True,
        shapes=shapes,
        annotations=annotations,
    )
    layout["xaxis"]["type"] = "date"
    return {"data": data, "layout": layout}


BUCKET_LENGTH = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(days=7)}


def _served_markers(
    served: Iterable[tuple[str, datetime]], first: str, last: str, bucket: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A dashed line and a label at each first-served time inside the axis (the last bucket included)."""
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    try:
        end = datetime.fromisoformat(last) + BUCKET_LENGTH.get(bucket, timedelta(days=31))
    except ValueError:  # not a time: no axis to mark
        return shapes, annotations
    for index, (label, at) in enumerate(sorted(served, key=lambda s: plotly_time(s[1]))):
        moment = plotly_time(at)
        if not first <= moment < plotly_time(end):
            continue
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": moment,
                "x1": moment,
                "y0": 0,
                "y1": 1,
                "line": {"color": INK, "width": 1, "dash": "dot"},
            }
        )
        annotations.append(
            {
                "x": moment,
                "y": 1.0 - 0.07 * (index % 3),  # a little lower each, so that close labels do not overlap
                "xref": "x",
                "yref": "paper",
                "text": plain(f"{label} first served"),
                "showarrow": False,
                "xanchor": "left",
                "font": {"size": 11},
            }
        )
    return shapes, annotations


def _in_time_order(points: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Each point with its bucket as plotly's date axis reads it, in time order (formatted once)."""
    return sorted(((plotly_time(p.get("bucket")), p) for p in points), key=lambda t: t[0])


def _band_trace(key: tuple[str, str], points: list[dict[str, Any]], index: int) -> dict[str, Any] | None:
    """The p25..p75 band of a line as one filled polygon (p75 forwards, p25 back); None without quartiles."""
    timed = _in_time_order(points)
    quartiles = [(x, as_float(p.get("p25")), as_float(p.get("p75"))) for x, p in timed]
    kept = [(x, low, high) for x, low, high in quartiles if low is not None and high is not None]
    if not kept:
        return None
    strategy, topology = key
    colour = SERIES_COLOURS[index % len(SERIES_COLOURS)]
    red, green, blue = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return {
        "type": "scatter",
        "mode": "lines",
        "x": [x for x, _, _ in kept] + [x for x, _, _ in reversed(kept)],
        "y": [high for _, _, high in kept] + [low for _, low, _ in reversed(kept)],
        "fill": "toself",
        "fillcolor": f"rgba({red}, {green}, {blue}, 0.18)",
        "line": {"width": 0, "color": colour},
        "hoverinfo": "skip",
        "showlegend": False,
        "legendgroup": plain(f"{strategy} @ {topology}" if topology else strategy),
        "name": plain(f"{strategy} @ {topology} p25-p75" if topology else f"{strategy} p25-p75"),
    }


def _one_bucket_figure(
    lines: list[tuple[tuple[str, str], list[dict[str, Any]]]], moment: str, bucket: str
) -> Figure:
    names = [plain(f"{s} @ {t}" if t else s) for (s, t), _ in lines]
    values = [as_float(points[0].get("tps")) for _, points in lines]
    bars = {
        "type": "bar",
        "x": names,
        "y": values,
        "text": [f"{v:.2f}" if v is not None else "" for v in values],
        "textposition": "outside",
        # Narrow bars: one or two values should not read as a wall of colour.
        "width": [0.4] * len(names),
        "customdata": [[as_int(points[0].get("reports")), *_who(key)] for key, points in lines],
        "marker": {"color": [SERIES_COLOURS[i % len(SERIES_COLOURS)] for i in range(len(names))]},
        "hovertemplate": "%{y:.2f} tok/s (median) from %{customdata[0]} reports" + WHO_HOVER,
        "name": "median decode tokens/s",
    }
    title = f"Decode throughput: every report in the {bucket} of {moment} UTC"
    layout = figure_layout(title, "Strategy @ topology", TPS_AXIS, showlegend=False)
    return {"data": [bars], "layout": layout}


# The hover of a timeline point or bar names what it is the median of (the series is over every node).
WHO_HOVER = "<br>strategy: %{customdata[1]}<br>topology: %{customdata[2]}<br>nodes: every node<extra></extra>"


def _who(key: tuple[str, str]) -> list[str]:
    strategy, topology = key
    return [plain(strategy), plain(topology or "not reported")]


def _timeline_trace(key: tuple[str, str], points: list[dict[str, Any]], index: int) -> dict[str, Any]:
    strategy, topology = key
    timed = _in_time_order(points)
    points = [p for _, p in timed]
    few = len(points) < 4
    who = _who(key)  # (the same for each of the line's points: hundreds on a busy package's page)
    return {
        "type": "scatter",
        # Lines with markers; a line of one to three points also labels each point with its value.
        "mode": "lines+markers+text" if few else "lines+markers",
        "text": [f"{as_float(p.get('tps')) or 0:.2f}" for p in points] if few else None,
        "textposition": "top center",
        "marker": {"size": 9 if few else 6},
        "name": plain(f"{strategy} @ {topology}" if topology else strategy),
        "legendgroup": plain(f"{strategy} @ {topology}" if topology else strategy),
        "x": [x for x, _ in timed],
        "y": [as_float(p.get("tps")) for p in points],
        "customdata": [[as_int(p.get("reports")), *who] for p in points],
        "hovertemplate": "%{x}<br>%{y:.2f} tok/s (median) from %{customdata[0]} reports" + WHO_HOVER,
        "line": {"color": SERIES_COLOURS[index % len(SERIES_COLOURS)]},
    }


def mtp_comparison_figure(mtp_on: dict[str, Any] | None, mtp_off: dict[str, Any] | None) -> Figure:
    """Median decode tokens/s with native MTP in use vs without."""
    groups = [("MTP on", mtp_on or {}, MTP_COLOUR), ("MTP off", mtp_off or {}, "#868e96")]
    data = [
        {
            "type": "bar",
            "x": [name for name, _, _ in groups],
            "y": [as_float(values.get("tps")) for _, values, _ in groups],
            "customdata": [as_int(values.get("reports")) for _, values, _ in groups],
            "marker": {"color": [colour for _, _, colour in groups]},
            "hovertemplate": "%{x}: %{y:.2f} tok/s from %{customdata} reports<extra></extra>",
            "name": "median decode tokens/s",
        }
    ]
    return {
        "data": data,
        "layout": figure_layout("MTP on vs off", "Speculative decoding", TPS_AXIS, showlegend=False),
    }


def strategy_figure(by_strategy: list[dict[str, Any]]) -> Figure:
    """Median decode tokens/s (bars) and draft acceptance rate (markers, %) per effective strategy."""
    names = [plain(_strategy_label(row)) for row in by_strategy]
    bars = {
        "type": "bar",
        "x": names,
        "y": [as_float(row.get("tps")) for row in by_strategy],
        "customdata": [as_int(row.get("reports")) for row in by_strategy],
        "marker": {"color": [SERIES_COLOURS[i % len(SERIES_COLOURS)] for i in range(len(names))]},
        "hovertemplate": "%{x}: %{y:.2f} tok/s from %{customdata} reports<extra></extra>",
        "name": "median decode tokens/s",
    }
    acceptance = {
        "type": "scatter",
        "mode": "markers",
        "x": names,
        "y": [_percent(row.get("acceptance_rate")) for row in by_strategy],
        "yaxis": "y2",
        "marker": {"color": INK, "size": 11, "symbol": "diamond"},
        "hovertemplate": "%{x}: %{y:.1f}% of drafted tokens accepted<extra></extra>",
        "name": "acceptance rate (%)",
    }
    layout = figure_layout(
        "Throughput and acceptance by strategy",
        "Effective strategy",
        TPS_AXIS,
        yaxis2={
            "title": {"text": "Acceptance rate (%)"},
            "overlaying": "y",
            "side": "right",
            "range": [0, 105],
            "tickmode": "linear",
            "tick0": 0,
            "dtick": 25,
            "showgrid": False,
        },
    )
    return {"data": [bars, acceptance], "layout": layout}


def _percent(value: Any) -> float | None:
    rate = as_float(value)
    return None if rate is None else round(rate * 100, 2)


def _strategy_label(row: dict[str, Any]) -> str:
    strategy = str(row.get("strategy") or "unknown")
    topology = row.get("topology")
    return f"{strategy} @ {topology}" if topology else strategy
