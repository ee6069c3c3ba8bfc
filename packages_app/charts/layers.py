"""Pure: the layer layout chart (a package's blocks by kind and size, MTP blocks, the stage splits nodes
serve and the blocks no stage holds)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packages_app.audit.model import Block
from packages_app.charts.common import (
    BYTES_AXIS,
    GAP_FILL,
    INK,
    KIND_COLOURS,
    KIND_ORDER,
    MTP_COLOUR,
    SERIES_COLOURS,
    Figure,
    as_int,
    figure_layout,
    plain,
)
from packages_app.glossary import format_decimal_size


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
    layout = figure_layout(
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
    size = as_int(value)
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
