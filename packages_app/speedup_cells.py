"""A revision's per-node total cells as the speedups read them (baselines.speedups): without their sketches,
of the nodes that registered a run of the revision (rollups/public_weight.py). The cells, and the ways they
ran, are each one query compiled once per process; the sketches of the sides a speedup shows are read apart,
in one ORM query (its list of ids differs each time).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from django.db.models import QuerySet

from packages_app import compiled
from packages_app.models import Rollup
from packages_app.rollups.public_weight import registered_nodes
from packages_app.stored_sketch import stored


class NodeCell(NamedTuple):
    """A per-node total cell of a revision, as a speedup reads it (without its sketch). A named tuple: the
    busiest revision has 2,180 at 10,000 nodes, and a frozen dataclass took about 5 us each to build."""

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
    """The revision's per-node total cells, without their sketches (one query, compiled once per process):
    the compare page read every node's sketch (1,123 cells of its 10M-report revision), where a speedup
    merges the sides it shows only (``read_sketches``)."""
    return list(map(NodeCell._make, compiled.rows(_node_cells_of, revision_id)))


def _node_cells_of(revision_id: int) -> QuerySet[Rollup, tuple[Any, ...]]:
    return _public_cells(revision_id).values_list(*NodeCell._fields)


def ran(revision_id: int) -> set[bool]:
    """The ways the cells ran: with MTP, without, both, or none (no cell). One query, from the natural key's
    index."""
    return {used for (used,) in compiled.rows(_ran_of, revision_id)}


def _ran_of(revision_id: int) -> QuerySet[Rollup, tuple[bool]]:
    return _public_cells(revision_id).values_list("mtp_used").distinct()


def _public_cells(revision_id: int) -> QuerySet[Rollup]:
    # Past ALL_NODES (an index range that skips the every-node cells), of the nodes that move the public
    # figures (rollups/public_weight.py).
    rows = Rollup.objects.filter(
        revision_id=revision_id, grain=Rollup.Grain.TOTAL, node_key__gt=Rollup.ALL_NODES
    )
    return rows.filter(registered_nodes(revision_id, "node_key")).order_by()


def read_sketches(cells: Iterable[NodeCell], texts: Texts) -> None:
    """Add to ``texts`` the sketches of the cells it lacks, in one query (none when it has them all)."""
    missing = sorted({c.id for c in cells} - texts.keys())
    if missing:
        found = Rollup.objects.filter(pk__in=missing).annotate(tps=stored("tps_sketch"))
        texts.update(found.values_list("pk", "tps"))


def decoded(cells: Iterable[NodeCell]) -> int:
    """The decode rates in the cells' sketches (a sketch's count is its cell's ``tps_n``)."""
    return sum(c.tps_n for c in cells)
