"""The decode-rate quartiles of each timeline point, kept on every models.RevisionRollup row of the point
(``point_tps_p25``, ``point_tps_median``, ``point_tps_p75``), written in the transaction that changes one
of its sketches.

A point of the package page's timeline is a revision's bucket x stage split x effective strategy: the
RevisionRollup cells of one grain and bucket start, stage split and strategy, whatever strategy was
requested and whether MTP was used (about half the seeded busy revisions' cells share a point with
another). Its median and quartiles were ranked from its cells' stored sketches, merged, on every request:
parsing about 100 kB of sketches and ranking their bins took 5 to 8 ms of the busiest revisions' pages (337
to 357 day cells at 1,000 and 10,000 nodes), a sixth of the page (issue 43). Kept, the timeline reads three
numbers a point; only a week or a month, which gathers day cells, still merges sketches.

How: every writer of RevisionRollup takes the locks of the points it touches (``lock``), adds to the
sketches in SQL (rollups.upsert, rollups.rebuild), then calls ``store`` with those points (or
``store_revisions`` after a rebuild, which holds the rollups' table lock): one read of those
points' cells, their sketches merged and ranked (``sketch.quartiles``, what the timeline computed before,
so the kept figure and a computed one are the same number), and one UPDATE a chunk (Django's
``bulk_update``), inside the same transaction, on rows that transaction holds already.
tests/test_rollup_quartiles.py, and tests.rollup_checks wherever the rollup tests call it, check every
row against its point's sketches.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable
from datetime import UTC, datetime
from typing import Any

from django.db import connections
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast

from packages_app import sketch
from packages_app.models import RevisionRollup

COLUMNS = ("point_tps_p25", "point_tps_median", "point_tps_p75")
POINT = ("revision_id", "grain", "bucket_start", "stage_splits", "strategy")
CHUNK = 200  # rows a statement (as the upserts)

PointKey = tuple[int, str, datetime, str, str]  # revision, grain, bucket start, stage splits, strategy


def point_of(key: tuple[Any, ...]) -> PointKey:
    """The point of a RevisionRollup key (rollups.upsert.RevisionKey)."""
    revision, grain, start, splits, _requested, strategy, _mtp_used = key
    return revision, grain, start, splits, strategy


def lock(points: Collection[PointKey], *, using: str = "default") -> None:
    """Take the transaction's lock of each of these points, in one order (PostgreSQL's advisory locks;
    SQLite has one writer at a time). A writer holds its points' locks from before its upsert of their
    cells to its commit: ``store`` then reads every cell of a point, including those other writers
    insert, and writes quartiles on cells it did not upsert itself. Without the locks two writers of one
    point deadlocked on each other's cells, or each kept quartiles that missed the other's reports."""
    connection = connections[using]
    if connection.vendor != "postgresql" or not points:
        return
    keys = sorted({_lock_key(point) for point in points})
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_advisory_xact_lock(k)) FROM "
            "(SELECT k FROM unnest(%s::bigint[]) WITH ORDINALITY AS u(k, i) ORDER BY i) AS ordered",
            [keys],
        )


def _lock_key(point: PointKey) -> int:
    """A point's advisory lock key: the same in every process (two points sharing one only wait on each
    other)."""
    revision, grain, start, splits, strategy = point
    text = f"revision-rollup-point|{revision}|{grain}|{start.astimezone(UTC).isoformat()}|{splits}|{strategy}"
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True)


def store(points: Collection[PointKey], *, using: str = "default") -> None:
    """Keep the quartiles of these points on each of their cells (one read, one UPDATE a chunk)."""
    if not points:
        return
    cells = RevisionRollup.objects.using(using).filter(
        revision_id__in={p[0] for p in points},
        grain__in={p[1] for p in points},
        bucket_start__in={p[2] for p in points},
    )
    _store(cells, set(points), using)


def store_revisions(revision_ids: Iterable[int], *, using: str = "default") -> None:
    """Keep the quartiles of every point of these revisions (after a rebuild)."""
    _store(RevisionRollup.objects.using(using).filter(revision_id__in=list(revision_ids)), None, using)


def _store(cells: QuerySet[RevisionRollup], wanted: set[PointKey] | None, using: str) -> None:
    """The cells of the ``wanted`` points among ``cells`` (every point of them for None) get their
    point's quartiles."""
    points: dict[PointKey, list[tuple[int, str]]] = {}
    rows = cells.annotate(tps=Cast("tps_sketch", TextField())).values_list("pk", *POINT, "tps")
    for pk, *key, text in rows.iterator(chunk_size=2000):
        point = (key[0], key[1], key[2], key[3], key[4])
        if wanted is None or point in wanted:
            points.setdefault(point, []).append((pk, text))
    kept = []
    for point_cells in points.values():
        bins = sketch.merged(sketch.from_json(json.loads(text)) for _, text in point_cells)
        figures = dict(zip(COLUMNS, sketch.quartiles(bins), strict=True))
        kept += [RevisionRollup(pk=pk, **figures) for pk, _ in point_cells]
    if kept:
        RevisionRollup.objects.using(using).bulk_update(kept, COLUMNS, batch_size=CHUNK)
