"""What the catalog counts besides its rows: the packages matching, per verdict and per status (the
facets, counted as their filters list them, with the broken revisions nodes ran in the window), and the
architectures the filter offers."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Case, Count, F, IntegerField, QuerySet, Value, When

from packages_app import compiled
from packages_app.catalog.filters import (
    ANY_INCONSISTENT,
    ANY_NEEDS_ACTION,
    NOT_AUDITED,
    CatalogFilters,
    as_arguments,
    carried,
    from_arguments,
    other_filters_q,
    wanted_statuses,
    wanted_verdicts,
)
from packages_app.compiled import ANY_TIME
from packages_app.fleet.sql import FENCE
from packages_app.fleet.window import window_start
from packages_app.models import LastServed, Package, Revision
from packages_app.verdicts import INCONSISTENT_VERDICTS, NEEDS_ACTION, STATUSES, VERDICTS, Status


@dataclass(frozen=True)
class CatalogCounts:
    """What two scans of the visible packages tell the catalog besides its rows."""

    matching: int  # packages the filters show (the paginator's count)
    facets: dict[str, int]  # per verdict (and "inconsistent"), given every filter but the verdict
    headlines: dict[str, int]  # per status (and "needs-action"), given every filter but the headline
    architectures: list[str]  # of every visible package's latest revision, for the filter's choices


@dataclass
class _Tally:
    """Counts packages per facet value the way the facet filters match them: by the latest revision's
    verdict and status, and by the broken revisions nodes ran in the window."""

    filters: CatalogFilters
    verdicts: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    matching: int = 0

    def add(self, verdict: str, status: str, served: set[tuple[str, str]], n: int = 1) -> None:
        verdicts = {verdict} | {v for v, _ in served if v in INCONSISTENT_VERDICTS}
        statuses = {status} | {h for _, h in served if h in NEEDS_ACTION}
        by_verdict = self._matches_verdict(verdict, verdicts)
        by_status = self._matches_status(status, statuses)
        if by_status:
            for v in verdicts:
                self.verdicts[v] = self.verdicts.get(v, 0) + n
            if verdicts & set(INCONSISTENT_VERDICTS):
                self.verdicts[ANY_INCONSISTENT] = self.verdicts.get(ANY_INCONSISTENT, 0) + n
        if by_verdict:
            for h in statuses:
                self.statuses[h] = self.statuses.get(h, 0) + n
            if statuses & set(NEEDS_ACTION):
                self.statuses[ANY_NEEDS_ACTION] = self.statuses.get(ANY_NEEDS_ACTION, 0) + n
        if by_verdict and by_status:
            self.matching += n

    def _matches_verdict(self, latest: str, verdicts: set[str]) -> bool:
        wanted = self.filters.verdict
        if not wanted:
            return True
        if wanted == NOT_AUDITED:
            return latest == NOT_AUDITED
        return bool(set(wanted_verdicts(wanted)) & verdicts)

    def _matches_status(self, latest: str, statuses: set[str]) -> bool:
        wanted = self.filters.headline
        if not wanted:
            return True
        if wanted == Status.NOT_ASSESSED:
            return latest == Status.NOT_ASSESSED
        return bool(set(wanted_statuses(wanted)) & statuses)


def catalog_counts(filters: CatalogFilters, show_private: bool = False) -> CatalogCounts:
    """The count, the verdict and headline facets and the architectures, from two scans: the broken
    revisions nodes ran in the window, per package (``_served_facets``); and the visible packages,
    grouped by their latest revision's verdict, status and architecture, by whether every other filter
    keeps them (``kept``), and, for each package the first scan found, by the package, so the same scan
    says which of them the reader may see and the filters keep. A package counts under each value the
    facet filter would list it for, so a facet's count is what its filter shows. The architectures
    ignore every filter.

    The packages are read from an index on their latest revision (``package_latest_visible``), merged
    with the revisions' facet index in its order: 5.7 ms for the catalog seed's 10,000 packages, where
    hashing both took 13.7. With the other filters in the WHERE clause instead, and the architectures
    read apart, the counts were no faster: the alert filter's 41.7 ms against 37.6 on the catalog seed
    (it keeps 5,321 of its 10,000 packages), 13.4 against 13.1 on the fleet seed."""
    since = window_start(filters.window_days)
    served = _served_facets(since)
    ran_broken = sorted({package_id for packages in served.values() for package_id in packages})
    latest = _counted(filters, since, show_private, ran_broken)
    tally = _Tally(filters, {v: 0 for v in (ANY_INCONSISTENT, *VERDICTS, NOT_AUDITED)})
    tally.statuses = {s: 0 for s in (ANY_NEEDS_ACTION, *STATUSES)}
    architectures: set[str] = set()
    kept: set[int] = set()
    for row in latest:
        architectures.add(row["latest_revision__architecture"] or "")
        if not row["kept"]:
            continue
        verdict = row["latest_revision__verdict"] or NOT_AUDITED
        status = row["latest_revision__headline"] or Status.NOT_ASSESSED
        tally.add(verdict, status, set(), row["n"])
        if row["ran_broken_id"] is not None:
            kept.add(row["ran_broken_id"])
    for (verdict, status), packages in served.items():
        for package_id, extra in packages.items():
            if package_id in kept:  # once more, with what its nodes ran, less itself
                tally.add(verdict or NOT_AUDITED, status or Status.NOT_ASSESSED, extra)
                tally.add(verdict or NOT_AUDITED, status or Status.NOT_ASSESSED, set(), -1)
    return CatalogCounts(tally.matching, tally.verdicts, tally.statuses, sorted(architectures - {""}))


def _counted(
    filters: CatalogFilters, since: datetime, show_private: bool, ran_broken: list[int]
) -> list[dict[str, Any]]:
    """The visible packages counted by their latest revision's verdict, status and architecture, whether
    the other filters keep them, and (of ``ran_broken``) by the package. Read by SQL compiled once per
    process and shape of the filters (``compiled.rows``: which filters are set, how many packages ran
    broken revisions), the filters' values bound (``filters.as_arguments``); built each time for a
    filter the arguments do not carry (``filters.carried``)."""
    others = replace(filters, verdict="", headline="", sort="repo")  # (the counts read the other filters)
    arguments = as_arguments(others, since, window=filters.alert)
    if not carried(others, arguments):
        return list(_counts_of(filters, since, show_private, ran_broken))
    return compiled.rows(_counts_read, show_private, ran_broken, *arguments)


def _counts_read(show_private: bool, ran_broken: Sequence[int], *arguments: Any) -> QuerySet[Any, Any]:
    """``_counts_of`` for the filters of these arguments (``_counted``'s, as stand-ins)."""
    since: Sequence[datetime] = arguments[-1]
    filters = from_arguments(*arguments)
    return _counts_of(filters, since[0] if since else ANY_TIME, show_private, list(ran_broken))


def _counts_of(
    filters: CatalogFilters, since: datetime, show_private: bool, ran_broken: list[int]
) -> QuerySet[Any, Any]:
    others = other_filters_q(filters, since)
    own = Case(When(pk__in=ran_broken, then=F("pk"))) if ran_broken else Value(None, IntegerField())
    kept_by_filters = Case(When(others, then=Value(True)), default=Value(False)) if others else Value(True)
    counted: QuerySet[Any, Any] = (
        Package.objects.visible(show_private)
        .values(
            "latest_revision__verdict",
            "latest_revision__headline",
            "latest_revision__architecture",
            ran_broken_id=own,
            kept=kept_by_filters,
        )
        .annotate(n=Count("id"))
        .order_by()
    )
    return counted


def _served_facets(since: datetime) -> dict[tuple[str, str], dict[int, set[tuple[str, str]]]]:
    """Per (latest verdict, latest status): package id -> the (verdict, status) of the other revisions its
    nodes ran since ``since`` that count in a facet (an inconsistent verdict or a status needing action),
    for every package.

    One query (``_older_served_sql``): the revisions nodes ran in the window that are not their package's
    latest, found as the LastServed rows whose revision no package has as its latest (a revision is only ever
    its own package's latest: an anti-join with the ``package_latest_visible`` index's list, where joining
    each row to its package hashed the packages whole: 3.7 ms against 4.8 in process on the catalog seed, none
    found; 0.9 against 0.8 on the fleet seed, 39), kept whole (FENCE), then the verdict and status of the few
    it finds and of their packages' latest, by id. Joined as the ORM writes it, PostgreSQL read every served
    revision's verdict and status before comparing it with the latest: 16.6 ms against 6.1 on the catalog seed
    (no such revision), 2.4 against 0.9 on the fleet seed (39). As two queries, the older rows and then their
    facets by id, the fleet seed's took a millisecond more.

    Which packages the reader may see and the catalog's other filters keep is left to catalog_counts'
    scan of the packages: with them in this query, PostgreSQL, not expecting so few rows (an older,
    broken revision still served), evaluated them for every package before the join that leaves those
    rows: 24 ms against 8 for the alert filter in the catalog-shape seed."""
    with connection.cursor() as cursor:
        cursor.execute(_older_served_sql(), [connection.ops.adapt_datetimefield_value(since)])
        rows = cursor.fetchall()
    result: dict[tuple[str, str], dict[int, set[tuple[str, str]]]] = {}
    for package_id, latest_verdict, latest_status, verdict, status in rows:
        if verdict not in INCONSISTENT_VERDICTS and status not in NEEDS_ACTION:
            continue
        packages = result.setdefault((latest_verdict or "", latest_status or ""), {})
        packages.setdefault(package_id, set()).add((verdict, status))
    return result


@functools.cache
def _older_served_sql() -> str:
    """The served revisions that are not their package's latest, each with its verdict and status and
    its package's latest revision's, as SQL: the ORM selects from tables, not from a subquery, and kept
    as a join it could not be kept whole. Only table names (quoted) and the fence are formatted in."""
    quote = connection.ops.quote_name
    served, package = quote(LastServed._meta.db_table), quote(Package._meta.db_table)
    revision = quote(Revision._meta.db_table)
    fence = FENCE if connection.vendor == "postgresql" else ""
    return f"""
        SELECT s.package_id, l.verdict, l.headline, r.verdict, r.headline FROM (
            SELECT ls.package_id, ls.revision_id FROM {served} ls
            WHERE ls.last_at >= %s
                AND NOT EXISTS (SELECT 1 FROM {package} o WHERE o.latest_revision_id = ls.revision_id){fence}
        ) s
        JOIN {revision} r ON r.id = s.revision_id
        JOIN {package} p ON p.id = s.package_id
        LEFT JOIN {revision} l ON l.id = p.latest_revision_id
    """  # noqa: S608
