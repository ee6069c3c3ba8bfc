"""Read-side selectors over node reports: throughput series, MTP use and the unused-MTP alert.

They read the rollups (models.Rollup, kept by rollups.py), never the raw reports, except the
bounded "recent reports" table: so a page's cost depends on how long and how varied a revision's
traffic is (hours or days x strategies x topologies), not on how many reports it got. A package
page is five small queries; the catalog's columns one; the alert filter a subquery on a partial
index. Medians come from the rollups' sketches (packages_app.sketch): medians on every database,
within 1 % relative of the exact median (percentile_cont).

Results are typed (RevisionThroughput and its parts, CatalogThroughput); ``as_dict`` gives the
JSON-ready shape the API and the charts take.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import F, OuterRef, QuerySet, Subquery

from packages_app import sketch
from packages_app.models import Node, Report, Revision, Rollup
from packages_app.rollups import hourly_since

BUCKETS = ("hour", "day", "week", "month")
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
class Alert:
    message: str
    reports: int
    nodes: int


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
    prompt_tps: float | None
    stage_splits: list[str]
    recent: list[dict[str, Any]]
    plans: list[Plan]
    alert: Alert | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CatalogThroughput:
    """A catalog row's figures: median tok/s with and without MTP, reports, the alert flag."""

    tps_mtp: float | None
    tps_no_mtp: float | None
    reports: int
    alert: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


NO_THROUGHPUT = CatalogThroughput(tps_mtp=None, tps_no_mtp=None, reports=0, alert=False)


def time_bucket(span: timedelta) -> str:
    """The bucket that gives a timeline some tens to a few hundred points per line (an hour at least)."""
    for bucket, longest in (("hour", timedelta(days=4)), ("day", timedelta(days=200))):
        if span <= longest:
            return bucket
    return "week"


# --- one revision ----------------------------------------------------------------------------


def revision_throughput(revision_id: int, *, bucket: str | None = None) -> RevisionThroughput | None:
    """The revision's figures, or None while no node has reported running it.

    ``bucket`` defaults to one that suits the span of the reports; hour buckets need hour rollups,
    which are kept MESHDASH_ROLLUP_HOURLY_DAYS: an older revision is shown by day instead.
    """
    if bucket is not None and bucket not in BUCKETS:
        raise ValueError(f"bucket must be one of {', '.join(BUCKETS)}, not {bucket!r}")
    totals = list(_cells(revision_id, Rollup.Grain.TOTAL).values(*_TOTAL_FIELDS))
    if not totals:
        return None
    first_at, last_at = min(c["first_at"] for c in totals), max(c["last_at"] for c in totals)
    bucket = bucket or time_bucket(last_at - first_at)
    if bucket == "hour" and first_at < hourly_since():
        bucket = "day"
    mtp_detected = Revision.objects.filter(pk=revision_id, mtp_detected=True).exists()
    sums = _add_up(totals)
    return RevisionThroughput(
        reports=sums["reports"],
        first_at=first_at,
        last_at=last_at,
        bucket=bucket,
        series=_series(revision_id, bucket),
        by_strategy=_by_strategy(totals),
        mtp_on=_mtp(totals, used=True),
        mtp_off=_mtp(totals, used=False),
        **_rates(sums),
        prompt_tps=sketch.median(_merged(totals, "prompt_sketch")),
        stage_splits=sorted({c["stage_splits"] for c in totals} - {""}),
        recent=_recent(revision_id),
        plans=strategy_plans(revision_id),
        alert=_alert(revision_id, sums["unused"]) if mtp_detected else None,
    )


_TOTAL_FIELDS = (
    "stage_splits",
    "strategy",
    "mtp_used",
    "reports",
    "unused",
    "accepted",
    "proposed",
    "windows",
    "first_at",
    "last_at",
    "tps_sketch",
    "prompt_sketch",
)
ADDED_UP = ("reports", "unused", "accepted", "proposed", "windows")


def _cells(revision_id: int, grain: str) -> QuerySet[Rollup]:
    return Rollup.objects.filter(revision_id=revision_id, grain=grain, node_key=Rollup.ALL_NODES)


def _add_up(cells: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    sums = dict.fromkeys(ADDED_UP, 0)
    for cell in cells:
        for key in ADDED_UP:
            sums[key] += cell[key]
    return sums


def _merged(cells: Iterable[Mapping[str, Any]], column: str) -> sketch.Sketch:
    return sketch.merged(sketch.from_json(cell[column]) for cell in cells)


def _rates(sums: Mapping[str, int]) -> dict[str, float | None]:
    """Acceptance rate = accepted / proposed; mean accepted length = 1 + accepted / drafts."""
    accepted, proposed, windows = sums["accepted"], sums["proposed"], sums["windows"]
    return {
        "acceptance_rate": accepted / proposed if proposed else None,
        "mean_accepted_length": 1 + accepted / windows if windows else None,
    }


def _mtp(totals: list[dict[str, Any]], *, used: bool) -> MtpFigures:
    cells = [c for c in totals if c["mtp_used"] is used]
    return MtpFigures(reports=_add_up(cells)["reports"], tps=sketch.median(_merged(cells, "tps_sketch")))


def _by_strategy(totals: list[dict[str, Any]]) -> list[StrategyFigures]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for cell in totals:
        groups.setdefault(cell["strategy"], []).append(cell)
    return [_strategy(name, groups[name]) for name in sorted(groups)]


def _strategy(name: str, cells: list[dict[str, Any]]) -> StrategyFigures:
    sums = _add_up(cells)
    tps = sketch.median(_merged(cells, "tps_sketch"))
    return StrategyFigures(strategy=name, reports=sums["reports"], tps=tps, **_rates(sums))


def _series(revision_id: int, bucket: str) -> list[Point]:
    """Median decode rate and reports per (bucket, strategy, topology), from hour or day cells."""
    grain = Rollup.Grain.HOUR if bucket == "hour" else Rollup.Grain.DAY
    rows = _cells(revision_id, grain).values_list(
        "bucket_start", "strategy", "stage_splits", "reports", "tps_sketch"
    )
    points: dict[tuple[datetime, str, str], tuple[int, sketch.Sketch]] = {}
    for start, strategy, splits, reports, bins in rows:
        key = (bucket_start(start, bucket), strategy, splits)
        count, merged = points.get(key, (0, {}))
        points[key] = (count + reports, sketch.merge_into(merged, sketch.from_json(bins)))
    return [
        Point(bucket=at, strategy=strategy, topology=splits, tps=sketch.median(bins), reports=count)
        for (at, strategy, splits), (count, bins) in sorted(points.items())
    ]


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


def _alert(revision_id: int, unused: int) -> Alert | None:
    if not unused:
        return None
    per_node = Rollup.objects.filter(revision_id=revision_id, grain=Rollup.Grain.TOTAL, unused__gt=0)
    nodes = per_node.exclude(node_key=Rollup.ALL_NODES).values("node_key").distinct().count()
    message = (
        f"MTP weights present but never used in {unused} report{'s' if unused != 1 else ''} "
        f"from {nodes} node{'s' if nodes != 1 else ''}"
    )
    return Alert(message=message, reports=unused, nodes=nodes)


RECENT_FIELDS = (
    "received_at",
    "observed_at",
    "clock_skew_flagged",
    "node_name",
    "requested_strategy",
    "effective_strategy",
    "mtp_source",
    "mtp_used",
    "stage_splits",
    "predicted_per_second",
    "prompt_per_second",
    "predicted_n",
    "timings_flagged",
    "source",
    "run_id",
)


def _recent(revision_id: int) -> list[dict[str, Any]]:
    """The newest RECENT raw reports (the one raw read of a page, bounded by an index)."""
    rows = Report.objects.filter(revision_id=revision_id).order_by("-received_at", "-id")
    rows = rows.annotate(node_name=F("node__name"))
    return [dict(row) for row in rows.values(*RECENT_FIELDS)[:RECENT]]


PLAN_ROWS = 50
# Requests whose outcome is known (node-report.md section 4); "auto" and a package's own strategy
# names may resolve to anything, so they are never called unmet.
JUDGED_REQUESTS = ("mtp", "disabled", "ngram-cache", "ngram-suffix")


@dataclass(frozen=True)
class Plan:
    """What one node asked for on one topology, what ran, and how it went."""

    node: str
    stage_splits: str
    requested_strategy: str
    effective_strategy: str
    differs: bool
    reports: int
    from_spans: int
    tps: float | None
    last_seen: datetime | None


def plan_honoured(requested: str, effective: str) -> bool:
    """False only when a request of a known kind ran as something else (e.g. ``mtp`` -> ``disabled``)."""
    if requested not in JUDGED_REQUESTS or not effective:
        return True
    if requested == "mtp":
        return effective.startswith("native-mtp")
    if requested == "disabled":
        return effective == "disabled"
    return effective.endswith(requested)  # ngram-cache, or native-mtp+ngram-cache


def strategy_plans(revision_id: int) -> list[Plan]:
    """Requested vs effective strategy per node and topology: what each node asked for and what ran.

    The effective strategy comes from the node (the ``stage.openai_decode`` span's attributes, or the
    report's ``speculative`` block); a requested plan that differs from the effective one is the
    thing to see. One query over the revision's per-node total rollups; the busiest PLAN_ROWS.
    """
    name = Node.objects.filter(pk=OuterRef("node_key")).values("name")[:1]
    rows = (
        Rollup.objects.filter(revision_id=revision_id, grain=Rollup.Grain.TOTAL)
        .exclude(node_key=Rollup.ALL_NODES)
        .annotate(node_name=Subquery(name))
        .values_list(
            "node_name",
            "stage_splits",
            "requested_strategy",
            "strategy",
            "reports",
            "from_spans",
            "last_at",
            "tps_sketch",
        )
    )
    groups: dict[tuple[str, str, str, str], list[tuple[Any, ...]]] = {}
    for row in rows:
        groups.setdefault((row[0] or "", row[1], row[2], row[3]), []).append(row)
    plans = [_plan(key, cells) for key, cells in groups.items()]
    plans.sort(key=lambda plan: (-plan.reports, plan.node, plan.stage_splits))
    return plans[:PLAN_ROWS]


def _plan(key: tuple[str, str, str, str], cells: list[tuple[Any, ...]]) -> Plan:
    node, splits, requested, effective = key
    return Plan(
        node=node,
        stage_splits=splits,
        requested_strategy=requested,
        effective_strategy=effective,
        differs=not plan_honoured(requested, effective),
        reports=sum(c[4] for c in cells),
        from_spans=sum(c[5] for c in cells),
        tps=sketch.median(sketch.merged(sketch.from_json(c[7]) for c in cells)),
        last_seen=max(c[6] for c in cells),
    )


# --- the catalog -------------------------------------------------------------------------------


def catalog_throughput(revision_ids: Sequence[int]) -> dict[int, CatalogThroughput]:
    """Per revision: median tok/s with and without MTP, report count, alert flag. One query."""
    rows = (
        Rollup.objects.filter(
            revision_id__in=revision_ids, grain=Rollup.Grain.TOTAL, node_key=Rollup.ALL_NODES
        )
        .values_list("revision_id", "mtp_used", "reports", "unused", "tps_sketch", "revision__mtp_detected")
        .order_by()
    )
    grouped: dict[int, list[tuple[Any, ...]]] = {}
    for row in rows:
        grouped.setdefault(row[0], []).append(row)
    result = dict.fromkeys(revision_ids, NO_THROUGHPUT)
    for revision_id, cells in grouped.items():
        result[revision_id] = _catalog_row(cells)
    return result


def _catalog_row(cells: list[tuple[Any, ...]]) -> CatalogThroughput:
    on = sketch.merged(sketch.from_json(c[4]) for c in cells if c[1])
    off = sketch.merged(sketch.from_json(c[4]) for c in cells if not c[1])
    return CatalogThroughput(
        tps_mtp=sketch.median(on),
        tps_no_mtp=sketch.median(off),
        reports=sum(c[2] for c in cells),
        alert=bool(cells[0][5]) and any(c[3] > 0 for c in cells),
    )


def alert_revision_ids() -> QuerySet[Revision, int]:
    """Ids of revisions whose weights hold MTP while their reports show it unused (a subquery)."""
    unused = Rollup.objects.filter(grain=Rollup.Grain.TOTAL, node_key=Rollup.ALL_NODES, unused__gt=0)
    return Revision.objects.filter(pk__in=unused.values("revision_id"), mtp_detected=True).values_list(
        "pk", flat=True
    )
