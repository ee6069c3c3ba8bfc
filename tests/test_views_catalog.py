"""The catalog at ``/``: rows, filters in the URL, facets, sorting, pagination, helpful errors."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from packages_app.models import Package, RevisionRollup
from tests import dashboard_factories as f
from tests.rollup_checks import assert_revision_rollups_add_up_the_every_node_cells

pytestmark = pytest.mark.django_db


def text(response: Any) -> str:
    return response.content.decode()


def test_it_lists_every_package_with_its_audit_summary(client: Client) -> None:
    mix = f.catalog_mix()
    body = text(client.get("/"))
    for package in mix.values():
        assert f"/packages/{package.owner}/{package.name}/" in body
    assert "69cbd9fc" in body and "qwen35moe" in body and 'title="19,967,000,000 bytes">20.0 GB' in body
    assert 'class="badge verdict verdict-undeclared-mtp ' in body
    assert "17/64" in body  # the running ingest shows its progress


def test_filtering_to_any_inconsistent_shows_only_inconsistent_packages(client: Client) -> None:
    mix = f.catalog_mix()
    body = text(client.get("/", {"verdict": "inconsistent"}))
    assert mix["undeclared-mtp"].name in body and mix["invalid-manifest"].name in body
    assert mix["consistent-mtp"].name not in body and mix["consistent-no-mtp"].name not in body
    assert "4 packages" in body


def test_the_facets_link_to_each_verdict_keeping_the_other_filters(client: Client) -> None:
    f.catalog_mix()
    body = text(client.get("/", {"schema": "1", "sort": "-size"}))
    assert 'href="?schema=1&amp;sort=-size&amp;verdict=undeclared-mtp"' in body
    assert "undeclared-mtp <b>1</b>" in body


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"verdict": "mostly-fine"}, "verdict: Select a valid choice."),
        ({"schema": "7"}, "schema: Select a valid choice."),
        ({"page": "abc"}, "page: Enter a whole number."),
        ({"page": "0"}, "page: Ensure this value is greater than or equal to 1."),
        ({"per_page": "100000"}, "per_page: Ensure this value is less than or equal to 200."),
        ({"architecture": "qwen 35"}, "architecture: An architecture name is letters"),
        ({"mtp_detected": "maybe"}, "mtp_detected: Select a valid choice."),
        ({"sort": "price"}, "sort: Select a valid choice."),
        ({"q": "x" * 200}, "q: Ensure this value has at most 96 characters"),
    ],
)
def test_an_invalid_filter_falls_back_to_its_default_with_a_message_naming_it(
    client: Client, params: dict[str, str], message: str
) -> None:
    mix = f.catalog_mix()
    response = client.get("/", {**params, "schema": params.get("schema", "1")})
    assert response.status_code == 200
    assert message.rstrip(".") in text(response)
    assert "showing the default instead" in text(response)
    # The valid filter next to it still applies: schema=1 leaves out the one v2 package.
    assert mix["consistent-mtp"].name not in text(response) or "schema" in params
    assert 'select name="architecture"' in text(response)


def test_a_hostile_filter_value_is_echoed_escaped(client: Client) -> None:
    body = text(client.get("/", {"verdict": "<script>alert(1)</script>"}))
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_sorting_and_pagination_are_in_the_url(client: Client) -> None:
    for i in range(7):
        f.make_revision(f.make_package(f"meshllm/pkg-{i}-layers"), total_bytes=(i + 1) * 10**9)
    body = text(client.get("/", {"sort": "-size", "per_page": "3", "page": "2"}))
    assert "pkg-3-layers" in body and "pkg-6-layers" not in body and "pkg-0-layers" not in body
    assert "page 2 of 3" in body
    assert 'href="?sort=-size&amp;per_page=3&amp;page=3"' in body
    assert 'aria-sort="descending"' in body


def test_throughput_and_the_alert_show_once_nodes_report(client: Client) -> None:
    package = f.qwen35_package(with_history=False)
    assert package.latest_revision is not None
    f.qwen35_reports(package.latest_revision, count=3)
    body = text(client.get("/"))
    assert "3.2" in body and 'class="badge alert"' in body
    assert f.QWEN35_REPO.split("/")[1] in text(client.get("/", {"alert": "on"}))
    assert "No package matches" in text(client.get("/", {"alert": "on", "q": "Llama"}))


def catalog_queries(client: Client, params: dict[str, str]) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/", params).status_code == 200
    return len(queries)


def add_packages(count: int, start: int) -> None:
    node = f.make_node(f"node-{start}")
    for i in range(start, start + count):
        revision = f.make_revision(f.make_package(f"meshllm/p{i}-layers"), "undeclared-mtp")
        f.make_report(node, revision, 3.0 + i)


@pytest.mark.parametrize("params", [{}, {"verdict": "inconsistent", "alert": "on", "sort": "-updated"}])
def test_the_number_of_queries_does_not_grow_with_the_catalog(
    client: Client, django_assert_num_queries: Any, params: dict[str, str]
) -> None:
    add_packages(3, 0)
    with_three = catalog_queries(client, params)
    add_packages(27, 100)
    assert Package.objects.count() == 30
    with django_assert_num_queries(with_three):
        client.get("/", params)


def test_a_seeded_synthetic_catalog_renders_with_the_same_queries(client: Client) -> None:
    from django.core.management import call_command

    from packages_app.models import Report

    quiet = StringIO()
    call_command("seed_synthetic", packages=30, reports=300, owner="synthetic-test", stdout=quiet)
    assert Package.objects.filter(repo_id__startswith="synthetic-test/").count() == 30
    assert Report.objects.count() == 300
    assert RevisionRollup.objects.exists()  # filled with the other rollups, and agreeing with them
    assert_revision_rollups_add_up_the_every_node_cells()
    assert catalog_queries(client, {"verdict": "inconsistent"}) == catalog_queries(client, {})
    busiest = Package.objects.order_by("-latest_revision__reports__received_at").first()
    assert busiest is not None
    assert client.get(f"/packages/{busiest.repo_id}/").status_code == 200
    call_command("seed_synthetic", packages=5, reports=0, owner="synthetic-test", reset=True, stdout=quiet)
    assert Package.objects.filter(repo_id__startswith="synthetic-test/").count() == 5


def test_the_catalog_shows_and_filters_the_releases_that_refuse_a_package(client: Client) -> None:
    old_abi = f.make_revision(
        f.make_package("meshllm/old-abi-layers"), refused_by="|v0.76.1|v0.76.2|"
    ).package
    admitted = f.make_revision(f.make_package("meshllm/admitted-layers")).package

    body = text(client.get("/", {"refused_by": "v0.76.2"}))

    assert old_abi.name in body and admitted.name not in body
    assert '<option value="v0.78.0">v0.78.0</option>' in body


def test_an_unknown_release_in_the_refused_by_filter_falls_back_with_a_message(client: Client) -> None:
    response = client.get("/", {"refused_by": "v9.9.9"})

    # Issue 11: a bad or stale filter value is ignored with a message naming it, never an error page.
    assert response.status_code == 200
    assert "Ignored refused_by" in text(response)


def test_each_rows_links_lead_to_its_own_package(client: Client) -> None:
    """The package's name, what to do about it and each revision nodes ran link to that package's page
    (its section or revision), never to another row's."""
    from django.utils import timezone

    f.qwen35_fleet(timezone.now())
    f.make_revision(f.make_package("meshllm/Other-layers"), "undeclared-mtp")
    body = text(client.get("/"))
    rows = {}  # each row with its notes: from its name's link to the next row's
    for segment in body.split('<a class="repo" href="')[1:]:
        href = segment.split('"', 1)[0]
        rows[href] = segment
    qwen, other = f"/packages/{f.QWEN35_REPO}/", "/packages/meshllm/Other-layers/"
    assert set(rows) == {qwen, other}
    assert f'href="{qwen}?revision={f.QWEN35_SHA}"' in rows[qwen]  # the broken revision its nodes ran
    assert f'href="{other}#action"' in rows[other] and qwen not in rows[other]
    assert other not in rows[qwen]
