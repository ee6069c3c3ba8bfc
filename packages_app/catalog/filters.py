"""The catalog's filters: the validated values, and the conditions each one adds to the packages' query.

Shared by the catalog's rows (``listing``) and its counts (``facets``), which keep the facets' own filters
apart: a facet's counts ignore its own filter."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import F, Q, Value
from django.db.models.functions import Upper

from packages_app.fleet.served import served_headline_q, served_inconsistent_q
from packages_app.fleet.window import DEFAULT_WINDOW_DAYS, window_start
from packages_app.models import LastServed
from packages_app.verdicts import INCONSISTENT_VERDICTS, NEEDS_ACTION, Status

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


def other_filters_q(filters: CatalogFilters, since: datetime | None = None) -> Q:
    """Every filter except the two facets (verdict, headline), whose counts must ignore their own;
    ``since``: the window's start, when the caller holds it (else from the filters' window)."""
    q = Q()
    if filters.q:
        # ``repo_id__icontains``, upper-cased once when stored (Package.repo_upper).
        q &= Q(repo_upper__contains=Upper(Value(filters.q)))
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
        q &= alert_q(since or window_start(filters.window_days))
    if filters.refused_by:
        q &= Q(latest_revision__refused_by__contains=f"|{filters.refused_by}|")
    return q


def alert_q(since: datetime) -> Q:
    """Packages with MTP weights nodes reported unused: in their latest revision's reports
    (throughput.latest_alert_q), or in any revision's since ``since`` (fleet.served.served_alert_q). Both
    need a LastServed row of a revision with MTP weights and a report of them unused, so the packages are
    read as one list of those rows' (a semi-join): PostgreSQL walks the LastServed rows, not the whole
    catalog in its order, and hashes the list once for the catalog's counts, where the two conditions
    (and a list of every package with MTP unused, leading them) joined every package's latest revision
    to its LastServed row and hashed two lists. On the catalog seed, where 5,321 of 10,000 packages
    alert, the first page's ids took 3.7 ms against 8.6, the counts 29.0 against 32.3."""
    unused = LastServed.objects.filter(last_unused_at__isnull=False, revision__mtp_detected=True).filter(
        Q(revision_id=F("package__latest_revision_id")) | Q(last_unused_at__gte=since)
    )
    return Q(id__in=unused.values("package_id"))


def wanted_verdicts(verdict: str) -> tuple[str, ...]:
    return INCONSISTENT_VERDICTS if verdict == ANY_INCONSISTENT else (verdict,)


def wanted_statuses(headline: str) -> tuple[str, ...]:
    return NEEDS_ACTION if headline == ANY_NEEDS_ACTION else (headline,)


def verdict_q(filters: CatalogFilters) -> Q:
    """The verdict filter; an inconsistent verdict also matches a package whose nodes ran such a revision."""
    verdict = filters.verdict
    if not verdict:
        return Q()
    if verdict == NOT_AUDITED:
        return Q(latest_revision__isnull=True) | Q(latest_revision__verdict="")
    verdicts = wanted_verdicts(verdict)
    latest = Q(latest_revision__verdict__in=verdicts)
    served = [v for v in verdicts if v in INCONSISTENT_VERDICTS]
    if not served:
        return latest
    return latest | served_inconsistent_q(window_start(filters.window_days), served)


def headline_q(filters: CatalogFilters) -> Q:
    """The headline filter; a status that needs action also matches a package whose nodes ran a revision
    with it in the window (the row then says so)."""
    if not filters.headline:
        return Q()
    if filters.headline == Status.NOT_ASSESSED:
        return Q(latest_revision__isnull=True) | Q(latest_revision__headline__in=["", Status.NOT_ASSESSED])
    statuses = wanted_statuses(filters.headline)
    latest = Q(latest_revision__headline__in=statuses)
    served = [s for s in statuses if s in NEEDS_ACTION]
    if not served:
        return latest
    return latest | served_headline_q(window_start(filters.window_days), served)
