"""A revision's nodes on its package page and API: the busiest plans, how many nodes ran it, and the nodes its
unused-MTP alert counts and names.

Read from models.PlanRollup (one row a node's plan: node, stage split, requested and effective strategy;
rollups/ keeps them in the transaction that stores the reports), of the nodes that registered a run of the
revision (rollups/public_weight.py):

- the busiest PLAN_ROWS plans and the ties at the cut, from the index by reports, with their sketches (a
  cut where many plans tie, all of one report say, reads them all: their sketches are a bin or two);
- the count of the nodes: one number, counted over the natural key's index;
- when the alert shows, each alerted node's reports showing MTP unused: one pair a node.

Before (issue 43) every request read the revision's per-node total cells (2,180 for the busiest seeded
revision at 10,000 nodes) and grouped them into plans in Python. Names are read for the plans at the cut
and the alert's nodes at its cut only, in one query; which of the tied ones are shown is decided by name.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from django.db.models import Count, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce

from packages_app import compiled, sketch
from packages_app.models import Node, PlanRollup
from packages_app.rollups.public_weight import registered_nodes
from packages_app.stored_sketch import merged_bins, parsed_stored, stored

PLAN_ROWS = 50
ALERT_NAMES = 10  # the nodes the unused-MTP alert names (the most such reports first); the others are counted
# Requests whose outcome is known (docs/node-report.md section 4); "auto" and a package's own strategy
# names may resolve to anything, so they are never called unmet.
JUDGED_REQUESTS = ("mtp", "disabled", "ngram-cache", "ngram-suffix")


@dataclass(frozen=True)
class NodePlan:
    """What one node asked for on one stage split, what ran (every topology together), and how it went."""

    node: str
    stage_splits: str
    requested_strategy: str
    effective_strategy: str
    differs: bool
    reports: int
    from_spans: int
    tps: float | None
    last_seen: datetime | None
    unused: int = 0  # its reports showing MTP weights unused (what the node's advice reads)


@dataclass(frozen=True)
class Alert:
    message: str
    reports: int
    nodes: int
    # Of the nodes whose reports show it, the ALERT_NAMES with the most such reports (then by name; the page
    # links each): a revision served by thousands of nodes is not named node by node.
    names: tuple[str, ...] = ()

    @property
    def unnamed(self) -> int:
        """The nodes the alert counts and does not name."""
        return self.nodes - len(self.names)


def plan_honoured(requested: str, effective: str) -> bool:
    """False only when a request of a known kind ran as something else (e.g. ``mtp`` -> ``disabled``)."""
    if requested not in JUDGED_REQUESTS or not effective:
        return True
    if requested == "mtp":
        return effective.startswith("native-mtp")
    if requested == "disabled":
        return effective == "disabled"
    return effective.endswith(requested)  # ngram-cache, or native-mtp+ngram-cache


# --- the reads ---------------------------------------------------------------------------------------


class PlanRow(NamedTuple):
    """One plan at the cut, as read: its key (node, split, requested, effective), figures and sketch text."""

    node_key: int
    stage_splits: str
    requested_strategy: str
    strategy: str
    reports: int
    from_spans: int
    unused: int
    tps: str  # the decode sketch, as JSON text (stored_sketch)
    last_at: datetime


def busiest(revision_id: int) -> list[PlanRow]:
    """The plans that may be among the busiest PLAN_ROWS: every plan with at least the reports of the
    PLAN_ROWS-th (ties at the cut included; ``ranked`` decides among them by name). One query."""
    return list(map(PlanRow._make, compiled.rows(_busiest_of(PLAN_ROWS), revision_id)))


@functools.cache
def _busiest_of(rows: int) -> Callable[[int], QuerySet[PlanRollup, tuple[Any, ...]]]:
    """The read of the plans at a cut of ``rows`` (one build, so one compiled read, per cut)."""

    def read(revision_id: int) -> QuerySet[PlanRollup, tuple[Any, ...]]:
        plans = _public(revision_id)
        # The reports of the rows-th busiest plan (none when there are fewer: every plan is shown).
        cut = plans.order_by("-reports").values("reports")[rows - 1 : rows]
        at_cut = plans.filter(reports__gte=Coalesce(Subquery(cut), 0)).annotate(tps=stored("tps_sketch"))
        return at_cut.values_list(*PlanRow._fields)

    return read


def count_nodes(revision_id: int) -> int:
    """How many nodes reported running the revision (of those that move its public figures). One query."""
    counted = compiled.rows(_count_nodes_of, revision_id)
    return int(counted[0][0]) if counted else 0


def _count_nodes_of(revision_id: int) -> QuerySet[PlanRollup, tuple[int]]:
    nodes = _public(revision_id).values("revision_id").annotate(n=Count("node_key", distinct=True))
    return nodes.values_list("n")


def unused_by_node(revision_id: int) -> dict[int, int]:
    """Per node whose reports show MTP unused: how many (one pair a node, not one a plan). One query, read
    from the index of the plans that show it (``planrollup_unused``), not from every plan's row."""
    return dict(compiled.rows(_unused_of, revision_id))


def _unused_of(revision_id: int) -> QuerySet[PlanRollup, tuple[int, int]]:
    nodes = _public(revision_id).filter(unused__gt=0).values("node_key").annotate(n=Sum("unused"))
    return nodes.values_list("node_key", "n")


def _public(revision_id: int) -> QuerySet[PlanRollup]:
    # The nodes that move public figures, as every public read of per-node cells.
    plans = PlanRollup.objects.filter(revision_id=revision_id)
    return plans.filter(registered_nodes(revision_id, "node_key")).order_by()


def node_names(keys: Iterable[int]) -> dict[int, str]:
    """The names of these nodes (one query; none for no node). A node deleted since has none: ""."""
    wanted = sorted(set(keys))
    return dict(compiled.rows(_names_of, wanted)) if wanted else {}


def _names_of(node_ids: Sequence[int]) -> QuerySet[Node, tuple[int, str]]:
    return Node.objects.filter(pk__in=node_ids).values_list("pk", "name")


# --- shaped for the page ---------------------------------------------------------------------------------


def ranked(candidates: list[PlanRow], names: Mapping[int, str]) -> list[NodePlan]:
    """The busiest PLAN_ROWS plans (most reports first, then by node name, split and strategies), their
    sketches parsed in one call into the decoder."""
    named = [(-row.reports, names.get(row.node_key, ""), *row[1:4], row) for row in candidates]
    named.sort(key=lambda item: item[:5])
    shown = [item[-1] for item in named[:PLAN_ROWS]]
    parsed = parsed_stored(row.tps for row in shown)
    return [_plan(row, names.get(row.node_key, ""), bins) for row, bins in zip(shown, parsed, strict=True)]


def _plan(row: PlanRow, name: str, bins: dict[str, int]) -> NodePlan:
    return NodePlan(
        node=name,
        stage_splits=row.stage_splits,
        requested_strategy=row.requested_strategy,
        effective_strategy=row.strategy,
        differs=not plan_honoured(row.requested_strategy, row.strategy),
        reports=row.reports,
        from_spans=row.from_spans,
        tps=sketch.median(merged_bins([bins])),
        last_seen=row.last_at,
        unused=row.unused,
    )


def alert(unused_by_node: Mapping[int, int], unused: int, names: Mapping[int, str]) -> Alert | None:
    """The unused-MTP alert: ``unused`` reports, from the nodes of ``unused_by_node``, ALERT_NAMES of
    them named (``names`` holds at least those at its cut: ``alert_cut``)."""
    if not unused:
        return None
    count = len(unused_by_node)
    named = sorted((-n, names[key]) for key, n in alert_cut(unused_by_node).items() if names.get(key))
    message = (
        f"MTP weights present but never used in {unused} report{'s' if unused != 1 else ''} "
        f"from {count} node{'s' if count != 1 else ''}"
    )
    return Alert(
        message=message, reports=unused, nodes=count, names=tuple(name for _, name in named[:ALERT_NAMES])
    )


def alert_cut(counts: Mapping[int, int]) -> dict[int, int]:
    """The nodes that may be among the ALERT_NAMES with the most reports showing MTP unused: every node
    with at least the count of the ALERT_NAMES-th (ties at the cut included: which of them are named is
    decided by name, read for these only)."""
    cut = heapq.nlargest(ALERT_NAMES, counts.values())[-1] if len(counts) > ALERT_NAMES else 0
    return {key: n for key, n in counts.items() if n >= cut}
