"""Throughput selectors: series by time bucket, MTP on/off, acceptance, and the unused-MTP alert.

Reports are added as the store paths add them (the row, then its rollups); the selectors read the
rollups, so medians are the sketch's: within 1 % of the exact median, on every database.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from packages_app import node_plans, reports, sketch, throughput
from packages_app.catalog.throughput import catalog_throughput, latest_alert_q
from packages_app.models import Node, Package, Report, Revision, Rollup
from packages_app.nodes import identity as nodes
from packages_app.throughput import revision_throughput
from tests.dashboard_factories import register_run

pytestmark = pytest.mark.django_db

T0 = datetime(2025, 3, 1, 10, 5, tzinfo=UTC)


def near(value: float) -> Any:
    """A median read from a sketch: within its 1 % relative error bound."""
    return pytest.approx(value, rel=sketch.ALPHA)


@pytest.fixture(autouse=True)
def hourly_rollups_for_old_reports(settings: Any) -> None:
    settings.MESHDASH_ROLLUP_HOURLY_DAYS = 100_000  # T0 is in the past: keep its hour rollups


@pytest.fixture
def package() -> Package:
    return Package.objects.create(repo_id="meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers", private=False)


@pytest.fixture
def first(package: Package) -> Revision:
    """The motivating revision: MTP weights, no declaration."""
    return Revision.objects.create(
        package=package, commit_sha="69cbd9fc1f928305e8e86e1148a1db6a6f1de8e9", mtp_detected=True
    )


@pytest.fixture
def fixed(package: Package) -> Revision:
    return Revision.objects.create(package=package, commit_sha="f" * 40, mtp_detected=True, mtp_declared=True)


@pytest.fixture
def node_a() -> Node:
    return nodes.create_node("node-a").node


@pytest.fixture
def node_b() -> Node:
    return nodes.create_node("node-b").node


def add(node: Node, revision: Revision, *, tps: float, at: datetime = T0, **fields: Any) -> Report:
    register_run(node, revision)  # a node that registered a run of it: its reports count publicly
    mtp = fields.pop("mtp_used", False)
    defaults: dict[str, Any] = {
        "effective_strategy": "native-mtp" if mtp else "disabled",
        "mtp_source": "Integrated" if mtp else "Disabled",
        "requested_strategy": "auto",
        "stage_splits": "0..27|27..41",
    }
    report = Report(
        node=node,
        report_id=uuid.uuid4(),
        body_sha256="0" * 64,
        received_at=at,
        observed_at=at,
        repo_id=revision.package.repo_id,
        commit_sha=revision.commit_sha,
        revision=revision,
        predicted_per_second=tps,
        mtp_used=mtp,
        body={},
        **(defaults | fields),
    )
    reports.insert_claimed(node, [report])  # claims its key, inserts it, adds it to the rollups
    return report


def test_the_series_groups_reports_by_hour_strategy_and_topology(first: Revision, node_a: Node) -> None:
    add(node_a, first, tps=3.0)
    add(node_a, first, tps=3.4, at=T0 + timedelta(minutes=40))
    add(node_a, first, tps=3.1, at=T0 + timedelta(hours=1))
    add(node_a, first, tps=9.0, at=T0 + timedelta(hours=1), stage_splits="0..41")
    series = figures(first.pk, bucket="hour").series
    assert [(p.bucket.hour, p.topology, p.reports) for p in series] == [
        (10, "0..27|27..41", 2),
        (11, "0..27|27..41", 1),
        (11, "0..41", 1),
    ]
    assert series[0].tps == near(3.2)  # the median of 3.0 and 3.4, on every database
    assert series[0].strategy == "disabled"


def test_a_point_of_several_cells_reads_its_quartiles_from_their_merged_sketches(
    first: Revision, node_a: Node
) -> None:
    # One bucket, strategy and split, asked for two ways: two cells, one point (the timeline's quartiles are
    # read from the merged bins; the cells alone have medians of 4.0 and 7.0).
    for tps in (3.0, 4.0, 5.0):
        add(node_a, first, tps=tps, requested_strategy="auto")
    for tps in (6.0, 7.0, 8.0):
        add(node_a, first, tps=tps, requested_strategy="disabled")
    (point,) = figures(first.pk, bucket="hour").series
    assert point.reports == 6
    assert (point.tps, point.p25, point.p75) == (near(5.5), near(4.25), near(6.75))


def test_the_series_can_be_bucketed_by_day(first: Revision, node_a: Node) -> None:
    add(node_a, first, tps=3.0)
    add(node_a, first, tps=3.0, at=T0 + timedelta(hours=5))
    assert [p.reports for p in figures(first.pk, bucket="day").series] == [2]


def test_a_time_range_keeps_the_series_from_its_start_and_the_totals_over_every_report(
    first: Revision, node_a: Node
) -> None:
    add(node_a, first, tps=3.0)
    add(node_a, first, tps=5.0, at=T0 + timedelta(days=10))
    add(node_a, first, tps=6.0, at=T0 + timedelta(days=10, hours=2))
    ranged = revision_throughput(first.pk, since=T0 + timedelta(days=9))
    assert ranged is not None
    # The range is a day and a few hours: hour buckets, and only the two recent hours.
    assert ranged.bucket == "hour"
    assert [(p.bucket.day, p.bucket.hour, p.reports) for p in ranged.series] == [(11, 10, 1), (11, 12, 1)]
    assert ranged.reports == 3


def test_control_without_a_range_the_series_starts_at_the_first_report(first: Revision, node_a: Node) -> None:
    add(node_a, first, tps=3.0)
    add(node_a, first, tps=5.0, at=T0 + timedelta(days=10))
    series = figures(first.pk).series
    assert series[0].bucket.date() == T0.date() and len(series) == 2


def test_an_unknown_bucket_is_refused(first: Revision) -> None:
    with pytest.raises(ValueError, match="bucket must be one of"):
        revision_throughput(first.pk, bucket="fortnight")


def test_it_splits_throughput_with_and_without_mtp(fixed: Revision, node_a: Node) -> None:
    add(node_a, fixed, tps=3.0)
    add(node_a, fixed, tps=3.2)
    add(node_a, fixed, tps=7.0, mtp_used=True)
    result = figures(fixed.pk)
    assert result.mtp_off == throughput.MtpFigures(reports=2, tps=near(3.1))
    assert result.mtp_on == throughput.MtpFigures(reports=1, tps=near(7.0))


def test_acceptance_rate_and_mean_accepted_length_come_from_the_counters(
    fixed: Revision, node_a: Node
) -> None:
    counters = {"speculative_proposed_n": 40, "speculative_accepted_n": 30, "speculative_windows": 20}
    add(node_a, fixed, tps=7.0, mtp_used=True, **counters)
    add(node_a, fixed, tps=7.0, mtp_used=True, draft_n=40, draft_n_accepted=30, speculative_windows=20)
    result = figures(fixed.pk)
    assert result.acceptance_rate == pytest.approx(60 / 80)
    assert result.mean_accepted_length == pytest.approx(1 + 60 / 40)
    (mtp_row,) = result.by_strategy
    assert (mtp_row.strategy, mtp_row.reports, mtp_row.acceptance_rate) == ("native-mtp", 2, 0.75)


def test_rates_are_none_without_speculative_counters(first: Revision, node_a: Node) -> None:
    add(node_a, first, tps=3.17, speculative_proposed_n=0, speculative_accepted_n=0)
    result = figures(first.pk)
    assert (result.acceptance_rate, result.mean_accepted_length) == (None, None)


def test_it_alerts_when_mtp_weights_are_never_used(first: Revision, node_a: Node, node_b: Node) -> None:
    add(node_a, first, tps=3.17)
    add(node_a, first, tps=3.17)
    add(node_b, first, tps=3.2)
    alert = figures(first.pk).alert
    assert alert == node_plans.Alert(
        message="MTP weights present but never used in 3 reports from 2 nodes",
        reports=3,
        nodes=2,
        names=(node_a.name, node_b.name),  # the package page names and links each node
    )


def test_the_alert_names_the_nodes_with_most_unused_reports_and_counts_the_rest(
    first: Revision, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A revision served by thousands of nodes is not named node by node: the alert names ALERT_NAMES of
    them, those with the most reports showing MTP unused (a tie at the cut decided by name), and counts
    every one. Control: with room for every node, each is named."""
    made = {name: nodes.create_node(name).node for name in ("node-d", "node-c", "node-b", "node-a")}
    for _ in range(3):
        add(made["node-c"], first, tps=3.0)
    for name in ("node-d", "node-b", "node-a"):
        add(made[name], first, tps=3.0)
    monkeypatch.setattr(node_plans, "ALERT_NAMES", 2)
    alert = figures(first.pk).alert
    assert alert is not None
    assert (alert.names, alert.nodes, alert.unnamed, alert.reports) == (("node-c", "node-a"), 4, 2, 6)
    assert alert.message == "MTP weights present but never used in 6 reports from 4 nodes"
    monkeypatch.setattr(node_plans, "ALERT_NAMES", 4)
    every = figures(first.pk).alert
    assert (
        every is not None and every.names == ("node-c", "node-a", "node-b", "node-d") and every.unnamed == 0
    )


def test_the_alert_message_speaks_of_one_report_from_one_node(first: Revision, node_a: Node) -> None:
    add(node_a, first, tps=3.17)
    assert figures(first.pk).alert.message.endswith("in 1 report from 1 node")


def test_there_is_no_alert_without_mtp_weights(package: Package, node_a: Node) -> None:
    plain = Revision.objects.create(package=package, commit_sha="a" * 40, mtp_detected=False)
    add(node_a, plain, tps=30.0)
    assert figures(plain.pk).alert is None


def test_there_is_no_alert_when_mtp_ran_or_the_operator_turned_it_off(fixed: Revision, node_a: Node) -> None:
    add(node_a, fixed, tps=7.0, mtp_used=True, speculative_proposed_n=10)
    add(node_a, fixed, tps=3.0, requested_strategy="disabled")
    assert figures(fixed.pk).alert is None
    Package.objects.filter(pk=fixed.package_id).update(latest_revision=fixed)
    assert not Package.objects.filter(latest_alert_q()).exists()


def test_stage_splits_and_recent_reports_are_listed(first: Revision, node_a: Node) -> None:
    for minute in range(25):
        add(node_a, first, tps=3.0, at=T0 + timedelta(minutes=minute), stage_splits="0..27|27..41")
    add(node_a, first, tps=9.0, at=T0 - timedelta(days=1), stage_splits="0..41")
    result = figures(first.pk)
    assert result.stage_splits == ["0..27|27..41", "0..41"]
    recent = result.recent
    assert len(recent) == 20
    assert recent[0]["received_at"] == T0 + timedelta(minutes=24)
    assert (recent[0]["node_name"], recent[0]["mtp_source"]) == ("node-a", "Disabled")


def test_a_revision_without_reports_has_no_figures(fixed: Revision) -> None:
    assert revision_throughput(fixed.pk) is None


def test_catalog_throughput_summarises_each_revision(first: Revision, fixed: Revision, node_a: Node) -> None:
    add(node_a, first, tps=3.17)
    add(node_a, fixed, tps=7.0, mtp_used=True)
    add(node_a, fixed, tps=3.0, requested_strategy="disabled")
    result = catalog_throughput([first.pk, fixed.pk, 999_999])
    assert result[first.pk].as_dict() == {
        "tps_mtp": None,
        "tps_no_mtp": near(3.17),
        "reports": 1,
        "alert": True,
    }
    assert result[fixed.pk].as_dict() == {
        "tps_mtp": near(7.0),
        "tps_no_mtp": near(3.0),
        "reports": 2,
        "alert": False,
    }
    assert result[999_999].as_dict() == {"tps_mtp": None, "tps_no_mtp": None, "reports": 0, "alert": False}


@pytest.mark.parametrize("count", [1, 25])
def test_catalog_throughput_takes_one_query_whatever_the_number_of_revisions(
    package: Package, node_a: Node, count: int, django_assert_num_queries: Any
) -> None:
    revisions = [
        Revision.objects.create(package=package, commit_sha=f"{i:040x}", mtp_detected=True)
        for i in range(count)
    ]
    for revision in revisions:
        add(node_a, revision, tps=3.0)
    with django_assert_num_queries(1):
        result = catalog_throughput([r.pk for r in revisions])
    assert all(summary.alert for summary in result.values())


def test_the_latest_alert_filter_flags_a_package_whose_latest_revision_shows_mtp_unused(
    first: Revision, fixed: Revision, node_a: Node
) -> None:
    add(node_a, first, tps=3.17)
    add(node_a, fixed, tps=7.0, mtp_used=True)
    Package.objects.filter(pk=first.package_id).update(latest_revision=first)
    assert list(Package.objects.filter(latest_alert_q())) == [first.package]
    Package.objects.filter(pk=first.package_id).update(latest_revision=fixed)  # the fix, MTP used
    assert not Package.objects.filter(latest_alert_q()).exists()


def test_strategy_and_mtp_figures_are_over_all_their_reports_not_over_the_series_points(
    fixed: Revision, node_a: Node
) -> None:
    # Three reports in one hour, one in the next: the median of the two points' medians would be 6.
    for tps in (1.0, 2.0, 3.0):
        add(node_a, fixed, tps=tps, mtp_used=True)
    add(node_a, fixed, tps=10.0, mtp_used=True, at=T0 + timedelta(hours=1))
    result = figures(fixed.pk, bucket="hour")
    assert [p.tps for p in result.series] == [near(2.0), near(10.0)]
    assert result.mtp_on == throughput.MtpFigures(reports=4, tps=near(2.5))
    assert result.by_strategy[0].tps == near(2.5)


def test_each_strategy_gets_its_own_median(fixed: Revision, node_a: Node) -> None:
    for tps in (1.0, 2.0, 9.0):
        add(node_a, fixed, tps=tps, effective_strategy="ngram-cache")
    add(node_a, fixed, tps=7.0, mtp_used=True)
    by_strategy = {row.strategy: row for row in figures(fixed.pk).by_strategy}
    assert by_strategy["ngram-cache"].tps == near(2.0)
    assert by_strategy["ngram-cache"].reports == 3 and by_strategy["native-mtp"].tps == near(7.0)


def test_counts_and_counters_add_up_across_buckets_strategies_and_topologies(
    fixed: Revision, node_a: Node
) -> None:
    counters = {"speculative_proposed_n": 10, "speculative_accepted_n": 5, "speculative_windows": 5}
    add(node_a, fixed, tps=7.0, mtp_used=True, **counters)
    add(node_a, fixed, tps=7.0, mtp_used=True, at=T0 + timedelta(days=1), stage_splits="0..41", **counters)
    add(node_a, fixed, tps=7.0, mtp_used=True, effective_strategy="native-mtp+ngram-cache", draft_n=30)
    add(node_a, fixed, tps=3.0, effective_strategy="")
    result = figures(fixed.pk, bucket="day")
    assert (result.mtp_on.reports, result.mtp_off.reports) == (3, 1)
    assert result.acceptance_rate == pytest.approx(10 / 50)
    assert result.mean_accepted_length == pytest.approx(1 + 10 / 10)
    rows = {row.strategy: (row.reports, row.acceptance_rate) for row in result.by_strategy}
    assert rows == {"": (1, None), "native-mtp": (2, 0.5), "native-mtp+ngram-cache": (1, 0.0)}
    assert result.stage_splits == ["0..27|27..41", "0..41"]


def test_weeks_start_on_monday_and_days_at_midnight_utc(first: Revision, node_a: Node) -> None:
    sunday_night = datetime(2025, 3, 2, 23, 30, tzinfo=UTC)
    add(node_a, first, tps=3.0, at=sunday_night)
    add(node_a, first, tps=3.0, at=sunday_night + timedelta(hours=1))
    weeks = [p.bucket for p in figures(first.pk, bucket="week").series]
    assert weeks == [datetime(2025, 2, 24, tzinfo=UTC), datetime(2025, 3, 3, tzinfo=UTC)]
    days = [p.bucket for p in figures(first.pk, bucket="day").series]
    assert days == [datetime(2025, 3, 2, tzinfo=UTC), datetime(2025, 3, 3, tzinfo=UTC)]
    months = [p.bucket for p in figures(first.pk, bucket="month").series]
    assert months == [datetime(2025, 3, 1, tzinfo=UTC)]


def test_a_revisions_figures_take_the_same_queries_however_many_reports_and_strategies(
    first: Revision, node_a: Node, node_b: Node
) -> None:
    add(node_a, first, tps=3.0)
    with CaptureQueriesContext(connection) as few:
        revision_throughput(first.pk)
    for hour in range(30):
        strategy = ["disabled", "ngram-cache", "native-mtp"][hour % 3]
        add(node_b, first, tps=3.0 + hour, at=T0 + timedelta(hours=hour), effective_strategy=strategy)
    with CaptureQueriesContext(connection) as many:
        result = figures(first.pk)
    assert len(many) == len(few)
    assert (len(result.series), len(result.by_strategy)) == (30, 3)


def figures(revision_id: int, bucket: str | None = None) -> throughput.RevisionThroughput:
    result = revision_throughput(revision_id, bucket=bucket)
    assert result is not None
    return result


def test_a_time_range_with_an_end_keeps_the_series_before_it_and_the_totals_over_every_report(
    first: Revision, node_a: Node
) -> None:
    add(node_a, first, tps=3.0)
    add(node_a, first, tps=5.0, at=T0 + timedelta(days=10))
    ranged = revision_throughput(first.pk, since=T0 - timedelta(days=1), until=T0 + timedelta(days=9))
    assert ranged is not None
    assert [p.bucket.date() for p in ranged.series] == [T0.date()]
    assert ranged.reports == 2
    # Control: without the end both days are drawn.
    assert len(revision_throughput(first.pk, since=T0 - timedelta(days=1)).series) == 2  # type: ignore[union-attr]


def test_a_time_range_limits_the_mtp_strategy_and_acceptance_figures_to_it(
    first: Revision, node_a: Node
) -> None:
    add(node_a, first, tps=3.0)
    add(node_a, first, tps=9.0, mtp_used=True, speculative_proposed_n=10, speculative_accepted_n=2)
    add(node_a, first, tps=5.0, at=T0 + timedelta(days=10))
    add(
        node_a,
        first,
        tps=7.0,
        at=T0 + timedelta(days=10),
        mtp_used=True,
        speculative_proposed_n=10,
        speculative_accepted_n=8,
    )
    ranged = revision_throughput(first.pk, since=T0 + timedelta(days=9))
    assert ranged is not None
    assert (ranged.mtp_on.reports, ranged.mtp_off.reports) == (1, 1)
    assert ranged.mtp_on.tps == pytest.approx(7.0, rel=0.01)
    assert ranged.acceptance_rate == pytest.approx(0.8)
    assert [(s.strategy, s.reports) for s in ranged.by_strategy] == [("disabled", 1), ("native-mtp", 1)]
    assert ranged.reports == 4  # the revision's count stays over every report
    # Control: without a range every report counts.
    every = figures(first.pk)
    assert (every.mtp_on.reports, every.mtp_off.reports) == (2, 2)
    assert every.acceptance_rate == pytest.approx(0.5)
    # A range with no report in it: no figures, not the ones of every report.
    empty = revision_throughput(first.pk, since=T0 + timedelta(days=3), until=T0 + timedelta(days=4))
    assert empty is not None and empty.mtp_on.reports == 0 and empty.acceptance_rate is None


def test_the_plans_cut_keeps_the_busiest_and_breaks_ties_by_the_nodes_name(
    first: Revision, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Names are read for the plans at the cut only (node_plans.busiest): a tie at the cut is
    still decided by the node's name, as when every cell came with its name. Nodes are created in the
    reverse order of their names, so an order by node id would keep node-d and node-c."""
    monkeypatch.setattr(node_plans, "PLAN_ROWS", 3)
    made = {name: nodes.create_node(name).node for name in ("node-e", "node-d", "node-c", "node-b", "node-a")}
    for node in made.values():
        add(node, first, tps=3.0)
    add(made["node-e"], first, tps=3.0)  # the busiest: 2 reports; the four others tie at 1
    plans = figures(first.pk).plans
    assert [(p.node, p.reports) for p in plans] == [("node-e", 2), ("node-a", 1), ("node-b", 1)]
    with CaptureQueriesContext(connection) as queries:
        node_plans.node_names([made["node-a"].pk, made["node-b"].pk, made["node-a"].pk])
    assert len(queries) == 1
    assert node_plans.node_names([]) == {}


def test_a_plan_of_several_cells_is_cut_by_their_sum(
    first: Revision, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan adds up its node's cells of one split and strategy (here two topologies of the same split):
    node-a's two cells of 2 reports each make its plan the busiest (4), though each alone is below node-b's
    and node-c's 3. Control: its cells counted one by one would leave node-a out at a cut of two plans."""
    monkeypatch.setattr(node_plans, "PLAN_ROWS", 2)
    made = {name: nodes.create_node(name).node for name in ("node-a", "node-b", "node-c")}
    for topology in ("mesh-1", "mesh-2"):
        for _ in range(2):
            add(made["node-a"], first, tps=3.0, topology_id=topology)
    for name in ("node-b", "node-c"):
        for _ in range(3):
            add(made[name], first, tps=3.0)
    plans = figures(first.pk).plans
    assert [(p.node, p.reports) for p in plans] == [("node-a", 4), ("node-b", 3)]
    cells = Rollup.objects.filter(revision=first, grain="total").exclude(node_key=Rollup.ALL_NODES)
    assert sorted(cells.filter(node_key=made["node-a"].pk).values_list("node_key", "reports")) == [
        (made["node-a"].pk, 2),
        (made["node-a"].pk, 2),
    ]
    one_by_one = cells.order_by("-reports").values_list("node_key", flat=True)[:2]
    assert made["node-a"].pk not in set(one_by_one)
