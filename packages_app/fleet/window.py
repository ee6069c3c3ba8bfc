"""The window a fleet page reads (the last N days) and the rollup cells that add up to it, to the hour."""

from __future__ import annotations

import functools
import operator
from datetime import UTC, datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from packages_app.models import Rollup
from packages_app.rollups.cells import hourly_since

DEFAULT_WINDOW_DAYS = 7


def window_start(days: int = DEFAULT_WINDOW_DAYS, now: datetime | None = None) -> datetime:
    return (now or timezone.now()) - timedelta(days=days)


def window_cells(since: datetime) -> Q:
    """Rollup cells of the reports received since ``since``, to the hour: day cells of the whole days
    after since's day, and since's day by hour from since's hour. Past the hour cells' retention
    (MESHDASH_ROLLUP_HOURLY_DAYS) the window starts at since's day instead."""
    return functools.reduce(operator.or_, window_parts(since))


def window_parts(since: datetime) -> list[Q]:
    """``window_cells`` as conditions that are each one (grain, bucket_start) range: ANDed with a
    revision and a node, each is one range of the rollups' natural key, which PostgreSQL only scans
    as such when the OR is spelled out around them (else it reads every cell of the revision and
    node: 0.9 s instead of 0.05 s for /nodes/' 200 groups at 10M reports)."""
    parts = []
    for grain, start, end in _window_ranges(since):
        part = Q(grain=grain, bucket_start__gte=start)
        parts.append(part & Q(bucket_start__lt=end) if end else part)
    return parts


def _window_ranges(since: datetime) -> list[tuple[str, datetime, datetime | None]]:
    """(grain, from, before) of each part of the window: whole days by day, since's day by hour."""
    hour = since.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    day = hour.replace(hour=0)
    if hour < hourly_since():
        return [(Rollup.Grain.DAY.value, day, None)]
    next_day = day + timedelta(days=1)
    return [(Rollup.Grain.DAY.value, next_day, None), (Rollup.Grain.HOUR.value, hour, next_day)]


def window_terms(since: datetime) -> list[tuple[str, datetime, datetime, int]]:
    """(grain, from, before, sign) of the cells that add up to the window: whole days by day, and since's
    day by the hours from since's, or, where that is fewer cells, as its day cell less its hours before
    since's (a day cell holds exactly its hour cells' reports and bins while the hours are kept). So a
    page reads at most 12 hour cells a strategy instead of 24. Past the hour cells' retention, as
    ``_window_ranges``."""
    hour = since.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    day = hour.replace(hour=0)
    next_day = day + timedelta(days=1)
    kept = hourly_since()
    if hour < kept:
        return [(Rollup.Grain.DAY.value, day, _END_OF_TIME, 1)]
    if day >= kept and hour - day < next_day - hour:
        before = [(Rollup.Grain.HOUR.value, day, hour, -1)] if hour > day else []
        return [(Rollup.Grain.DAY.value, day, _END_OF_TIME, 1), *before]
    return [(Rollup.Grain.DAY.value, next_day, _END_OF_TIME, 1), (Rollup.Grain.HOUR.value, hour, next_day, 1)]


_END_OF_TIME = datetime(9999, 1, 1, tzinfo=UTC)
