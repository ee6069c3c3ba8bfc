"""Who moves a public figure (docs/fleet.md, "Whose reports make a public figure"; issue 48).

The every-node cells, which every public figure is read from, count a report only when its node registered a
run of its revision (``registered_pairs``: a ``NodeRun`` whose package ref resolved to it, or whose own
identity named it), and at most MESHDASH_PUBLIC_REPORTS_PER_NODE_DAY of one node's reports of one revision a
day (the day the report is plotted in), the first that arrived. Every report still goes to its node's own
cells. A node that registers a run of a revision it already reported on has those reports added to the
every-node cells then (``adding.add_registered_reports``), under the same daily cap.

This module finds the registered pairs and each batch's room (``public_room``, as cells.PublicRoom counts
it); ``PUBLIC_COLUMNS`` is the same rule in the SQL rebuild (rebuild.py).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import UTC
from typing import Any

from django.conf import settings
from django.db.models import OuterRef, Q, Subquery, Sum
from django.db.models.expressions import RawSQL

from packages_app import compiled, report_time
from packages_app.models import NodeRollup, NodeRun, Package, Report, Revision, Rollup
from packages_app.rollups.cells import EPOCH, PublicRoom, public_day


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


def registered_nodes(revision_id: int, field: str) -> Q:
    """A filter of the rows whose ``field`` (a node id) names a node that registered a run of the revision
    (as ``registered_pairs``), for a read of per-node cells or raw reports that a public page shows (no
    query of its own). Three subqueries, one per way of registering, none of them correlated: the
    database reads each once from its index (migration 0033) and hashes it. One subquery with the three
    ways OR'd made it probe the node's runs once per row read (2,180 probes, 6.5 of the query's 9.8 ms,
    for the busiest revision at 10,000 nodes: BENCHMARKS.md, issue 43)."""
    registered = Q()
    for sql, params in _registered_subqueries():
        revision_params = compiled.bound(params, {_ANY_REVISION: revision_id})
        # The ORM's own SQL, compiled from querysets; the revision goes in as a bound parameter.
        registered |= Q(**{f"{field}__in": RawSQL(sql, revision_params)})  # noqa: S611
    return registered


def registered_nodes_sql(revision_id: int, column: str) -> tuple[str, list[Any]]:
    """``registered_nodes`` for a read written in SQL: the condition on ``column`` (a node id, its name
    quoted by the caller) and its parameters, the same three subqueries."""
    conditions, params = [], []
    for sql, subquery_params in _registered_subqueries():
        conditions.append(f"{column} IN ({sql})")
        params += compiled.bound(subquery_params, {_ANY_REVISION: revision_id})
    return "(" + " OR ".join(conditions) + ")", params


_ANY_REVISION = compiled.stand_ins(1)[0]  # the compiled subqueries' stand-in for the revision read


@functools.cache
def _registered_subqueries() -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """The three ways of registering as SQL, compiled once per process by the ORM from these querysets
    (for ``_ANY_REVISION``, each use putting its revision in its place): built and resolved for every
    read, the three querysets cost about 1.4 ms each time, twice a package page (its plans' cells and
    its recent reports)."""
    revision = Revision.objects.filter(pk=_ANY_REVISION).order_by()
    named = NodeRun.objects.filter(
        repo_id=Subquery(revision.values("package__repo_id")[:1]),
        commit_sha=Subquery(revision.values("commit_sha")[:1]),
    )
    ways = (
        NodeRun.objects.filter(revision_id=_ANY_REVISION),
        NodeRun.objects.filter(served_revision_id=_ANY_REVISION),
        named,
    )
    return tuple(runs.order_by().values("node_id").query.sql_with_params() for runs in ways)


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


# Per report row ``r``: whether its node registered a run of its revision, and its rank among that node's
# reports of that revision plotted the same day (by id: the first that arrived), as PublicRoom counts.
PUBLIC_COLUMNS = f"""
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


def public_parameters(revision_ids: list[int]) -> dict[str, Any]:
    """The parameters ``PUBLIC_COLUMNS`` and the rebuild's statements read."""
    return {
        "revisions": revision_ids,
        "epoch": EPOCH,
        "skew": report_time.CLOCK_SKEW_LIMIT,
        "replay": report_time.REPLAY_WINDOW,
        "cap": public_reports_per_node_day(),
    }
