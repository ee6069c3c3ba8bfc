"""A revision's per-node cells as the speedups read them (baselines.speedups): one a node's stage split with
MTP used or not, every strategy and topology together (models.SplitRollup, kept on write by rollups/), without
their sketches, of the nodes that registered a run of the revision (rollups/public_weight.py). The cells, and
the ways they ran, are each one query compiled once per process; the sketches of the sides a speedup shows
are merged apart, in one query (``merged_sketches``).

Why SplitRollup and not Rollup's per-node total cells: a speedup pairs MTP on with MTP off per stage split
and node release, and adds up each side's cells (counts, and the sketches bin by bin), so the strategies
and topologies Rollup splits them by only multiply the rows read and the sketches merged. The catalog
seed's busiest revision with MTP: 240 rows where its per-node total cells are 720, and its MTP on/off pair
merges 80 sketches, not 240; its speedups took 7.5 to 7.9 ms against 12.1 to 12.4 reading the total cells
(medians of 100 calls, three alternating rounds; BENCHMARKS.md, issue 43).

Why the bins are added up in SQL on PostgreSQL: the busiest revision with MTP on the catalog seed showed
MTP on against MTP off over 120 total cells a side; reading their 240 sketches as text and merging them in
Python took 2.6 ms, adding each side's bins up where they are stored 1.9 ms (medians of 50 reads each, side
by side, the same cells; the ORM's building of the texts' query not counted). SQLite reads the texts and
merges them in Python (``stored_sketch.merged_stored``); the tests check both give the same sketches.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import QuerySet

from packages_app import compiled, sketch
from packages_app.models import SplitRollup
from packages_app.rollups.public_weight import registered_nodes
from packages_app.stored_sketch import merged_stored, stored


class NodeCell(NamedTuple):
    """A node's stage split with MTP used or not on a revision, as a speedup reads it (without its sketch). A
    named tuple: the busiest revision has 2,180 per-node total cells at 10,000 nodes, and a frozen dataclass
    took about 5 us each to build."""

    id: int
    node_key: int
    stage_splits: str
    mtp_used: bool
    reports: int
    accepted: int
    proposed: int
    tps_n: int


# A cell's decode sketch as its stored JSON text, by the cell's id: a side merges its cells' texts in one
# parse (stored_sketch.merged_stored), not a parse a node that served it (about a thousand at 10,000 nodes).
Texts = dict[int, str]


def node_cells(revision_id: int) -> list[NodeCell]:
    """The revision's per-node cells, without their sketches (one query, compiled once per process):
    the compare page read every node's sketch (1,123 cells of its 10M-report revision), where a speedup
    merges the sides it shows only (``read_sketches``)."""
    return list(map(NodeCell._make, compiled.rows(_node_cells_of, revision_id)))


def _node_cells_of(revision_id: int) -> QuerySet[SplitRollup, tuple[Any, ...]]:
    return _public_cells(revision_id).values_list(*NodeCell._fields)


def ran(revision_id: int) -> set[bool]:
    """The ways the cells ran: with MTP, without, both, or none (no cell). One query."""
    return {used for (used,) in compiled.rows(_ran_of, revision_id)}


def _ran_of(revision_id: int) -> QuerySet[SplitRollup, tuple[bool]]:
    return _public_cells(revision_id).values_list("mtp_used").distinct()


def _public_cells(revision_id: int) -> QuerySet[SplitRollup]:
    # Of the nodes that move the public figures (rollups/public_weight.py).
    rows = SplitRollup.objects.filter(revision_id=revision_id)
    return rows.filter(registered_nodes(revision_id, "node_key")).order_by()


def merged_sketches(sides: Sequence[Sequence[NodeCell]]) -> list[sketch.Sketch]:
    """Each side's decode sketch: its cells' sketches merged (an empty side: an empty sketch). One query
    for every side, none without a cell."""
    if not any(sides):
        return [{} for _ in sides]
    if connection.vendor == "postgresql":
        return _merged_in_sql(sides)
    texts = read_sketches(cell for side in sides for cell in side)
    return [merged_stored(texts[c.id] for c in side) if side else {} for side in sides]


def read_sketches(cells: Iterable[NodeCell]) -> Texts:
    """The cells' sketches as their stored JSON texts, by cell id (one query)."""
    ids = sorted({c.id for c in cells})
    found = SplitRollup.objects.filter(pk__in=ids).annotate(tps=stored("tps_sketch"))
    return dict(found.values_list("pk", "tps"))


def _merged_in_sql(sides: Sequence[Sequence[NodeCell]]) -> list[sketch.Sketch]:
    ids = [cell.id for side in sides for cell in side]
    numbers = [number for number, side in enumerate(sides) for _ in side]
    with connection.cursor() as cursor:
        cursor.execute(_merged_sql(), [ids, numbers])
        merged: list[sketch.Sketch] = [{} for _ in sides]
        for number, index, count in cursor.fetchall():
            merged[number][index] = count
    return merged


@functools.cache
def _merged_sql() -> str:
    """Each (cell, side) pair's bins, added up per side and bin: only the table's and columns' names are
    formatted in. A bin's count is a whole number the rollups wrote (rollups/cells.py)."""
    quote = connection.ops.quote_name
    return f"""
        SELECT s.side, b.bin::int, SUM(b.n::bigint)::bigint
        FROM unnest(%s::bigint[], %s::int[]) AS s (id, side)
        JOIN {quote(SplitRollup._meta.db_table)} AS r ON r.{quote("id")} = s.id
        CROSS JOIN LATERAL jsonb_each_text(r.{quote("tps_sketch")}) AS b (bin, n)
        GROUP BY s.side, b.bin
    """  # noqa: S608


def decoded(cells: Iterable[NodeCell]) -> int:
    """The decode rates in the cells' sketches (a sketch's count is its cell's ``tps_n``)."""
    return sum(c.tps_n for c in cells)
