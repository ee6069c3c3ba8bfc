"""Read-side selectors for the dashboard and the read-only JSON API; they never write.

Every selector issues a fixed number of queries, independent of how many packages, revisions or
reports exist, so pages stay fast at scale (tests pin the counts).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeAlias

from django.core.paginator import Page, Paginator
from django.db import DatabaseError
from django.db.models import Case, Count, F, IntegerField, Min, Q, QuerySet, Value, When
from django.db.models.functions import NullIf

from packages_app import throughput
from packages_app.audit.assessment import Headline
from packages_app.audit.check import ManifestCheck, check_manifest
from packages_app.audit.model import FileCheck
from packages_app.fleet.served import (
    ServedRevision,
    served_alert_q,
    served_headline_q,
    served_inconsistent_q,
    served_revisions,
)
from packages_app.fleet.window import DEFAULT_WINDOW_DAYS, window_start
from packages_app.layout import FileRole
from packages_app.models import FixProposal, LastServed, Package, PackageFile, Revision, Serving, TrackRequest
from packages_app.verdicts import INCONSISTENT_VERDICTS, NEEDS_ACTION, STATUSES, VERDICTS, Status, Verdict

# Catalog filter values beside the verdicts and statuses themselves.
ANY_INCONSISTENT = "inconsistent"
NOT_AUDITED = "unaudited"
ANY_NEEDS_ACTION = "needs-action"


@dataclass(frozen=True)
class CatalogFilters:
    """Validated catalog filters; the empty value of each field means "no filter"."""

    q: str = ""
    verdict: str = ""
    headline: str = ""  # a Status value, or ANY_NEEDS_ACTION
    architecture: str = ""
    schema: int | None = None
    mtp_detected: bool | None = None
    mtp_declared: bool | None = None
    status: str = ""
    alert: bool = False
    sort: str = "repo"
    window_days: int = DEFAULT_WINDOW_DAYS
    refused_by: str = ""  # a release name from releases.toml: packages whose latest revision it refuses


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
_HISTORY_FIELDS = (
    "package_id",
    "commit_sha",
    "committed_at",
    "title",
    "status",
    "verdict",
    "headline",
    "mtp_detected",
    "mtp_declared",
    "schema_version",
    "total_bytes",
    "error",  # why a revision without a headline is not assessed (verdicts.not_assessed)
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
HISTORY_LIMIT = 200
DIFF_LINE_LIMIT = 4000
# difflib is quadratic in the worst case; real manifests are under 2,000 pretty-printed lines.
DIFF_INPUT_LIMIT = 6000
TENSOR_ROW_LIMIT = 5000
FILES_PER_PAGE = 500
Checks: TypeAlias = Mapping[str, FileCheck]  # the manifest's check of each file, by path (audit provenance)
MISSING_ON_HUB = "missing_on_hub"  # capability.py's provenance status of a file the Hub did not list
_SHA_PREFIX = re.compile(r"[0-9a-fA-F]{4,40}")


class LookupFailed(Exception):
    """A package, revision or file the request named does not exist (HTTP 404). ``back`` names the list
    the error page leads back to: ``catalog`` or ``nodes``."""

    def __init__(self, message: str, back: str = "catalog") -> None:
        super().__init__(message)
        self.back = back


class AmbiguousRevision(Exception):
    """A sha prefix matches more than one revision (HTTP 400)."""


# --- throughput (aggregated over node reports by throughput.py) ---------------------------------


def first_served(revisions: list[Revision]) -> dict[int, datetime]:
    """When nodes first reported running each of these revisions (one query over the every-node
    serving rows; a revision no node ran is left out)."""
    rows = (
        Serving.objects.filter(revision_id__in=[r.pk for r in revisions], node_key=0)
        .values("revision_id")
        .annotate(first=Min("first_at"))
        .values_list("revision_id", "first")
    )
    return dict(rows)


# --- catalog -----------------------------------------------------------------------------------


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


def catalog_queryset(filters: CatalogFilters, show_private: bool = False) -> QuerySet[Package]:
    """Packages matching ``filters``, each with its latest revision joined, in the requested order."""
    packages = Package.objects.visible(show_private).select_related("latest_revision").only(*_CATALOG_FIELDS)
    packages = packages.filter(_filters_q(filters), _verdict_q(filters), _headline_q(filters))
    packages = packages.annotate(headline_doc=F("latest_revision__assessment__headline"))
    return packages.order_by(*_SORT_ORDER.get(filters.sort, _SORT_ORDER["repo"]))


def _filters_q(filters: CatalogFilters) -> Q:
    """Every filter except the two facets (verdict, headline), whose counts must ignore their own."""
    q = Q()
    if filters.q:
        q &= Q(repo_id__icontains=filters.q)
    if filters.architecture:
        q &= Q(latest_revision__architecture=filters.architecture)
    if filters.schema is not None:
        q &= Q(latest_revision__schema_version=filters.schema)
    if filters.mtp_detected is not None:
        q &= Q(latest_revision__mtp_detected=filters.mtp_detected)
    if filters.mtp_declared is not None:
        q &= Q(latest_revision__mtp_declared=filters.mtp_declared)
    if filters.status:
        q &= Q(latest_revision__status=filters.status)
    if filters.alert:
        since = window_start(filters.window_days)
        # Either alert needs a revision whose MTP went unused: the packages of those (LastServed rows)
        # lead the query where they are few, not a walk of the whole catalog in its order.
        unused = Q(id__in=LastServed.objects.filter(last_unused_at__isnull=False).values("package_id"))
        q &= unused & (throughput.latest_alert_q() | served_alert_q(since))
    if filters.refused_by:
        q &= Q(latest_revision__refused_by__contains=f"|{filters.refused_by}|")
    return q


def _wanted_verdicts(verdict: str) -> tuple[str, ...]:
    return INCONSISTENT_VERDICTS if verdict == ANY_INCONSISTENT else (verdict,)


def _wanted_statuses(headline: str) -> tuple[str, ...]:
    return NEEDS_ACTION if headline == ANY_NEEDS_ACTION else (headline,)


def _verdict_q(filters: CatalogFilters) -> Q:
    """The verdict filter; an inconsistent verdict also matches a package whose nodes ran such a revision."""
    verdict = filters.verdict
    if not verdict:
        return Q()
    if verdict == NOT_AUDITED:
        return Q(latest_revision__isnull=True) | Q(latest_revision__verdict="")
    verdicts = _wanted_verdicts(verdict)
    latest = Q(latest_revision__verdict__in=verdicts)
    served = [v for v in verdicts if v in INCONSISTENT_VERDICTS]
    if not served:
        return latest
    return latest | served_inconsistent_q(window_start(filters.window_days), served)


def _headline_q(filters: CatalogFilters) -> Q:
    """The headline filter; a status that needs action also matches a package whose nodes ran a revision
    with it in the window (the row then says so)."""
    if not filters.headline:
        return Q()
    if filters.headline == Status.NOT_ASSESSED:
        return Q(latest_revision__isnull=True) | Q(latest_revision__headline__in=["", Status.NOT_ASSESSED])
    statuses = _wanted_statuses(filters.headline)
    latest = Q(latest_revision__headline__in=statuses)
    served = [s for s in statuses if s in NEEDS_ACTION]
    if not served:
        return latest
    return latest | served_headline_q(window_start(filters.window_days), served)


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
        return bool(set(_wanted_verdicts(wanted)) & verdicts)

    def _matches_status(self, latest: str, statuses: set[str]) -> bool:
        wanted = self.filters.headline
        if not wanted:
            return True
        if wanted == Status.NOT_ASSESSED:
            return latest == Status.NOT_ASSESSED
        return bool(set(_wanted_statuses(wanted)) & statuses)


def catalog_counts(filters: CatalogFilters, show_private: bool = False) -> CatalogCounts:
    """The count, the verdict and headline facets and the architectures, from two scans: the broken
    revisions nodes ran in the window, per package (``_served_facets``); and the visible packages
    matching every other filter, grouped by their latest revision's verdict, status and architecture,
    and, for each package the first scan found, by the package, so the same scan says which of them
    the reader may see and the filters keep. A package counts under each value the facet filter would
    list it for, so a facet's count is what its filter shows. With any other filter, the architectures
    (which ignore every filter) take a third query."""
    others = _filters_q(filters)
    served = _served_facets(window_start(filters.window_days))
    ran_broken = {package_id for packages in served.values() for package_id in packages}
    own = Case(When(pk__in=ran_broken, then=F("pk"))) if ran_broken else Value(None, IntegerField())
    latest = (
        Package.objects.visible(show_private)
        .filter(others)
        .values(
            "latest_revision__verdict",
            "latest_revision__headline",
            "latest_revision__architecture",
            ran_broken_id=own,
        )
        .annotate(n=Count("id"))
        .order_by()
    )
    tally = _Tally(filters, {v: 0 for v in (ANY_INCONSISTENT, *VERDICTS, NOT_AUDITED)})
    tally.statuses = {s: 0 for s in (ANY_NEEDS_ACTION, *STATUSES)}
    architectures: set[str] = set()
    kept: set[int] = set()
    for row in latest:
        verdict = row["latest_revision__verdict"] or NOT_AUDITED
        status = row["latest_revision__headline"] or Status.NOT_ASSESSED
        tally.add(verdict, status, set(), row["n"])
        architectures.add(row["latest_revision__architecture"] or "")
        if row["ran_broken_id"] is not None:
            kept.add(row["ran_broken_id"])
    for (verdict, status), packages in served.items():
        for package_id, extra in packages.items():
            if package_id in kept:  # once more, with what its nodes ran, less itself
                tally.add(verdict or NOT_AUDITED, status or Status.NOT_ASSESSED, extra)
                tally.add(verdict or NOT_AUDITED, status or Status.NOT_ASSESSED, set(), -1)
    names = catalog_architectures(show_private) if others else sorted(architectures - {""})
    return CatalogCounts(tally.matching, tally.verdicts, tally.statuses, names)


def _served_facets(since: Any) -> dict[tuple[str, str], dict[int, set[tuple[str, str]]]]:
    """Per (latest verdict, latest status): package id -> the (verdict, status) of the other revisions its
    nodes ran since ``since`` that count in a facet (an inconsistent verdict or a status needing action),
    for every package.

    Which packages the reader may see and the catalog's other filters keep is left to catalog_counts'
    scan of the packages: with them in this query, PostgreSQL, not expecting so few rows (an older,
    broken revision still served), evaluated them for every package before the join that leaves those
    rows: 24 ms against 8 for the alert filter in the catalog-shape seed."""
    broken = Q(revision__verdict__in=INCONSISTENT_VERDICTS) | Q(revision__headline__in=NEEDS_ACTION)
    rows = (
        LastServed.objects.filter(broken, last_at__gte=since)
        .exclude(revision_id=F("package__latest_revision_id"))
        .values_list(
            "package_id",
            "package__latest_revision__verdict",
            "package__latest_revision__headline",
            "revision__verdict",
            "revision__headline",
        )
        .distinct()
    )
    result: dict[tuple[str, str], dict[int, set[tuple[str, str]]]] = {}
    for package_id, latest_verdict, latest_status, verdict, status in rows:
        packages = result.setdefault((latest_verdict or "", latest_status or ""), {})
        packages.setdefault(package_id, set()).add((verdict or "", status or ""))
    return result


def catalog_architectures(show_private: bool = False) -> list[str]:
    """Architectures of the packages' latest revisions, for the filter's choices."""
    names = (
        Package.objects.visible(show_private)
        .exclude(latest_revision__architecture="")
        .filter(latest_revision__isnull=False)
        .values_list("latest_revision__architecture", flat=True)
        .distinct()
        .order_by("latest_revision__architecture")
    )
    return list(names)


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
    packages = _packages_of(page, packages_in_order, by_revision=filters.sort not in _PACKAGE_ORDER)
    latest_ids = [p.latest_revision_id for p in packages if p.latest_revision_id]
    figures = throughput.catalog_throughput(latest_ids) if latest_ids else {}
    served = served_revisions([p.pk for p in packages], window_start(filters.window_days))
    fixes = latest_fix_proposals([p.pk for p in packages])
    rows = [
        CatalogRow(
            p,
            p.latest_revision,
            figures.get(p.latest_revision_id or 0),
            [s for s in served.get(p.pk, []) if not s.is_latest],
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


def latest_fix_proposals(package_ids: list[int]) -> dict[int, FixProposal]:
    """Each package's newest fix pull request that was sent or is being sent (one query)."""
    shown = [
        FixProposal.Status.OPENING,
        FixProposal.Status.OPEN,
        FixProposal.Status.MERGED,
        FixProposal.Status.CLOSED,
    ]
    found: dict[int, FixProposal] = {}
    for proposal in FixProposal.objects.filter(package_id__in=package_ids, status__in=shown).order_by("-id"):
        found.setdefault(proposal.package_id, proposal)
    return found


def fix_proposal_for(package: Package) -> FixProposal | None:
    """The package's newest fix proposal, whatever became of it (a stale or refused one says why)."""
    return package.fix_proposals.order_by("-id").first()


# --- one package ---------------------------------------------------------------------------------


def get_package(owner: str, name: str, show_private: bool = False) -> Package:
    """The package, or LookupFailed; a private one the reader may not see is "not tracked" too."""
    repo_id = f"{owner}/{name}"
    package = Package.objects.visible(show_private).filter(repo_id=repo_id).first()
    if package is None:
        raise LookupFailed(f"No package {repo_id} is tracked.")
    return package


def package_counts(package: Package) -> dict[str, int]:
    """How many revisions and files a package holds (what deleting it removes)."""
    files = PackageFile.objects.filter(revision__package=package).count()
    return {"revisions": package.revisions.count(), "files": files}


def resolve_revision(package: Package, ref: str | None) -> Revision | None:
    """The revision ``ref`` names (a full sha or a prefix of at least 4 hex digits), else the latest.

    None only when no ``ref`` was given and the package has no revision yet (first sync pending).
    """
    if not ref:
        return _latest_revision(package)
    if not _SHA_PREFIX.fullmatch(ref):
        raise LookupFailed(f"{ref!r} is not a commit sha (4 to 40 hex digits).")
    matches = list(package.revisions.filter(commit_sha__startswith=ref.lower())[:2])
    if not matches:
        raise LookupFailed(f"{package.repo_id} has no revision {ref}.")
    if len(matches) > 1:
        raise AmbiguousRevision(f"{ref} matches several revisions of {package.repo_id}; give more digits.")
    return matches[0]


def _latest_revision(package: Package) -> Revision | None:
    if package.latest_revision_id:
        return package.revisions.filter(id=package.latest_revision_id).first()
    return package.revisions.order_by(F("committed_at").desc(nulls_last=True), "-id").first()


def require_revision(package: Package, ref: str | None) -> Revision:
    revision = resolve_revision(package, ref)
    if revision is None:
        raise LookupFailed(f"{package.repo_id} has no revision yet; its first ingest is still queued.")
    return revision


def judge_manifest(data: bytes, show_private: bool = False) -> tuple[ManifestCheck, Revision | None]:
    """Judge manifest bytes alone (the check page and its API); when a stored revision holds the same
    bytes, its carrier's architecture feeds the split-certification gate and ``audit_package`` is
    pointed at it. A pasted manifest arrives with the browser's CRLF line ends: the LF bytes count too.
    The lookup is best effort: without a database the check still answers."""
    tracked = tracked_manifest(data, show_private)
    source = f"{tracked.package.repo_id} --revision {tracked.commit_sha}" if tracked else ""
    architecture = (tracked.architecture or None) if tracked else None
    return check_manifest(data, source=source, architecture=architecture), tracked


def tracked_manifest(data: bytes, show_private: bool = False) -> Revision | None:
    """The newest stored revision holding these manifest bytes (or their LF form, as a browser pastes CRLF);
    None without one, or without a database (the check answers without it: best effort)."""
    digests = {hashlib.sha256(d).hexdigest() for d in (data, data.replace(b"\r\n", b"\n"))}
    try:
        return revision_with_manifest(digests, show_private)
    except DatabaseError:
        return None


def revision_with_manifest(digests: set[str], show_private: bool = False) -> Revision | None:
    """The newest stored revision whose manifest bytes have one of these sha256 digests (one query)."""
    revisions = Revision.objects.filter(manifest_sha256__in=digests).select_related("package")
    if not show_private:
        revisions = revisions.filter(package__private=False)
    return revisions.order_by(F("committed_at").desc(nulls_last=True), "-id").first()


def revision_history(package: Package) -> list[Revision]:
    """The newest revisions, lightest columns only (the audit JSON stays in the database)."""
    revisions = package.revisions.only(*_HISTORY_FIELDS).order_by(
        F("committed_at").desc(nulls_last=True), "-id"
    )
    return list(revisions[:HISTORY_LIMIT])


@dataclass(frozen=True)
class FileRow:
    file: PackageFile
    manifest_size: int | None
    manifest_sha256: str
    status: str


@dataclass(frozen=True)
class FilePage:
    rows: list[FileRow]
    page: Page[PackageFile]


def revision_files(revision: Revision, page_number: int = 1, per_page: int = FILES_PER_PAGE) -> FilePage:
    """One page of the revision's files, each with what the manifest says about it (audit provenance).

    Files the manifest names but the Hub did not list are rows too, after the last page's Hub files.
    """
    paginator = Paginator(revision.files.defer("kv", "tensors").order_by("path"), per_page)
    page = paginator.get_page(page_number)
    checks = revision.audited.provenance.by_path()
    rows = [_file_row(f, checks.get(f.path)) for f in page.object_list]
    if not page.has_next():
        rows += _unlisted_rows(revision, checks)
    return FilePage(rows, page)


def _unlisted_rows(revision: Revision, checks: Checks) -> list[FileRow]:
    """Rows for the files the manifest names and the Hub did not list, by path."""
    unlisted = sorted((c for c in checks.values() if c.status == MISSING_ON_HUB), key=lambda c: c.path)
    return [_file_row(PackageFile(revision=revision, path=c.path, role=c.role), c) for c in unlisted]


@dataclass(frozen=True)
class FileRange:
    """Consecutive layer files with nothing to look at (sha256 as the manifest says, no header error).

    A split block's later parts carry no GGUF header: an unread header is not a finding, a failed one is."""

    first: str
    last: str
    count: int
    first_block: int | None
    last_block: int | None
    size: int
    header_bytes: int
    status: str  # the sha256 comparison every file of the range shares: "match", or "" (manifest names none)
    is_range: bool = True


@dataclass(frozen=True)
class FileOverview:
    """The files section by default: layer files as ranges, each file worth a look as its own row.

    ``items`` hold ``FileRange`` and ``FileRow`` in path order; ``more_other_files`` counts the files that
    are neither layers nor shown (a package with thousands of stray files lists them on the full pages).
    """

    items: list[FileRow | FileRange]
    total: int
    more_other_files: int


# The overview lists at most this many non-layer files by name, and reads at most this many layer files.
OVERVIEW_OTHER_FILES = 12
OVERVIEW_LAYER_FILES = 5000
_CLEAN_STATUSES = frozenset({"match", ""})
_OVERVIEW_FIELDS = (
    *("revision_id", "path", "role", "layer_index", "size", "lfs_sha256"),
    *("header_status", "header_bytes", "header_error"),
)


def revision_file_overview(revision: Revision, mtp_blocks: Iterable[int] = ()) -> FileOverview:
    """Layer files grouped into ranges, with mismatches, failed headers and MTP blocks kept as rows."""
    files = revision.files.only(*_OVERVIEW_FIELDS)
    checks = revision.audited.provenance.by_path()
    layers = list(files.filter(role=FileRole.LAYER.value).order_by("path")[:OVERVIEW_LAYER_FILES])
    others = list(files.exclude(role=FileRole.LAYER.value).order_by("path")[: OVERVIEW_OTHER_FILES + 1])
    total = revision.files.count()
    rows = [_file_row(f, checks.get(f.path)) for f in others[:OVERVIEW_OTHER_FILES]]
    items: list[FileRow | FileRange] = [*rows, *_layer_items(layers, checks, frozenset(mtp_blocks))]
    items += _unlisted_rows(revision, checks)
    shown_others = min(len(others), OVERVIEW_OTHER_FILES)
    more = total - len(layers) - shown_others
    return FileOverview(items, total, max(more, 0))


def _layer_items(
    layers: list[PackageFile], checks: Checks, mtp_blocks: frozenset[int]
) -> list[FileRow | FileRange]:
    items: list[FileRow | FileRange] = []
    run: list[PackageFile] = []
    for file in layers:
        row = _file_row(file, checks.get(file.path))
        if _unremarkable(row, mtp_blocks) and (not run or _status(run[-1], checks) == row.status):
            run.append(file)
            continue
        if _unremarkable(row, mtp_blocks):
            items.extend(_closed_run(run, checks))
            run = [file]
            continue
        items.extend(_closed_run(run, checks))
        run = []
        items.append(row)
    items.extend(_closed_run(run, checks))
    return items


def _unremarkable(row: FileRow, mtp_blocks: frozenset[int]) -> bool:
    file = row.file
    return (
        row.status in _CLEAN_STATUSES
        and file.header_status != PackageFile.HeaderStatus.FAILED
        and file.layer_index not in mtp_blocks
    )


def _status(file: PackageFile, checks: Checks) -> str:
    check = checks.get(file.path)
    return check.status if check else ""


def _closed_run(run: list[PackageFile], checks: Checks) -> list[FileRow | FileRange]:
    if len(run) < 3:
        return [_file_row(f, checks.get(f.path)) for f in run]
    return [
        FileRange(
            first=run[0].path,
            last=run[-1].path,
            count=len(run),
            first_block=run[0].layer_index,
            last_block=run[-1].layer_index,
            size=sum(f.size for f in run),
            header_bytes=sum(f.header_bytes or 0 for f in run),
            status=_status(run[0], checks),
        )
    ]


def _file_row(file: PackageFile, check: FileCheck | None) -> FileRow:
    if check is None:
        return FileRow(file=file, manifest_size=None, manifest_sha256="", status="")
    return FileRow(
        file=file,
        manifest_size=check.manifest_size,
        manifest_sha256=check.manifest_sha256 or "",
        status=check.status,
    )


def get_file(revision: Revision, path: str) -> PackageFile:
    file = revision.files.filter(path=path).first()
    if file is None:
        raise LookupFailed(f"{revision} has no file {path}.")
    return file


# --- GGUF metadata view --------------------------------------------------------------------------


@dataclass(frozen=True)
class KvRow:
    key: str
    kind: str
    summary: str
    full: str = ""


def kv_rows(kv: Any, text_limit: int = 240) -> list[KvRow]:
    """KV metadata as display rows: arrays summarised, long strings (chat templates) folded."""
    if not isinstance(kv, dict):
        return []
    return [_kv_row(str(key), value, text_limit) for key, value in sorted(kv.items())]


def _kv_row(key: str, value: Any, text_limit: int) -> KvRow:
    if isinstance(value, dict) and "array" in value:
        return KvRow(key, "array", f"{value.get('array')}[{value.get('count')}]")
    if isinstance(value, list):
        head = ", ".join(json.dumps(v) for v in value[:8])
        more = f", ... ({len(value)} items)" if len(value) > 8 else ""
        return KvRow(key, "array", f"[{head}{more}]")
    if isinstance(value, str):
        if len(value) > text_limit:
            return KvRow(key, "string", value[:text_limit] + "...", full=value)
        return KvRow(key, "string", value)
    kinds = {bool: "bool", int: "integer", float: "number"}
    return KvRow(key, kinds.get(type(value), "json"), json.dumps(value))


# --- diff between two revisions ----------------------------------------------------------------


@dataclass
class RevisionDiff:
    old: Revision
    new: Revision
    manifest_diff: list[str] = field(default_factory=list)
    truncated: bool = False
    too_large: bool = False
    added: list[PackageFile] = field(default_factory=list)
    removed: list[PackageFile] = field(default_factory=list)
    changed: list[tuple[PackageFile, PackageFile]] = field(default_factory=list)

    @property
    def verdict_changed(self) -> bool:
        return self.old.verdict != self.new.verdict

    @property
    def sides(self) -> tuple[Revision, Revision]:
        return self.old, self.new


def revision_diff(old: Revision, new: Revision) -> RevisionDiff:
    """Manifest changes as a unified diff, plus files added, removed and changed (size or sha256)."""
    old_lines, new_lines = _manifest_lines(old.manifest_json), _manifest_lines(new.manifest_json)
    too_large = max(len(old_lines), len(new_lines)) > DIFF_INPUT_LIMIT
    lines = [] if too_large else manifest_unified_diff(old, new)
    diff = RevisionDiff(old, new, lines[:DIFF_LINE_LIMIT], len(lines) > DIFF_LINE_LIMIT, too_large)
    old_files = _files_by_path(old)
    new_files = _files_by_path(new)
    diff.added = [new_files[p] for p in sorted(new_files.keys() - old_files.keys())]
    diff.removed = [old_files[p] for p in sorted(old_files.keys() - new_files.keys())]
    for path in sorted(old_files.keys() & new_files.keys()):
        a, b = old_files[path], new_files[path]
        if (a.size, a.lfs_sha256) != (b.size, b.lfs_sha256):
            diff.changed.append((a, b))
    return diff


def _files_by_path(revision: Revision) -> dict[str, PackageFile]:
    files = revision.files.only("revision_id", "path", "role", "size", "lfs_sha256")
    return {f.path: f for f in files}


def manifest_unified_diff(old: Revision, new: Revision) -> list[str]:
    # Pretty-printed with sorted keys so the diff shows meaning, not key order or minified lines.
    return list(
        difflib.unified_diff(
            _manifest_lines(old.manifest_json),
            _manifest_lines(new.manifest_json),
            fromfile=f"model-package.json@{old.short_sha}",
            tofile=f"model-package.json@{new.short_sha}",
            lineterm="",
        )
    )


def _manifest_lines(manifest: Any) -> list[str]:
    if manifest is None:
        return []
    return json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


# --- ingest status ----------------------------------------------------------------------------

_INGEST_FIELDS = (
    "package__repo_id",
    "commit_sha",
    "committed_at",
    "status",
    "error",
    "attempts",
    "files_total",
    "files_done",
    "queued_at",
    "started_at",
    "finished_at",
)


@dataclass(frozen=True)
class IngestOverview:
    unfinished: list[Revision]
    failed: list[Revision]
    sync_errors: list[Package]
    counts: dict[str, int]
    track_requests: list[TrackRequest] = field(default_factory=list)


def ingest_overview(
    limit: int = 100, show_private: bool = False, show_track_requests: bool = False
) -> IngestOverview:
    """Queued and running ingests (oldest first), recent failures, packages whose sync failed, and (for
    those who may track) the track requests the Hub has not confirmed: checking, missing or failed."""
    visible = Revision.objects.all() if show_private else Revision.objects.filter(package__private=False)
    revisions = visible.select_related("package").only(*_INGEST_FIELDS)
    unfinished = revisions.unfinished().order_by("queued_at", "id")[:limit]
    failed = revisions.filter(status=Revision.Status.FAILED).order_by(
        F("finished_at").desc(nulls_last=True), "-id"
    )[:limit]
    sync_errors = (
        Package.objects.visible(show_private)
        .exclude(sync_error="")
        .only("repo_id", "sync_error", "last_synced_at")
    )
    counts = {status: 0 for status in Revision.Status.values}
    for row in visible.values("status").annotate(n=Count("id")).order_by():
        counts[row["status"]] = row["n"]
    requests = list(TrackRequest.objects.all()[:limit]) if show_track_requests else []
    return IngestOverview(list(unfinished), list(failed), list(sync_errors[:limit]), counts, requests)
