"""The read-only JSON API: ``GET /api/v1/packages`` and ``GET /api/v1/packages/<owner>/<name>``."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from packages_app.web.api_shapes import PackageDetailOut, PackageListOut
from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db

DETAIL = "/api/v1/packages/meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers"


def test_the_list_uses_the_catalog_filters_and_reports_facets(client: Client) -> None:
    f.catalog_mix()
    body = client.get("/api/v1/packages", {"verdict": "undeclared-mtp"}).json()
    assert body["count"] == 1
    (row,) = body["results"]
    assert row["repo_id"] == f.QWEN35_REPO
    assert row["url"] == DETAIL
    assert row["latest_revision"]["commit_sha"] == f.QWEN35_SHA
    assert row["latest_revision"]["verdict"] == "undeclared-mtp"
    assert row["latest_revision"]["mtp_detected"] is True and row["latest_revision"]["mtp_declared"] is False
    assert body["facets"]["verdict"]["inconsistent"] == 4


def test_the_list_is_paginated_with_links_that_keep_the_filters(client: Client) -> None:
    for i in range(5):
        f.make_revision(f.make_package(f"meshllm/p{i}-layers"))
    body = client.get("/api/v1/packages", {"per_page": "2", "page": "2", "schema": "1"}).json()
    assert [r["repo_id"] for r in body["results"]] == ["meshllm/p2-layers", "meshllm/p3-layers"]
    assert body["pages"] == 3
    assert body["next"] == "/api/v1/packages?per_page=2&page=3&schema=1"
    assert body["previous"] == "/api/v1/packages?per_page=2&page=1&schema=1"


@pytest.mark.parametrize("sort", ["repo", "-size", "-updated"])
def test_walking_the_pages_gives_the_one_page_list_in_its_order(client: Client, sort: str) -> None:
    for i, size in enumerate([5, 1, 9, 3, 7, 2, 8]):  # pages past the first are read by their ids first
        f.make_revision(f.make_package(f"meshllm/w{i}-layers"), total_bytes=size * 10**9)
    whole = client.get("/api/v1/packages", {"sort": sort, "per_page": "200"}).json()["results"]
    walked = [
        row["repo_id"]
        for page in (1, 2, 3)
        for row in client.get("/api/v1/packages", {"sort": sort, "per_page": "3", "page": str(page)}).json()[
            "results"
        ]
    ]
    assert walked == [row["repo_id"] for row in whole] and len(walked) == 7


def test_a_page_past_the_end_is_a_json_404(client: Client) -> None:
    response = client.get("/api/v1/packages", {"page": "3"})
    assert response.status_code == 404
    assert response.json() == {"error": "Page 3 is past the last page of results."}


def test_an_invalid_filter_is_a_json_400_naming_the_parameter(client: Client) -> None:
    response = client.get("/api/v1/packages", {"verdict": "fine", "page": "x"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error.startswith("Invalid filter: ") and "verdict:" in error and "page:" in error


def test_the_list_filters_on_the_releases_that_refuse_a_package(client: Client) -> None:
    f.make_revision(f.make_package("meshllm/old-abi-layers"), refused_by="|v0.76.2|")
    f.make_revision(f.make_package("meshllm/admitted-layers"))

    body = client.get("/api/v1/packages", {"refused_by": "v0.76.2"}).json()

    assert [p["repo_id"] for p in body["results"]] == ["meshllm/old-abi-layers"]
    assert body["results"][0]["latest_revision"]["refused_by"] == ["v0.76.2"]


def test_the_detail_carries_the_whole_audit_and_the_history(client: Client) -> None:
    f.qwen35_package()
    body = client.get(DETAIL).json()
    assert body["verdict"] == "undeclared-mtp"
    assert body["detected"]["mtp_blocks"] == [40]
    assert body["declared"]["present"] is False
    assert body["problems"][0]["code"] == "undeclared_mtp"
    assert body["provenance"]["build_host_path"] is True
    assert body["runtime"]["auto"]["outcome"] == "no-mtp"
    assert body["compatibility"] == [
        {
            "release": "v0.76.2",
            "admitted": False,
            "why": "schema v1 is offline-only; split serving requires package-v2.",
        }
    ]
    assert body["suggested_generation"]["generation"]["speculative_decoding"]["default"] == "mtp"
    assert [r["verdict"] for r in body["revisions"]] == ["undeclared-mtp", "consistent-mtp"]
    assert body["throughput"] is None and body["alerts"] == []


def test_the_detail_reports_throughput_and_the_alert_once_nodes_report(client: Client) -> None:
    package = f.qwen35_package()
    f.qwen35_reports(package.revisions.get(commit_sha=f.QWEN35_SHA))
    body = client.get(DETAIL).json()
    assert body["throughput"]["mtp_off"]["reports"] == 6
    assert body["throughput"]["stage_splits"] == ["0..27|27..41"]
    assert body["alerts"][0]["message"] == "MTP weights present but never used in 6 reports from 2 nodes"


def test_the_detail_of_another_revision_is_chosen_by_sha_prefix(client: Client) -> None:
    f.qwen35_package()
    body = client.get(DETAIL, {"revision": f.sha("qwen35-old")[:10]}).json()
    assert body["verdict"] == "consistent-mtp" and body["suggested_generation"] is None


@pytest.mark.parametrize(
    ("url", "params", "status", "error"),
    [
        ("/api/v1/packages/meshllm/nope", {}, 404, "No package meshllm/nope is tracked."),
        (
            DETAIL,
            {"revision": "cafe"},
            404,
            "meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers has no revision cafe.",
        ),
        (DETAIL, {"revision": "<x>"}, 404, "'<x>' is not a commit sha (4 to 40 hex digits)."),
    ],
)
def test_lookup_failures_are_json_errors(
    client: Client, url: str, params: dict[str, str], status: int, error: str
) -> None:
    f.qwen35_package()
    response = client.get(url, params)
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"error": error}


def test_a_package_still_waiting_for_its_first_ingest_is_listed_with_empty_fields(client: Client) -> None:
    f.make_package("meshllm/new-layers")
    body = client.get("/api/v1/packages/meshllm/new-layers").json()
    assert body["revision"] is None and body["verdict"] is None and body["problems"] == []


@pytest.mark.parametrize("method", ["post", "put", "delete", "patch"])
def test_writes_are_refused_with_a_json_405(client: Client, method: str) -> None:
    response = getattr(client, method)("/api/v1/packages")
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"
    assert "read-only" in response.json()["error"]


def count_queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def test_the_number_of_queries_does_not_grow_with_the_data(
    client: Client, django_assert_num_queries: Any
) -> None:
    package = f.qwen35_package()
    node = f.make_node()
    for i in range(3):
        f.make_report(node, f.make_revision(f.make_package(f"meshllm/a{i}-layers"), "undeclared-mtp"), 3.0)
    few_list = count_queries(client, "/api/v1/packages")
    few_detail = count_queries(client, DETAIL)
    for i in range(27):
        f.make_report(node, f.make_revision(f.make_package(f"meshllm/b{i}-layers"), "undeclared-mtp"), 3.0)
        f.make_revision(package, "undeclared-mtp", latest=False)
    with django_assert_num_queries(few_list):
        client.get("/api/v1/packages")
    with django_assert_num_queries(few_detail):
        client.get(DETAIL)


def test_responses_match_the_documented_models(client: Client) -> None:
    package = f.qwen35_package()
    f.qwen35_reports(package.revisions.get(commit_sha=f.QWEN35_SHA))
    f.make_package("meshllm/new-layers")
    PackageListOut.model_validate(client.get("/api/v1/packages").json())
    PackageDetailOut.model_validate(client.get(DETAIL).json())
    PackageDetailOut.model_validate(client.get("/api/v1/packages/meshllm/new-layers").json())


def test_the_openapi_document_describes_both_endpoints_and_every_filter(client: Client) -> None:
    document = client.get("/api/v1/openapi.json").json()
    listing = document["paths"]["/api/v1/packages"]["get"]
    names = {p["name"] for p in listing["parameters"]}
    assert names >= {"verdict", "architecture", "q", "sort", "page", "alert"}
    verdict = next(p for p in listing["parameters"] if p["name"] == "verdict")
    assert "inconsistent" in verdict["schema"]["enum"]
    detail = document["paths"]["/api/v1/packages/{owner}/{name}"]["get"]
    schema = detail["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema["$ref"] == "#/components/schemas/PackageDetailOut"
    assert "PackageListOut" in document["components"]["schemas"]


def api_routes() -> list[str]:
    """Every route of the JSON API and the node endpoints in the URL conf, as OpenAPI paths (``{owner}``)."""
    from django.urls import URLPattern, get_resolver

    found = []
    for pattern in get_resolver().url_patterns:
        for inner in getattr(pattern, "url_patterns", [pattern]):
            if isinstance(inner, URLPattern):
                route = "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", str(inner.pattern))
                if route.startswith(("/api/", "/v1/")):
                    found.append(route)
    return found


def test_the_openapi_document_describes_every_api_route_the_server_answers(client: Client) -> None:
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    routes = api_routes()
    assert "/api/v1/hooks/hub" in routes and "/api/v1/packages/{owner}/{name}" in routes  # the walk sees them
    assert sorted(set(routes) - set(paths)) == []
    hook = paths["/api/v1/hooks/hub"]["post"]
    assert {"202", "200", "403", "404"} <= set(hook["responses"])
    assert hook["parameters"][0]["name"] == "X-Webhook-Secret"


def test_the_openapi_document_marks_the_pre_assessment_fields_deprecated(client: Client) -> None:
    schemas = client.get("/api/v1/openapi.json").json()["components"]["schemas"]
    detail = schemas["PackageDetailOut"]["properties"]
    for old in ("verdict", "runtime", "compatibility"):
        assert detail[old].get("deprecated") is True, old
    assert "deprecated" not in detail["assessment"]
    summary = schemas["RevisionSummaryOut"]["properties"]
    assert all(summary[old].get("deprecated") is True for old in ("verdict", "mtp_detected", "mtp_declared"))
    assert "headline" in schemas["PackageRowOut"]["properties"] and "HeadlineOut" in schemas


def test_the_list_and_the_detail_share_the_assessments_field_names(client: Client) -> None:
    f.qwen35_package()
    (row,) = client.get("/api/v1/packages").json()["results"]
    detail = client.get(DETAIL).json()
    assert row["headline"] == detail["assessment"]["headline"] == detail["revision"]["headline"]
    assert row["latest_revision"]["mtp"]["verdict"] == detail["assessment"]["mtp"]["verdict"]
    assert client.get("/api/v1/packages", {"headline": "not-servable"}).json()["count"] == 1
    assert client.get("/api/v1/packages", {"headline": "serves-mtp"}).json()["count"] == 0
