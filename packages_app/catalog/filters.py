"""The catalog's filters: the validated values, and the conditions each one adds to the packages' query.

Shared by the catalog's rows (``listing``) and its counts (``facets``), which keep the facets' own filters
apart: a facet's counts ignore its own filter."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

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


def verdict_q(filters: CatalogFilters, since: datetime | None = None) -> Q:
    """The verdict filter; an inconsistent verdict also matches a package whose nodes ran such a revision
    (since ``since``, when the caller holds the window's start; else from the filters' window)."""
    verdict = filters.verdict
    if not verdict:
        return Q()
    if verdict == NOT_AUDITED:
        return Q(latest_revision__isnull=True) | Q(latest_revision__verdict="")
    latest = Q(latest_revision__verdict__in=wanted_verdicts(verdict))
    served = served_verdicts(filters)
    if not served:
        return latest
    return latest | served_inconsistent_q(since or window_start(filters.window_days), served)


def headline_q(filters: CatalogFilters, since: datetime | None = None) -> Q:
    """The headline filter; a status that needs action also matches a package whose nodes ran a revision
    with it in the window (the row then says so)."""
    if not filters.headline:
        return Q()
    if filters.headline == Status.NOT_ASSESSED:
        return Q(latest_revision__isnull=True) | Q(latest_revision__headline__in=["", Status.NOT_ASSESSED])
    latest = Q(latest_revision__headline__in=wanted_statuses(filters.headline))
    served = served_statuses(filters)
    if not served:
        return latest
    return latest | served_headline_q(since or window_start(filters.window_days), served)


def served_verdicts(filters: CatalogFilters) -> list[str]:
    """The verdicts the verdict filter also matches in the revisions nodes ran in the window."""
    if not filters.verdict or filters.verdict == NOT_AUDITED:
        return []
    return [v for v in wanted_verdicts(filters.verdict) if v in INCONSISTENT_VERDICTS]


def served_statuses(filters: CatalogFilters) -> list[str]:
    """The statuses the headline filter also matches in the revisions nodes ran in the window."""
    if not filters.headline or filters.headline == Status.NOT_ASSESSED:
        return []
    return [s for s in wanted_statuses(filters.headline) if s in NEEDS_ACTION]


def reads_window(filters: CatalogFilters) -> bool:
    """Whether the catalog's rows read the window (its start is then one of their query's values)."""
    return filters.alert or bool(served_verdicts(filters)) or bool(served_statuses(filters))


# --- The filters as a compiled read's arguments (packages_app/compiled.py) --------------------------------

TEXT_FILTERS = ("q", "architecture", "status")  # bound; the other filters are part of the read's shape


def as_arguments(filters: CatalogFilters, since: datetime, window: bool) -> tuple[Any, ...]:
    """The filters as a compiled read's arguments: their texts bound, the others part of its shape (the
    schema version as a text: a stand-in id is negative, which the ORM finds out of a positive field's
    range and compiles as a condition no row meets); the window's start bound when ``window`` (only a
    query that reads it may take it: a stand-in must be one of the query's values)."""
    texts = {name: text for name in TEXT_FILTERS if (text := getattr(filters, name))}
    schema = None if filters.schema is None else str(filters.schema)
    shape = (filters.mtp_detected, filters.mtp_declared, filters.alert, filters.verdict, filters.headline)
    return (",".join(texts), list(texts.values()), schema, *shape, filters.sort, [since] if window else [])


def from_arguments(
    names: str,
    texts: Sequence[str],
    schema: str | None,
    mtp_detected: bool | None,
    mtp_declared: bool | None,
    alert: bool,
    verdict: str,
    headline: str,
    sort: str,
    since: Sequence[datetime],
) -> CatalogFilters:
    """The filters ``as_arguments`` made these arguments of (the window's start apart: ``since``)."""
    text_filters: dict[str, Any] = dict(zip(names.split(",") if names else [], texts, strict=True))
    return CatalogFilters(
        **text_filters,
        schema=None if schema is None else int(schema),
        mtp_detected=mtp_detected,
        mtp_declared=mtp_declared,
        alert=alert,
        verdict=verdict,
        headline=headline,
        sort=sort,
    )


def carried(filters: CatalogFilters, arguments: tuple[Any, ...]) -> bool:
    """Whether the arguments carry every filter (the window as its start): a filter they leave out (a
    release's refusals, whose text sits in a LIKE pattern a stand-in cannot take, or one added later)
    sends its read to the ORM, built for its values."""
    return replace(from_arguments(*arguments), window_days=filters.window_days) == filters
