"""The rollup cells one batch of reports adds to: their keys (six grains a report), and what each report adds
(counts, sums, minimum and maximum, and sketch bins of each sketched metric), worked out once a report.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings

from packages_app import report_metrics, report_time, sketch
from packages_app.models import Report, Rollup

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
# A cell's counters, as the Rollup columns that add them up.
SUMMED = ("reports", "from_spans", "unused", *SUMS, "moved", "refused")
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

    def merge(self, other: Metric) -> None:
        """Add another cell's figure (as the upsert adds a cell to a stored row)."""
        self.n += other.n
        self.total += other.total
        self.low = min((v for v in (self.low, other.low) if v is not None), default=None)
        self.high = max((v for v in (self.high, other.high) if v is not None), default=None)
        for index, count in other.bins.items():
            self.bins[index] = self.bins.get(index, 0) + count


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

    def merge(self, other: Cell) -> None:
        """Add another cell's Rollup figures to this one's (every-node cells of several topologies:
        rollups.upsert); what only Serving reads (last_unused_at, sole_strategy) is not added."""
        for name in SUMMED:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.first_at, self.last_at = min(self.first_at, other.first_at), max(self.last_at, other.last_at)
        for name, metric in other.metrics.items():
            self.metrics[name].merge(metric)


def shows_mtp_unused(mtp_used: bool, requested_strategy: str) -> bool:
    return not mtp_used and requested_strategy not in NON_MTP_CHOICES


def hourly_since(now: datetime | None = None) -> datetime:
    """Hour cells start at or after this time; older reports go to day and total cells only."""
    days = int(getattr(settings, "MESHDASH_ROLLUP_HOURLY_DAYS", 14))
    start = (now or datetime.now(UTC)) - timedelta(days=days)
    return start.replace(minute=0, second=0, microsecond=0)


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
        figures = ReportContribution.of(row)
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


def public_day(row: Report) -> datetime:
    """The day a report is plotted in (its day cell's start): the daily cap's unit (rollups.public_weight)."""
    return _plotted(row).astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass
class PublicRoom:
    """How many more reports of each (node, revision, day) the every-node cells take: the daily cap less
    what they already took, for pairs whose node registered a run of the revision; none for the rest
    (rollups.public_weight makes it)."""

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


def _placement(row: Report) -> report_time.Placement:
    if row.observed_at is None:
        return report_time.Placement.ON_TIME
    return report_time.placement(row.observed_at, row.received_at)


@dataclass(frozen=True, slots=True)
class ReportContribution:
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
    def of(cls, row: Report) -> ReportContribution:
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
            cell.last_unused_at = later(cell.last_unused_at, self.at)
        for value in self.values:
            if value is not None:
                cell.metrics[value[0]].add(value[1], value[2])


def later(a: datetime | None, b: datetime | None) -> datetime | None:
    """The later of two times, either of which may be missing."""
    return b if a is None else a if b is None else max(a, b)


def _ratio(totals: dict[str, int | None], numerator: str, denominator: str) -> float | None:
    # As the SQL path's CASE: a missing numerator counts as 0; no denominator, no ratio.
    below = totals[denominator]
    return (totals[numerator] or 0) / below if below else None


def _first(*values: int | None) -> int | None:
    # As SQL's COALESCE: llama-server style nodes send draft_n*, mesh-llm sends speculative_*.
    return next((value for value in values if value is not None), None)
