"""The catalog's served revisions: which revisions nodes ran in the window, by how many nodes, broken first,
and the catalog's served-revision filters (from models.Serving and models.LastServed).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Subquery, Sum

from packages_app import compiled
from packages_app.audit.assessment import Headline
from packages_app.fleet.names import RevisionNames
from packages_app.fleet.window import window_cells
from packages_app.models import LastServed, Revision, RevisionRollup, Rollup, Serving


@dataclass(frozen=True)
class ServedRevision(RevisionNames):
    """A revision some node reported running inside the window."""

    package_id: int
    revision_id: int
    repo_id: str
    commit_sha: str
    verdict: str
    headline: str
    is_latest: bool
    nodes: int
    reports: int
    alert: bool
    sentence: str  # the revision's headline sentence
    action: str  # and its action

    @property
    def reason(self) -> str:
        if self.alert and not self.status.needs_action:
            return "Nodes report its MTP weights present but never used."
        return self.sentence


def served_revisions(
    package_ids: Iterable[int], since: datetime, latest: bool = True
) -> dict[int, list[ServedRevision]]:
    """Per package, the revisions nodes reported since ``since``, broken first (2 queries): which, by
    how many nodes and with which headline (``_served_rows``); the window's reports from the every-node
    cells (RevisionRollup).

    Without the packages' latest revisions unless ``latest``: the catalog shows only the others, and
    the latest are most of what nodes run (the alert filter's first page at 10,000 nodes: 69 revisions
    served, 22 of them not the latest; this took 6.0 ms with the latest, 3.6 without)."""
    ids = list(package_ids)
    rows = _served_rows(ids, since, latest) if ids else []
    reports = dict(
        RevisionRollup.objects.filter(window_cells(since), revision_id__in=[row["pk"] for row in rows])
        .values_list("revision_id")
        .annotate(n=Sum("reports"))
        .order_by()
    )
    result: dict[int, list[ServedRevision]] = {}
    for row in rows:
        served = _served(row, reports.get(row["pk"], 0))
        result.setdefault(served.package_id, []).append(served)
    for items in result.values():
        items.sort(key=lambda s: (not s.broken, s.status.rank, -s.nodes, s.commit_sha))
    return result


def _served_queryset(
    package_ids: list[int], since: datetime, latest: bool
) -> QuerySet[Revision, dict[str, Any]]:
    """The revisions of these packages that nodes reported since ``since`` (of the latest too if
    ``latest``), each counting its nodes' Serving rows in a subquery (from the serving_revision_recent
    index alone). Not each Serving row joined to its revision and grouped: PostgreSQL then read the
    revision's assessment for every row (a page of the catalog shape: 2,451 rows, 40 nodes each, for
    49 revisions, 6.6 ms against 1.6 ms)."""
    window = (
        Serving.objects.filter(revision_id=OuterRef("pk"), last_at__gte=since)
        .exclude(node_key=Rollup.ALL_NODES)
        .order_by()
    )
    nodes = window.values("revision_id").annotate(n=Count("node_key", distinct=True)).values("n")
    revisions = Revision.objects.filter(package_id__in=package_ids)
    if not latest:
        revisions = revisions.exclude(pk=F("package__latest_revision_id"))
    rows: QuerySet[Revision, dict[str, Any]] = (
        revisions.annotate(nodes=Subquery(nodes), unused=Exists(window.filter(last_unused_at__gte=since)))
        .filter(nodes__gt=0)
        .values(*_SERVED_COLUMNS)
        .order_by()
    )
    return rows


_SERVED_COLUMNS = (
    "pk",
    "package_id",
    "package__repo_id",
    "package__latest_revision_id",
    "commit_sha",
    "verdict",
    "headline",
    "mtp_detected",
    "assessment__headline",
    "nodes",
    "unused",
)


def _served_rows(package_ids: list[int], since: datetime, latest: bool) -> list[dict[str, Any]]:
    """``_served_queryset``'s rows, from its SQL compiled once per process for each number of packages
    (``_served_sql``), these packages and ``since`` bound in their stand-ins' places: built and compiled
    by the ORM for every read, with its three subqueries, it took 3.7 ms against 1.9 (the alert filter's
    first page at 10,000 nodes)."""
    sql, params = _served_sql(len(package_ids), latest)
    values = {**compiled.ids_bound(package_ids), compiled.db_time(compiled.ANY_TIME): compiled.db_time(since)}
    with connection.cursor() as cursor:
        cursor.execute(sql, compiled.bound(params, values))
        columns = [column[0] for column in cursor.description]
        rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    for row in rows:  # as the ORM reads a JSON key: the text its driver hands back, decoded
        if isinstance(row["assessment__headline"], str):
            row["assessment__headline"] = json.loads(row["assessment__headline"])
    return rows


@functools.lru_cache(maxsize=64)
def _served_sql(packages: int, latest: bool) -> tuple[str, tuple[Any, ...]]:
    """``_served_queryset`` as SQL and parameters, compiled by the ORM for stand-ins (packages_app.compiled):
    package ids no package has and a time."""
    queryset = _served_queryset(compiled.stand_ins(packages), compiled.ANY_TIME, latest)
    return queryset.query.sql_with_params()


def _served(row: Mapping[str, Any], reports: int) -> ServedRevision:
    headline = Headline.from_json(row["assessment__headline"])
    return ServedRevision(
        package_id=row["package_id"],
        revision_id=row["pk"],
        repo_id=row["package__repo_id"],
        commit_sha=row["commit_sha"],
        verdict=row["verdict"] or "",
        headline=row["headline"] or "",
        is_latest=row["pk"] == row["package__latest_revision_id"],
        nodes=row["nodes"],
        reports=reports,
        alert=bool(row["unused"]) and bool(row["mtp_detected"]),
        sentence=headline.sentence if headline else "",
        action=headline.action.text if headline else "",
    )


def unused_since(since: datetime) -> Q:
    """Serving rows whose nodes reported a revision's MTP weights unused since ``since``."""
    return Q(last_unused_at__gte=since, revision__mtp_detected=True)


def _served_packages_q(served: QuerySet[LastServed]) -> Q:
    """Packages with a revision among these (a subquery, not evaluated)."""
    return Q(id__in=served.values("package_id"))


def served_inconsistent_q(since: datetime, verdicts: Iterable[str]) -> Q:
    """Packages that nodes ran a revision of with one of these verdicts since ``since``."""
    return _served_packages_q(
        LastServed.objects.filter(last_at__gte=since, revision__verdict__in=list(verdicts))
    )


def served_headline_q(since: datetime, statuses: Iterable[str]) -> Q:
    """Packages that nodes ran a revision of with one of these headline statuses since ``since``."""
    return _served_packages_q(
        LastServed.objects.filter(last_at__gte=since, revision__headline__in=list(statuses))
    )


def served_alert_q(since: datetime) -> Q:
    """Packages whose nodes reported a revision's MTP weights unused since ``since``."""
    unused = LastServed.objects.filter(last_unused_at__gte=since, revision__mtp_detected=True)
    return _served_packages_q(unused)
