"""catalog/: the read-side selectors behind the catalog, package pages, ingest status and JSON API."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from packages_app import throughput
from packages_app.catalog.diff import DIFF_INPUT_LIMIT, revision_diff
from packages_app.catalog.errors import AmbiguousRevision, LookupFailed
from packages_app.catalog.facets import catalog_counts
from packages_app.catalog.files import kv_rows, revision_files
from packages_app.catalog.filters import CatalogFilters
from packages_app.catalog.ingest_status import ingest_overview
from packages_app.catalog.listing import catalog_page, catalog_queryset
from packages_app.catalog.lookups import require_revision, resolve_revision
from packages_app.models import Package, PackageFile, Revision
from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db


def repos(filters: CatalogFilters) -> list[str]:
    return [p.repo_id for p in catalog_queryset(filters)]


@pytest.fixture
def mix() -> dict[str, Package]:
    return f.catalog_mix()


def test_any_inconsistent_lists_exactly_the_four_inconsistent_verdicts(mix: dict[str, Package]) -> None:
    inconsistent = ("undeclared-mtp", "declared-without-weights", "declaration-mismatch", "invalid-manifest")
    assert set(repos(CatalogFilters(verdict="inconsistent"))) == {mix[v].repo_id for v in inconsistent}


def test_not_audited_lists_packages_still_ingesting_or_without_any_revision(mix: dict[str, Package]) -> None:
    f.make_package("meshllm/just-tracked-layers")
    assert repos(CatalogFilters(verdict="unaudited")) == [
        mix["running"].repo_id,
        "meshllm/just-tracked-layers",
    ]


def test_facets_count_every_verdict_under_the_other_filters(mix: dict[str, Package]) -> None:
    facets = catalog_counts(CatalogFilters(verdict="consistent-mtp", schema=1)).facets
    # The verdict filter itself is ignored, so the user sees what each verdict would give.
    assert facets["undeclared-mtp"] == 1
    assert facets["consistent-mtp"] == 0  # the only consistent-mtp package is schema v2
    assert facets["inconsistent"] == 4
    assert facets["unaudited"] == 1


def test_filters_combine(mix: dict[str, Package]) -> None:
    filters = CatalogFilters(mtp_detected=True, mtp_declared=False, architecture="qwen35moe")
    assert repos(filters) == [f.QWEN35_REPO]
    assert repos(CatalogFilters(status="running")) == [mix["running"].repo_id]
    assert repos(CatalogFilters(q="qwen3")) == [f.QWEN35_REPO, mix["declaration-mismatch"].repo_id]


def test_sorting_by_size_puts_unknown_sizes_last(mix: dict[str, Package]) -> None:
    big = f.make_package("meshllm/DeepSeek-V3.2-UD-Q4_K_XL-layers")
    f.make_revision(big, block_count=61, total_bytes=407 * 10**9)
    assert repos(CatalogFilters(sort="-size"))[0] == big.repo_id
    assert repos(CatalogFilters(sort="size"))[-1] == mix["running"].repo_id


def test_the_alert_filter_keeps_packages_whose_nodes_never_used_their_mtp(mix: dict[str, Package]) -> None:
    qwen = mix["undeclared-mtp"].latest_revision
    assert qwen is not None
    f.make_report(f.make_node(), qwen, 3.17)
    assert repos(CatalogFilters(alert=True)) == [f.QWEN35_REPO]


def test_a_catalog_page_carries_throughput_for_its_rows(mix: dict[str, Package]) -> None:
    qwen = mix["undeclared-mtp"].latest_revision
    assert qwen is not None
    f.qwen35_reports(qwen, count=3)
    result = catalog_page(CatalogFilters(q="Qwen3.5"), 1, 50)
    (row,) = result.rows
    assert row.throughput is not None and row.throughput.reports == 3 and row.throughput.alert
    assert row.throughput.tps_no_mtp == pytest.approx(3.22, rel=0.01)  # the median, from the sketch


def test_a_page_past_the_end_is_clamped_for_the_browser(mix: dict[str, Package]) -> None:
    assert catalog_page(CatalogFilters(), 99, 5).page.number == 2


def test_a_revision_is_found_by_any_unique_sha_prefix() -> None:
    package = f.qwen35_package()
    assert resolve_revision(package, "69CBD9").commit_sha == f.QWEN35_SHA  # type: ignore[union-attr]
    assert resolve_revision(package, None).commit_sha == f.QWEN35_SHA  # type: ignore[union-attr]


def test_an_ambiguous_prefix_asks_for_more_digits() -> None:
    package = f.make_package("meshllm/a-layers")
    f.make_revision(package, commit_sha="abcd" + "1" * 36)
    f.make_revision(package, commit_sha="abcd" + "2" * 36)
    with pytest.raises(AmbiguousRevision, match="give more digits"):
        resolve_revision(package, "abcd")


@pytest.mark.parametrize("ref", ["abc", "zzzz", "../etc", "0" * 41, "ffffffff"])
def test_a_ref_that_is_no_sha_or_matches_nothing_is_not_found(ref: str) -> None:
    package = f.qwen35_package(with_history=False)
    with pytest.raises(LookupFailed):
        resolve_revision(package, ref)


def test_a_package_without_revisions_resolves_to_none_unless_one_is_required() -> None:
    package = f.make_package("meshllm/new-layers")
    assert resolve_revision(package, None) is None
    with pytest.raises(LookupFailed, match="no revision yet"):
        require_revision(package, None)


def test_file_rows_compare_the_manifest_sha256_with_the_hub_lfs_sha256() -> None:
    package = f.make_package("meshllm/b-layers")
    revision = f.make_revision(package, "undeclared-mtp", files=True)
    missing = {"path": "layers/layer-041.gguf", "manifest_size": 5, "status": "missing_on_hub"}
    revision.audit["provenance"]["files"] = [*f.provenance_files(41, mismatch=7), missing]
    revision.save()
    rows = {row.file.path: row for row in revision_files(revision).rows}
    assert rows["layers/layer-007.gguf"].status == "sha256_mismatch"
    assert rows["layers/layer-006.gguf"].status == "match"
    assert rows["layers/layer-041.gguf"].status == "missing_on_hub"
    assert rows["layers/layer-041.gguf"].file.pk is None
    assert rows["model-package.json"].status == ""


def test_file_rows_survive_an_audit_of_an_unexpected_shape() -> None:
    revision = f.make_revision(f.make_package("meshllm/c-layers"), files=True, audit={"provenance": [1, 2]})
    assert len(revision_files(revision).rows) == 42
    audited = revision.audited
    assert audited.problems == () and audited.detected.blocks == () and audited.suggestion is None


def test_problems_are_listed_errors_first_with_evidence_as_text() -> None:
    revision = f.make_revision(f.make_package("meshllm/d-layers"), "undeclared-mtp")
    revision.audit["problems"].reverse()
    problems = revision.audited.problems_by_severity()
    assert [p.severity for p in problems] == ["error", "warning"]
    assert problems[0].evidence_lines() == [("mtp_blocks", "[40]"), ("generation", "null")]


def test_kv_rows_summarise_arrays_and_fold_long_text() -> None:
    rows = {row.key: row for row in kv_rows(f.qwen35_kv() | {"raw.list": list(range(20))})}
    assert rows["tokenizer.ggml.tokens"].summary == "STRING[151936]"
    assert rows["raw.list"].summary == "[0, 1, 2, 3, 4, 5, 6, 7, ... (20 items)]"
    assert rows["qwen35moe.block_count"].summary == "41"
    template = rows["tokenizer.chat_template"]
    assert len(template.summary) == 243 and template.full == f.qwen35_kv()["tokenizer.chat_template"]
    assert kv_rows(None) == []


def test_a_diff_lists_files_added_removed_and_changed_and_the_verdict_change() -> None:
    package = f.make_package("meshllm/e-layers")
    old = f.make_revision(package, "consistent-mtp", committed_at=f.BASE_TIME - timedelta(days=1), files=True)
    new = f.make_revision(package, "undeclared-mtp", files=True)
    PackageFile.objects.filter(revision=new, path="layers/layer-040.gguf").delete()
    PackageFile.objects.filter(revision=new, path="layers/layer-003.gguf").update(lfs_sha256="f" * 64)
    PackageFile.objects.create(revision=new, path="shared/common.gguf", size=10)
    diff = revision_diff(old, new)
    assert [x.path for x in diff.added] == ["shared/common.gguf"]
    assert [x.path for x in diff.removed] == ["layers/layer-040.gguf"]
    assert [a.path for a, _ in diff.changed] == ["layers/layer-003.gguf"]
    assert diff.verdict_changed
    assert '-  "generation": {' in diff.manifest_diff


def test_the_ingest_overview_lists_unfinished_oldest_first_and_failures_with_errors() -> None:
    package = f.make_package("meshllm/f-layers")
    running = f.make_revision(package, "", status=Revision.Status.RUNNING, files_total=10, files_done=3)
    queued = f.make_revision(package, "", status=Revision.Status.QUEUED, latest=False)
    failed = f.make_revision(
        package, "", status=Revision.Status.FAILED, error="HubUnavailable: 503", latest=False
    )
    Package.objects.filter(pk=package.pk).update(sync_error="HubNotFound: gone")
    overview = ingest_overview()
    assert [r.pk for r in overview.unfinished] == [running.pk, queued.pk]
    assert [r.error for r in overview.failed] == [failed.error]
    assert [p.repo_id for p in overview.sync_errors] == [package.repo_id]
    assert overview.counts == {"queued": 1, "running": 1, "done": 0, "failed": 1}


def test_a_revisions_figures_follow_every_new_report_without_a_cache() -> None:
    revision = f.make_revision(f.make_package("meshllm/busy-layers"), "undeclared-mtp")
    node = f.make_node()
    for hour in range(3):
        f.make_report(node, revision, 3.0, at=f.BASE_TIME + timedelta(hours=hour))
    assert (figures := throughput.revision_throughput(revision.pk)) and figures.mtp_off.reports == 3
    f.make_report(node, revision, 9.0, at=f.BASE_TIME - timedelta(days=1))  # an older report, linked late
    figures = throughput.revision_throughput(revision.pk)
    assert figures is not None and figures.mtp_off.reports == 4


def test_a_revision_nobody_reported_on_costs_one_query(django_assert_num_queries: Any) -> None:
    revision = f.make_revision(f.make_package("meshllm/quiet-layers"))
    with django_assert_num_queries(1):
        assert throughput.revision_throughput(revision.pk) is None


@pytest.mark.parametrize(
    ("span", "bucket"),
    [
        (timedelta(minutes=30), "hour"),
        (timedelta(days=1), "hour"),
        (timedelta(days=30), "day"),
        (timedelta(days=900), "week"),
    ],
)
def test_the_timeline_bucket_grows_with_the_span_of_the_reports(span: timedelta, bucket: str) -> None:
    assert throughput.time_bucket(span) == bucket


def test_manifests_too_large_to_diff_quickly_are_not_diffed_line_by_line() -> None:
    package = f.make_package("meshllm/huge-layers")
    huge = {"layers": [{"i": i} for i in range(DIFF_INPUT_LIMIT)]}
    old = f.make_revision(package, manifest_json=huge, committed_at=f.BASE_TIME - timedelta(days=1))
    new = f.make_revision(package, manifest_json={"layers": []})
    diff = revision_diff(old, new)
    assert diff.too_large and diff.manifest_diff == []
