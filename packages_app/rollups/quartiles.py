"""The decode-rate quartiles kept on every models.RevisionRollup row beside its sketch (``tps_p25``,
``tps_median``, ``tps_p75``), written in the transaction that changes the sketch.

Why kept: the package page's timeline draws one point per bucket x strategy x stage split, and a point is
mostly one every-node cell. Its median and quartiles were ranked from the cell's stored sketch on every
request: parsing about 100 kB of sketches and ranking their bins took about 4 ms of the busiest revision's
page (357 points at 10,000 nodes), more than a tenth of it (issue 43). A point of several cells (two
requested strategies in one bucket, or the day cells of a week) still merges their sketches.

How: every writer of RevisionRollup adds to a sketch in SQL (rollups.upsert, rollups.rebuild) and has its
statement return each row's sketch as it now stands; ``store`` ranks those and writes the quartiles back
with one UPDATE a chunk (Django's ``bulk_update``), inside the same transaction, on rows that transaction
already holds. ``sketch.quartiles`` is what the timeline computed before, so a stored figure and a computed
one are the same number (tests/test_rollup_quartiles.py checks them against the sketches after every path).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from packages_app import sketch
from packages_app.models import RevisionRollup

COLUMNS = ("tps_p25", "tps_median", "tps_p75")
CHUNK = 200  # rows a statement (as the upserts)


def store(rows: Iterable[tuple[int, str | Mapping[str, int]]], *, using: str = "default") -> None:
    """Write the quartiles of these RevisionRollup rows, given as (id, sketch as stored: JSON text, or
    the parsed object SQLite's driver may hand back)."""
    kept = [
        RevisionRollup(pk=pk, **dict(zip(COLUMNS, sketch.quartiles(_bins(stored)), strict=True)))
        for pk, stored in rows
    ]
    if kept:
        RevisionRollup.objects.using(using).bulk_update(kept, COLUMNS, batch_size=CHUNK)


def _bins(stored: str | Mapping[str, int]) -> Mapping[str, int]:
    if isinstance(stored, str):
        bins: Mapping[str, int] = json.loads(stored)
        return bins
    return stored
