"""The catalog page's rows: the packages the filters keep, in the requested order, one page of them with
each latest revision's headline, throughput, the other revisions nodes ran and the fix pull request.

A fixed number of queries, however many packages, revisions or reports exist (tests pin the counts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Case, F, IntegerField, OuterRef, QuerySet, Subquery, Value, When
from django.db.models.functions import NullIf

from packages_app import compiled
from packages_app.audit.assessment import Headline
from packages_app.catalog import throughput
from packages_app.catalog.facets import catalog_counts
from packages_app.catalog.filters import (
    CatalogFilters,
    as_arguments,
    carried,
    from_arguments,
    headline_q,
    other_filters_q,
    reads_window,
    verdict_q,
)
from packages_app.compiled import ANY_TIME
from packages_app.fleet.served import ServedRevision, served_revisions
from packages_app.fleet.window import window_start
from packages_app.models import FixProposal, Package, Revision
from packages_app.verdicts import Status, Verdict

# Columns a catalog row shows; the audit and manifest JSON stay in the database.
_CATALOG_FIELDS = (
    "repo_id",
    "sync_error",
    "latest_revision__commit_sha",
    "latest_revision__committed_at",
    "latest_revision__status",
    "latest_revision__error",
    "latest_revision__files_total",
    "latest_revision__files_done",
    "latest_revision__schema_version",
    "latest_revision__architecture",
    "latest_revision__block_count",
    "latest_revision__nextn_predict_layers",
    "latest_revision__total_bytes",
    "latest_revision__verdict",
    "latest_revision__headline",
    "latest_revision__mtp_detected",
    "latest_revision__mtp_declared",
    "latest_revision__refused_by",
)


# Worst first: each verdict's and status's rank from the vocabulary; not audited after every audited one.
_VERDICT_RANK = Case(
    *(When(latest_revision__verdict=v.value, then=Value(v.rank)) for v in Verdict),
    default=Value(len(Verdict)),
    output_field=IntegerField(),
)
_STATUS_RANK = Case(
    *(When(latest_revision__headline=s.value, then=Value(s.rank)) for s in Status),
    default=Value(Status.NOT_ASSESSED.rank),
    output_field=IntegerField(),
)
# A package's newest fix pull request that was sent or is being sent (latest_fix_proposals reads it).
_LATEST_FIX = Subquery(
    FixProposal.objects.filter(
        package_id=OuterRef("pk"),
        status__in=[
            FixProposal.Status.OPENING,
            FixProposal.Status.OPEN,
            FixProposal.Status.MERGED,
            FixProposal.Status.CLOSED,
        ],
    )
    .order_by("-id")
    .values("pk")[:1]
)
_SORT_ORDER: dict[str, tuple[Any, ...]] = {
    "repo": ("repo_id",),
    "-repo": ("-repo_id",),
    "updated": (F("latest_revision__committed_at").asc(nulls_last=True), "repo_id"),
    "-updated": (F("latest_revision__committed_at").desc(nulls_last=True), "repo_id"),
    # A size of 0 means "not measured yet" (ingest unfinished): sorted last, like a missing revision.
    "size": (NullIf("latest_revision__total_bytes", Value(0)).asc(nulls_last=True), "repo_id"),
    "-size": (NullIf("latest_revision__total_bytes", Value(0)).desc(nulls_last=True), "repo_id"),
    "layers": (F("latest_revision__block_count").asc(nulls_last=True), "repo_id"),
    "-layers": (F("latest_revision__block_count").desc(nulls_last=True), "repo_id"),
    "status": (_STATUS_RANK.asc(), "repo_id"),
    "-status": (_STATUS_RANK.desc(), "repo_id"),
    "verdict": (_VERDICT_RANK.asc(), "repo_id"),
    "-verdict": (_VERDICT_RANK.desc(), "repo_id"),
}


@dataclass(frozen=True)
class CatalogRow:
    package: Package
    revision: Revision | None
    throughput: throughput.CatalogThroughput | None
    # Revisions other than the latest that nodes ran in the window, broken ones first.
    served: list[ServedRevision] = field(default_factory=list)
    headline: Headline | None = None  # the latest revision's; None while it is not assessed
    fix: FixProposal | None = None  # the pull request meshdash proposed with the patched manifest

    @property
    def status(self) -> Status:
        return self.headline.status if self.headline else Status.NOT_ASSESSED

    @property
    def served_broken(self) -> list[ServedRevision]:
        return [s for s in self.served if s.broken]

    @property
    def alert(self) -> bool:
        return bool(self.throughput and self.throughput.alert) or any(s.alert for s in self.served)


@dataclass(frozen=True)
class CatalogResult:
    page: Page[Package]
    rows: list[CatalogRow]
    facets: dict[str, int]  # packages per verdict (and "inconsistent"), as the verdict filter lists them
    architectures: list[str]
    headlines: dict[str, int] = field(default_factory=dict)  # per status (and "needs-action"), likewise


def catalog_queryset(
    filters: CatalogFilters, show_private: bool = False, since: datetime | None = None
) -> QuerySet[Package]:
    """Packages matching ``filters``, each with its latest revision joined, in the requested order
    (``since``: the window's start, when the caller holds it)."""
    packages = Package.objects.visible(show_private).select_related("latest_revision").only(*_CATALOG_FIELDS)
    conditions = (other_filters_q(filters, since), verdict_q(filters, since), headline_q(filters, since))
    packages = packages.filter(*conditions)
    packages = packages.annotate(headline_doc=F("latest_revision__assessment__headline"), fix_id=_LATEST_FIX)
    return packages.order_by(*_SORT_ORDER.get(filters.sort, _SORT_ORDER["repo"]))


def catalog_page(
    filters: CatalogFilters, page_number: int, per_page: int, clamp: bool = True, show_private: bool = False
) -> CatalogResult:
    """One page of the catalog with its facets; ``clamp`` maps a page past the end to the last page.

    Raises ``django.core.paginator.EmptyPage`` for a page past the end when ``clamp`` is False.
    """
    counts = catalog_counts(filters, show_private)
    packages_in_order = catalog_queryset(filters, show_private)
    paginator = Paginator(packages_in_order, per_page)
    paginator.count = counts.matching  # counted by the facets' scans already
    page = paginator.get_page(page_number) if clamp else paginator.page(page_number)
    by_revision = filters.sort not in _PACKAGE_ORDER
    first = None
    if page.number == 1 and not by_revision and per_page <= PAGE_BY_IDS:
        first = _first_page(filters, show_private, per_page)
    packages = first if first is not None else _packages_of(page, packages_in_order, by_revision)
    latest_ids = [p.latest_revision_id for p in packages if p.latest_revision_id]
    figures = throughput.catalog_throughput(latest_ids) if latest_ids else {}
    served = served_revisions([p.pk for p in packages], window_start(filters.window_days), latest=False)
    fixes = latest_fix_proposals(packages)
    rows = [
        CatalogRow(
            p,
            p.latest_revision,
            figures.get(p.latest_revision_id or 0),
            served.get(p.pk, []),
            Headline.from_json(getattr(p, "headline_doc", None)),
            fixes.get(p.pk),
        )
        for p in packages
    ]
    return CatalogResult(page, rows, counts.facets, counts.architectures, counts.headlines)


# A page of at most this many rows is read as its ids first (past the first page, or in an order of the
# latest revisions').
PAGE_BY_IDS = 1000
_PACKAGE_ORDER = ("repo", "-repo")  # the sorts by the package's own columns


def _packages_of(
    page: Page[Package], packages_in_order: QuerySet[Package], by_revision: bool = False
) -> list[Package]:
    """The page's packages. Past the first page, or sorted by the latest revisions' columns
    (``by_revision``), its ids first, then their rows: PostgreSQL computes a query's columns for every
    row an OFFSET skips or it sorts, so one query read the latest revision's assessment of every earlier
    package, or of every package the filters keep (page 100 of 10,000 packages: 38 ms in one query, 6
    ms in two; the 3,631 packages with MTP weights not declared, newest first: 13.5 ms in one, 4 in
    two, their ids read from the revision_facets index alone). The first page in the packages' own
    order stays one query: PostgreSQL walks the packages in that order and stops at the page's end
    (0.5 ms for the catalog's first page; in two queries, about 2 ms more)."""
    if (page.number == 1 and not by_revision) or page.paginator.per_page > PAGE_BY_IDS:
        return list(page.object_list)
    ids = list(page.object_list.values_list("pk", flat=True))  # type: ignore[attr-defined]
    rows = {package.pk: package for package in packages_in_order.filter(pk__in=ids).order_by()}
    return [rows[pk] for pk in ids if pk in rows]


def _first_page(filters: CatalogFilters, show_private: bool, per_page: int) -> list[Package] | None:
    """The first page in the packages' own order, read by SQL compiled once per process and shape of the
    filters and page (``compiled.instances``; the filters' values bound, ``filters.as_arguments``); None
    for a filter the arguments do not carry, which the paginator's page reads."""
    since = window_start(filters.window_days)
    arguments = as_arguments(filters, since, window=reads_window(filters))
    if not carried(filters, arguments):
        return None
    first: list[Package] = compiled.instances(_first_page_read, show_private, str(per_page), *arguments)
    return first


def _first_page_read(show_private: bool, per_page: str, *arguments: Any) -> QuerySet[Package]:
    """``catalog_queryset``'s first ``per_page`` rows for the filters of these arguments (``_first_page``'s,
    as stand-ins). The page's length is part of the shape: the ORM writes a LIMIT as a number."""
    since: Sequence[datetime] = arguments[-1]
    filters = from_arguments(*arguments)
    return catalog_queryset(filters, show_private, since[0] if since else ANY_TIME)[: int(per_page)]


def latest_fix_proposals(packages: list[Package]) -> dict[int, FixProposal]:
    """Each package's newest fix pull request that was sent or is being sent, by the id catalog_queryset
    annotated it with (``fix_id``, a subquery a row): one query, none for a page without any (1.2 ms
    less for such a page, as the benchmark's catalog has, at 10,000 nodes)."""
    ids = [fix_id for p in packages if (fix_id := getattr(p, "fix_id", None))]
    return (
        {proposal.package_id: proposal for proposal in FixProposal.objects.filter(pk__in=ids)} if ids else {}
    )
