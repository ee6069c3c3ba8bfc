"""Services that keep the report rollups (models.Rollup): added to as reports are stored, pruned, rebuilt.

Exactly once, without a task: the store paths (reports.store_report, reports.store_reports,
telemetry's span insert) and the paths that link stored reports to a revision call ``add_reports``
with the rows *they* inserted or linked, inside the transaction that inserted or linked them. Either
both the rows and their figures commit or neither does; a replay inserts nothing and adds nothing;
a worker killed mid-way rolls both back. The upsert adds to the stored cells in SQL (counts and sums
add, minimum and maximum compare, sketches add bin by bin), its rows sorted by key so that two
batches touching the same cells lock them in the same order (no deadlock).

Per report, cells of six grains: (node, hour), (node, day), (node, total) and the same for all nodes
(``node_key = 0``), which the pages read: a package page reads its revision's total cells and one
day (or hour) series, never the reports; the catalog reads total cells. Hour cells older than
MESHDASH_ROLLUP_HOURLY_DAYS are not written and are pruned (``prune_hourly``): the day cells hold
them already.

Who moves a public figure (docs/fleet.md, "Whose reports make a public figure"): the every-node cells,
which every public figure is read from, count a report only when its node registered a run of its
revision (``registered_pairs``: a ``NodeRun`` whose package ref resolved to it, or whose own identity
named it), and at most MESHDASH_PUBLIC_REPORTS_PER_NODE_DAY of one node's reports of one revision a
day (the day the report is plotted in), the first that arrived. Every report still goes to its node's
own cells. A node that registers a run of a revision it already reported on has those reports added to
the every-node cells then (``add_registered_reports``), under the same daily cap.

Beside them, per node, its hour and day cells with every strategy and topology together
(models.NodeRollup: reports, decode-rate sketch, reports per strategy), which the nodes pages read.
And the same transaction adds to models.Serving (per revision x node x topology x
split: reports, first and last arrival, last report showing MTP unused), derived from the batch's
total cells, so "which revisions did nodes run since T" is a comparison per Serving row, not a sum
over cells; and to models.LastServed (per revision: the newest of its every-node Serving rows' times),
so "did nodes run this revision since T" is one comparison.

Quantiles: packages_app.sketch, a fixed log-bucket histogram (DDSketch's mapping) written by this
module, not the ``ddsketch`` package and not PostgreSQL's percentile_cont, because: merging is
adding integer counts per bin, which SQL can do inside the upsert on both PostgreSQL and SQLite
(a DDSketch object or a t-digest would need a read-modify-write in Python, and t-digest merges
are not exact); the relative error bound is fixed (1 %) whatever the data; a report costs one bin
increment and a cell's sketch is a JSON object of a few tens of bins, and the same numbers come out
on SQLite, so medians are medians there too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connections, transaction
from django.db.models import Count, Exists, F, Max, OuterRef, Q, QuerySet, Subquery, Sum

from packages_app import report_metrics, report_time, sketch
from packages_app.models import (
    ROLLUP_KEY,
    LastServed,
    NodeRollup,
    NodeRun,
    Package,
    Report,
    Revision,
    Rollup,
    Serving,
)

# A report "shows MTP unused" unless the operator chose a strategy without MTP: then the package
# is not at fault, so such reports never raise the alert.
NON_MTP_CHOICES = ("disabled", "ngram-cache", "ngram-suffix")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # the one bucket of the total grain
# The sketched metrics, by their Rollup column prefix ("tps"), from the metrics table.
SKETCHED = report_metrics.sketched()
METRICS = tuple(m.rollup for m in SKETCHED)
# The Rollup counters the reports add up ("accepted", "proposed", "windows"), each from the first of
# its source columns a report has, from the metrics table; and the derived metrics' ratios of them.
SUMS = report_metrics.summed()
RATIOS = {m.name: m.ratio for m in SKETCHED if m.derived}
# The Report columns a rollup reads (the link paths fetch only these).
SOURCE_FIELDS = (
    "id",
    "revision_id",
    "node_id",
    "received_at",
    "observed_at",
    "stage_splits",
    "requested_strategy",
    "effective_strategy",
    "mtp_used",
    "source",
    *(m.name for m in SKETCHED if not m.derived),
    *(name for names in SUMS.values() for name in names),
    "topology_id",
)
UPSERT_ROWS = 200
REBUILD_CHUNK = 20_000

Key = tuple[int, str, int, datetime, str, str, str, bool, str]  # as models.ROLLUP_KEY


@dataclass
class Metric:
    """Count, sum, minimum, maximum and sketch of one figure over a cell's reports."""

    n: int = 0
    total: float = 0.0
    low: float | None = None
    high: float | None = None
    bins: sketch.Sketch = field(default_factory=dict)

    def add(self, value: float, index: int) -> None:
        """Add a value that falls in sketch bin ``index``."""
        self.n += 1
        self.total += value
        self.low = value if self.low is None or value < self.low else self.low
        self.high = value if self.high is None or value > self.high else self.high
        self.bins[index] = self.bins.get(index, 0) + 1


@dataclass
class Cell:
    """What one batch adds to one Rollup row."""

    first_at: datetime
    last_at: datetime
    reports: int = 0
    from_spans: int = 0
    unused: int = 0
    accepted: int = 0
    proposed: int = 0
    windows: int = 0
    moved: int = 0  # reports plotted when observed, more than the skew limit before they arrived
    refused: int = 0  # reports whose observed time was not believed: plotted when they arrived
    last_unused_at: datetime | None = None  # for models.Serving, not a Rollup column
    sole_strategy: str | None = None  # for models.Serving: the strategy key of its cells, "" for several
    metrics: dict[str, Metric] = field(default_factory=lambda: {name: Metric() for name in METRICS})


def shows_mtp_unused(mtp_used: bool, requested_strategy: str) -> bool:
    return not mtp_used and requested_strategy not in NON_MTP_CHOICES


def hourly_since(now: datetime | None = None) -> datetime:
    """Hour cells start at or after this time; older reports go to day and total cells only."""
    days = int(getattr(settings, "MESHDASH_ROLLUP_HOURLY_DAYS", 14))
    start = (now or datetime.now(UTC)) - timedelta(days=days)
    return start.replace(minute=0, second=0, microsecond=0)


# --- adding ------------------------------------------------------------------------------------


def add_reports(
    rows: Iterable[Report], *, using: str = "default", serving: ServingListener | None = None
) -> int:
    """Add stored reports to their rollups; call inside the transaction that stored them.

    Rows without a revision are skipped (``link_reports`` adds them once linked). Returns how many
    reports were added. ``serving`` sees what the batch adds to each Serving row before it is added, and
    returns what to do once it is, in the same transaction (judgements.serving_changing).
    """
    if not settings.MESHDASH_ROLLUP_ON_STORE:
        return 0
    rows = [row for row in rows if row.revision_id is not None]
    cells, added = cells_of(rows, hourly_since(), public_room(rows, using=using))
    if cells:
        # Inside the storing transaction, no savepoint of its own (two round trips a store): a
        # failure here fails the store.
        with transaction.atomic(using=using, savepoint=False):
            upsert(cells, using=using)
            upsert_node_rollups(node_rollups_of(cells), using=using)
            servings = servings_of(cells)
            then = serving(servings) if serving is not None else None
            upsert_serving(servings, using=using)
            upsert_last_served(servings, using=using)
            if then is not None:
                then()
    return added


# Told what a batch adds to each Serving row before it is added; returns what to do once it is.
ServingListener = Callable[[Mapping["ServingKey", "Cell"]], Callable[[], object]]


def add_report_ids(
    ids: Sequence[int], *, using: str = "default", serving: ServingListener | None = None
) -> int:
    """Add reports by id (the link paths): one read of the columns a rollup needs."""
    if not ids:
        return 0
    rows = Report.objects.using(using).filter(pk__in=ids).values_list(*SOURCE_FIELDS)
    return add_reports([_report(row) for row in rows], using=using, serving=serving)


def _report(values: tuple[object, ...]) -> Report:
    return Report(**dict(zip(SOURCE_FIELDS, values, strict=True)))


def link_reports(unlinked: Q, changes: dict[str, object], serving: ServingListener | None = None) -> int:
    """Give the reports matching ``unlinked`` (a filter that excludes linked ones) ``changes`` and
    roll up the ones that gain a revision, exactly once: their rows are locked first, so a second
    linker waits, then finds them linked already and skips them."""
    with transaction.atomic():
        ids = list(Report.objects.select_for_update().filter(unlinked).values_list("pk", flat=True))
        if not ids:
            return 0
        Report.objects.filter(pk__in=ids).update(**changes)
        add_report_ids(ids, serving=serving)
    return len(ids)


def cells_of(
    rows: Iterable[Report], hourly_from: datetime, room: PublicRoom, *, own: bool = True
) -> tuple[dict[Key, Cell], int]:
    """The cells the rows add to, and how many rows counted: each row to its node's cells (unless not
    ``own``) and to the every-node cells while ``room`` has room for it (taking that room)."""
    cells: dict[Key, Cell] = {}
    added = 0
    for row in rows:
        if row.revision_id is None:
            continue
        added += 1
        figures = Figures.of(row)
        nodes: tuple[int, ...] = (row.node_id,) if own else ()
        if room.take(row):
            nodes += (Rollup.ALL_NODES,)
        for key in _keys(row, hourly_from, nodes):
            cell = cells.get(key)
            if cell is None:
                cell = cells[key] = Cell(first_at=row.received_at, last_at=row.received_at)
            figures.add_to(cell)
    return cells, added


def _keys(row: Report, hourly_from: datetime, nodes: tuple[int, ...]) -> list[Key]:
    # Its bucket is when the node observed it, within the accepted skew (report_time); first_at and
    # last_at stay arrival times (Serving's recency, outliving_reports).
    at = _plotted(row).astimezone(UTC)
    hour = at.replace(minute=0, second=0, microsecond=0)
    buckets = [(Rollup.Grain.DAY.value, hour.replace(hour=0)), (Rollup.Grain.TOTAL.value, EPOCH)]
    if hour >= hourly_from:
        buckets.append((Rollup.Grain.HOUR.value, hour))
    rest = (
        row.stage_splits,
        row.requested_strategy,
        row.effective_strategy,
        bool(row.mtp_used),
        row.topology_id,
    )
    return [
        (int(row.revision_id or 0), grain, node, start, *rest) for grain, start in buckets for node in nodes
    ]


def _plotted(row: Report) -> datetime:
    observed = row.observed_at
    return row.received_at if observed is None else report_time.plotted_at(observed, row.received_at)


# --- who moves a public figure -------------------------------------------------------------------


def public_day(row: Report) -> datetime:
    """The day a report is plotted in (its day cell's start): the daily cap's unit."""
    return _plotted(row).astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass
class PublicRoom:
    """How many more reports of each (node, revision, day) the every-node cells take: the daily cap less
    what they already took, for pairs whose node registered a run of the revision; none for the rest."""

    registered: set[tuple[int, int]]
    cap: int
    taken: dict[tuple[int, int, datetime], int] = field(default_factory=dict)

    def take(self, row: Report) -> bool:
        if (row.node_id, row.revision_id) not in self.registered:
            return False
        day = (int(row.node_id), int(row.revision_id or 0), public_day(row))
        if self.taken.get(day, 0) >= self.cap:
            return False
        self.taken[day] = self.taken.get(day, 0) + 1
        return True


def public_reports_per_node_day() -> int:
    return int(settings.MESHDASH_PUBLIC_REPORTS_PER_NODE_DAY)


def registered_pairs(
    revision_ids: Iterable[int], node_ids: Iterable[int] | None = None, *, using: str = "default"
) -> set[tuple[int, int]]:
    """(node, revision) pairs, of these revisions (and nodes), whose node registered a run of the
    revision: its package ref resolved to it, its own identity named it (``served_revision``), or it
    named the revision's repo and commit before the revision was ingested. One query."""
    revisions = sorted(set(revision_ids))
    if not revisions:
        return set()
    named = Revision.objects.using(using).filter(
        pk__in=revisions, package__repo_id=OuterRef("repo_id"), commit_sha=OuterRef("commit_sha")
    )
    runs = NodeRun.objects.using(using).annotate(named=Subquery(named.values("pk")[:1]))
    runs = runs.filter(
        Q(revision_id__in=revisions) | Q(served_revision_id__in=revisions) | Q(named__isnull=False)
    )
    if node_ids is not None:
        runs = runs.filter(node_id__in=sorted(set(node_ids)))
    wanted = set(revisions)
    pairs: set[tuple[int, int]] = set()
    for node, *ran in runs.values_list("node_id", "revision_id", "served_revision_id", "named"):
        pairs.update((node, r) for r in ran if r in wanted)
    return pairs


def registered_node_ids(revision_id: int) -> QuerySet[NodeRun, Any]:
    """The nodes that registered a run of the revision (as ``registered_pairs``), as a subquery for a
    read of per-node cells or raw reports that a public page shows (no query of its own)."""
    named = Revision.objects.filter(
        pk=revision_id, package__repo_id=OuterRef("repo_id"), commit_sha=OuterRef("commit_sha")
    )
    ran = Q(revision_id=revision_id) | Q(served_revision_id=revision_id) | Q(Exists(named))
    return NodeRun.objects.filter(ran).values("node_id")


def public_room(rows: Sequence[Report], *, using: str = "default") -> PublicRoom:
    """The room of a batch about to be stored: its registered pairs, each day's count so far read from
    the node's own day cells (every report of a registered pair went public until the cap, so what
    went public that day is the smaller of the two). Two queries, none for a batch of no revision."""
    room = PublicRoom(
        registered_pairs({int(r.revision_id or 0) for r in rows}, {r.node_id for r in rows}, using=using),
        public_reports_per_node_day(),
    )
    days = {
        (r.node_id, r.revision_id, public_day(r))
        for r in rows
        if (r.node_id, r.revision_id) in room.registered
    }
    if days:
        counted = (
            NodeRollup.objects.using(using)
            .filter(
                grain=Rollup.Grain.DAY,
                node_key__in={d[0] for d in days},
                revision_id__in={d[1] for d in days},
                bucket_start__in={d[2] for d in days},
            )
            .values_list("node_key", "revision_id", "bucket_start")
            .annotate(n=Sum("reports"))
            .order_by()
        )
        for node, revision, day, n in counted:
            room.taken[(int(node), int(revision), day.astimezone(UTC))] = min(int(n), room.cap)
    return room


def add_registered_reports(node_id: int, revision_id: int) -> int:
    """A node registered its first run of a revision: the reports it stored for it before go to the
    every-node cells now (the first of each day up to the cap; they are in its own cells already).
    Call inside the registration's transaction, before the registration is saved."""
    if (node_id, revision_id) in registered_pairs([revision_id], [node_id]):
        return 0
    rows = Report.objects.filter(node_id=node_id, revision_id=revision_id).order_by("pk")
    reports = [_report(row) for row in rows.values_list(*SOURCE_FIELDS).iterator(REBUILD_CHUNK)]
    cells, _ = cells_of(
        reports,
        hourly_since(),
        PublicRoom({(node_id, revision_id)}, public_reports_per_node_day()),
        own=False,
    )
    if not cells:
        return 0
    upsert(cells)
    servings = servings_of(cells)
    upsert_serving(servings)
    upsert_last_served(servings)
    return sum(cell.reports for key, cell in cells.items() if key[1] == Rollup.Grain.TOTAL)


def _placement(row: Report) -> report_time.Placement:
    if row.observed_at is None:
        return report_time.Placement.ON_TIME
    return report_time.placement(row.observed_at, row.received_at)


@dataclass(frozen=True, slots=True)
class Figures:
    """What one report adds to each of its cells, worked out once (bins included) for all six."""

    at: datetime
    from_spans: int
    unused: int
    accepted: int
    proposed: int
    windows: int
    moved: int
    refused: int
    values: tuple[tuple[str, float, int] | None, ...]  # (metric, value, bin) per METRICS

    @classmethod
    def of(cls, row: Report) -> Figures:
        totals = {total: _first(*(getattr(row, name) for name in names)) for total, names in SUMS.items()}
        derived = {name: _ratio(totals, *ratio) for name, ratio in RATIOS.items()}
        values = [derived[m.name] if m.derived else getattr(row, m.name) for m in SKETCHED]
        where = _placement(row)
        return cls(
            at=row.received_at,
            from_spans=int(row.source == Report.Source.OTLP),
            unused=int(shows_mtp_unused(bool(row.mtp_used), row.requested_strategy)),
            accepted=totals["accepted"] or 0,
            proposed=totals["proposed"] or 0,
            windows=totals["windows"] or 0,
            moved=int(where is report_time.Placement.MOVED),
            refused=int(where is report_time.Placement.REFUSED),
            values=tuple(
                None if v is None else (name, v, sketch.bin_of(v))
                for name, v in zip(METRICS, values, strict=True)
            ),
        )

    def add_to(self, cell: Cell) -> None:
        cell.reports += 1
        cell.from_spans += self.from_spans
        cell.unused += self.unused
        cell.accepted += self.accepted
        cell.proposed += self.proposed
        cell.windows += self.windows
        cell.moved += self.moved
        cell.refused += self.refused
        cell.first_at = min(cell.first_at, self.at)
        cell.last_at = max(cell.last_at, self.at)
        if self.unused:
            cell.last_unused_at = _later(cell.last_unused_at, self.at)
        for value in self.values:
            if value is not None:
                cell.metrics[value[0]].add(value[1], value[2])


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    """The later of two times, either of which may be missing."""
    return b if a is None else a if b is None else max(a, b)


def _ratio(totals: dict[str, int | None], numerator: str, denominator: str) -> float | None:
    # As the SQL path's CASE: a missing numerator counts as 0; no denominator, no ratio.
    below = totals[denominator]
    return (totals[numerator] or 0) / below if below else None


def _first(*values: int | None) -> int | None:
    # As SQL's COALESCE: llama-server style nodes send draft_n*, mesh-llm sends speculative_*.
    return next((value for value in values if value is not None), None)


# --- the upsert ----------------------------------------------------------------------------------

KEY_COLUMNS = tuple(f"{name}_id" if name == "revision" else name for name in ROLLUP_KEY)
SUMMED = ("reports", "from_spans", "unused", *SUMS, "moved", "refused")
METRIC_COLUMNS = tuple(f"{m}_{part}" for m in METRICS for part in ("n", "sum", "min", "max", "sketch"))
COLUMNS = (*KEY_COLUMNS, *SUMMED, "first_at", "last_at", *METRIC_COLUMNS)


def upsert(cells: dict[Key, Cell], *, using: str = "default") -> None:
    """Add the cells to the stored rollups: one INSERT ... ON CONFLICT DO UPDATE per UPSERT_ROWS."""
    connection = connections[using]
    statement = _upsert_sql(connection.vendor, Rollup._meta.db_table)
    ordered = sorted(cells.items(), key=lambda item: item[0])
    _execute(connection, statement, [row_values(connection, key, cell) for key, cell in ordered])


@dataclass(frozen=True)
class Statement:
    sql: str  # with {rows} where the VALUES rows go
    row: str  # one row's placeholders


def _execute(connection: Any, statement: Statement, rows: list[list[Any]]) -> None:
    """Run an upsert UPSERT_ROWS rows at a time. Callers pass the rows sorted by key, so that two
    transactions touching the same rows lock them in the same order: no deadlock."""
    with connection.cursor() as cursor:
        for start in range(0, len(rows), UPSERT_ROWS):
            chunk = rows[start : start + UPSERT_ROWS]
            placeholders = ", ".join([statement.row] * len(chunk))
            cursor.execute(
                statement.sql.replace("{rows}", placeholders, 1), [v for row in chunk for v in row]
            )


def _upsert_sql(vendor: str, table: str) -> Statement:
    postgres = vendor == "postgresql"
    cast = "::jsonb" if postgres else ""
    row = "(" + ", ".join(f"%s{cast}" if c.endswith("_sketch") else "%s" for c in COLUMNS) + ")"
    updates = [f"{c} = {table}.{c} + excluded.{c}" for c in (*SUMMED, *_metric_parts("n", "sum"))]
    updates += [f"{c} = {_least(postgres, table, c)}" for c in ("first_at", *_metric_parts("min"))]
    updates += [f"{c} = {_greatest(postgres, table, c)}" for c in ("last_at", *_metric_parts("max"))]
    updates += [f"{c} = {_merge_bins(postgres, table, c)}" for c in _metric_parts("sketch")]
    # Only column names and constants are formatted in; every value is a parameter.
    sql = (
        f"INSERT INTO {table} ({', '.join(COLUMNS)}) VALUES {{rows}} "  # noqa: S608
        f"ON CONFLICT ({', '.join(KEY_COLUMNS)}) DO UPDATE SET {', '.join(updates)}"
    )
    return Statement(sql, row)


def _metric_parts(*parts: str) -> list[str]:
    return [f"{m}_{part}" for m in METRICS for part in parts]


def _least(postgres: bool, table: str, column: str) -> str:
    # LEAST skips NULLs; SQLite's two-argument MIN returns NULL if either is NULL.
    if postgres:
        return f"LEAST({table}.{column}, excluded.{column})"
    return f"COALESCE(MIN({table}.{column}, excluded.{column}), {table}.{column}, excluded.{column})"


def _greatest(postgres: bool, table: str, column: str) -> str:
    if postgres:
        return f"GREATEST({table}.{column}, excluded.{column})"
    return f"COALESCE(MAX({table}.{column}, excluded.{column}), {table}.{column}, excluded.{column})"


def _merge_bins(postgres: bool, table: str, column: str) -> str:
    """Bin-by-bin sum of two sketches stored as JSON objects ``{"bin": count}`` (names only, no values)."""
    if postgres:
        return (
            "(SELECT COALESCE(jsonb_object_agg(b.key, b.n), '{}'::jsonb) FROM "  # noqa: S608
            "(SELECT key, SUM(value::bigint) AS n FROM "
            f"(SELECT * FROM jsonb_each_text({table}.{column}) UNION ALL "
            f"SELECT * FROM jsonb_each_text(excluded.{column})) AS e GROUP BY key) AS b)"
        )
    return (
        "(SELECT COALESCE(json_group_object(b.key, b.n), '{}') FROM "  # noqa: S608
        "(SELECT key, SUM(value) AS n FROM "
        f"(SELECT key, value FROM json_each({table}.{column}) UNION ALL "
        f"SELECT key, value FROM json_each(excluded.{column})) GROUP BY key) AS b)"
    )


def row_values(connection: Any, key: Key, cell: Cell) -> list[Any]:
    ops = connection.ops
    revision, grain, node, start, splits, requested, strategy, mtp_used, topology = key
    values: list[Any] = [
        revision,
        grain,
        node,
        ops.adapt_datetimefield_value(start),
        splits,
        requested,
        strategy,
        mtp_used,
        topology,
        *(getattr(cell, name) for name in SUMMED),
        ops.adapt_datetimefield_value(cell.first_at),
        ops.adapt_datetimefield_value(cell.last_at),
    ]
    for name in METRICS:
        metric = cell.metrics[name]
        values += [metric.n, metric.total, metric.low, metric.high, _json(metric.bins)]
    return values


def _json(bins: sketch.Sketch) -> str:
    return "{" + ", ".join(f'"{index}": {count}' for index, count in sorted(bins.items())) + "}"


# --- a node's cells, every strategy together (models.NodeRollup) --------------------------------

NodeKey = tuple[int, str, int, datetime, str]  # revision, grain, node, bucket start, stage splits
NODE_ROLLUP_KEY = ("revision_id", "grain", "node_key", "bucket_start", "stage_splits")
NODE_ROLLUP_COLUMNS = (*NODE_ROLLUP_KEY, "reports", "tps_sketch", "strategies")


@dataclass
class NodeCell:
    """What one batch adds to one NodeRollup row."""

    reports: int = 0
    bins: sketch.Sketch = field(default_factory=dict)
    strategies: dict[str, int] = field(default_factory=dict)


def strategy_key(requested: str, effective: str, mtp_used: bool) -> str:
    """The key of a strategy in NodeRollup.strategies (as PostgreSQL's jsonb_build_array(...)::text)."""
    return json.dumps([requested, effective, bool(mtp_used)], ensure_ascii=False)


def node_rollups_of(cells: dict[Key, Cell]) -> dict[NodeKey, NodeCell]:
    """The NodeRollup rows the cells add to: their hour and day cells of one node, summed over
    strategies and topologies."""
    merged: dict[NodeKey, NodeCell] = {}
    for key, cell in cells.items():
        revision, grain, node, start, splits, requested, strategy, mtp_used, _topology = key
        if grain == Rollup.Grain.TOTAL or node == Rollup.ALL_NODES:
            continue
        found = merged.setdefault((revision, grain, node, start, splits), NodeCell())
        found.reports += cell.reports
        for index, count in cell.metrics["tps"].bins.items():
            found.bins[index] = found.bins.get(index, 0) + count
        pair = strategy_key(requested, strategy, mtp_used)
        found.strategies[pair] = found.strategies.get(pair, 0) + cell.reports
    return merged


def upsert_node_rollups(cells: dict[NodeKey, NodeCell], *, using: str = "default") -> None:
    """Add to the stored NodeRollup rows, in key order (after ``upsert``, as every writer: no deadlock)."""
    connection = connections[using]
    adapt = connection.ops.adapt_datetimefield_value
    rows = [
        [revision, grain, node, adapt(start), splits, c.reports, _json(c.bins), json.dumps(c.strategies)]
        for (revision, grain, node, start, splits), c in sorted(cells.items(), key=lambda item: item[0])
    ]
    _execute(connection, _node_rollup_upsert_sql(connection.vendor), rows)


def _node_rollup_upsert_sql(vendor: str) -> Statement:
    postgres, table = vendor == "postgresql", NodeRollup._meta.db_table
    cast = "::jsonb" if postgres else ""
    updates = [f"reports = {table}.reports + excluded.reports"]
    updates += [f"{c} = {_merge_bins(postgres, table, c)}" for c in ("tps_sketch", "strategies")]
    # Only column names are formatted in; every value is a parameter.
    sql = (
        f"INSERT INTO {table} ({', '.join(NODE_ROLLUP_COLUMNS)}) VALUES {{rows}} "  # noqa: S608
        f"ON CONFLICT ({', '.join(NODE_ROLLUP_KEY)}) DO UPDATE SET {', '.join(updates)}"
    )
    return Statement(sql, f"(%s, %s, %s, %s, %s, %s, %s{cast}, %s{cast})")


# --- who served what (models.Serving) ------------------------------------------------------------

ServingKey = tuple[int, int, str, str]  # revision, node_key, topology, stage splits
SERVING_KEY = ("revision_id", "node_key", "topology_id", "stage_splits")
SERVING_COLUMNS = (
    *SERVING_KEY,
    "reports",
    "unused",
    "first_at",
    "last_at",
    "last_unused_at",
    "sole_strategy",
)


def servings_of(cells: dict[Key, Cell]) -> dict[ServingKey, Cell]:
    """The Serving rows the cells add to: their total-grain cells (each report is in exactly one per
    node key) summed per revision x node x topology x split, with the strategy they all ran (or "")."""
    servings: dict[ServingKey, Cell] = {}
    for key, cell in cells.items():
        revision, grain, node, _start, splits, requested, strategy, mtp_used, topology = key
        if grain != Rollup.Grain.TOTAL:
            continue
        serving_key = (revision, node, topology, splits)
        serving = servings.get(serving_key)
        ran = strategy_key(requested, strategy, mtp_used)
        if serving is None:
            serving = servings[serving_key] = Cell(first_at=cell.first_at, last_at=cell.last_at)
            serving.sole_strategy = ran
        elif serving.sole_strategy != ran:
            serving.sole_strategy = ""
        serving.reports += cell.reports
        serving.unused += cell.unused
        serving.first_at = min(serving.first_at, cell.first_at)
        serving.last_at = max(serving.last_at, cell.last_at)
        serving.last_unused_at = _later(serving.last_unused_at, cell.last_unused_at)
    return servings


def upsert_serving(servings: dict[ServingKey, Cell], *, using: str = "default") -> None:
    """Add to the stored Serving rows, in key order (as ``upsert``, after it: no deadlock)."""
    connection = connections[using]
    adapt = connection.ops.adapt_datetimefield_value
    rows = [
        [
            *key,
            c.reports,
            c.unused,
            adapt(c.first_at),
            adapt(c.last_at),
            adapt(c.last_unused_at),
            c.sole_strategy or "",
        ]
        for key, c in sorted(servings.items(), key=lambda item: item[0])
    ]
    _execute(connection, _serving_upsert_sql(connection.vendor), rows)


def _serving_upsert_sql(vendor: str) -> Statement:
    postgres, table = vendor == "postgresql", Serving._meta.db_table
    updates = [f"{c} = {table}.{c} + excluded.{c}" for c in ("reports", "unused")]
    updates.append(f"first_at = {_least(postgres, table, 'first_at')}")
    updates += [f"{c} = {_greatest(postgres, table, c)}" for c in ("last_at", "last_unused_at")]
    # One strategy stays the row's only while every batch adds that one.
    updates.append(
        f"sole_strategy = CASE WHEN {table}.sole_strategy = excluded.sole_strategy"
        f" THEN {table}.sole_strategy ELSE '' END"
    )
    # Only column names are formatted in; every value is a parameter.
    sql = (
        f"INSERT INTO {table} ({', '.join(SERVING_COLUMNS)}) VALUES {{rows}} "  # noqa: S608
        f"ON CONFLICT ({', '.join(SERVING_KEY)}) DO UPDATE SET {', '.join(updates)}"
    )
    return Statement(sql, "(" + ", ".join(["%s"] * len(SERVING_COLUMNS)) + ")")


def upsert_last_served(servings: dict[ServingKey, Cell], *, using: str = "default") -> None:
    """Move each revision's LastServed row forward to its every-node Serving rows' newest times (after
    ``upsert_serving``, in revision order)."""
    newest: dict[int, Cell] = {}
    for (revision, node, _topology, _splits), cell in servings.items():
        if node != Rollup.ALL_NODES:
            continue
        found = newest.setdefault(revision, Cell(first_at=cell.first_at, last_at=cell.last_at))
        found.last_at = max(found.last_at, cell.last_at)
        found.last_unused_at = _later(found.last_unused_at, cell.last_unused_at)
    connection = connections[using]
    adapt = connection.ops.adapt_datetimefield_value
    rows = [[r, r, adapt(c.last_at), adapt(c.last_unused_at)] for r, c in sorted(newest.items())]
    _execute(connection, _last_served_upsert_sql(connection.vendor), rows)


def _last_served_upsert_sql(vendor: str) -> Statement:
    postgres, table = vendor == "postgresql", LastServed._meta.db_table
    updates = ", ".join(f"{c} = {_greatest(postgres, table, c)}" for c in ("last_at", "last_unused_at"))
    # Only table and column names are formatted in; every value is a parameter.
    sql = (
        f"INSERT INTO {table} (revision_id, package_id, last_at, last_unused_at) VALUES {{rows}} "  # noqa: S608
        f"ON CONFLICT (revision_id) DO UPDATE SET {updates}"
    )
    package = f"(SELECT package_id FROM {Revision._meta.db_table} WHERE id = %s)"  # noqa: S608
    return Statement(sql, f"(%s, {package}, %s, %s)")


def rebuild_last_served(revision_ids: Sequence[int]) -> None:
    """The revisions' LastServed rows from their every-node Serving rows (after those are rebuilt)."""
    LastServed.objects.filter(revision_id__in=revision_ids).delete()
    newest = (
        Serving.objects.filter(revision_id__in=revision_ids, node_key=Rollup.ALL_NODES)
        .values("revision_id", package_id=F("revision__package_id"))
        .annotate(last_at=Max("last_at"), last_unused_at=Max("last_unused_at"))
        .order_by()
    )
    LastServed.objects.bulk_create(LastServed(**row) for row in newest)


# --- upkeep --------------------------------------------------------------------------------------


def prune_hourly(now: datetime | None = None) -> int:
    """Delete hour cells past their window (their reports are in the day cells); returns how many."""
    since = hourly_since(now)
    NodeRollup.objects.filter(grain=Rollup.Grain.HOUR, bucket_start__lt=since).delete()
    deleted, _ = Rollup.objects.filter(grain=Rollup.Grain.HOUR, bucket_start__lt=since).delete()
    return deleted


def rebuild(revision_ids: Sequence[int] | None = None) -> int:
    """Recompute rollups from the raw reports (every revision, or the given ones); returns reports.

    A few revisions at a time, each group in one transaction that first takes the rollup table in
    EXCLUSIVE mode on PostgreSQL: a store that already upserted has committed before the lock is
    granted (its reports are read here), one that has not waits and adds its reports after this
    commit (they were not visible here). So nothing is counted twice or lost while reports keep
    arriving. On PostgreSQL a group is rebuilt by one SQL statement (``_rebuild_in_sql``) and holds
    at most REBUILD_GROUP_REPORTS reports (or one busier revision); on SQLite, one revision.
    """
    if revision_ids is None:
        revision_ids = list(Revision.objects.order_by("pk").values_list("pk", flat=True))
    total = 0
    for group in _rebuild_groups(revision_ids):
        total += _rebuild_group(group)
    return total


REBUILD_GROUP_REPORTS = 200_000


def _rebuild_groups(revision_ids: Sequence[int]) -> list[list[int]]:
    if connections["default"].vendor != "postgresql":
        return [[revision_id] for revision_id in revision_ids]
    counts = dict(
        Report.objects.filter(revision_id__in=revision_ids)
        .order_by()
        .values_list("revision_id")
        .annotate(n=Count("*"))
        .values_list("revision_id", "n")
    )
    groups: list[list[int]] = [[]]
    size = 0
    for revision_id in revision_ids:
        n = counts.get(revision_id, 0)
        if groups[-1] and size + n > REBUILD_GROUP_REPORTS:
            groups.append([])
            size = 0
        groups[-1].append(revision_id)
        size += n
    return [group for group in groups if group]


def outliving_reports(revision_ids: Sequence[int] | None = None) -> list[int]:
    """Revisions whose rollups count reports older than the oldest raw report they still have (the
    retention dropped them, or someone deleted them): rebuilding those would lose figures."""
    reports = Report.objects.filter(revision=OuterRef("revision"))
    oldest = reports.order_by("received_at").values("received_at")
    cells = Rollup.objects.filter(grain=Rollup.Grain.TOTAL, node_key=Rollup.ALL_NODES)
    if revision_ids is not None:
        cells = cells.filter(revision_id__in=revision_ids)
    cells = cells.annotate(oldest=Subquery(oldest[:1])).filter(Q(oldest=None) | Q(first_at__lt=F("oldest")))
    return sorted(set(cells.values_list("revision_id", flat=True)))


def _rebuild_group(revision_ids: list[int]) -> int:
    connection = connections["default"]
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f"LOCK TABLE {Rollup._meta.db_table} IN EXCLUSIVE MODE")
                # A group's sorts fit in memory; compiling the statement (JIT) costs more than it saves.
                cursor.execute("SET LOCAL work_mem = '256MB'")
                cursor.execute("SET LOCAL jit = off")
                _delete_rollups(revision_ids)
                _rebuild_serving_in_sql(cursor, revision_ids)
                rebuild_last_served(revision_ids)
                total = _rebuild_in_sql(cursor, revision_ids)
                _rebuild_node_rollups_in_sql(cursor, revision_ids)
                return total
        _delete_rollups(revision_ids)
        reports = (
            Report.objects.filter(revision_id__in=revision_ids).order_by("pk").values_list(*SOURCE_FIELDS)
        )
        rows = (
            Report(**dict(zip(SOURCE_FIELDS, row, strict=True)))
            for row in reports.values_list(*SOURCE_FIELDS).iterator(REBUILD_CHUNK)
        )
        room = PublicRoom(registered_pairs(revision_ids), public_reports_per_node_day())
        cells, total = cells_of(rows, hourly_since(), room)
        upsert(cells)
        upsert_node_rollups(node_rollups_of(cells))
        upsert_serving(servings_of(cells))
        rebuild_last_served(revision_ids)
    return total


def _delete_rollups(revision_ids: list[int]) -> None:
    for model in (Rollup, NodeRollup, Serving):
        model.objects.filter(revision_id__in=revision_ids).delete()


# --- rebuilding in SQL (PostgreSQL) --------------------------------------------------------------
# The same cells as cells_of + Figures, computed by PostgreSQL from the raw rows in one statement:
# at 10,000,000 reports the Python path takes tens of minutes, this a few. Bins as sketch.bin_of
# (ln and ceil on the same doubles); tests/test_rollups.py checks both paths give the same rows.

_KEY_SQL = (
    "revision_id",
    "grain",
    "node_key",
    "bucket_start",
    "stage_splits",
    "requested_strategy",
    "effective_strategy",
    "mtp_used",
    "topology_id",
)
# Rollup prefix -> the src column the SQL rebuild reads (a Report column, or a derived one src computes).
SQL_METRICS = {m.rollup: m.name for m in SKETCHED}


# Per report row ``r``: whether its node registered a run of its revision, and its rank among that node's
# reports of that revision plotted the same day (by id: the first that arrived), as PublicRoom counts.
_PUBLIC_COLUMNS = f"""
    EXISTS (
        SELECT 1 FROM {NodeRun._meta.db_table} AS nr WHERE nr.node_id = r.node_id
        AND (
            nr.revision_id = r.revision_id OR nr.served_revision_id = r.revision_id
            OR (nr.repo_id, nr.commit_sha) = (
                SELECT p.repo_id, rv.commit_sha FROM {Revision._meta.db_table} AS rv
                JOIN {Package._meta.db_table} AS p ON p.id = rv.package_id WHERE rv.id = r.revision_id
            )
        )
    ) AS registered,
    row_number() OVER (
        PARTITION BY r.node_id, r.revision_id, date_bin('1 day', CASE
            WHEN r.observed_at > r.received_at + %(skew)s OR r.observed_at < r.received_at - %(replay)s
            THEN r.received_at ELSE r.observed_at END, %(epoch)s)
        ORDER BY r.id
    ) AS day_rank"""  # noqa: S608  # a table name only


def _public_parameters(revision_ids: list[int]) -> dict[str, Any]:
    return {
        "revisions": revision_ids,
        "epoch": EPOCH,
        "skew": report_time.CLOCK_SKEW_LIMIT,
        "replay": report_time.REPLAY_WINDOW,
        "cap": public_reports_per_node_day(),
    }


def _rebuild_serving_in_sql(cursor: Any, revision_ids: list[int]) -> None:
    """The revisions' Serving rows from their reports (as servings_of over cells_of's cells)."""
    non_mtp = ", ".join(f"'{choice}'" for choice in NON_MTP_CHOICES)
    # Only column names and constants are formatted in; the revisions are a parameter.
    cursor.execute(
        f"""
        INSERT INTO {Serving._meta.db_table} ({", ".join(SERVING_COLUMNS)})
        SELECT {", ".join(SERVING_KEY)}, count(*), sum(unused), min(received_at),
               max(received_at), max(CASE WHEN unused = 1 THEN received_at END),
               CASE WHEN min(pair) = max(pair) THEN min(pair) ELSE '' END
        FROM (
            SELECT revision_id, CASE WHEN n.every THEN 0 ELSE node_id END AS node_key, topology_id,
                   stage_splits, received_at,
                   (NOT mtp_used AND requested_strategy NOT IN ({non_mtp}))::int AS unused,
                   jsonb_build_array(requested_strategy, effective_strategy, mtp_used)::text AS pair
            FROM (
                SELECT r.*, {_PUBLIC_COLUMNS} FROM {Report._meta.db_table} AS r
                WHERE revision_id = ANY(%(revisions)s)
            ) AS r
            CROSS JOIN (VALUES (false), (true)) AS n (every)
            WHERE NOT n.every OR (r.registered AND r.day_rank <= %(cap)s)
        ) AS r
        GROUP BY {", ".join(SERVING_KEY)}
        """,  # noqa: S608
        _public_parameters(revision_ids),
    )


def _rebuild_in_sql(cursor: Any, revision_ids: list[int]) -> int:
    keys = ", ".join(_KEY_SQL)
    coalesced = {total: f"COALESCE({', '.join(names)}, 0)" for total, names in SUMS.items()}
    counters = ", ".join(f"{expr} AS {total}" for total, expr in coalesced.items())
    ratios = ", ".join(
        f"CASE WHEN {coalesced[b]} <> 0 THEN {coalesced[a]}::float8 / {coalesced[b]} END AS {name}"
        for name, (a, b) in RATIOS.items()
    )
    summed = ", ".join(f"sum({total}) AS {total}" for total in SUMS)
    non_mtp = ", ".join(f"'{choice}'" for choice in NON_MTP_CHOICES)
    totals = ", ".join(
        f"count({column}), COALESCE(sum({column}), 0), min({column}), max({column})"
        for column in SQL_METRICS.values()
    )
    bins = " UNION ALL ".join(
        f"SELECT {keys}, '{metric}' AS metric, CASE WHEN {column} < %(min_positive)s THEN %(zero_bin)s"  # noqa: S608
        f" ELSE ceil(ln({column}) / %(log_gamma)s)::int END AS bin, count(*) AS n"
        f" FROM cells WHERE {column} IS NOT NULL GROUP BY {keys}, bin"
        for metric, column in SQL_METRICS.items()
    )
    sketches = ", ".join(
        f"COALESCE(jsonb_object_agg(bin::text, n) FILTER (WHERE metric = '{metric}'), '{{}}'::jsonb)"
        for metric in SQL_METRICS
    )
    metric_columns = ", ".join(
        f"t.{metric}_n, t.{metric}_sum, t.{metric}_min, t.{metric}_max, COALESCE(s.{metric}_sketch, '{{}}')"
        for metric in SQL_METRICS
    )
    total_names = ", ".join(f"{m}_n, {m}_sum, {m}_min, {m}_max" for m in SQL_METRICS)
    sketch_names = ", ".join(f"{m}_sketch" for m in SQL_METRICS)
    stored_metrics = ", ".join(m.name for m in SKETCHED if not m.derived)
    # Only column names and constants are formatted in; the revision and the numbers are parameters.
    sql = f"""
        WITH placed AS (
            SELECT r.*,
                   (observed_at > received_at + %(skew)s
                    OR observed_at < received_at - %(replay)s) AS refused_at,
                   {_PUBLIC_COLUMNS}
            FROM {Report._meta.db_table} AS r WHERE revision_id = ANY(%(revisions)s)
        ), src AS (
            SELECT revision_id, node_id, registered, day_rank, received_at, stage_splits, requested_strategy,
                   effective_strategy,
                   mtp_used, topology_id, (source = 'otlp')::int AS from_spans,
                   (NOT mtp_used AND requested_strategy NOT IN ({non_mtp}))::int AS unused,
                   {counters},
                   {stored_metrics},
                   {ratios},
                   (NOT refused_at AND observed_at < received_at - %(skew)s)::int AS moved,
                   refused_at::int AS refused,
                   CASE WHEN refused_at THEN received_at ELSE observed_at END AS plotted,
                   date_bin(
                       '1 hour', CASE WHEN refused_at THEN received_at ELSE observed_at END, %(epoch)s
                   ) AS hour
            FROM placed
        ), cells AS MATERIALIZED (
            SELECT src.*, g.grain, g.bucket_start, n.node_key FROM src
            CROSS JOIN LATERAL (VALUES
                ('day', date_bin('1 day', plotted, %(epoch)s)),
                ('total', %(epoch)s),
                ('hour', CASE WHEN hour >= %(hourly_from)s THEN hour END)
            ) AS g (grain, bucket_start)
            CROSS JOIN LATERAL (VALUES (node_id), (0)) AS n (node_key)
            WHERE g.bucket_start IS NOT NULL AND (n.node_key <> 0 OR (registered AND day_rank <= %(cap)s))
        ), totals AS (
            SELECT {keys}, count(*) AS reports, sum(from_spans) AS from_spans, sum(unused) AS unused,
                   {summed}, sum(moved) AS moved, sum(refused) AS refused,
                   min(received_at) AS first_at, max(received_at) AS last_at,
                   {totals}
            FROM cells GROUP BY {keys}
        ), binned AS ({bins}
        ), sketches AS (
            SELECT {keys}, {sketches} FROM binned GROUP BY {keys}
        )
        INSERT INTO {Rollup._meta.db_table} ({", ".join(COLUMNS)})
        SELECT {", ".join(f"t.{k}" for k in _KEY_SQL)}, {", ".join(f"t.{c}" for c in SUMMED)},
               t.first_at, t.last_at, {metric_columns}
        FROM totals AS t ({keys}, {", ".join(SUMMED)}, first_at, last_at, {total_names})
        LEFT JOIN sketches AS s ({keys}, {sketch_names}) USING ({keys})
    """  # noqa: S608
    cursor.execute(
        sql,
        {
            **_public_parameters(revision_ids),
            "hourly_from": hourly_since(),
            "min_positive": sketch.MIN_POSITIVE,
            "zero_bin": sketch.ZERO_BIN,
            "log_gamma": sketch.LOG_GAMMA,
        },
    )
    return int(Report.objects.filter(revision_id__in=revision_ids).count())


def _rebuild_node_rollups_in_sql(cursor: Any, revision_ids: list[int]) -> None:
    """The revisions' NodeRollup rows from their rebuilt Rollup cells (as node_rollups_of does)."""
    keys = ", ".join(NODE_ROLLUP_KEY)
    # Only column names and constants are formatted in; the revisions are a parameter.
    cursor.execute(
        f"""
        WITH cells AS (
            SELECT {keys}, reports, tps_sketch,
                   jsonb_build_array(requested_strategy, strategy, mtp_used)::text AS pair
            FROM {Rollup._meta.db_table}
            WHERE revision_id = ANY(%(revisions)s) AND node_key <> 0 AND grain <> 'total'
        ), pairs AS (
            SELECT {keys}, sum(n) AS reports, jsonb_object_agg(pair, n) AS strategies
            FROM (SELECT {keys}, pair, sum(reports) AS n FROM cells GROUP BY {keys}, pair) AS p
            GROUP BY {keys}
        ), bins AS (
            SELECT {keys}, jsonb_object_agg(bin, n) AS tps_sketch
            FROM (
                SELECT {keys}, b.key AS bin, sum(b.value::bigint) AS n
                FROM cells CROSS JOIN LATERAL jsonb_each_text(cells.tps_sketch) AS b
                GROUP BY {keys}, b.key
            ) AS s
            GROUP BY {keys}
        )
        INSERT INTO {NodeRollup._meta.db_table} ({", ".join(NODE_ROLLUP_COLUMNS)})
        SELECT {keys}, pairs.reports, COALESCE(bins.tps_sketch, '{{}}'::jsonb), pairs.strategies
        FROM pairs LEFT JOIN bins USING ({keys})
        """,  # noqa: S608
        {"revisions": revision_ids},
    )
