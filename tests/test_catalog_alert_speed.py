"""The catalog's cheaper reads keep their answers: the served revisions' query compiled once per process,
the catalog's fix pull requests read through the rows' ids, the architectures from the counts' scan, the
alert filter as one list of LastServed rows, the search over the stored upper-cased repo id."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from packages_app.catalog import throughput
from packages_app.catalog.facets import catalog_counts
from packages_app.catalog.filters import CatalogFilters, alert_q, other_filters_q
from packages_app.catalog.listing import catalog_page
from packages_app.catalog.throughput import catalog_throughput
from packages_app.fleet import served as fleet_served
from packages_app.fleet import window as fleet_window
from packages_app.models import FixProposal, LastServed, Package, Revision
from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db


def served_fleet() -> list[Package]:
    """Three packages whose nodes ran an older revision and the latest, at different times; one unused."""
    now = timezone.now()
    packages = []
    for i, hours in enumerate((2, 30, 24 * 4)):
        package = f.make_package(f"meshllm/Served{i}-layers")
        old = f.make_revision(package, "undeclared-mtp", latest=False)
        latest = f.make_revision(package, "consistent-mtp", committed_at=f.BASE_TIME + timedelta(1))
        node = f.make_node(f"box-{i}")
        f.make_report(node, old, 3.0 + i, at=now - timedelta(hours=hours))
        f.make_report(node, latest, 5.0 + i, at=now - timedelta(hours=hours), mtp_used=True)
        packages.append(package)
    f.make_revision(f.make_package("meshllm/Quiet-layers"))
    return packages


@pytest.mark.parametrize("days", [1, 2, 7])
def test_the_compiled_served_query_reads_what_its_queryset_does(days: int) -> None:
    packages = served_fleet()
    since = fleet_window.window_start(days)
    for count in (1, 2, len(packages)):  # a compiled query per number of packages
        ids = [p.pk for p in packages[:count]]
        for latest in (True, False):
            compiled = fleet_served._served_rows(ids, since, latest)
            built = list(fleet_served._served_queryset(ids, since, latest))
            assert sorted(compiled, key=lambda r: r["pk"]) == sorted(built, key=lambda r: r["pk"])
            assert all(isinstance(row["assessment__headline"], dict) for row in compiled)


def test_without_the_latest_the_served_revisions_are_the_others_unchanged() -> None:
    packages = served_fleet()
    ids = [p.pk for p in packages]
    since = fleet_window.window_start(2)
    every = fleet_served.served_revisions(ids, since)
    others = fleet_served.served_revisions(ids, since, latest=False)
    assert others == {
        package: kept for package, served in every.items() if (kept := [s for s in served if not s.is_latest])
    }
    assert sorted(others) == ids[:2]  # the third package's nodes ran it 4 days ago
    assert [s.reports for s in others[ids[0]]] == [1] and others[ids[0]][0].alert
    assert fleet_served.served_revisions([], since) == {}


def test_the_compiled_throughput_query_binds_every_revision_asked_for() -> None:
    packages = served_fleet()
    ids = list(Revision.objects.filter(package__in=packages).order_by("pk").values_list("pk", flat=True))
    every = catalog_throughput(ids)
    assert sum(figures.reports for figures in every.values()) == 6
    assert any(figures.tps_mtp for figures in every.values()) and any(
        figures.alert for figures in every.values()
    )
    for count in range(1, len(ids)):  # a compiled query per number of revisions
        assert catalog_throughput(ids[-count:]) == {pk: every[pk] for pk in ids[-count:]}
    assert catalog_throughput([]) == {}


def make_fix(package: Package, revision: Revision, status: str, seed: str) -> FixProposal:
    return FixProposal.objects.create(
        package=package,
        revision=revision,
        base_sha=f.sha(seed),
        status=status,
        title="t",
        description="d",
        diff="",
        manifest="",
    )


@pytest.mark.parametrize(("sort", "page"), [("repo", 1), ("repo", 2), ("-updated", 1)])
def test_a_catalog_row_has_the_newest_fix_pull_request_sent_or_being_sent(sort: str, page: int) -> None:
    fixed, other = f.make_package("meshllm/Fixed-layers"), f.make_package("meshllm/Other-layers")
    revision = f.make_revision(fixed, "undeclared-mtp")
    other_revision = f.make_revision(other, "undeclared-mtp")
    make_fix(fixed, revision, FixProposal.Status.CLOSED, "a")
    shown = make_fix(fixed, revision, FixProposal.Status.OPEN, "b")
    make_fix(fixed, revision, FixProposal.Status.FAILED, "c")  # nothing sent: not shown
    make_fix(other, other_revision, FixProposal.Status.STALE, "d")
    if page == 2:  # a page read by its ids first
        for i in range(3):
            f.make_revision(f.make_package(f"meshllm/A{i}-layers"))
    result = catalog_page(CatalogFilters(sort=sort), page, 3)
    fixes = {row.package.repo_id: row.fix for row in result.rows}
    assert fixes["meshllm/Fixed-layers"] == shown and fixes["meshllm/Other-layers"] is None


def test_the_architectures_ignore_every_filter_but_what_the_reader_may_see() -> None:
    f.make_revision(f.make_package("meshllm/Llama-layers"), architecture="llama")
    f.make_revision(f.make_package("meshllm/Qwen-layers"), architecture="qwen35moe")
    f.make_revision(f.make_package("meshllm/Blank-layers"), architecture="")
    f.make_package("meshllm/Untouched-layers")
    secret = f.make_package("meshllm/Secret-layers")
    Package.objects.filter(pk=secret.pk).update(private=True)
    f.make_revision(secret, architecture="gemma3")

    for filters, matching in (
        (CatalogFilters(), 4),
        (CatalogFilters(q="Llama"), 1),
        (CatalogFilters(alert=True), 0),
    ):
        counts = catalog_counts(filters)
        assert counts.architectures == ["llama", "qwen35moe"], filters
        assert counts.matching == matching, filters
    assert catalog_counts(CatalogFilters(q="Llama"), show_private=True).architectures == [
        "gemma3",
        "llama",
        "qwen35moe",
    ]


def random_alerts(seed: int, packages: int = 16) -> None:
    """Packages whose latest and older revisions have weights with MTP or without, and LastServed rows
    whose newest report of MTP unused is inside the window, before it, or never."""
    rng = random.Random(seed)
    now = timezone.now()
    for i in range(packages):
        package = f.make_package(f"meshllm/U{seed}x{i}-layers")
        for latest in (False, True) if rng.random() < 0.5 else (True,):
            revision = f.make_revision(
                package,
                rng.choice(("undeclared-mtp", "consistent-no-mtp")),
                latest=latest,
                committed_at=f.BASE_TIME + timedelta(days=int(latest)),
            )
            if rng.random() < 0.8:
                unused = rng.choice((None, now - timedelta(days=1), now - timedelta(days=20)))
                last = now - timedelta(days=rng.choice((0, 20)))
                LastServed.objects.create(
                    revision=revision, package=package, last_at=last, last_unused_at=unused
                )


def alerting_as_two(since: datetime) -> set[int]:
    """The packages the alert filter listed as two conditions (the latest revision's, the window's)."""
    return set(
        Package.objects.filter(throughput.latest_alert_q() | fleet_served.served_alert_q(since)).values_list(
            "pk", flat=True
        )
    )


@pytest.mark.parametrize("seed", range(3))
def test_the_alert_filter_as_one_list_keeps_what_its_two_conditions_kept(seed: int) -> None:
    random_alerts(seed)
    for days in (2, 7, 30):
        since = fleet_window.window_start(days)
        kept = set(Package.objects.filter(alert_q(since)).values_list("pk", flat=True))
        assert kept == alerting_as_two(since), days
    assert alerting_as_two(fleet_window.window_start(7))  # something to keep, and something not
    assert Package.objects.exclude(pk__in=alerting_as_two(fleet_window.window_start(7))).exists()


def test_control_the_window_alone_misses_the_latest_revisions_unused_before_it() -> None:
    # What the latest revision's own condition adds: without it, a package whose latest revision's MTP
    # went unused before the window is no longer listed.
    for seed in range(3):
        random_alerts(seed)
    since = fleet_window.window_start(7)
    window_only = LastServed.objects.filter(last_unused_at__gte=since, revision__mtp_detected=True)
    assert set(
        Package.objects.filter(pk__in=window_only.values("package_id")).values_list("pk", flat=True)
    ) != (alerting_as_two(since))


@pytest.mark.parametrize(
    "text",
    [
        "Qwen3.5",
        "qwen3.5",
        "QWEN",
        "v0",
        "50%",
        "a_b",
        "\\",
        "-layers",
        "\u0131",
        "\u00e9",
    ],  # dotless i, e acute
)
def test_the_search_reads_the_stored_upper_cased_repo_id_as_icontains_would(text: str) -> None:
    for name in ("meshllm/Qwen3.5-35B-layers", "meshllm/qwen3.5-9B-v0-layers", "meshllm/a_b-50%-layers"):
        f.make_package(name)
    f.make_package("meshllm/Other-layers")
    searched = set(
        Package.objects.filter(other_filters_q(CatalogFilters(q=text))).values_list("pk", flat=True)
    )
    assert searched == set(Package.objects.filter(repo_id__icontains=text).values_list("pk", flat=True))


def test_control_the_stored_column_searched_as_typed_misses_another_case() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("SQLite's LIKE ignores ASCII case itself")
    f.make_package("meshllm/Qwen3.5-35B-layers")
    assert Package.objects.filter(repo_id__icontains="qwen3.5").exists()
    assert not Package.objects.filter(repo_upper__contains="qwen3.5").exists()
