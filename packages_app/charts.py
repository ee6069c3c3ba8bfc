"""Pure chart building: audit and throughput data in, plotly figure dicts out; no Django, no I/O.

The dicts go to the page through ``json_script`` and static/packages_app/charts.js draws them.
"""

from __future__ import annotations

import functools
import html
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from packages_app import report_metrics
from packages_app.audit.model import Block
from packages_app.glossary import format_decimal_size

Figure = dict[str, Any]
# Axis titles from the metrics table (packages_app.report_metrics).
TPS_AXIS = report_metrics.axis_title("predicted_per_second")

# Sizes follow the site's one unit rule: decimal units (kB, MB, GB, 10^3 steps). Axes carry raw bytes
# with d3's SI format ("15G" + "B"), hovers the same text as the tables (glossary.format_decimal_size).
BYTES_AXIS = {"tickformat": "~s", "ticksuffix": "B"}
MTP_COLOUR = "#d6336c"
# The page's text colour: what is drawn in it (stage-split lines and labels, the tensor-count line, the
# acceptance markers) is recoloured by static/packages_app/meshdash.js from the scheme's --fg.
INK = "#212529"
# Blocks no stage holds: a translucent warning fill, legible under the bars in both colour schemes.
GAP_FILL = "rgba(245, 159, 0, 0.28)"
# Legend order and colour: a block is coloured by its first kind in this order.
KIND_COLOURS = {
    "attention": "#1c7ed6",
    "ssm": "#0ca678",
    "ffn": "#7048e8",
    "moe": "#f59f00",
    "other": "#868e96",
}
KIND_ORDER = list(KIND_COLOURS)
SERIES_COLOURS = ["#1c7ed6", "#d6336c", "#0ca678", "#f59f00", "#7048e8", "#e8590c", "#495057", "#1098ad"]
_FONT = {"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12}


def _layout(title: str, x_title: str, y_title: str, **extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "title": {"text": title},
        "xaxis": {"title": {"text": x_title}, "automargin": True},
        "yaxis": {"title": {"text": y_title}, "automargin": True, "rangemode": "tozero"},
        "font": _FONT,
        "margin": {"l": 60, "r": 60, "t": 50, "b": 90},
        "legend": {"orientation": "h", "x": 0, "y": -0.22, "yanchor": "top"},
        "hovermode": "closest",
        "height": 420,
        "paper_bgcolor": "rgba(0,0,0,0)",
    }
    layout.update(extra)
    return layout


# --- layer layout --------------------------------------------------------------------------------


def block_category(block: Block) -> str:
    """The legend group of a block: ``mtp`` for NextN blocks, else its kinds joined (``attention+moe``)."""
    if block.mtp:
        return "mtp"
    kinds = {k for k in block.kinds if k != "nextn"}
    return "+".join(sorted(kinds, key=_kind_rank)) or "other"


def _kind_rank(kind: str) -> tuple[int, str]:
    return (KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER), kind)


def _category_colour(category: str) -> str:
    if category == "mtp":
        return MTP_COLOUR
    return KIND_COLOURS.get(category.split("+")[0], KIND_COLOURS["other"])


def layer_layout_figure(
    blocks: Iterable[Block],
    stage_splits: Iterable[str] = (),
    missing_mtp: Mapping[int, Sequence[str]] | None = None,
) -> Figure:
    """Bytes per block as bars (MTP highlighted), tensor counts as a line, stage boundaries as lines.

    ``missing_mtp`` is the audit's ``missing_nextn_tensors`` ({block: tensor names}): those blocks get
    a marker above their bar, so a head that cannot load is visible on the chart.
    """
    ordered = sorted(blocks, key=lambda b: b.index)
    data = _block_bar_traces(ordered)
    data.append(_tensor_count_trace(ordered))
    if missing_mtp:
        data.append(_missing_mtp_trace(ordered, missing_mtp))
    splits = list(stage_splits)
    shapes, annotations = _stage_boundaries(splits)
    gap_shapes, gap_notes = _gap_marks([g for split in splits for g in stage_gaps(split, len(ordered))])
    shapes, annotations = shapes + gap_shapes, annotations + gap_notes
    most_tensors = max((b.tensor_count for b in ordered), default=0)
    layout = _layout(
        "Layer layout: tensor data and tensor count per block",
        "Block index",
        "Tensor data (bytes, decimal units)",
        yaxis2={
            "title": {"text": "Tensors (count)"},
            "overlaying": "y",
            "side": "right",
            "range": [0, max(1, math.ceil(most_tensors * 1.15))],
            # Whole tensors: a step of at least 1, about five ticks.
            "tickmode": "linear",
            "tick0": 0,
            "dtick": max(1, math.ceil(most_tensors / 5)),
            "showgrid": False,
        },
        barmode="overlay",
        bargap=0.15,
        shapes=shapes,
        annotations=annotations,
    )
    layout["yaxis"].update(BYTES_AXIS)
    return {"data": data, "layout": layout}


def _block_bar_traces(blocks: list[Block]) -> list[dict[str, Any]]:
    groups: dict[str, list[Block]] = {}
    for block in blocks:
        groups.setdefault(block_category(block), []).append(block)
    # MTP last, so it is drawn on top and listed last in the legend.
    names = sorted(groups, key=lambda name: (name == "mtp", _kind_rank(name.split("+")[0]), name))
    colours = category_colours(names)
    return [_bar_trace(name, groups[name], colours[name]) for name in names]


def category_colours(categories: list[str]) -> dict[str, str]:
    """A colour per block category, never shared: a kind's own colour first, then an unused series colour."""
    used: set[str] = set()
    colours = {}
    for category in categories:
        colour = _category_colour(category)
        if colour in used:
            colour = next((c for c in SERIES_COLOURS if c not in used and c != MTP_COLOUR), colour)
        used.add(colour)
        colours[category] = colour
    return colours


def _missing_mtp_trace(blocks: list[Block], missing: Mapping[int, Sequence[str]]) -> dict[str, Any]:
    heights = {b.index: b.nbytes for b in blocks}
    indices = sorted(missing)
    return {
        "type": "scatter",
        "mode": "markers",
        "name": "MTP tensors missing",
        "x": indices,
        "y": [round(heights.get(i, 0) * 1.04) for i in indices],
        "customdata": [plain(", ".join(missing[i])) for i in indices],
        "marker": {"symbol": "x", "size": 13, "color": "#c92a2a", "line": {"width": 2, "color": "#c92a2a"}},
        "hovertemplate": "block %{x} lacks %{customdata}<extra>MTP tensors missing</extra>",
    }


def _bar_trace(category: str, blocks: list[Block], colour: str) -> dict[str, Any]:
    mtp = category == "mtp"
    return {
        "type": "bar",
        # A fixed width: plotly would otherwise size each trace's bars by its own x spacing.
        "width": 0.8,
        "name": "MTP (NextN) block" if mtp else plain(category),
        "x": [b.index for b in blocks],
        "y": [b.nbytes for b in blocks],
        "customdata": [[plain(b.file or ""), b.tensor_count, _size_label(b.nbytes)] for b in blocks],
        "hovertemplate": "block %{x}<br>%{customdata[2]}, %{customdata[1]} tensors<br>%{customdata[0]}"
        "<extra>" + plain(category) + "</extra>",
        "marker": {
            "color": colour,
            "line": {
                "color": "#000000" if mtp else colour,
                "width": 2 if mtp else 0,
            },
        },
    }


def _size_label(value: Any) -> str:
    size = _as_int(value)
    return f"{format_decimal_size(size)} ({size:,} bytes)"


def _tensor_count_trace(blocks: list[Block]) -> dict[str, Any]:
    return {
        "type": "scatter",
        "mode": "lines+markers",
        "name": "tensors",
        "yaxis": "y2",
        "x": [b.index for b in blocks],
        "y": [b.tensor_count for b in blocks],
        "line": {"color": INK, "width": 1},
        "marker": {"size": 4},
        "hovertemplate": "block %{x}: %{y} tensors<extra></extra>",
    }


def stage_boundaries(splits: Iterable[str]) -> dict[int, list[str]]:
    """Interior block boundaries of stage splits such as ``0..27|27..41``: {27: ["0..27|27..41"]}."""
    boundaries: dict[int, list[str]] = {}
    for split in splits:
        for start in _range_starts(split):
            if start > 0:
                boundaries.setdefault(start, []).append(split)
    return dict(sorted(boundaries.items()))


@dataclass(frozen=True)
class StageGap:
    """Blocks ``start`` to ``end`` (inclusive) of a package that no stage of a split holds."""

    split: str
    start: int
    end: int
    mtp: tuple[int, ...] = ()  # the MTP blocks among them

    @property
    def sentence(self) -> str:
        if self.start == self.end:
            mtp = " (the MTP block)" if self.mtp else ""
            return f"The split {self.split} holds no stage for block {self.start}{mtp}: nothing serves it."
        mtp = f" (the MTP block {', '.join(map(str, self.mtp))} among them)" if self.mtp else ""
        held = f"blocks {self.start}-{self.end}{mtp}"
        return f"The split {self.split} holds no stage for {held}: nothing serves them."


def stage_gaps(split: str, block_count: int | None, mtp_blocks: Iterable[int] = ()) -> list[StageGap]:
    """The runs of blocks ``0..block_count`` that no stage of ``split`` (``0..20|20..41``, end exclusive)
    holds: a topology that leaves part of the package unserved. Nothing when the split or the block count
    cannot be read (a split stated otherwise is not judged)."""
    ranges = _ranges(split)
    if not ranges or not block_count:
        return []
    held = [False] * block_count
    for start, end in ranges:
        for index in range(max(start, 0), min(end, block_count)):
            held[index] = True
    mtp = set(mtp_blocks)
    gaps, index = [], 0
    while index < block_count:
        if held[index]:
            index += 1
            continue
        end = index
        while end + 1 < block_count and not held[end + 1]:
            end += 1
        gaps.append(StageGap(split, index, end, tuple(sorted(b for b in mtp if index <= b <= end))))
        index = end + 1
    return gaps


def _ranges(split: str) -> list[tuple[int, int]]:
    ranges = []
    for part in split.split("|"):
        start, sep, end = part.strip().partition("..")
        if not (sep and start.isdigit() and end.isdigit()):
            return []
        ranges.append((int(start), int(end)))
    return ranges


def _range_starts(split: str) -> list[int]:
    starts = []
    for part in split.split("|"):
        start, sep, _end = part.partition("..")
        if sep and start.strip().isdigit():
            starts.append(int(start))
    return starts


def _gap_marks(gaps: Iterable[StageGap]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Blocks no stage holds, shaded across the plot and labelled above it."""
    shapes, annotations = [], []
    for gap in gaps:
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": gap.start - 0.5,
                "x1": gap.end + 0.5,
                "y0": 0,
                "y1": 1,
                "fillcolor": GAP_FILL,
                "line": {"width": 0},
                "layer": "below",
            }
        )
        annotations.append(
            {
                "x": (gap.start + gap.end) / 2,
                "y": 0.96,
                "xref": "x",
                "yref": "paper",
                "text": "held by no stage",
                "hovertext": plain(gap.sentence),
                "showarrow": False,
                "font": {"size": 11},
            }
        )
    return shapes, annotations


def _stage_boundaries(splits: Iterable[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    shapes, annotations = [], []
    for boundary, names in stage_boundaries(splits).items():
        # Between the last block of one stage and the first of the next.
        x = boundary - 0.5
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": x,
                "x1": x,
                "y0": 0,
                "y1": 1,
                "line": {"color": INK, "width": 2, "dash": "dash"},
            }
        )
        annotations.append(
            {
                "x": x,
                "y": 1.02,
                "xref": "x",
                "yref": "paper",
                "text": f"stage split at {boundary}",
                "hovertext": plain(", ".join(names)),
                "showarrow": False,
                "font": {"size": 11},
            }
        )
    return shapes, annotations


# --- throughput ----------------------------------------------------------------------------------


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
        return {"data": [], "layout": _layout(title, "Time (UTC)", TPS_AXIS)}
    if len(moments) == 1:
        return _one_bucket_figure(sorted(lines.items()), moments[0], bucket)
    data = []
    for i, (key, points) in enumerate(sorted(lines.items())):
        band = _band_trace(key, points, i)
        data += [band, _timeline_trace(key, points, i)] if band else [_timeline_trace(key, points, i)]
    shapes, annotations = _served_markers(served, moments[0], moments[-1], bucket)
    layout = _layout(
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
    quartiles = [(x, _as_float(p.get("p25")), _as_float(p.get("p75"))) for x, p in timed]
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
    values = [_as_float(points[0].get("tps")) for _, points in lines]
    bars = {
        "type": "bar",
        "x": names,
        "y": values,
        "text": [f"{v:.2f}" if v is not None else "" for v in values],
        "textposition": "outside",
        # Narrow bars: one or two values should not read as a wall of colour.
        "width": [0.4] * len(names),
        "customdata": [[_as_int(points[0].get("reports")), *_who(key)] for key, points in lines],
        "marker": {"color": [SERIES_COLOURS[i % len(SERIES_COLOURS)] for i in range(len(names))]},
        "hovertemplate": "%{y:.2f} tok/s (median) from %{customdata[0]} reports" + WHO_HOVER,
        "name": "median decode tokens/s",
    }
    title = f"Decode throughput: every report in the {bucket} of {moment} UTC"
    layout = _layout(title, "Strategy @ topology", TPS_AXIS, showlegend=False)
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
    return {
        "type": "scatter",
        # Lines with markers; a line of one to three points also labels each point with its value.
        "mode": "lines+markers+text" if few else "lines+markers",
        "text": [f"{_as_float(p.get('tps')) or 0:.2f}" for p in points] if few else None,
        "textposition": "top center",
        "marker": {"size": 9 if few else 6},
        "name": plain(f"{strategy} @ {topology}" if topology else strategy),
        "legendgroup": plain(f"{strategy} @ {topology}" if topology else strategy),
        "x": [x for x, _ in timed],
        "y": [_as_float(p.get("tps")) for p in points],
        "customdata": [[_as_int(p.get("reports")), *_who(key)] for p in points],
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
            "y": [_as_float(values.get("tps")) for _, values, _ in groups],
            "customdata": [_as_int(values.get("reports")) for _, values, _ in groups],
            "marker": {"color": [colour for _, _, colour in groups]},
            "hovertemplate": "%{x}: %{y:.2f} tok/s from %{customdata} reports<extra></extra>",
            "name": "median decode tokens/s",
        }
    ]
    return {
        "data": data,
        "layout": _layout("MTP on vs off", "Speculative decoding", TPS_AXIS, showlegend=False),
    }


def strategy_figure(by_strategy: list[dict[str, Any]]) -> Figure:
    """Median decode tokens/s (bars) and draft acceptance rate (markers, %) per effective strategy."""
    names = [plain(_strategy_label(row)) for row in by_strategy]
    bars = {
        "type": "bar",
        "x": names,
        "y": [_as_float(row.get("tps")) for row in by_strategy],
        "customdata": [_as_int(row.get("reports")) for row in by_strategy],
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
    layout = _layout(
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
    rate = _as_float(value)
    return None if rate is None else round(rate * 100, 2)


def plotly_time(value: Any) -> str:
    """A time plotly's date axis reads: UTC, no offset suffix (it does not parse ``+00:00`` or ``Z``)."""
    return _plotly_moment(value) if isinstance(value, datetime) else str(value)


@functools.lru_cache(maxsize=4096)
def _plotly_moment(value: datetime) -> str:
    # A busy package's timeline names each of its hundreds of buckets in several traces: format each once.
    moment = value.astimezone(UTC) if value.tzinfo is not None else value
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _strategy_label(row: dict[str, Any]) -> str:
    strategy = str(row.get("strategy") or "unknown")
    topology = row.get("topology")
    return f"{strategy} @ {topology}" if topology else strategy


def plain(value: Any) -> str:
    """Text plotly shows literally: it reads a few HTML tags in labels, so markup is entity-escaped."""
    return html.escape(str(value), quote=False)


def _as_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return round(float(value), 3)


# --- before and after ----------------------------------------------------------------------------

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
        return {"data": [], "layout": _layout("Decode throughput: no reports yet", "Time (UTC)", y_title)}
    if len(moments) == 1:
        labelled = [(label, points[0]) for label, points in lines if points]
        values = [_as_float(point.get("tps")) for _, point in labelled]
        bars = {
            "type": "bar",
            "x": [plain(label) for label, _ in labelled],
            "y": values,
            "text": [f"{v:.2f}" if v is not None else "" for v in values],
            "textposition": "outside",
            "width": [0.4] * len(labelled),
            "customdata": [_as_int(point.get("reports")) for _, point in labelled],
            "marker": {"color": [colours[i % 2] for i in range(len(labelled))]},
            "hovertemplate": "%{x}: %{y:.2f} tok/s from %{customdata} reports<extra></extra>",
            "name": "median decode tokens/s",
        }
        title = f"Decode throughput: every report in the {bucket} of {moments[0]} UTC"
        return {"data": [bars], "layout": _layout(title, "Revision", y_title, showlegend=False)}
    data = []
    for index, (label, points) in enumerate(lines):
        ordered = sorted(points, key=lambda p: plotly_time(p.get("bucket")))
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": plain(label),
                "x": [plotly_time(p.get("bucket")) for p in ordered],
                "y": [_as_float(p.get("tps")) for p in ordered],
                "customdata": [_as_int(p.get("reports")) for p in ordered],
                "hovertemplate": "%{x}<br>%{y:.2f} tok/s from %{customdata} reports"
                "<extra>%{fullData.name}</extra>",
                "line": {"color": colours[index % 2]},
                "marker": {"size": 7},
            }
        )
    layout = _layout(
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
    layout = _layout(
        "Decode rate spread: box p25-p75, whiskers p5-p95",
        "Revision",
        report_metrics.BY_NAME["predicted_per_second"].label,
        showlegend=False,
    )
    return {"data": data, "layout": layout}
