"""The API page's examples work as written (docs/api.md, linked from the README): the report curl body, and
the catalog query it shows."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.test import Client

from packages_app.nodes import identity

pytestmark = pytest.mark.django_db

API_PAGE = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text(encoding="utf-8")


def api_page_report_body() -> str:
    """The heredoc the API page pipes to curl, with its two shell substitutions done as a shell would."""
    body = re.search(r"<<JSON\n(.*?)\nJSON\n", API_PAGE, re.S)
    assert body is not None, "docs/api.md's report example moved"
    text = body.group(1)
    text = text.replace("$(python3 -c 'import uuid; print(uuid.uuid4())')", str(uuid.uuid4()))
    return text.replace("$(date -u +%Y-%m-%dT%H:%M:%SZ)", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))


def test_the_api_page_report_example_is_accepted_as_written(client: Client) -> None:
    assert "$(" not in api_page_report_body()
    issued = identity.create_node("gpu-box-1")
    headers = {"Authorization": f"Bearer {issued.token}"}
    body = api_page_report_body()
    created = client.post("/api/v1/reports", body, content_type="application/json", headers=headers)
    assert created.status_code == 201, created.content
    replay = client.post("/api/v1/reports", body, content_type="application/json", headers=headers)
    assert replay.status_code == 200 and replay.json()["duplicate"] is True


def test_the_api_page_catalog_query_is_a_valid_filter(client: Client) -> None:
    query = re.search(r"`GET /api/v1/packages` \| [^`]*`\?([^`]+)`", API_PAGE)
    assert query is not None
    assert client.get(f"/api/v1/packages?{query.group(1)}").status_code == 200
