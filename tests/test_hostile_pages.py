"""Pages that survive hostile but well-formed packages: a manifest nested 950 deep, 20,000 files, an audit
inflated by a 77,000-layer manifest. Each guard is shown against a control without it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from packages_app import hub, ingest
from packages_app.catalog import files as catalog_files
from packages_app.models import Package, PackageFile, Revision
from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db

DEEP = 950
ADMIN = "/" + settings.MESHDASH_ADMIN_PATH + "packages_app/"


def deep_manifest() -> bytes:
    return b'{"schema_version": 1, "x": ' + b"[" * DEEP + b"]" * DEEP + b"}"


def quiet(client: Client) -> Client:
    client.raise_request_exception = False
    return client


# --- a manifest nested 950 deep ---------------------------------------------------------------------


@pytest.fixture
def deep_package(tmp_path: Path) -> Revision:
    (tmp_path / "model-package.json").write_bytes(deep_manifest())
    outcome = ingest.ingest_revision("meshllm/deep-layers", source=hub.LocalFolderSource(tmp_path))
    f.make_revision(Package.objects.get(), "consistent-no-mtp", latest=False)
    return outcome.revision


def test_a_manifest_nested_950_deep_is_kept_as_bytes_but_not_stored_parsed(deep_package: Revision) -> None:
    rev = Revision.objects.get(pk=deep_package.pk)
    assert bytes(rev.manifest_bytes or b"") == deep_manifest()
    assert rev.manifest_json is None and rev.status == "failed"
    assert "nest" in rev.error  # json's own recursion limit or the parser's 64 levels, by call depth


def test_a_manifest_200_deep_that_json_reads_is_still_not_stored_parsed() -> None:
    data = b'{"schema_version": 1, "x": ' + b"[" * 200 + b"]" * 200 + b"}"
    assert json.loads(data)  # the control: json reads it, so without the guard it would be stored
    parsed, error = ingest._decode_manifest(data)
    assert parsed is None and error is not None and "more than 64 levels deep" in error


@pytest.mark.parametrize(
    "url",
    [
        "/",
        "/packages/meshllm/deep-layers/",
        "/packages/meshllm/deep-layers/diff",
        "/api/v1/packages",
        "/api/v1/packages/meshllm/deep-layers",
        ADMIN + "revision/",
        ADMIN + "package/",
    ],
)
def test_no_page_fails_on_a_manifest_nested_950_deep(
    admin_client: Client, deep_package: Revision, url: str
) -> None:
    assert quiet(admin_client).get(url).status_code < 500


def test_the_admin_change_page_of_that_revision_renders(admin_client: Client, deep_package: Revision) -> None:
    assert quiet(admin_client).get(f"{ADMIN}revision/{deep_package.pk}/change/").status_code == 200


def test_control_the_same_value_stored_parsed_fails_the_package_page(client: Client) -> None:
    package = f.make_package("meshllm/deep-layers")
    revision = f.make_revision(package, "consistent-no-mtp")
    # Written as the text a shallower ingest stored (encoding it here, under pytest's deep stack, may fail).
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE packages_app_revision SET manifest_json = %s{cast} WHERE id = %s",  # noqa: S608
            [deep_manifest().decode(), revision.pk],
        )
    assert quiet(client).get("/packages/meshllm/deep-layers/").status_code == 500


# --- 20,000 files --------------------------------------------------------------------------------

MANY = 20_000


@pytest.fixture
def many_files() -> Revision:
    revision = f.make_revision(f.make_package("meshllm/wide-layers"), "consistent-no-mtp")
    kv = {"general.architecture": "qwen35moe", "note": "x" * 2000}
    PackageFile.objects.bulk_create(
        (PackageFile(revision=revision, path=f"junk/{i:06d}.bin", size=i, kv=kv) for i in range(MANY)),
        batch_size=2000,
    )
    return revision


def test_a_package_with_20000_files_renders_one_small_page_of_them(
    client: Client, many_files: Revision
) -> None:
    summary = client.get("/packages/meshllm/wide-layers/").content.decode()
    # The summary names a few stray files and counts the rest.
    assert summary.count('<td data-label="Path" class="path">') == catalog_files.OVERVIEW_OTHER_FILES
    assert f"{MANY - catalog_files.OVERVIEW_OTHER_FILES} other files not listed above" in summary
    response = client.get("/packages/meshllm/wide-layers/?files=all")
    body = response.content.decode()
    assert response.status_code == 200
    # One row per file shown (each row names its path several times: text, file link, Hub link).
    assert body.count('<td data-label="Path" class="path">') == catalog_files.FILES_PER_PAGE
    assert f"files page 1 of {MANY // catalog_files.FILES_PER_PAGE}" in body
    assert len(body) < 1_000_000
    last = client.get(f"/packages/meshllm/wide-layers/?files_page={MANY // catalog_files.FILES_PER_PAGE}")
    assert "junk/019999.bin" in last.content.decode()


def test_control_without_pagination_the_page_grows_with_the_files(
    client: Client, many_files: Revision, monkeypatch: pytest.MonkeyPatch
) -> None:
    paged = len(client.get("/packages/meshllm/wide-layers/?files=all").content)
    monkeypatch.setattr(catalog_files, "FILES_PER_PAGE", MANY)
    monkeypatch.setattr(catalog_files.revision_files, "__defaults__", (1, MANY))
    whole = len(client.get("/packages/meshllm/wide-layers/?files=all").content)
    assert whole > 20 * paged


def test_the_admin_file_list_never_loads_the_json_columns(admin_client: Client, many_files: Revision) -> None:
    with CaptureQueriesContext(connection) as queries_run:
        response = admin_client.get(ADMIN + "packagefile/")
    assert response.status_code == 200
    listing = [q["sql"] for q in queries_run.captured_queries if "packages_app_packagefile" in q["sql"]]
    assert listing and not any('"kv"' in sql or '"tensors"' in sql for sql in listing)
    assert len(queries_run.captured_queries) < 20
    assert len(response.content) < 500_000


def test_control_the_stock_query_would_load_them() -> None:
    assert '"kv"' in str(PackageFile.objects.all().query).replace("packages_app_packagefile.", "")


def test_the_admin_delete_page_counts_files_instead_of_listing_them(
    admin_client: Client, many_files: Revision
) -> None:
    package = Package.objects.get()
    page = admin_client.get(f"{ADMIN}package/{package.pk}/delete/")
    assert page.status_code == 200 and len(page.content) < 100_000
    assert "20000" in page.content.decode().replace(",", "")
    assert admin_client.post(f"{ADMIN}package/{package.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not PackageFile.objects.exists()


# --- an audit inflated by a 77,000-layer manifest ---------------------------------------------------


def inflated_audit() -> dict[str, Any]:
    files = [
        {"path": f"layers/layer-{i:05d}.gguf", "status": "match", "manifest_size": i} for i in range(77_000)
    ]
    return {
        "verdict": "undeclared-mtp",
        "provenance": {"files": files},
        "detected": {"blocks": [{"index": i, "kinds": ["attn"]} for i in range(77_000)]},
        "suggested_generation": {"patched_manifest": "x" * (16 * 1024 * 1024), "generation": {"a": 1}},
    }


def test_a_stored_audit_is_capped_and_says_what_was_cut() -> None:
    doc = ingest.cap_audit(inflated_audit())
    size = len(json.dumps(doc))
    assert size < 1_000_000
    cut = {c["path"]: (c["kept"], c["total"]) for c in doc["truncated"]}
    assert cut == {
        "detected.blocks": (ingest.AUDIT_LIST_LIMIT, 77_000),
        "provenance.files": (ingest.AUDIT_LIST_LIMIT, 77_000),
        "suggested_generation.patched_manifest": (0, 16 * 1024 * 1024),
    }
    assert doc["verdict"] == "undeclared-mtp" and doc["suggested_generation"]["generation"] == {"a": 1}


def test_control_the_uncapped_audit_is_over_20_mb() -> None:
    assert len(json.dumps(inflated_audit())) > 20_000_000


def test_the_package_page_says_what_was_cut_and_the_patched_manifest_why_it_is_missing(
    client: Client,
) -> None:
    revision = f.make_revision(f.make_package("meshllm/big-layers"), "undeclared-mtp")
    Revision.objects.filter(pk=revision.pk).update(audit=ingest.cap_audit(inflated_audit()))
    body = client.get("/packages/meshllm/big-layers/").content.decode()
    assert "the first 2000 of 77000 items are kept" in body
    response = client.get("/packages/meshllm/big-layers/manifest.patched.json")
    assert response.status_code == 404 and "was too large to store" in response.content.decode()


def test_a_small_package_read_in_one_query_shows_the_overview_read_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    revision = f.make_revision(f.make_package("meshllm/m-layers"), "consistent-mtp", files=True)
    notes = (PackageFile(revision=revision, path=f"notes/{i:02d}.md") for i in range(20))
    PackageFile.objects.bulk_create(notes)
    revision.audit["provenance"]["files"] = f.provenance_files(41, mismatch=12)
    revision.save()
    with CaptureQueriesContext(connection) as one_read:
        small = catalog_files.revision_file_overview(revision, [40])
    monkeypatch.setattr(catalog_files, "OVERVIEW_ONE_READ", 10)  # as a package of more files is read
    with CaptureQueriesContext(connection) as apart:
        big = catalog_files.revision_file_overview(revision, [40])
    assert small == big
    assert small.total == revision.files.count() and small.more_other_files > 0  # stray files beyond 12
    assert any(not getattr(item, "is_range", False) for item in small.items)  # the mismatch and MTP rows
    assert (len(one_read), len(apart)) == (1, 4)
