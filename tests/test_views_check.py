"""The "Check a manifest" page and POST /api/v1/check-manifest: no login, 16 MiB cap, limited, escaped."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from packages_app.layout import MAX_MANIFEST_BYTES
from packages_app.manifest.identity import package_id_of
from packages_app.web.api_shapes import ManifestCheckOut
from tests.test_rulebook import mtp_sd, v2_base

# The rate limit counts in the cache, which is Redis in the services pass: these run in both passes.
pytestmark = pytest.mark.cache

PAGE = "/check/"
API = "/api/v1/check-manifest"
# The page looks for a tracked revision holding the same manifest bytes, to link it.
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_limits() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


def valid_v2(**strategies: Any) -> dict[str, Any]:
    doc = v2_base()
    sd = mtp_sd()
    sd["strategies"].update(strategies)
    doc["generation"] = {"speculative_decoding": sd}
    doc["package_id"] = package_id_of(doc)
    return doc


def text(response: Any) -> str:
    return response.content.decode()


def test_the_page_needs_no_login_and_offers_paste_and_upload(client: Client) -> None:
    response = client.get(PAGE)

    assert response.status_code == 200
    assert 'name="manifest"' in text(response) and 'type="file"' in text(response)
    assert 'href="/check/" aria-current="page"' in text(response)


def test_a_pasted_manifest_leads_with_what_a_manifest_alone_cannot_see(client: Client) -> None:
    response = client.post(PAGE, {"manifest": json.dumps(valid_v2())})
    body = text(response)

    assert response.status_code == 200
    headline = body[body.index('id="result"') : body.index('id="validation"')]
    assert "headline-weights-unread" in headline and "weights were not read" in headline
    assert "python manage.py audit_package &lt;package folder or owner/repo&gt;" in headline
    assert "Valid as mesh-llm's validator judges it" in body
    assert '<span class="outcome outcome-native-mtp">native-mtp</span>' in body
    assert "<code>v0.78.0</code>" in body
    assert "Not pinned down in mesh-llm's code" in body and "no local GGUF signal" in body
    assert "finds no problem in the manifest itself" in body


def test_a_manifest_meshdash_tracks_links_its_revision_and_that_revisions_answer(client: Client) -> None:
    from tests import dashboard_factories as f

    data = json.dumps(valid_v2()).encode()
    digest = hashlib.sha256(data).hexdigest()
    revision = f.make_revision(f.make_package("meshllm/Tracked-layers"), manifest_sha256=digest)

    body = text(client.post(PAGE, {"manifest": data.decode()}))

    assert f"?revision={revision.commit_sha}" in body and "meshllm/Tracked-layers" in body
    assert f"audit_package meshllm/Tracked-layers --revision {revision.commit_sha}" in body


def test_an_uploaded_invalid_manifest_lists_mesh_llms_codes(client: Client) -> None:
    doc = valid_v2()
    doc["native_abi_version"] = "0.1.57"  # edited without recomputing the id
    upload = SimpleUploadedFile("model-package.json", json.dumps(doc).encode(), "application/json")

    response = client.post(PAGE, {"file": upload})

    assert response.status_code == 200
    assert "headline-invalid-manifest" in text(response)
    assert "Invalid as mesh-llm's validator judges it" in text(response)
    assert "<code>package_identity_mismatch</code>" in text(response)


@pytest.mark.parametrize("data", [{}, {"manifest": "{}", "file": SimpleUploadedFile("m.json", b"{}")}])
def test_it_wants_exactly_one_of_paste_and_upload(client: Client, data: dict[str, Any]) -> None:
    response = client.post(PAGE, data)

    assert response.status_code == 400
    assert "exactly one of the two" in text(response)


def test_hostile_names_are_shown_escaped(client: Client) -> None:
    doc = valid_v2(**{"<script>alert(1)</script>": {"type": "ngram-cache", "proposer": "<img src=x>"}})

    body = text(client.post(PAGE, {"manifest": json.dumps(doc)}))

    assert "<script>alert(1)</script>" not in body and "<img src=x>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_a_pasted_manifest_over_the_form_limit_is_refused_with_a_way_out(client: Client) -> None:
    response = client.post(PAGE, {"manifest": " " * (3 * 1024 * 1024)})

    assert response.status_code == 413
    assert "upload the file instead" in text(response)


def test_the_page_is_rate_limited_per_address(client: Client, settings: Any) -> None:
    settings.MESHDASH_CHECK_RATE_LIMIT = 2
    for _ in range(2):
        assert client.post(PAGE, {"manifest": "{}"}).status_code == 200

    response = client.post(PAGE, {"manifest": "{}"})

    assert response.status_code == 429
    assert int(response["Retry-After"]) >= 1


# --- the API --------------------------------------------------------------------------------------


def test_the_api_answers_the_documented_shape(client: Client) -> None:
    response = client.post(API, json.dumps(valid_v2()), content_type="application/json")

    assert response.status_code == 200
    doc = response.json()
    ManifestCheckOut.model_validate(doc)
    assert doc["valid"] is True and doc["package_id"]["matches"] is True
    assert doc["runtime"]["mtp"]["outcome"] == "native-mtp"


@pytest.mark.parametrize("body", [b"", b"not json", b"[]", b'{"schema_version": 1}'])
def test_the_api_judges_anything_that_is_not_a_manifest_as_invalid(client: Client, body: bytes) -> None:
    response = client.post(API, body, content_type="application/octet-stream")

    assert response.status_code == 200
    assert response.json()["valid"] is False


def test_the_api_refuses_a_body_over_16_mib(client: Client) -> None:
    response = client.post(API, b"{" + b" " * MAX_MANIFEST_BYTES + b"}", content_type="application/json")

    assert response.status_code == 413
    assert "16 MiB" in response.json()["error"]


def test_the_api_is_post_only_and_rate_limited(client: Client, settings: Any) -> None:
    settings.MESHDASH_CHECK_RATE_LIMIT = 1
    assert client.get(API).status_code == 405
    assert client.post(API, b"{}", content_type="application/json").status_code == 200

    response = client.post(API, b"{}", content_type="application/json")

    assert response.status_code == 429 and int(response["Retry-After"]) >= 1


def test_the_openapi_document_describes_the_check(client: Client) -> None:
    document = client.get("/api/v1/openapi.json").json()

    operation = document["paths"]["/api/v1/check-manifest"]["post"]
    assert set(operation["responses"]) == {"200", "405", "413", "429", "503"}
    assert "ManifestCheckOut" in document["components"]["schemas"]
