"""charts/: audit and throughput data -> plotly figure dicts (pure, no Django)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import plotly.graph_objects as go
import pytest

from packages_app.audit.model import Block, Detected
from packages_app.charts.common import INK, MTP_COLOUR, plotly_time
from packages_app.charts.compare import comparison_timeline_figure, distribution_figure
from packages_app.charts.layers import layer_layout_figure, stage_boundaries, stage_gaps
from packages_app.charts.timelines import mtp_comparison_figure, strategy_figure, throughput_timeline_figure
from tests.dashboard_factories import block

MIB = 1024 * 1024


def blocks(*docs: dict[str, Any]) -> list[Block]:
    """Blocks as the stored audit holds them, read back as the pages read them."""
    return list(Detected.from_json({"blocks": list(docs)}).blocks)


QWEN35_BLOCKS = blocks(*(block(i, mtp=i == 40) for i in range(41)))


def trace_named(figure: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in figure["data"] if t["name"] == name)


def test_it_puts_the_mtp_block_in_its_own_highlighted_trace() -> None:
    figure = layer_layout_figure(QWEN35_BLOCKS)
    mtp = trace_named(figure, "MTP (NextN) block")
    assert mtp["x"] == [40]
    assert mtp["marker"]["color"] == MTP_COLOUR
    assert all(40 not in t["x"] for t in figure["data"] if t["type"] == "bar" and t is not mtp)


def test_it_groups_trunk_blocks_by_kind_and_plots_tensor_counts_on_a_second_axis() -> None:
    figure = layer_layout_figure(QWEN35_BLOCKS)
    bars = [t["name"] for t in figure["data"] if t["type"] == "bar"]
    assert bars == ["attention+moe", "ssm+moe", "MTP (NextN) block"]
    assert trace_named(figure, "attention+moe")["x"] == [3, 7, 11, 15, 19, 23, 27, 31, 35, 39]
    tensors = trace_named(figure, "tensors")
    assert tensors["yaxis"] == "y2"
    assert tensors["y"][40] == 20 and tensors["y"][3] == 16 and tensors["y"][0] == 19


def test_it_draws_one_line_per_interior_stage_boundary() -> None:
    figure = layer_layout_figure(QWEN35_BLOCKS, ["0..27|27..41", "0..41", "0..20|20..27|27..41"])
    assert [shape["x0"] for shape in figure["layout"]["shapes"]] == [19.5, 26.5]
    assert stage_boundaries(["0..27|27..41", "0..20|20..27|27..41"]) == {
        20: ["0..20|20..27|27..41"],
        27: ["0..27|27..41", "0..20|20..27|27..41"],
    }


def test_it_ignores_stage_splits_it_cannot_read() -> None:
    assert stage_boundaries(["", "garbage", "x..y|..", "27..41"]) == {27: ["27..41"]}


def test_it_tolerates_malformed_stored_blocks_instead_of_crashing() -> None:
    # A block without an index is not drawn; a block's malformed values read as empty.
    malformed = blocks({"index": "7", "bytes": None}, {}, {"kinds": "attention"}, {"index": 3, "bytes": "x"})
    figure = layer_layout_figure(malformed)
    assert [(t["name"], t["x"], t["y"]) for t in figure["data"] if t["type"] == "bar"] == [
        ("other", [3], [0])
    ]


def test_labels_from_reports_and_manifests_are_entity_escaped_for_plotly() -> None:
    hostile = "<img src=x onerror=alert(1)>"
    escaped = "&lt;img src=x onerror=alert(1)&gt;"
    figure = throughput_timeline_figure([{"bucket": "2026-01-01", "strategy": hostile, "tps": 1.0}])
    assert figure["data"][0]["x"] == [escaped]
    days = [{"bucket": f"2026-01-0{d}", "strategy": hostile, "tps": 1.0} for d in (1, 2)]
    assert throughput_timeline_figure(days)["data"][0]["name"] == escaped
    layout = layer_layout_figure(blocks(block(0) | {"file": hostile}))
    assert "<img" not in str(layout)


def test_the_timeline_has_one_line_per_strategy_and_topology_in_time_order() -> None:
    t0 = datetime(2026, 5, 1, 12, tzinfo=UTC)
    series = [
        {"bucket": t0 + timedelta(hours=1), "strategy": "disabled", "topology": "0..27|27..41", "tps": 3.2},
        {"bucket": t0, "strategy": "disabled", "topology": "0..27|27..41", "tps": 3.1, "reports": 4},
        {"bucket": t0, "strategy": "native-mtp", "topology": "0..41", "tps": 9.5, "reports": 2},
    ]
    figure = throughput_timeline_figure(series)
    assert [t["name"] for t in figure["data"]] == ["disabled @ 0..27|27..41", "native-mtp @ 0..41"]
    assert figure["data"][0]["x"] == ["2026-05-01 12:00:00", "2026-05-01 13:00:00"]
    assert figure["data"][0]["y"] == [3.1, 3.2]


def test_times_are_converted_to_utc_without_an_offset_plotly_would_misread() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert plotly_time(datetime(2026, 5, 1, 14, 30, tzinfo=plus_two)) == "2026-05-01 12:30:00"


def test_the_strategy_chart_shows_acceptance_as_a_percentage() -> None:
    rows = [{"strategy": "native-mtp", "tps": 9.1, "reports": 3, "acceptance_rate": 0.7}]
    figure = strategy_figure(rows)
    assert trace_named(figure, "acceptance rate (%)")["y"] == [70.0]
    assert figure["layout"]["yaxis2"]["title"]["text"] == "Acceptance rate (%)"


def test_missing_throughput_values_become_gaps_not_zeros() -> None:
    figure = mtp_comparison_figure({"reports": 0, "tps": None}, {"reports": 6, "tps": 3.17})
    assert figure["data"][0]["y"] == [None, 3.17]


def all_figures() -> list[dict[str, Any]]:
    t0 = datetime(2026, 5, 1, 12, tzinfo=UTC)
    return [
        layer_layout_figure(QWEN35_BLOCKS, ["0..27|27..41"]),
        throughput_timeline_figure([{"bucket": t0, "strategy": "mtp", "topology": "", "tps": 9.0}]),
        mtp_comparison_figure({"reports": 2, "tps": 9.0}, None),
        strategy_figure([{"strategy": "native-mtp", "tps": 9.0, "acceptance_rate": 0.5}]),
    ]


@pytest.mark.parametrize("index", range(4))
def test_every_figure_is_valid_plotly_with_titled_axes(index: int) -> None:
    figure = all_figures()[index]
    go.Figure(figure)  # raises on any property plotly does not know
    layout = figure["layout"]
    assert layout["title"]["text"]
    assert layout["xaxis"]["title"]["text"] and layout["yaxis"]["title"]["text"]
    assert "(" in layout["yaxis"]["title"]["text"], "the y axis names its unit"


def test_each_block_kind_gets_its_own_colour_in_the_layer_chart() -> None:
    four = blocks(
        {"index": 0, "kinds": ["attention"], "bytes": MIB, "tensor_count": 9},
        {"index": 1, "kinds": ["attention", "moe"], "bytes": MIB, "tensor_count": 9},
        {"index": 2, "kinds": ["ssm", "moe"], "bytes": MIB, "tensor_count": 9},
        {"index": 3, "kinds": ["attention", "nextn"], "mtp": True, "bytes": MIB, "tensor_count": 12},
    )
    bars = [t for t in layer_layout_figure(four)["data"] if t["type"] == "bar"]
    colours = [t["marker"]["color"] for t in bars]
    assert len(bars) == 4 and len(set(colours)) == 4


def test_blocks_missing_mtp_tensors_are_marked_on_the_layer_chart() -> None:
    three = blocks(*({"index": i, "kinds": ["attention"], "bytes": MIB, "tensor_count": 9} for i in range(3)))
    figure = layer_layout_figure(three, missing_mtp={2: ["eh_proj", "<b>enorm</b>"]})
    marker = next(t for t in figure["data"] if t["name"] == "MTP tensors missing")
    assert marker["x"] == [2]
    assert marker["customdata"] == ["eh_proj, &lt;b&gt;enorm&lt;/b&gt;"]


def test_a_timeline_line_with_few_points_is_a_line_with_labelled_markers() -> None:
    series = [
        {
            "bucket": f"2026-05-01 1{h}:00:00",
            "strategy": "disabled",
            "topology": "",
            "tps": 3.171 + h,
            "reports": 4,
        }
        for h in range(2)
    ]
    trace = throughput_timeline_figure(series)["data"][0]
    assert trace["mode"] == "lines+markers+text" and trace["text"] == ["3.17", "4.17"]


def test_reports_all_in_one_hour_are_bars_not_a_millisecond_time_axis() -> None:
    t0 = datetime(2026, 12, 1, 14, tzinfo=UTC)
    series = [
        {"bucket": t0, "strategy": "disabled", "topology": "0..20|20..41", "tps": 3.19, "reports": 40},
        {"bucket": t0, "strategy": "native-mtp", "topology": "", "tps": 9.5, "reports": 2},
    ]
    figure = throughput_timeline_figure(series, "hour")
    assert [t["type"] for t in figure["data"]] == ["bar"]
    assert figure["layout"]["xaxis"].get("type") != "date"
    assert figure["data"][0]["x"] == ["disabled @ 0..20|20..41", "native-mtp"]
    assert figure["data"][0]["text"] == ["3.19", "9.50"]
    assert figure["layout"]["title"]["text"] == (
        "Decode throughput: every report in the hour of 2026-12-01 14:00:00 UTC"
    )


def test_control_two_hours_of_reports_keep_the_time_axis() -> None:
    t0 = datetime(2026, 12, 1, 14, tzinfo=UTC)
    series = [{"bucket": t0 + timedelta(hours=h), "strategy": "mtp", "tps": 9.0 + h} for h in range(2)]
    figure = throughput_timeline_figure(series)
    assert figure["layout"]["xaxis"]["type"] == "date" and figure["data"][0]["type"] == "scatter"


def test_the_layer_chart_speaks_the_site_unit_rule_decimal_bytes_with_the_tables_text_on_hover() -> None:
    figure = layer_layout_figure(QWEN35_BLOCKS)
    mtp = trace_named(figure, "MTP (NextN) block")
    # Raw bytes on a decimal (SI) axis: 520 MB reads "520MB", never MiB.
    assert mtp["y"] == [520_000_000]
    assert figure["layout"]["yaxis"]["tickformat"] == "~s" and figure["layout"]["yaxis"]["ticksuffix"] == "B"
    assert "MiB" not in str(figure)
    assert mtp["customdata"][0][2] == "520 MB (520,000,000 bytes)"
    assert "%{customdata[2]}" in mtp["hovertemplate"]


def test_what_the_chart_draws_in_ink_is_marked_for_the_page_to_recolour() -> None:
    figure = layer_layout_figure(QWEN35_BLOCKS, ["0..20|20..41"])
    assert trace_named(figure, "tensors")["line"]["color"] == INK
    assert figure["layout"]["shapes"][0]["line"]["color"] == INK


def test_a_time_range_without_reports_says_so_instead_of_drawing_an_empty_axis() -> None:
    figure = throughput_timeline_figure([])
    assert figure["data"] == []
    assert figure["layout"]["title"]["text"] == "Decode throughput: no report in this time range"


def test_a_one_bucket_line_without_a_median_has_an_empty_bar_not_a_zero() -> None:
    series = [{"bucket": "2026-12-01 14:00:00", "strategy": "mtp", "tps": None, "reports": 0}]
    bars = throughput_timeline_figure(series, "day")["data"][0]
    assert bars["y"] == [None] and bars["text"] == [""]


# --- before and after ------------------------------------------------------------------------------


def test_the_comparison_charts_escape_what_they_are_given_as_names() -> None:
    hostile = '<img src=x onerror="alert(1)">'
    point = {"bucket": datetime(2026, 1, 1, 10, tzinfo=UTC), "tps": 3.0, "reports": 2}
    later = {"bucket": datetime(2026, 1, 1, 11, tzinfo=UTC), "tps": 5.0, "reports": 4}
    timeline = comparison_timeline_figure([(hostile, [point]), ("after", [later])])
    assert timeline["data"][0]["name"] == '&lt;img src=x onerror="alert(1)"&gt;'
    spread = {"p5": 1.0, "p25": 2.0, "p50": 3.0, "p75": 4.0, "p95": 5.0}
    box, median = distribution_figure([(hostile, spread, 7), ("after", None, 0)])["data"]
    assert "<img" not in box["name"] + median["name"] and box["name"].endswith("(7 reports)")
    # The control: a name without markup is shown as given.
    assert timeline["data"][1]["name"] == "after"
    go.Figure(timeline)  # plotly accepts both figures as they are
    go.Figure(distribution_figure([(hostile, spread, 7)]))


def test_a_comparison_in_one_bucket_is_one_bar_per_revision_not_a_sub_second_axis() -> None:
    at = datetime(2026, 1, 1, 10, tzinfo=UTC)
    figure = comparison_timeline_figure(
        [
            ("before", [{"bucket": at, "tps": 3.0, "reports": 2}]),
            ("after", [{"bucket": at, "tps": 5.0, "reports": 4}]),
        ],
        "hour",
    )
    (bars,) = figure["data"]
    assert bars["type"] == "bar" and bars["x"] == ["before", "after"] and bars["y"] == [3.0, 5.0]
    assert "date" not in str(figure["layout"]["xaxis"])
    empty = comparison_timeline_figure([("before", []), ("after", [])])
    assert empty["data"] == []


def test_the_spread_box_puts_whiskers_at_p5_and_p95_and_the_box_at_the_quartiles() -> None:
    spread = {"p5": 1.0, "p25": 2.5, "p50": 3.0, "p75": 4.0, "p95": 7.0}
    box, median = distribution_figure([("before", spread, 9)])["data"]
    assert box["type"] == "bar" and box["base"] == [2.5] and box["y"] == [1.5]  # p25 .. p75
    assert median["y"] == [3.0]
    whiskers = median["error_y"]
    assert (median["y"][0] - whiskers["arrayminus"][0], median["y"][0] + whiskers["array"][0]) == (1.0, 7.0)
    assert box["hovertext"] == ["p5 1.00 · p25 2.50 · median 3.00 · p75 4.00 · p95 7.00 tok/s"]


# --- the timeline's band and first-served markers ----------------------------------------------------


def test_each_timeline_line_has_its_p25_to_p75_band_drawn_under_it() -> None:
    t0 = datetime(2026, 5, 1, 12, tzinfo=UTC)
    series = [
        {"bucket": t0, "strategy": "disabled", "tps": 3.0, "p25": 2.5, "p75": 3.5, "reports": 3},
        {"bucket": t0 + timedelta(hours=1), "strategy": "disabled", "tps": 4.0, "p25": 3.0, "p75": 5.0},
    ]
    band, line = throughput_timeline_figure(series)["data"]
    assert band["fill"] == "toself" and band["hoverinfo"] == "skip" and not band["showlegend"]
    # Along p75 forwards, back along p25: one closed polygon around the median line.
    assert band["x"] == [
        "2026-05-01 12:00:00",
        "2026-05-01 13:00:00",
        "2026-05-01 13:00:00",
        "2026-05-01 12:00:00",
    ]
    assert band["y"] == [3.5, 5.0, 3.0, 2.5]
    assert band["legendgroup"] == line["legendgroup"] == "disabled"
    assert line["y"] == [3.0, 4.0]
    # Control: points without quartiles get the line alone.
    bare = [{k: v for k, v in p.items() if k not in ("p25", "p75")} for p in series]
    assert [t["name"] for t in throughput_timeline_figure(bare)["data"]] == ["disabled"]


def test_first_served_markers_fall_on_the_axis_or_are_left_out() -> None:
    t0 = datetime(2026, 5, 1, 12, tzinfo=UTC)
    series = [{"bucket": t0 + timedelta(hours=h), "strategy": "disabled", "tps": 3.0} for h in range(3)]
    served = [
        ("<b>aaaa</b>", t0 + timedelta(minutes=5)),  # inside
        ("bbbbbbbb", t0 + timedelta(hours=2, minutes=30)),  # inside the last hour bucket
        ("cccccccc", t0 + timedelta(hours=3)),  # after the last bucket: not on the axis
        ("dddddddd", t0 - timedelta(minutes=1)),  # before the first
    ]
    layout = throughput_timeline_figure(series, "hour", served)["layout"]
    assert [s["x0"] for s in layout["shapes"]] == ["2026-05-01 12:05:00", "2026-05-01 14:30:00"]
    assert [a["text"] for a in layout["annotations"]] == [
        "&lt;b&gt;aaaa&lt;/b&gt; first served",
        "bbbbbbbb first served",
    ]
    assert all(s["yref"] == "paper" and s["line"]["color"] == INK for s in layout["shapes"])
    # A one-bucket chart has no time axis, so no marker, and string buckets that are no time draw none.
    one = throughput_timeline_figure(series[:1], "hour", served)
    assert "shapes" not in one["layout"]
    words = [{"bucket": w, "strategy": "disabled", "tps": 1.0} for w in ("a", "b")]
    assert throughput_timeline_figure(words, "hour", served)["layout"]["shapes"] == []


def test_the_timeline_hover_names_the_strategy_and_the_topology_of_each_point_and_bar() -> None:
    hostile = "<b>x</b>"
    series = [
        {
            "bucket": "2026-12-01 10:00:00",
            "strategy": "native-mtp",
            "topology": "0..27|27..41",
            "tps": 9.0,
            "reports": 3,
        },
        {
            "bucket": "2026-12-01 11:00:00",
            "strategy": "native-mtp",
            "topology": "0..27|27..41",
            "tps": 8.0,
            "reports": 2,
        },
        {"bucket": "2026-12-01 11:00:00", "strategy": hostile, "topology": "", "tps": 4.0, "reports": 1},
    ]
    lines = [t for t in throughput_timeline_figure(series)["data"] if t.get("hoverinfo") != "skip"]
    by_name = {t["name"]: t for t in lines}
    mtp = by_name["native-mtp @ 0..27|27..41"]
    assert mtp["customdata"] == [[3, "native-mtp", "0..27|27..41"], [2, "native-mtp", "0..27|27..41"]]
    for part in ("%{customdata[0]} reports", "strategy: %{customdata[1]}", "topology: %{customdata[2]}"):
        assert part in mtp["hovertemplate"]
    # Text plotly would read as markup is escaped; a missing topology is said, not left blank.
    assert by_name["&lt;b&gt;x&lt;/b&gt;"]["customdata"] == [[1, "&lt;b&gt;x&lt;/b&gt;", "not reported"]]
    # One bucket: the bars say the same.
    bars = throughput_timeline_figure(series[:1], "hour")["data"][0]
    assert bars["customdata"] == [[3, "native-mtp", "0..27|27..41"]]
    assert "topology: %{customdata[2]}" in bars["hovertemplate"]


def test_stage_gaps_names_the_blocks_no_stage_holds_with_the_mtp_block_among_them() -> None:
    (gap,) = stage_gaps("0..20|20..41", 48, mtp_blocks=[47])
    assert (gap.start, gap.end, gap.mtp) == (41, 47, (47,))
    assert gap.sentence == (
        "The split 0..20|20..41 holds no stage for blocks 41-47 (the MTP block 47 among them): "
        "nothing serves them."
    )


def test_stage_gaps_finds_a_hole_between_stages_and_nothing_when_the_split_covers_the_package() -> None:
    assert [(g.start, g.end) for g in stage_gaps("0..10|12..41", 41)] == [(10, 11)]
    assert stage_gaps("0..27|27..41", 41) == []
    assert stage_gaps("0..27|27..41", None) == []  # the block count unknown: not judged
    assert stage_gaps("stage-a|stage-b", 41) == []  # a split stated otherwise: not judged


def test_the_layout_chart_shades_the_blocks_no_stage_holds() -> None:
    glm = blocks(*({"index": i, "bytes": 10, "tensor_count": 9, "kinds": ["attention"]} for i in range(48)))
    figure = layer_layout_figure(glm, ["0..20|20..41"])
    (rect,) = [s for s in figure["layout"]["shapes"] if s["type"] == "rect"]
    assert (rect["x0"], rect["x1"]) == (40.5, 47.5)
    assert "held by no stage" in [a["text"] for a in figure["layout"]["annotations"]]
    covered = layer_layout_figure(glm, ["0..24|24..48"])
    assert [s for s in covered["layout"]["shapes"] if s["type"] == "rect"] == []


def test_a_single_block_no_stage_holds_reads_in_the_singular() -> None:
    (gap,) = stage_gaps("0..44|44..88", 89, mtp_blocks=[88])
    assert (
        gap.sentence
        == "The split 0..44|44..88 holds no stage for block 88 (the MTP block): nothing serves it."
    )
