"""Discovery as mesh-llm does it (issue 41 items 5 and 7; docs/rules.md section 6b): a tracked namespace's
repos are packages when they hold model-package.json, found through the Hub's API, not the name; catalog
`variants` as an object or an array, each package row's `source_revision` kept as the source model's
revision; and the model card's `base_model` and `experimental` tag on the package page and in the API."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from django.test import Client

from packages_app import hub, tracking
from packages_app.devhub import DevHub
from packages_app.devhub.generator import QWEN38_MTP2_REPO, QWEN38_MTP2_SOURCE, QWEN38_REPO
from packages_app.models import Package

pytestmark = pytest.mark.django_db
# The source model's revision as the generator makes it up (a sha1 of "source-revision" and the source repo).
MTP2_SOURCE_REVISION = hashlib.sha1(
    f"source-revision\0{QWEN38_MTP2_SOURCE}".encode(), usedforsecurity=False
).hexdigest()


def test_a_repo_without_layers_in_its_name_holding_a_manifest_is_discovered_one_without_is_not(
    hub_settings: DevHub,
) -> None:
    found = tracking.discover_packages(["meshllm"], "meshllm/catalog")

    assert QWEN38_MTP2_REPO in found.found and QWEN38_MTP2_REPO in found.tracked
    assert QWEN38_MTP2_SOURCE not in found.found
    assert not Package.objects.filter(repo_id=QWEN38_MTP2_SOURCE).exists()


def test_the_catalog_rows_of_both_variant_shapes_are_kept_with_the_source_models_revision(
    hub_settings: DevHub, client: Client
) -> None:
    tracking.discover_packages(["meshllm"], "meshllm/catalog")

    (row,) = Package.objects.get(repo_id=QWEN38_MTP2_REPO).catalog_rows  # an array-shaped entry
    assert row["entry"] == f"entries/{QWEN38_MTP2_SOURCE}.json" and row["variant"] == "UD-Q4_K_XL"
    assert row["source_repo"] == QWEN38_MTP2_SOURCE and row["source_revision"] == MTP2_SOURCE_REVISION
    (object_row,) = Package.objects.get(repo_id=QWEN38_REPO).catalog_rows  # an object-shaped entry
    assert object_row["variant"] == "UD-Q4_K_XL" and object_row["layer_count"] == 65
    detail = client.get(f"/api/v1/packages/{QWEN38_MTP2_REPO}").json()
    assert detail["catalog"] == [row]


@pytest.mark.parametrize(
    ("variants", "expected"),
    [
        ({"Q4": {"packages": [{"repo": "o/a"}]}}, [("o/a", "Q4")]),
        ([{"name": "Q4", "packages": [{"repo": "o/a", "source_revision": "s1"}]}], [("o/a", "Q4")]),
        ([{"packages": [{"repo": "o/b"}]}, "junk", 7], [("o/b", "0")]),
        ("a string", []),
        ({"Q4": {"packages": [{"repo": "o/c", "type": "gguf"}]}}, []),  # not a layer package
    ],
    ids=["object", "array", "array with junk", "neither", "another type"],
)
def test_catalog_variants_are_read_as_an_object_or_an_array(variants: Any, expected: list[Any]) -> None:
    rows = list(hub.catalog_entry_rows("entries/o/x.json", {"variants": variants}))
    assert [(r.repo, r.variant) for r in rows] == expected


def test_a_catalog_rows_source_revision_falls_back_to_the_variants_source_revision() -> None:
    entry = {
        "variants": {"Q4": {"source": {"repo": "up/m", "revision": "r" * 40}, "packages": [{"repo": "o/a"}]}}
    }
    (row,) = hub.catalog_entry_rows("entries/up/m.json", entry)
    assert (row.source_repo, row.source_revision) == ("up/m", "r" * 40)


def test_a_repo_the_listing_gives_without_files_is_asked_for_its_own(
    hub_settings: DevHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Bare:  # a listing entry that does not say which files the repo holds
        def __init__(self, repo_id: str) -> None:
            self.id = repo_id

    listed = [Bare(QWEN38_MTP2_REPO), Bare(QWEN38_MTP2_SOURCE)]
    monkeypatch.setattr(hub.client.HfApi, "list_models", lambda self, **kw: iter(listed))

    found = hub.namespace_packages("meshllm", endpoint=hub_settings.url)

    assert set(found) == {QWEN38_MTP2_REPO}  # each repo's own info said which holds a manifest


def test_past_the_probe_cap_the_repos_are_reported_not_dropped_silently(
    hub_settings: DevHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Bare:
        def __init__(self, repo_id: str) -> None:
            self.id = repo_id

    monkeypatch.setattr(hub.client, "MAX_MANIFEST_PROBES", 1)
    listed = [Bare(QWEN38_MTP2_REPO), Bare(QWEN38_MTP2_SOURCE)]
    monkeypatch.setattr(hub.client.HfApi, "list_models", lambda self, **kw: iter(listed))
    skipped: list[tuple[str, str]] = []

    found = hub.namespace_packages(
        "meshllm", endpoint=hub_settings.url, on_skip=lambda r, w: skipped.append((r, w))
    )

    assert set(found) == {QWEN38_MTP2_REPO}
    assert [r for r, _ in skipped] == [QWEN38_MTP2_SOURCE] and "does not ask each one" in skipped[0][1]


def test_a_node_naming_a_repo_without_a_manifest_does_not_get_it_tracked(hub_settings: DevHub) -> None:
    source = hub.HubSource(QWEN38_MTP2_SOURCE, endpoint=hub_settings.url, max_retries=1)
    assert tracking.confirm_package(QWEN38_MTP2_SOURCE, source) is None
    # The control: the package without -layers in its name, named the same way, is tracked.
    package = tracking.confirm_package(
        QWEN38_MTP2_REPO, hub.HubSource(QWEN38_MTP2_REPO, endpoint=hub_settings.url)
    )
    assert package is not None and package.repo_id == QWEN38_MTP2_REPO


# --- the model card -----------------------------------------------------------------------------------


def test_the_sync_keeps_the_cards_base_model_and_experimental_tag_and_the_page_shows_them(
    hub_settings: DevHub, client: Client
) -> None:
    tracking.sync_package(QWEN38_MTP2_REPO, hub.HubSource(QWEN38_MTP2_REPO, endpoint=hub_settings.url))
    tracking.sync_package(QWEN38_REPO, hub.HubSource(QWEN38_REPO, endpoint=hub_settings.url))

    package = Package.objects.get(repo_id=QWEN38_MTP2_REPO)
    assert package.base_model == QWEN38_MTP2_SOURCE and package.experimental
    page = client.get(f"/packages/{QWEN38_MTP2_REPO}/").content.decode()
    assert f'href="{hub_settings.url}/{QWEN38_MTP2_SOURCE}"' in page
    assert '<span class="badge warn" title="The model card tags it experimental' in page
    card = client.get(f"/api/v1/packages/{QWEN38_MTP2_REPO}").json()["model_card"]
    assert card["base_model"] == QWEN38_MTP2_SOURCE and card["experimental"] is True
    # The control: a package whose card has no experimental tag shows no badge.
    other = client.get(f"/packages/{QWEN38_REPO}/").content.decode()
    assert "tags it experimental" not in other and "unsloth/Qwen3.8-27B-GGUF" in other


def test_a_base_model_that_is_no_repo_id_is_shown_as_text_never_as_a_link(client: Client) -> None:
    Package.objects.create(repo_id="meshllm/odd-layers", private=False, base_model="javascript:alert(1)")
    page = client.get("/packages/meshllm/odd-layers/").content.decode()
    assert "<code>javascript:alert(1)</code>" in page and 'href="javascript' not in page
