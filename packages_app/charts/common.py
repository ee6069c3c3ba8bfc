"""Pure: what every chart shares: the figure type, axes, colours, the plotly layout, and how values and
times reach plotly (escaped text, UTC times without an offset)."""

from __future__ import annotations

import functools
import html
from datetime import UTC, datetime
from typing import Any

from packages_app import report_metrics

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
FONT = {"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12}


def figure_layout(title: str, x_title: str, y_title: str, **extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "title": {"text": title},
        "xaxis": {"title": {"text": x_title}, "automargin": True},
        "yaxis": {"title": {"text": y_title}, "automargin": True, "rangemode": "tozero"},
        "font": FONT,
        "margin": {"l": 60, "r": 60, "t": 50, "b": 90},
        "legend": {"orientation": "h", "x": 0, "y": -0.22, "yanchor": "top"},
        "hovermode": "closest",
        "height": 420,
        "paper_bgcolor": "rgba(0,0,0,0)",
    }
    layout.update(extra)
    return layout


def plotly_time(value: Any) -> str:
    """A time plotly's date axis reads: UTC, no offset suffix (it does not parse ``+00:00`` or ``Z``)."""
    return _plotly_moment(value) if isinstance(value, datetime) else str(value)


@functools.lru_cache(maxsize=4096)
def _plotly_moment(value: datetime) -> str:
    # A busy package's timeline names each of its hundreds of buckets in several traces: format each once.
    moment = value.astimezone(UTC) if value.tzinfo is not None else value
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def plain(value: Any) -> str:
    """Text plotly shows literally: it reads a few HTML tags in labels, so markup is entity-escaped."""
    return html.escape(str(value), quote=False)


def as_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def as_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return round(float(value), 3)
