"""Fuzzing the report endpoints: whatever a client sends, the answer is a JSON 2xx/4xx, never a 500."""

from __future__ import annotations

import copy
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packages_app.nodes import identity as nodes

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,  # the same inputs every run: a failure here is reproducible, never flaky
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
ANSWERS = {200, 201, 400, 409, 413, 415}

# Text that includes what storage chokes on: NUL, lone surrogates, odd planes.
any_text = st.text(st.characters(exclude_categories=()), max_size=40)
scalars = st.none() | st.booleans() | st.integers() | st.floats() | any_text


def json_trees(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=6) | st.dictionaries(any_text, inner, max_size=6),
        max_leaves=40,
    )


json_values = json_trees(scalars)  # floats include NaN/inf, which json.dumps writes as invalid JSON
strict_json = json_trees(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | any_text
)


@pytest.fixture
def token(settings: Any) -> str:
    settings.MESHDASH_NODE_RATE_LIMIT = 0
    settings.MESHDASH_NAMESPACES = []  # never enqueue ingests while fuzzing
    cache.clear()
    return nodes.create_node("fuzzer").token


def valid_report() -> dict[str, Any]:
    return {
        "report_id": str(uuid.uuid4()),
        "observed_at": datetime.now(UTC).isoformat(),
        "package": {"repo": "meshllm/Llama-3.2-1B-Instruct-Q4_K_M-layers", "revision": "c" * 40},
        "topology": {"topology_id": "t", "stages": [{"node": "n", "layer_start": 0, "layer_end": 16}]},
        "speculative": {
            "requested_strategy": "auto",
            "effective_strategy": "native-mtp",
            "mtp_source": "Integrated",
        },
        "hardware": {"gpu": "M2"},
        "timings": {"predicted_n": 10, "predicted_per_second": 40.5, "speculative_proposed_n": 4},
    }


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


def replace_at(body: dict[str, Any], path: tuple[Any, ...], new: Any) -> dict[str, Any]:
    mutated = copy.deepcopy(body)
    target: Any = mutated
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = new
    return mutated


def send(client: Client, token: str, url: str, data: bytes, content_type: str = "application/json") -> Any:
    response = client.post(url, data=data, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code in ANSWERS, response.content[:300]
    assert response["Content-Type"] == "application/json"
    return response


@FUZZ
@given(body=json_values)
def test_any_json_body_gets_a_clear_answer(client: Client, token: str, body: Any) -> None:
    raw = json.dumps(body).encode()
    assert "error" in send(client, token, "/api/v1/reports", raw).json()
    send(client, token, "/api/v1/reports/batch", raw)


@FUZZ
@given(data=st.data())
def test_a_valid_report_with_any_one_value_replaced_never_breaks_the_endpoint(
    client: Client, token: str, data: st.DataObject
) -> None:
    body = valid_report()
    path = data.draw(st.sampled_from(paths(body)))
    mutated = replace_at(body, path, data.draw(json_values))
    response = send(client, token, "/api/v1/reports", json.dumps(mutated).encode())
    if response.status_code == 400:
        assert response.json()["field"] is not None


@FUZZ
@given(counters=st.dictionaries(any_text, json_values, max_size=8))
def test_unknown_timing_counters_are_kept_or_refused_never_crash(
    client: Client, token: str, counters: dict[str, Any]
) -> None:
    body = valid_report()
    body["timings"] = counters | body["timings"]
    send(client, token, "/api/v1/reports", json.dumps(body).encode())


@FUZZ
@given(items=st.lists(st.one_of(strict_json, st.just("valid")), min_size=1, max_size=8))
def test_a_batch_of_anything_answers_per_item(client: Client, token: str, items: list[Any]) -> None:
    reports = [valid_report() if item == "valid" else item for item in items]
    response = send(client, token, "/api/v1/reports/batch", json.dumps({"reports": reports}).encode())
    results = response.json()["results"]
    assert [r["index"] for r in results] == list(range(len(reports)))
    assert all(r["status"] in {200, 201, 400, 409} for r in results)


@FUZZ
@given(raw=st.binary(max_size=300), content_type=st.sampled_from(["application/json", "text/plain", ""]))
def test_raw_bytes_get_a_clear_answer(client: Client, token: str, raw: bytes, content_type: str) -> None:
    send(client, token, "/api/v1/reports", raw, content_type)
