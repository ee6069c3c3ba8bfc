"""The catalog's counts are what its filters show: over random catalogs (privacy, latest verdicts and
statuses, architectures, older broken revisions nodes ran in the window or before it), the count, every
verdict facet and every status facet of catalog.facets equal the rows the catalog's own query lists with
that filter (catalog.listing.catalog_queryset, built from filters.verdict_q and headline_q), under the
other filters, for readers who may and may not see private packages."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.db.models import F
from django.utils import timezone

from packages_app import compiled
from packages_app.catalog import facets, listing
from packages_app.catalog.facets import CatalogCounts, catalog_counts
from packages_app.catalog.filters import (
    ANY_INCONSISTENT,
    ANY_NEEDS_ACTION,
    NOT_AUDITED,
    CatalogFilters,
    as_arguments,
    carried,
)
from packages_app.catalog.listing import catalog_queryset
from packages_app.fleet.window import window_start
from packages_app.models import LastServed, Package, Revision
from packages_app.verdicts import INCONSISTENT_VERDICTS, NEEDS_ACTION, STATUSES, VERDICTS
from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db

ARCHITECTURES = ("qwen35moe", "llama", "")
PRIVACY = (False, False, False, True, None)  # None: not synced yet, hidden like a private one


def random_catalog(seed: int, packages: int = 14) -> None:
    """Packages with a random latest revision (or none, or one still ingesting), some with older
    revisions, broken or not, that nodes ran inside the window, before it, or never."""
    rng = random.Random(seed)
    now = timezone.now()
    for i in range(packages):
        package = f.make_package(f"meshllm/P{seed}x{i}-layers")
        Package.objects.filter(pk=package.pk).update(private=rng.choice(PRIVACY))
        for _ in range(rng.choice((0, 1, 1, 2))):  # older revisions
            older = f.make_revision(
                package,
                rng.choice(VERDICTS),
                latest=False,
                headline=rng.choice(STATUSES),
                architecture=rng.choice(ARCHITECTURES),
            )
            served = rng.choice((None, 1, 3, 20))  # days ago; None: never
            if served is not None:
                at = now - timedelta(days=served)
                LastServed.objects.create(revision=older, package=package, last_at=at, last_unused_at=at)
        if rng.random() < 0.1:
            continue  # tracked, no revision yet
        latest = f.make_revision(
            package,
            rng.choice((*VERDICTS, "")),
            committed_at=f.BASE_TIME + timedelta(days=1),
            headline=rng.choice((*STATUSES, "")),
            architecture=rng.choice(ARCHITECTURES),
            schema_version=rng.choice((1, 2)),
        )
        if rng.random() < 0.15:
            ingesting = {"status": Revision.Status.RUNNING, "verdict": "", "headline": ""}
            Revision.objects.filter(pk=latest.pk).update(**ingesting)
        if rng.random() < 0.4:
            at = now - timedelta(days=rng.choice((0, 2, 20)))
            LastServed.objects.create(revision=latest, package=package, last_at=at, last_unused_at=at)


FILTERS = (
    CatalogFilters(),
    CatalogFilters(q="x1"),
    CatalogFilters(architecture="llama"),
    CatalogFilters(schema=2, mtp_detected=True),
    CatalogFilters(alert=True),
    CatalogFilters(window_days=2),
    CatalogFilters(verdict=ANY_INCONSISTENT),
    CatalogFilters(verdict="consistent-mtp", architecture="qwen35moe"),
    CatalogFilters(verdict=NOT_AUDITED),
    CatalogFilters(headline=ANY_NEEDS_ACTION),
    CatalogFilters(headline="serves-mtp", q="layers"),
    CatalogFilters(verdict=ANY_INCONSISTENT, headline=ANY_NEEDS_ACTION, window_days=30),
)


def listed(filters: CatalogFilters, show_private: bool) -> int:
    return catalog_queryset(filters, show_private).count()


def disagreements(counts: CatalogCounts, filters: CatalogFilters, show_private: bool) -> list[str]:
    """Where the counts say other than the catalog's rows would."""
    wrong = []
    if counts.matching != (n := listed(filters, show_private)):
        wrong.append(f"matching {counts.matching} != {n}")
    for verdict in (ANY_INCONSISTENT, *VERDICTS, NOT_AUDITED):
        if counts.facets[verdict] != (n := listed(replace(filters, verdict=verdict), show_private)):
            wrong.append(f"verdict {verdict}: {counts.facets[verdict]} != {n}")
    for status in (ANY_NEEDS_ACTION, *STATUSES):
        if counts.headlines[status] != (n := listed(replace(filters, headline=status), show_private)):
            wrong.append(f"status {status}: {counts.headlines[status]} != {n}")
    visible = Package.objects.visible(show_private).exclude(latest_revision__architecture="")
    architectures = sorted(set(visible.values_list("latest_revision__architecture", flat=True)) - {None})
    if counts.architectures != architectures:
        wrong.append(f"architectures {counts.architectures} != {architectures}")
    return wrong


@pytest.mark.parametrize("seed", range(4))
def test_every_count_is_what_its_filter_lists(seed: int) -> None:
    random_catalog(seed)
    for show_private in (False, True):
        for filters in FILTERS:
            counts = catalog_counts(filters, show_private)
            assert disagreements(counts, filters, show_private) == [], (filters, show_private)


def test_the_catalogs_hold_older_broken_revisions_nodes_ran_in_the_window() -> None:
    """What the random catalogs must hold for the counts' second read to matter, and the control: the
    counts without what nodes ran (``_served_facets`` read as nothing) disagree with the rows."""
    for seed in range(4):
        random_catalog(seed)
    since = timezone.now() - timedelta(days=7)
    found = facets._served_facets(since)
    older = {package for packages in found.values() for package in packages}
    assert len(older) >= 4
    broken = LastServed.objects.filter(last_at__gte=since, revision__verdict__in=INCONSISTENT_VERDICTS)
    assert broken.exclude(revision_id=F("package__latest_revision_id")).exists()
    assert LastServed.objects.filter(last_at__gte=since, revision__headline__in=NEEDS_ACTION).exists()
    with mock.patch.object(facets, "_served_facets", return_value={}):
        wrong = [
            problem
            for filters in FILTERS
            for problem in disagreements(catalog_counts(filters, True), filters, True)
        ]
    assert any(problem.startswith("verdict inconsistent") for problem in wrong), wrong
    assert any(problem.startswith("status needs-action") for problem in wrong), wrong


COMPILED = (
    *FILTERS,
    CatalogFilters(status="running"),
    CatalogFilters(refused_by="v0.78.0"),  # built by the ORM each time (its text sits in a LIKE pattern)
    CatalogFilters(q="%_\\ x", architecture="llama", status="done", schema=1, mtp_detected=False, alert=True),
    CatalogFilters(q="P1X", mtp_declared=True, window_days=30),
)


@pytest.mark.parametrize("seed", range(2))
def test_the_compiled_counts_read_what_their_queryset_does(seed: int) -> None:
    """facets._counted (compiled once per shape of the filters) reads the rows its queryset reads, for
    every filter, reader and list of packages that ran broken revisions (none, one, all)."""
    random_catalog(seed)
    for filters in COMPILED:
        since = window_start(filters.window_days)
        served = facets._served_facets(since)
        ran = sorted({package for packages in served.values() for package in packages})
        assert ran
        for show_private in (False, True):
            for ran_broken in (ran, ran[:1], []):
                read = facets._counted(filters, since, show_private, ran_broken)
                built = list(facets._counts_of(filters, since, show_private, ran_broken))
                assert sorted(read, key=repr) == sorted(built, key=repr), (filters, show_private)


def test_one_compiled_counts_read_serves_every_value_of_its_filters() -> None:
    random_catalog(0)
    since = window_start(7)
    compiled._compiled.cache_clear()
    for q in ("x1", "X2", "layers"):
        for days in (1, 7):
            filters = CatalogFilters(q=q, schema=2, alert=True)
            facets._counted(filters, since - timedelta(days=days), False, [days, days + 1])
    assert compiled._compiled.cache_info().misses == 1 and compiled._compiled.cache_info().hits == 5
    facets._counted(CatalogFilters(q="x1", schema=1, alert=True), since, False, [1, 2])  # compiled in
    assert compiled._compiled.cache_info().misses == 2


def test_a_filter_the_compiled_read_does_not_carry_is_counted_by_the_orm(monkeypatch: Any) -> None:
    """A release's refusals (its text sits in a LIKE pattern, which a stand-in cannot take) is not carried
    by the compiled read's arguments: its counts are built by the ORM for its values. The control: taken
    for carried, the compiled read counts as if the filter were not set."""
    random_catalog(1)
    since = window_start(7)
    refused = CatalogFilters(refused_by="v0.78.0")
    for filters in COMPILED:
        arguments = as_arguments(filters, since, window=filters.alert)
        assert carried(filters, arguments) == (filters != refused), filters
    built = sorted(facets._counts_of(refused, since, False, []), key=repr)
    assert sorted(facets._counted(refused, since, False, []), key=repr) == built
    monkeypatch.setattr(facets, "carried", lambda filters, arguments: True)
    unfiltered = sorted(facets._counts_of(CatalogFilters(), since, False, []), key=repr)
    assert sorted(facets._counted(refused, since, False, []), key=repr) == unfiltered != built


@pytest.mark.parametrize("seed", range(2))
def test_the_compiled_first_page_reads_what_the_catalogs_queryset_does(seed: int) -> None:
    """The catalog's first page in the packages' own order, read by SQL compiled once per shape of the
    filters and page (listing._first_page): the instances the catalog's queryset makes, their latest
    revision and annotations included, for every filter, reader and page length; none for a filter the
    arguments do not carry (the paginator's page reads it)."""
    random_catalog(seed)
    for filters in (*COMPILED, *(replace(one, sort="-repo") for one in FILTERS)):
        for show_private in (False, True):
            for per_page in (1, 3, 50):
                read = listing._first_page(filters, show_private, per_page)
                if filters.refused_by:
                    assert read is None
                    continue
                built = list(catalog_queryset(filters, show_private)[:per_page])
                assert read is not None and [_row(p) for p in read] == [_row(p) for p in built], filters


def _row(package: Package) -> tuple[Any, ...]:
    """What a catalog row reads of a package: its fields, its latest revision's and its annotations."""
    revision = package.latest_revision
    latest = None if revision is None else {k: v for k, v in vars(revision).items() if not k.startswith("_")}
    own = {k: v for k, v in vars(package).items() if not k.startswith("_")}
    return own, latest, package.get_deferred_fields()
