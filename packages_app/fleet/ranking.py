"""Which of each node's rows the nodes pages show: the rows likely to need action first, then the busiest,
ranked in SQL (node by node, from an index) or from every row of the window when those are few.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import (
    Case,
    F,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    TextField,
    Value,
    When,
)

from packages_app import compiled
from packages_app.fleet.runs import NodeIds
from packages_app.fleet.sql import rows_matching
from packages_app.models import Node, Revision, Serving
from packages_app.verdicts import NEEDS_ACTION, Status, improves, status_of

# Each status's rank (the vocabulary's), for ranking in SQL; an unknown or empty status ranks last.
HEADLINE_RANK = Case(
    *(When(revision__headline=s.value, then=Value(s.rank)) for s in Status),
    default=Value(Status.NOT_ASSESSED.rank),
)
LATEST_HEADLINE_RANK = Case(
    *(When(revision__package__latest_revision__headline=s.value, then=Value(s.rank)) for s in Status),
    default=Value(Status.NOT_ASSESSED.rank),
)


# What a node served, per (revision, split): the rows shown per node on /nodes/ and on its own page,
# those needing action first, then the busiest. The rest is counted, up to SERVED_COUNT_CAP.
NODES_PAGE_ROWS = 5
NODE_PAGE_ROWS = 100
NODES_PER_PAGE = 20
SERVED_COUNT_CAP = 200


class RevisionList(Subquery):
    """The revision ids a correlated, sliced subquery of Serving rows selects, comma-separated in one
    column: a per-row LIMIT (the top rows of each node) in one query on both databases, each node's
    rows read from an index in order until the limit, never all of them sorted (PostgreSQL and SQLite
    both let a subquery in FROM name the outer row)."""

    template = "(SELECT string_agg(CAST(top.revision_id AS text), ',') FROM (%(subquery)s) AS top)"
    output_field = TextField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        template = "(SELECT group_concat(top.revision_id) FROM (%(subquery)s) AS top)"
        return self.as_sql(compiler, connection, template=template, **extra)


class CappedCount(Subquery):
    """How many rows a correlated subquery sliced to ``[:cap + 1]`` selects: the count stops there."""

    template = "(SELECT COUNT(*) FROM (%(subquery)s) AS capped)"
    output_field = IntegerField()


def servings_in_window(since: datetime, show_private: bool) -> QuerySet[Serving]:
    """Each node's own Serving rows (never node_key 0) of the rows it served since ``since``."""
    servings = Serving.objects.filter(node_key=OuterRef("pk"), last_at__gte=since)
    return servings if show_private else servings.exclude(revision_id__in=_hidden_revisions())


def _hidden_revisions() -> QuerySet[Revision, Any]:
    """The revisions of packages not known to be public, as a subquery: PostgreSQL hashes it once and
    probes it per row, where joining each row to its revision and package (to count a node's rows in
    the window) took 0.75 ms a node."""
    return Revision.objects.exclude(package__private=False).values("pk")


def flagged_servings(servings: QuerySet[Serving], since: datetime) -> QuerySet[Serving]:
    """The rows likely to need action: a revision whose headline calls for action, one whose
    package's latest revision has a better headline (verdicts.improves), or MTP unused in the window
    (the advice itself is judged in Python for the rows shown, against the node's release)."""
    unused = Q(last_unused_at__gte=since, revision__mtp_detected=True)
    better = Q(latest_rank__gt=F("own_rank")) & ~Q(latest_rank=Status.NOT_ASSESSED.rank)  # verdicts.improves
    flagged = Q(revision__headline__in=NEEDS_ACTION) | better | unused
    return servings.annotate(own_rank=HEADLINE_RANK, latest_rank=LATEST_HEADLINE_RANK).filter(flagged)


@dataclass(frozen=True)
class Tops:
    """Per node: the revisions of its busiest Serving rows and of its busiest flagged ones (at most the
    limit each), and how many rows it served in the window (counted up to SERVED_COUNT_CAP + 1)."""

    revisions: dict[int, set[int]]
    served: dict[int, int]


_BUSIEST = ("-reports", "-revision_id", "stage_splits", "topology_id")


def top_revisions(node_ids: NodeIds, since: datetime, show_private: bool, limit: int) -> Tops:
    """Each node's candidate revisions (one query): of its busiest rows over their life, and of its
    busiest flagged rows. For a list of ids (a page's nodes), compiled once per shape (``compiled.rows``):
    built by the ORM on each read, with its rank cases, it took 13.2 ms for the catalog seed's /nodes/,
    compiled 6.1; a query of ids (judging every node) is built once a call."""
    if isinstance(node_ids, list) and not node_ids:
        return Tops({}, {})
    read = _tops_of(limit)
    if isinstance(node_ids, list):
        rows = compiled.rows(read, node_ids, since, show_private)
    else:
        rows = list(read(node_ids, since, show_private))
    revisions: dict[int, set[int]] = {}
    served: dict[int, int] = {}
    for node_id, busiest, flagged, count in rows:
        revisions[node_id] = {int(i) for text in (busiest, flagged) if text for i in str(text).split(",")}
        served[node_id] = int(count or 0)
    return Tops(revisions, served)


@functools.cache
def _tops_of(limit: int) -> Callable[[NodeIds, datetime, bool], QuerySet[Node, tuple[Any, ...]]]:
    """The read of ``top_revisions`` at ``limit`` rows a node (one build, so one compiled read, per limit:
    the limit is SQL text, not a parameter)."""

    def read(node_ids: NodeIds, since: datetime, show_private: bool) -> QuerySet[Node, tuple[Any, ...]]:
        mine = servings_in_window(since, show_private)
        return Node.objects.filter(pk__in=node_ids).values_list(
            "pk",
            RevisionList(mine.order_by(*_BUSIEST).values("revision_id")[:limit]),
            RevisionList(flagged_servings(mine, since).order_by(*_BUSIEST).values("revision_id")[:limit]),
            CappedCount(mine.order_by().values("pk")[: SERVED_COUNT_CAP + 1]),
        )

    return read


_WINDOW_ROW = (
    "node_key",
    "revision_id",
    "stage_splits",
    "topology_id",
    "reports",
    "first_at",
    "last_at",
    "last_unused_at",
    "revision__package__latest_revision_id",
    "revision__package__latest_revision__headline",
    "revision__headline",
    "revision__mtp_detected",
    "sole_strategy",
)


def few_window_rows(
    ids: NodeIds, since: datetime, show_private: bool, cap: int
) -> list[dict[str, Any]] | None:
    """The nodes' Serving rows in the window with what ranking them reads, when there are at most ``cap``
    (the rows a page shows of these nodes; two queries, the first counting at most ``cap + 1``); else
    None (one query). A fleet of a thousand nodes each running a few revisions has fewer rows in the
    window than the per-node queries of ``top_revisions`` and ``shown_groups`` cost (about 40 ms at 1,000
    nodes); a few nodes serving thousands each have many more, and there those read each node's
    busiest rows only. The count takes in the rows of private packages too: never fewer than shown. For a
    list of ids (a page's nodes) both reads are compiled once per shape (``compiled.rows``): built by the
    ORM, the count took 1.4 ms of its 1.7 on the catalog seed's /nodes/."""
    if isinstance(ids, list):
        if not ids:
            return []
        if len(compiled.rows(_counted_of(cap), ids, since)) > cap:  # from the index alone
            return None
        return compiled.rows(_window_read, ids, since, show_private)
    if _window_rows(ids, since).values("pk")[: cap + 1].count() > cap:
        return None
    return list(_window_read(ids, since, show_private))


def _window_rows(ids: NodeIds | Sequence[int], since: datetime) -> QuerySet[Serving]:
    return Serving.objects.filter(node_key__in=ids, last_at__gte=since).order_by()


@functools.cache
def _counted_of(cap: int) -> Callable[[Sequence[int], datetime], QuerySet[Any, Any]]:
    """The read of at most ``cap + 1`` of the nodes' rows in the window (one build per cap: SQL text)."""

    def read(ids: Sequence[int], since: datetime) -> QuerySet[Any, Any]:
        counted: QuerySet[Any, Any] = _window_rows(ids, since).values_list("pk")[: cap + 1]
        return counted

    return read


def _window_read(ids: NodeIds | Sequence[int], since: datetime, show_private: bool) -> QuerySet[Any, Any]:
    """``few_window_rows``' rows: the nodes' rows in the window, with what ranking them reads."""
    rows = _window_rows(ids, since)
    if not show_private:
        rows = rows.filter(revision__package__private=False)
    read: QuerySet[Any, Any] = rows.values(*_WINDOW_ROW)
    return read


def tops_of_window(window: list[dict[str, Any]], since: datetime, limit: int) -> Tops:
    """``top_revisions`` from every row of the window (``few_window_rows``): the same busiest and flagged
    rows' revisions, by the same order, and each node's count of rows."""
    by_node: dict[int, list[dict[str, Any]]] = {}
    for row in window:
        by_node.setdefault(row["node_key"], []).append(row)
    revisions: dict[int, set[int]] = {}
    served: dict[int, int] = {}
    for node, rows in by_node.items():
        rows.sort(key=lambda r: (-r["reports"], -r["revision_id"], r["stage_splits"], r["topology_id"]))
        flagged = [r for r in rows if _likely_stale({**r, "unused_recently": _recently_unused(r, since)})]
        revisions[node] = {r["revision_id"] for r in rows[:limit] + flagged[:limit]}
        served[node] = min(len(rows), SERVED_COUNT_CAP + 1)
    return Tops(revisions, served)


def _recently_unused(row: Mapping[str, Any], since: datetime) -> int:
    """1 when the row's last report showing MTP unused is in the window (``_ranked_groups``' column)."""
    return int(row["last_unused_at"] is not None and row["last_unused_at"] >= since)


def shown_groups(
    since: datetime, show_private: bool, tops: Tops, limit: int, window: list[dict[str, Any]] | None = None
) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """The (node, revision, split) groups of each node's candidate revisions, added up over their
    topologies, ``limit`` a node at most, flagged first then the busiest (one query, or none from the
    ``window``'s rows), and how many more each node served."""
    pairs = sorted((node, revision) for node, found in tops.revisions.items() for revision in found)
    if not pairs:
        return [], {}
    if window is not None:
        groups = _groups_of(window, since, set(pairs))
    else:
        groups = _ranked_groups([r for _n, r in pairs], [n for n, _r in pairs], since, show_private)
    by_node: dict[int, list[dict[str, Any]]] = {}
    for group in groups:
        by_node.setdefault(group["node_key"], []).append(group)
    shown: list[dict[str, Any]] = []
    hidden: dict[int, int] = {}
    for node, groups in by_node.items():
        groups.sort(key=lambda g: (-g["stale"], -g["reports_n"], -g["revision_id"], g["stage_splits"]))
        shown += groups[:limit]
        hidden[node] = max(0, min(tops.served.get(node, 0), SERVED_COUNT_CAP) - min(len(groups), limit))
    return shown, hidden


def _ranked_groups(
    revision_ids: list[int], node_ids: list[int], since: datetime, show_private: bool
) -> list[dict[str, Any]]:
    """Per (node, revision, split) of these (revision, node) pairs, its Serving rows (one a topology)
    added up, flagged (``stale``) as likely to need action by ``flagged_servings``' conditions, judged
    here from the values read (one query, compiled once per number of pairs: built by the ORM on each
    read it took 4.8 ms against 3.2 for the 60 pairs of the catalog seed's /nodes/)."""
    rows = compiled.rows(_groups_read, revision_ids, node_ids, since, show_private)
    return [{**row, "stale": int(_likely_stale(row)), "sole_strategy": _one_of(row)} for row in rows]


def _groups_read(
    revision_ids: Sequence[int], node_ids: Sequence[int], since: datetime, show_private: bool
) -> QuerySet[Any, Any]:
    """``_ranked_groups``' read: the pairs' Serving rows in the window, grouped."""
    pairs = list(zip(revision_ids, node_ids, strict=True))
    servings = Serving.objects.filter(
        pk__in=rows_matching(Serving, ("revision_id", "node_key"), pairs), last_at__gte=since
    )
    if not show_private:
        servings = servings.filter(revision__package__private=False)
    rows: QuerySet[Any, Any] = (
        servings.values(
            "node_key",
            "revision_id",
            "stage_splits",
            "revision__package__latest_revision_id",
            "revision__package__latest_revision__headline",
            "revision__headline",
            "revision__mtp_detected",
        )
        .annotate(
            reports_n=Sum("reports"),
            last_at_max=Max("last_at"),
            first_at_min=Min("first_at"),
            unused_recently=Max(Case(When(last_unused_at__gte=since, then=Value(1)), default=Value(0))),
            sole_low=Min("sole_strategy"),
            sole_high=Max("sole_strategy"),
        )
        .order_by()
    )
    return rows


def _one_of(row: Mapping[str, Any]) -> str:
    """The strategy a group's Serving rows all ran, or "" (``Serving.sole_strategy``)."""
    low, high = row["sole_low"], row["sole_high"]
    return str(low) if low == high else ""


def _groups_of(
    window: list[dict[str, Any]], since: datetime, pairs: set[tuple[int, int]]
) -> list[dict[str, Any]]:
    """``_ranked_groups`` of the window's rows (``few_window_rows``) of these (node, revision) pairs."""
    groups: dict[tuple[int, int, str], dict[str, Any]] = {}
    for row in window:
        if (row["node_key"], row["revision_id"]) not in pairs:
            continue
        key = (row["node_key"], row["revision_id"], row["stage_splits"])
        unused = _recently_unused(row, since)
        group = groups.get(key)
        if group is None:
            groups[key] = {
                **{name: row[name] for name in _WINDOW_ROW[:3] + _WINDOW_ROW[8:]},
                "reports_n": row["reports"],
                "last_at_max": row["last_at"],
                "first_at_min": row["first_at"],
                "unused_recently": unused,
            }
            continue
        group["reports_n"] += row["reports"]
        group["last_at_max"] = max(group["last_at_max"], row["last_at"])
        group["first_at_min"] = min(group["first_at_min"], row["first_at"])
        group["unused_recently"] = max(group["unused_recently"], unused)
        if group["sole_strategy"] != row["sole_strategy"]:
            group["sole_strategy"] = ""
    return [{**group, "stale": int(_likely_stale(group))} for group in groups.values()]


def _likely_stale(row: Mapping[str, Any]) -> bool:
    own, latest = (
        status_of(row["revision__headline"]),
        status_of(row["revision__package__latest_revision__headline"]),
    )
    unused = bool(row["unused_recently"]) and bool(row["revision__mtp_detected"])
    return own.value in NEEDS_ACTION or improves(latest, own) or unused
