"""An address holding a NUL character (``%00``) gets a clear 400, never a 500: PostgreSQL refuses a NUL in
any text it is asked to find, so looking up such a node, topology, repo or file name failed the request
(meshdash.middleware.NulInAddressMiddleware). The control: without the guard, the same address fails on
PostgreSQL."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db

GUARD = "meshdash.middleware.NulInAddressMiddleware"
PAGES = (
    "/nodes/a%00b/",
    "/topologies/%00/",
    "/packages/meshllm/Nul-layers/files/a%00b.gguf",
    "/packages/meshllm/Nul-layers/?revision=%00",
    "/?q=qwen%00",
    "/nodes/?page=%001",
)
API = ("/api/v1/packages/meshllm/a%00", "/api/v1/nodes/%00", "/api/v1/packages?q=%00")


@pytest.fixture
def quiet_client(client: Client) -> Client:
    client.raise_request_exception = False
    f.make_revision(f.make_package("meshllm/Nul-layers"), "consistent-mtp", files=True)
    return client


@pytest.mark.parametrize("url", PAGES)
def test_a_page_whose_address_holds_a_nul_says_so(quiet_client: Client, url: str) -> None:
    response = quiet_client.get(url, secure=True)
    assert response.status_code == 400
    assert "NUL character" in response.content.decode()


@pytest.mark.parametrize("url", API)
def test_the_api_says_so_as_json(quiet_client: Client, url: str) -> None:
    response = quiet_client.get(url, secure=True)
    assert response.status_code == 400
    assert "NUL character" in response.json()["error"]


def test_an_address_without_one_is_answered_as_before(quiet_client: Client) -> None:
    assert quiet_client.get("/nodes/a-b/", secure=True).status_code == 404
    assert quiet_client.get("/packages/meshllm/Nul-layers/", secure=True).status_code == 200


@pytest.mark.parametrize("url", ["/nodes/a%00b/", "/topologies/%00/", "/api/v1/packages/meshllm/a%00"])
def test_control_without_the_guard_postgresql_fails_the_request(
    quiet_client: Client, url: str, settings_override: None
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("SQLite stores a NUL in text: the lookup finds nothing, a 404")
    assert quiet_client.get(url, secure=True).status_code == 500


@pytest.fixture
def settings_override() -> object:
    from django.test import override_settings

    with override_settings(MIDDLEWARE=[m for m in settings.MIDDLEWARE if m != GUARD]):
        yield None
