"""Read-side selectors over node reports: throughput series, MTP use and the unused-MTP alert.

They read the rollups (models.RevisionRollup, every node's cells without the topology split, and the
nodes' plans, models.PlanRollup, through node_plans; kept by rollups/), never the raw reports, except the
bounded "recent reports" table: so a page's cost depends on how long and how varied a revision's traffic
is (hours or days x strategies x splits), not on how many reports it got, nor on how many topologies its
nodes form, nor (but for two counts over an index: its nodes, its alerted nodes) on how many nodes ran it.
A package page's figures
are five to nine small queries (the totals, the busiest plans, the node count, the names, and as needed
the alerted nodes, a time range's cells, the weights' MTP, the series and the recent reports). Medians
come from the rollups' sketches (packages_app.sketch, read through stored_sketch): medians on every
database, within 1 % relative of the exact median (percentile_cont). The catalog's columns are
catalog/throughput.py's.

Results are typed (RevisionThroughput and its parts); ``as_dict`` gives the JSON-ready shape the API and
the charts take.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import F, QuerySet

from packages_app import compiled, node_plans, report_metrics, sketch
from packages_app.models import Report, Revision, RevisionRollup, Rollup
from packages_app.report_time import REPLAY_WINDOW, placement
from packages_app.rollups import quartiles
from packages_app.rollups.cells import hourly_since
from packages_app.rollups.public_weight import registered_nodes
from packages_app.stored_sketch import merged_bins, merged_stored, parsed_stored, stored

BUCKETS = ("hour", "day", "week", "month")
# The time ranges the package page offers for its timeline (``?range=``); no range = every report.
RANGES = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}
RECENT = 20
A_MONDAY = datetime(2000, 1, 3, tzinfo=UTC)  # weeks start on Mondays, as date_trunc's do


@dataclass(frozen=True)
class Point:
    """One point of the timeline: a bucket of one strategy on one topology."""

    bucket: datetime
    strategy: str
    topology: str
    tps: float | None
    reports: int
    # The middle half of the bucket's decode rates (from the same sketch as the median, within 1 %).
    p25: float | None = None
    p75: float | None = None


@dataclass(frozen=True)
class StrategyFigures:
    strategy: str
    reports: int
    tps: float | None
    acceptance_rate: float | None
    mean_accepted_length: float | None


@dataclass(frozen=True)
class MtpFigures:
    reports: int
    tps: float | None


@dataclass(frozen=True)
class RevisionThroughput:
    """Everything the package page charts for one revision."""

    reports: int
    first_at: datetime
    last_at: datetime
    bucket: str
    series: list[Point]
    by_strategy: list[StrategyFigures]
    mtp_on: MtpFigures
    mtp_off: MtpFigures
    acceptance_rate: float | None
    mean_accepted_length: float | None
    stage_splits: list[str]
    recent: list[dict[str, Any]]
    plans: list[node_plans.NodePlan]
    alert: node_plans.Alert | None
    nodes: int = 0  # nodes that reported running it
    auto_off: int = 0  # reports that asked for auto and ran without MTP
    # Where the timeline places reports (report_time): when observed, within the accepted skew.
    moved: int = 0  # plotted when their node observed them, more than the skew limit before arrival
    refused: int = 0  # an observed time not believed: plotted when they arrived

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def time_bucket(span: timedelta) -> str:
    """The bucket that gives a timeline some tens to a few hundred points per line (an hour at least)."""
    for bucket, longest in (("hour", timedelta(days=4)), ("day", timedelta(days=200))):
        if span <= longest:
            return bucket
    return "week"


# --- one revision ----------------------------------------------------------------------------


def revision_throughput(
    revision_id: int,
    *,
    bucket: str | None = None,
    page: bool = True,
    since: datetime | None = None,
    until: datetime | None = None,
    mtp_detected: bool | None = None,
) -> RevisionThroughput | None:
    """The revision's figures, or None while no node has reported running it.

    ``bucket`` defaults to one that suits the span of the reports; hour buckets need hour rollups,
    which are kept MESHDASH_ROLLUP_HOURLY_DAYS: an older revision is shown by day instead.
    ``page=False`` leaves out what only the HTML page shows (the time series and the recent raw
    reports): the JSON API does not pay for them. ``since`` and ``until`` limit the time series, the
    MTP on/off and per-strategy figures and the acceptance figures to the buckets from
    ``since`` on and starting before ``until`` (hour buckets while the hourly rollups cover ``since``,
    else whole UTC days), and pick the series' bucket from that range; ``reports``, ``first_at``,
    ``last_at``, the nodes' plans, the alert and the recent reports stay over every report.
    ``mtp_detected``: the revision's flag when the caller holds it (else read when the alert needs it).
    """
    if bucket is not None and bucket not in BUCKETS:
        raise ValueError(f"bucket must be one of {', '.join(BUCKETS)}, not {bucket!r}")
    totals = compiled.rows(_total_cells, revision_id)
    if not totals:
        return None
    first_at, last_at = min(c["first_at"] for c in totals), max(c["last_at"] for c in totals)
    start = max(first_at, since) if since is not None else first_at
    end = min(last_at, until) if until is not None else last_at
    sums = _add_up(totals)
    bucket = bucket or time_bucket(max(end - start, timedelta(0)))
    # first_at is an arrival; a replayed report sits up to REPLAY_WINDOW before it, in cells the hour
    # grain may no longer hold.
    earliest = start - REPLAY_WINDOW if sums["moved"] else start
    if bucket == "hour" and earliest < hourly_since():
        bucket = "day"
    ranged = page and (since is not None or until is not None)
    figured = _range_cells(revision_id, since, until) if ranged else totals
    candidates = node_plans.busiest(revision_id)
    nodes = node_plans.count_nodes(revision_id)
    # The alert, on weights that hold MTP (read only when reports show it unused), names the nodes whose
    # reports show it.
    alerted = sums["unused"] > 0 and nodes > 0
    if alerted and mtp_detected is None:
        mtp_detected = Revision.objects.filter(pk=revision_id, mtp_detected=True).exists()
    alerted = alerted and bool(mtp_detected)
    unused = node_plans.unused_by_node(revision_id) if alerted else {}
    names = node_plans.node_names([row.node_key for row in candidates] + list(node_plans.alert_cut(unused)))
    return RevisionThroughput(
        reports=sums["reports"],
        first_at=first_at,
        last_at=last_at,
        bucket=bucket,
        series=_series(revision_id, bucket, since, until) if page else [],
        by_strategy=_by_strategy(figured),
        mtp_on=_mtp(figured, used=True),
        mtp_off=_mtp(figured, used=False),
        **_rates(_add_up(figured)),
        stage_splits=sorted({c["stage_splits"] for c in totals} - {""}),
        recent=_recent(revision_id) if page else [],
        plans=node_plans.ranked(candidates, names),
        alert=node_plans.alert(unused, sums["unused"], names) if alerted else None,
        nodes=nodes,
        auto_off=sum(c["reports"] for c in totals if not c["mtp_used"] and c["requested_strategy"] == "auto"),
        moved=sums["moved"],
        refused=sums["refused"],
    )


_TOTAL_FIELDS = (
    "stage_splits",
    "requested_strategy",
    "strategy",
    "mtp_used",
    "reports",
    "unused",
    "accepted",
    "proposed",
    "windows",
    "moved",
    "refused",
    "first_at",
    "last_at",
    "tps",  # the decode sketch, as JSON text (stored)
)
ADDED_UP = ("reports", "unused", "accepted", "proposed", "windows", "moved", "refused")


def _total_cells(revision_id: int) -> QuerySet[RevisionRollup, dict[str, Any]]:
    cells = _cells(revision_id, Rollup.Grain.TOTAL).annotate(tps=stored("tps_sketch"))
    totals: QuerySet[RevisionRollup, dict[str, Any]] = cells.values(*_TOTAL_FIELDS)
    return totals


def _range_cells(revision_id: int, since: datetime | None, until: datetime | None) -> list[dict[str, Any]]:
    """The every-node cells of a time range, shaped as the total cells: hour cells when the hourly
    rollups reach back to ``since``, else day cells (the range's first day counted whole)."""
    grain = Rollup.Grain.HOUR if since is not None and since >= hourly_since() else Rollup.Grain.DAY
    cells = _cells(revision_id, grain)
    if since is not None:
        cells = cells.filter(bucket_start__gte=bucket_start(since, grain.value))
    if until is not None:
        cells = cells.filter(bucket_start__lt=until)
    return list(cells.annotate(tps=stored("tps_sketch")).values(*_TOTAL_FIELDS))


def _cells(revision_id: int, grain: str) -> QuerySet[RevisionRollup]:
    return RevisionRollup.objects.filter(revision_id=revision_id, grain=grain)


def _add_up(cells: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    sums = dict.fromkeys(ADDED_UP, 0)
    for cell in cells:
        for key in ADDED_UP:
            sums[key] += cell[key]
    return sums


def _merged(cells: Iterable[Mapping[str, Any]], column: str) -> sketch.Sketch:
    return merged_stored(cell[column] for cell in cells)


def _rates(sums: Mapping[str, int]) -> dict[str, float | None]:
    """Acceptance rate = accepted / proposed; mean accepted length = 1 + accepted / drafts."""
    accepted, proposed, windows = sums["accepted"], sums["proposed"], sums["windows"]
    return {
        "acceptance_rate": accepted / proposed if proposed else None,
        "mean_accepted_length": 1 + accepted / windows if windows else None,
    }


def _mtp(totals: list[dict[str, Any]], *, used: bool) -> MtpFigures:
    cells = [c for c in totals if c["mtp_used"] is used]
    return MtpFigures(reports=_add_up(cells)["reports"], tps=sketch.median(_merged(cells, "tps")))


def _by_strategy(totals: list[dict[str, Any]]) -> list[StrategyFigures]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for cell in totals:
        groups.setdefault(cell["strategy"], []).append(cell)
    return [_strategy(name, groups[name]) for name in sorted(groups)]


def _strategy(name: str, cells: list[dict[str, Any]]) -> StrategyFigures:
    sums = _add_up(cells)
    tps = sketch.median(_merged(cells, "tps"))
    return StrategyFigures(strategy=name, reports=sums["reports"], tps=tps, **_rates(sums))


def _series(
    revision_id: int, bucket: str, since: datetime | None = None, until: datetime | None = None
) -> list[Point]:
    """Median decode rate and reports per (bucket, strategy, topology), from hour or day cells; from the
    cell that holds ``since`` on and the cells that start before ``until``, when they are given."""
    grain = Rollup.Grain.HOUR if bucket == "hour" else Rollup.Grain.DAY
    start = bucket_start(since, grain.value) if since is not None else None
    # The cells as they are, grouped into points here (SQL's grouping cost more than this loop). Each cell
    # carries its point's quartiles (rollups.quartiles); a week or a month gathers day cells, whose
    # sketches are merged.
    regroup = bucket != grain
    rows = compiled.rows(_series_cells, revision_id, grain.value, start, until, regroup)
    parsed = parsed_stored(row[-1] for row in rows) if regroup else [None] * len(rows)
    points: dict[tuple[datetime, str, str], list[tuple[Any, ...]]] = {}
    for row, bins in zip(rows, parsed, strict=True):
        start, strategy, splits = row[:3]
        key = (bucket_start(start, bucket) if regroup else start, strategy, splits)
        points.setdefault(key, []).append((row, bins))
    series = []
    for (at, strategy, splits), point in sorted(points.items(), key=lambda item: item[0]):
        if regroup:
            p25, median, p75 = sketch.quartiles(merged_bins([bins for _, bins in point]))
        else:
            p25, median, p75 = point[0][0][4:7]
        series.append(
            Point(
                bucket=at,
                strategy=strategy,
                topology=splits,
                tps=median,
                reports=sum(row[3] for row, _ in point),
                p25=p25,
                p75=p75,
            )
        )
    return series


def _series_cells(
    revision_id: int, grain: str, start: datetime | None, until: datetime | None, regroup: bool
) -> QuerySet[RevisionRollup, tuple[Any, ...]]:
    """The timeline's cells of one grain from the cell that holds ``start`` on, before ``until``; with
    their sketches when they are regrouped (a week or a month of day cells)."""
    cells = _cells(revision_id, grain)
    if start is not None:
        cells = cells.filter(bucket_start__gte=start)
    if until is not None:
        cells = cells.filter(bucket_start__lt=until)
    columns = ("bucket_start", "strategy", "stage_splits", "reports", *quartiles.COLUMNS)
    if regroup:
        cells = cells.annotate(tps=stored("tps_sketch"))
    return cells.values_list(*columns, *(("tps",) if regroup else ())).order_by()


def bucket_start(at: datetime, bucket: str) -> datetime:
    """The start of the bucket ``at`` falls in, in UTC (weeks start on Mondays)."""
    at = at.astimezone(UTC)
    hour = at.replace(minute=0, second=0, microsecond=0)
    if bucket == "hour":
        return hour
    day = hour.replace(hour=0)
    if bucket == "day":
        return day
    if bucket == "week":
        return day - timedelta(days=(day - A_MONDAY).days % 7)
    return day.replace(day=1)


def recent_fields(metrics: Sequence[report_metrics.ReportMetric] | None = None) -> tuple[str, ...]:
    """The columns of the recent reports table: the report's context, then the table's shown metrics."""
    return (
        "received_at",
        "observed_at",
        "clock_skew_flagged",
        "node_name",
        "requested_strategy",
        "effective_strategy",
        "mtp_source",
        "mtp_used",
        "stage_splits",
        *report_metrics.shown_columns(metrics),
        "timings_flagged",
        "source",
        "run_id",
    )


RECENT_FIELDS = recent_fields()


def _recent(revision_id: int) -> list[dict[str, Any]]:
    """The newest RECENT raw reports (the one raw read of a page, bounded by an index)."""
    shown = [report_metrics.BY_NAME[name] for name in report_metrics.shown_columns()]
    recent: list[dict[str, Any]] = compiled.rows(_recent_reports, revision_id)
    for row in recent:
        # The metric cells in the table's order, for the page: (metric, value).
        row["metrics"] = [(metric, row[metric.name]) for metric in shown]
        row["placement"] = placement(row["observed_at"], row["received_at"]).value
    return recent


def _recent_reports(revision_id: int) -> QuerySet[Report, dict[str, Any]]:
    rows = Report.objects.filter(registered_nodes(revision_id, "node_id"), revision_id=revision_id)
    rows = rows.order_by("-received_at", "-id")  # a node's unregistered reports: on its own page only
    rows = rows.annotate(node_name=F("node__name"))
    recent: QuerySet[Report, dict[str, Any]] = rows.values(*RECENT_FIELDS)[:RECENT]
    return recent
