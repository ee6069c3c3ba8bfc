"""The one table of report metrics (issue 21, item 6): every surface lists exactly the table's metrics, so
a new charted metric is a row of packages_app.report_metrics, its model fields and their migration."""

from __future__ import annotations

import typing
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from packages_app import report_metrics, reports, throughput
from packages_app.models import Report, Rollup
from packages_app.nodes.report_schema import ACCEPTED_OF, PLAUSIBLE, StrictNumber, Timings, build_timings
from packages_app.report_metrics import COUNT, METRICS, ReportMetric
from packages_app.rollups import cells as rollups_cells
from packages_app.rollups import rebuild as rollups_rebuild
from packages_app.rollups import upsert as rollups_upsert
from packages_app.web import fleet_pages

SENT = [m for m in METRICS if not m.derived]


def test_names_are_unique_and_each_row_is_complete() -> None:
    assert len({m.name for m in METRICS}) == len(METRICS)
    for m in METRICS:
        assert m.unit and m.label, m.name
        assert m.type in ("int", "float"), m.name
        assert m.aggregation in ("sketch", "sum", "none"), m.name
        assert (m.aggregation == "sketch") == bool(m.rollup), m.name  # a sketch needs its column prefix
        assert not (m.derived and m.stored), m.name  # a derived metric is no report column
        assert not m.shown or m.stored, m.name  # tables and CSV read the column


@pytest.mark.parametrize("metric", SENT, ids=lambda m: m.name)
def test_the_report_schema_types_and_bounds_each_metric_nodes_send(metric: ReportMetric) -> None:
    field = Timings.model_fields[metric.name]
    # StrictInt | None or StrictNumber | None: the Annotated type other than None, then its base type.
    (kind,) = [a for a in typing.get_args(field.annotation) if a is not type(None)]
    assert typing.get_args(kind)[0] is (int if metric.type == "int" else float), (metric.name, kind)
    assert metric.type != "float" or kind == StrictNumber
    assert PLAUSIBLE[metric.name] == metric.bound


def test_the_schema_bounds_exactly_the_table_metrics_nodes_send() -> None:
    assert set(PLAUSIBLE) == {m.name for m in SENT}
    # The pydantic model has no bounded timings field the table does not know.
    numeric = {name for name, f in Timings.model_fields.items() if "Strict" in str(f.annotation)}
    assert numeric <= {m.name for m in SENT} | {"stop"}, numeric - {m.name for m in SENT}


def test_ingest_fills_exactly_the_stored_metrics_and_each_is_a_report_column() -> None:
    assert tuple(m.name for m in METRICS if m.stored) == reports.TIMING_COLUMNS
    columns = {f.name for f in Report._meta.get_fields()}
    assert {m.name for m in METRICS if m.stored} <= columns


def test_the_rollups_keep_every_sketched_metric_in_both_paths() -> None:
    sketched = [m for m in METRICS if m.aggregation == "sketch"]
    assert tuple(m.rollup for m in sketched) == rollups_cells.METRICS
    assert {m.rollup: m.name for m in sketched} == rollups_rebuild.SQL_METRICS
    columns = {f.name for f in Rollup._meta.get_fields()}
    for m in sketched:
        assert {f"{m.rollup}_{part}" for part in ("n", "sum", "min", "max", "sketch")} <= columns, m.name
        if not m.derived:
            assert m.name in rollups_cells.SOURCE_FIELDS  # the Python path reads the column it sketches


def test_recent_reports_and_the_csv_show_exactly_the_shown_metrics() -> None:
    shown = [m.name for m in METRICS if m.shown]
    assert [c for c in throughput.RECENT_FIELDS if c in report_metrics.BY_NAME] == shown
    assert [c for c in fleet_pages.REPORT_COLUMNS if c in report_metrics.BY_NAME] == shown


EXTRA = ReportMetric(
    "extra_per_second", "float", "tokens/s", "Extra tokens/s", "sketch", (0, 1), True, True, "extra"
)
EXTRA_COUNT = ReportMetric("extra_n", "int", "tokens", "Extra tokens", bound=(0, 10))


def test_a_new_row_reaches_the_derived_lists_through_the_table_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(report_metrics, "METRICS", (*METRICS, EXTRA))
    assert report_metrics.plausible_bounds()["extra_per_second"] == (0, 1)
    assert report_metrics.stored_columns()[-1] == "extra_per_second"
    assert report_metrics.shown_columns()[-1] == "extra_per_second"
    assert report_metrics.sketched()[-1] is EXTRA
    # The lists read the table when asked, never a copy taken at import.
    monkeypatch.setattr(report_metrics, "METRICS", METRICS)
    assert "extra_per_second" not in report_metrics.stored_columns()


def test_a_new_row_is_a_typed_documented_field_of_the_report_schema() -> None:
    model = build_timings((*METRICS, EXTRA, EXTRA_COUNT))
    assert set(model.model_fields) == {m.name for m in SENT} | {"extra_per_second", "extra_n"}
    schema = model.model_json_schema()["properties"]
    assert schema["extra_per_second"]["anyOf"][0] == {"type": "number"}
    assert schema["extra_n"]["anyOf"][0] == {"type": "integer"}
    assert (
        schema["extra_n"]["description"]
        == "Extra tokens. Outside 0..10 it is stored and flagged, not refused."
    )
    assert schema["extra_per_second"]["description"].startswith("Extra tokens/s. Outside 0..1 ")
    # A row without a bound is typed and described by its label and unit alone.
    unbounded = ReportMetric("extra_ms", "float", "ms", "Extra time")
    assert build_timings((unbounded,)).model_json_schema()["properties"]["extra_ms"]["description"] == (
        "Extra time, in ms."
    )
    # Typed as the table says: strict, so a string or a fraction for a count is refused, naming the key.
    assert model.model_validate({"extra_n": 3, "extra_per_second": 2}).extra_n == 3  # type: ignore[attr-defined]
    with pytest.raises(ValidationError) as refused:
        model.model_validate({"extra_n": 1.5})
    assert refused.value.errors()[0]["loc"] == ("extra_n",)
    with pytest.raises(ValidationError):
        model.model_validate({"extra_per_second": "fast"})
    # Without the row, the key is just an unknown counter: kept, untyped.
    assert "extra_n" not in Timings.model_fields
    assert Timings.model_validate({"extra_n": 1.5}).model_extra == {"extra_n": 1.5}


def test_the_derived_metric_is_no_schema_field() -> None:
    derived = [m.name for m in METRICS if m.derived]
    assert derived and not set(derived) & set(Timings.model_fields)


def test_a_new_shown_row_is_a_column_of_the_recent_reports_and_the_csv() -> None:
    table = (*METRICS, EXTRA)
    recent = throughput.recent_fields(table)
    csv = fleet_pages.report_columns(table)
    assert "extra_per_second" in recent and "extra_per_second" in csv
    # After the metrics already shown, before the trailing context columns.
    assert recent.index("extra_per_second") == recent.index("predicted_n") + 1
    assert csv.index("extra_per_second") == csv.index("predicted_n") + 1
    # The real lists are these functions on the real table, and an unshown row stays out.
    assert throughput.recent_fields() == throughput.RECENT_FIELDS
    assert fleet_pages.report_columns() == fleet_pages.REPORT_COLUMNS
    assert "extra_n" not in fleet_pages.report_columns((*METRICS, EXTRA_COUNT))


def test_axis_titles_come_from_the_table() -> None:
    assert report_metrics.axis_title("predicted_per_second") == "Decode tokens/s (median)"


def test_the_charts_and_the_recent_reports_table_take_their_labels_from_the_table() -> None:
    from packages_app.charts.common import TPS_AXIS
    from packages_app.charts.timelines import throughput_timeline_figure

    figure = throughput_timeline_figure([])
    assert figure["layout"]["yaxis"]["title"]["text"] == "Decode tokens/s (median)"
    assert f"{report_metrics.BY_NAME['predicted_per_second'].label} (median)" == TPS_AXIS


def test_the_rollup_counters_and_the_acceptance_ratio_come_from_the_table() -> None:
    sums = report_metrics.summed()
    # mesh-llm's speculative_* first, llama-server's draft_n* when a report has no speculative_*.
    assert sums == {
        "proposed": ("speculative_proposed_n", "draft_n"),
        "accepted": ("speculative_accepted_n", "draft_n_accepted"),
        "windows": ("speculative_windows",),
    }
    assert sums == rollups_cells.SUMS
    assert rollups_upsert.SUMMED[3:-2] == tuple(sums)
    assert rollups_upsert.SUMMED[-2:] == ("moved", "refused")  # where reports were placed (report_time)
    assert rollups_cells.RATIOS == {"acceptance": ("accepted", "proposed")}
    columns = {f.name for f in Rollup._meta.get_fields()}
    assert set(sums) <= columns
    assert {name for names in sums.values() for name in names} <= set(rollups_cells.SOURCE_FIELDS)
    # The schema flags a numerator above its denominator for exactly these pairs.
    assert report_metrics.agreeing_pairs() == (
        ("speculative_accepted_n", "speculative_proposed_n"),
        ("draft_n_accepted", "draft_n"),
    )
    assert report_metrics.agreeing_pairs() == ACCEPTED_OF


def test_a_new_summed_source_joins_its_counter_after_the_ones_before_it() -> None:
    other = ReportMetric("other_accepted_n", "int", "tokens", "Other", "sum", COUNT, True, total="accepted")
    other_proposed = ReportMetric(
        "other_proposed_n", "int", "tokens", "Other", "sum", COUNT, True, total="proposed"
    )
    table = (*METRICS, other, other_proposed)
    assert report_metrics.summed(table)["accepted"][-1] == "other_accepted_n"
    assert report_metrics.agreeing_pairs(table)[-1] == ("other_accepted_n", "other_proposed_n")
    # A numerator source without its denominator cannot be paired: refused, not silently dropped.
    with pytest.raises(ValueError, match="zip"):
        report_metrics.agreeing_pairs((*METRICS, other))


def test_the_python_path_takes_the_first_source_of_each_counter_and_the_ratio_of_totals() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    both = Report(
        received_at=at, speculative_proposed_n=80, speculative_accepted_n=50, draft_n=10, draft_n_accepted=1
    )
    figures = rollups_cells.ReportContribution.of(both)
    assert (figures.proposed, figures.accepted, figures.windows) == (80, 50, 0)
    assert dict((v[0], v[1]) for v in figures.values if v)["acceptance"] == 50 / 80
    llama = rollups_cells.ReportContribution.of(Report(received_at=at, draft_n=60, draft_n_accepted=30))
    assert (llama.proposed, llama.accepted) == (60, 30)
    assert dict((v[0], v[1]) for v in llama.values if v)["acceptance"] == 0.5
    none = rollups_cells.ReportContribution.of(Report(received_at=at, speculative_accepted_n=3))
    assert "acceptance" not in {v[0] for v in none.values if v}
