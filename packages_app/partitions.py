"""The raw reports' months: partitions created ahead, and old months dropped past the retention.

On PostgreSQL, ``packages_app_report`` is ``PARTITION BY RANGE (received_at)`` (migration 0009),
one partition per month named ``packages_app_report_pYYYY_MM``, plus a DEFAULT partition that
catches a month nobody created yet, so a store never fails for want of a partition. Beat runs
``maintain`` daily: it creates this month and the next MONTHS_AHEAD (moving any row the default
partition caught into its month's partition), then drops whole months older than
MESHDASH_REPORT_RETENTION_MONTHS (0 keeps every report).

Dropping a month loses nothing the pages show: a report's rollup cells are written in the
transaction that stores or links it, and received_at is the server's clock, so a month's cells are
final once the month is over. What a dropped month does lose: its raw rows (the "recent reports"
table and the CSV export), reports never linked to a revision (their package was never ingested),
the ability to ``rebuild_rollups`` over it, and the report keys that make replays of its reports
no-ops (a node replaying a report older than the retention would be counted again).

SQLite keeps one table; there the retention deletes the old rows instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings
from django.db import connection, transaction

from packages_app.models import Report, ReportKey

TABLE = Report._meta.db_table
DEFAULT = f"{TABLE}_default"
MONTHS_AHEAD = 2
_MONTHLY = re.compile(rf"^{TABLE}_p(\d{{4}})_(\d{{2}})$")


def month_start(at: datetime, months: int = 0) -> datetime:
    """The first instant (UTC) of ``at``'s month, moved by ``months``."""
    at = at.astimezone(UTC)
    index = at.year * 12 + at.month - 1 + months
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


def partition_name(month: datetime) -> str:
    return f"{TABLE}_p{month:%Y_%m}"


def retention_horizon(now: datetime | None = None) -> datetime | None:
    """Reports received before this are dropped; None when the retention is off."""
    months = int(settings.MESHDASH_REPORT_RETENTION_MONTHS)
    if months <= 0:
        return None
    return month_start(now or datetime.now(UTC), -months)


def is_partitioned() -> bool:
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_partitioned_table WHERE partrelid = %s::regclass", [TABLE])
        return cursor.fetchone() is not None


@dataclass(frozen=True)
class Partition:
    name: str
    month: datetime | None  # None: the DEFAULT partition
    rows: int  # the planner's estimate (pg_class.reltuples), 0 when never analysed


def monthly_partitions() -> list[Partition]:
    """The report table's partitions, oldest month first, the default partition last."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, greatest(c.reltuples, 0)::bigint FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
            [TABLE],
        )
        found = cursor.fetchall()
    parts = []
    for name, rows in found:
        match = _MONTHLY.match(name)
        month = datetime(int(match[1]), int(match[2]), 1, tzinfo=UTC) if match else None
        parts.append(Partition(name, month, rows))
    return sorted(parts, key=lambda p: (p.month is None, p.month or datetime.min.replace(tzinfo=UTC)))


@dataclass
class Upkeep:
    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    reports_deleted: int = 0  # rows deleted one by one: SQLite, or old rows the default partition held
    keys_deleted: int = 0


def maintain(now: datetime | None = None) -> Upkeep:
    """Create the coming months' partitions and drop the months past the retention. Idempotent."""
    now = now or datetime.now(UTC)
    upkeep = Upkeep()
    if is_partitioned():
        upkeep.created = create_months(now, month_start(now, MONTHS_AHEAD))
    horizon = retention_horizon(now)
    if horizon is not None:
        drop_before(horizon, upkeep)
    return upkeep


def create_months(first: datetime, last: datetime) -> list[str]:
    """Create the partitions missing for the months from ``first``'s to ``last``'s; their names."""
    existing = {part.month for part in monthly_partitions()}
    created = []
    month = month_start(first)
    while month <= last:
        if month not in existing:
            create_partition(month)
            created.append(partition_name(month))
        month = month_start(month, 1)
    return created


def create_partition(month: datetime) -> None:
    """Create one month's partition, first moving the rows the default partition holds for it.

    Attaching a range that the default partition has rows in would fail, so the rows move in the
    same transaction, with the default partition locked against new rows until the commit.
    """
    name, start, end = partition_name(month), month_start(month), month_start(month, 1)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {DEFAULT} IN SHARE ROW EXCLUSIVE MODE")
        cursor.execute(f"CREATE TABLE {name} (LIKE {TABLE} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
        cursor.execute(
            f"WITH moved AS (DELETE FROM {DEFAULT} WHERE received_at >= %s AND received_at < %s"  # noqa: S608
            f" RETURNING *) INSERT INTO {name} SELECT * FROM moved",
            [start, end],
        )
        cursor.execute(
            f"ALTER TABLE {TABLE} ATTACH PARTITION {name} FOR VALUES FROM (%s) TO (%s)", [start, end]
        )


def drop_before(horizon: datetime, upkeep: Upkeep) -> None:
    """Drop the reports received before ``horizon`` (a month start) and the keys only they used."""
    with transaction.atomic():
        if is_partitioned():
            old = [
                p for p in monthly_partitions() if p.month is not None and month_start(p.month, 1) <= horizon
            ]
            with connection.cursor() as cursor:
                if old:
                    # Deferred foreign-key checks of rows written earlier in this transaction (a caller's)
                    # would forbid the DROP: run them now.
                    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
                for part in old:
                    cursor.execute(f"DROP TABLE {part.name}")
                    upkeep.dropped.append(part.name)
        upkeep.reports_deleted, _ = Report.objects.filter(received_at__lt=horizon).delete()
        # A key's id is its report's id, and ids grow with time: the keys below the oldest kept
        # report's id belong to dropped reports. (A key whose report is still uncommitted is not
        # visible here, so it is never deleted.)
        oldest_kept = Report.objects.order_by("id").values_list("id", flat=True).first()
        old_keys = ReportKey.objects.filter(received_at__lt=horizon)
        if oldest_kept is not None:
            old_keys = old_keys.filter(id__lt=oldest_kept)
        upkeep.keys_deleted, _ = old_keys.delete()
