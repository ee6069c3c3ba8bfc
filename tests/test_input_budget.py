"""One input budget for every parser of untrusted input (issue 48): the same adversarial shapes fed to each.

Each parser (node reports, runs, certify reports, OTLP/JSON, OTLP/protobuf, Hub webhooks, model-package.json)
gets the same shapes filled to its own byte cap: arrays of empty strings, of zeros, of empty objects, of empty
arrays (each item a value: 2-3 bytes apiece), and arrays nested 900 deep (past the depth; 5,000 deep is past
the values too). Each is refused naming the
limit, before ``json.loads`` (or protobuf) builds anything. The control switches the value count off
(``json_value_bound`` -> 0) and shows the same body parsed whole: the issue's OTLP/JSON body of empty
strings in ``resource.entityRefs[].idKeys`` (a 1 KB gzip) goes through protobuf's JSON parser and answers 200.
How long each costs, against a well-formed body of the same size, is bench/bench_input_budget.py.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
from django.test import Client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from packages_app import input_budget
from packages_app.audit.certify_report import MAX_REPORT_BYTES
from packages_app.devnode import payloads
from packages_app.layout import MAX_MANIFEST_BYTES
from packages_app.manifest import parse_manifest
from packages_app.nodes import identity, otlp
from packages_app.web import api, api_telemetry, webhooks

SECRET = "s3cret-webhook"
ITEMS = {"empty-strings": b'""', "zeros": b"0", "empty-objects": b"{}", "empty-arrays": b"[]"}


def filled(prefix: bytes, item: bytes, suffix: bytes, size: int) -> bytes:
    """``prefix [item,item,...] suffix`` of about ``size`` bytes."""
    count = max(1, (size - len(prefix) - len(suffix) - 2) // (len(item) + 1))
    return prefix + b"[" + b",".join([item] * count) + b"]" + suffix


def deep(prefix: bytes, suffix: bytes, levels: int = 900) -> bytes:
    # 900 levels: past every parser's depth, within the 1,024 values any body may hold
    return prefix + b"[" * levels + b"]" * levels + suffix


# parser -> (where the shape goes: prefix, suffix), its byte cap
PLACES: dict[str, tuple[bytes, bytes, int]] = {
    "reports": (b'{"reports": ', b"}", api.MAX_BATCH_BYTES),
    "runs": (b'{"runs": ', b"}", api_telemetry.MAX_RUNS_BYTES),
    "certify": (b'{"schema_version": 1, "gates": ', b"}", MAX_REPORT_BYTES),
    "otlp-json": (
        b'{"resourceSpans": [{"resource": {"entityRefs": [{"idKeys": ',
        b"}]}}]}",
        otlp.INFLATE_FLOOR,
    ),
    "webhook": (b'{"event": {"scope": "repo", "action": "update"}, "repo": ', b"}", webhooks.MAX_BODY_BYTES),
    "manifest": (b'{"schema_version": 1, "layers": ', b"}", MAX_MANIFEST_BYTES),
}


@pytest.fixture
def token(db: None, settings: Any) -> str:
    settings.MESHDASH_WEBHOOK_SECRET = SECRET
    settings.CELERY_BROKER_URL = "redis://broker.invalid:6379/0"  # nothing here may enqueue
    return identity.create_node("node-a").token


def send(client: Client, token: str, parser: str, body: bytes, loads: Any = None) -> tuple[int, str, Any]:
    """The parser's answer to ``body``: (HTTP status, error, the json.loads mock) or, for the manifest,
    (0, its problems). ``loads`` replaces json.loads while the body is parsed (by default a spy on it)."""
    bearer = {"Authorization": f"Bearer {token}"}
    with mock.patch.object(json, "loads", loads or mock.Mock(wraps=json.loads)) as spy:
        if parser == "manifest":
            problems = parse_manifest(body).problems
            return 0, " ".join(f"{p.code}: {p.message}" for p in problems), spy
        if parser == "webhook":
            headers = {"X-Webhook-Secret": SECRET}
            response = client.post(
                "/api/v1/hooks/hub", body, content_type="application/json", headers=headers
            )
        elif parser == "otlp-json":
            response = client.post(
                "/v1/traces",
                gzip.compress(body, 9),
                content_type="application/json",
                headers=bearer | {"Content-Encoding": "gzip"},
            )
        else:
            url = {
                "reports": "/api/v1/reports/batch",
                "runs": "/api/v1/runs",
                "certify": "/api/v1/certify-reports",
            }
            response = client.post(url[parser], body, content_type="application/json", headers=bearer)
    return response.status_code, json.loads(response.content).get("error", ""), spy


@pytest.mark.django_db
@pytest.mark.parametrize("shape", list(ITEMS))
@pytest.mark.parametrize("parser", list(PLACES))
def test_each_parser_refuses_an_array_of_tiny_values_before_parsing_it(
    client: Client, token: str, parser: str, shape: str
) -> None:
    prefix, suffix, cap = PLACES[parser]
    body = filled(prefix, ITEMS[shape], suffix, cap)
    assert len(body) <= cap
    status, error, loads = send(client, token, parser, body)
    assert loads.call_count == 0, "json.loads ran on a body over the value budget"
    assert "values" in error and "every item of an array count" in error
    assert status in (0, 413)
    if parser == "manifest":
        assert error.startswith("manifest_too_large")


@pytest.mark.django_db
@pytest.mark.parametrize("parser", list(PLACES))
def test_each_parser_refuses_arrays_nested_past_its_depth(client: Client, token: str, parser: str) -> None:
    prefix, suffix, _ = PLACES[parser]
    status, error, _ = send(client, token, parser, deep(prefix, suffix))
    assert status in (0, 400, 413)
    assert "deep" in error or "levels" in error or "nests" in error


def test_the_value_bound_counts_every_value_json_loads_would_build() -> None:
    cases = [
        b"[]",
        b'[""]',
        b'["", ""]',
        b'{"a": 1, "b": [1, 2, {}]}',
        b"[[[]],[]]",
        b'{"a":{"b":{"c":null}}}',
    ]
    for raw in cases:
        built = _count(json.loads(raw))
        assert input_budget.json_value_bound(raw) >= built, raw
        # exact but for one per empty container, when no string holds , or :
        assert input_budget.json_value_bound(raw) <= built + raw.count(b"[]") + raw.count(b"{}"), raw


def _count(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(1 + _count(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_count(v) for v in value)
    return 1


# --- the issue's attack, guarded and not ------------------------------------------------------------

# ~300,000 empty strings; gzip ~1 KB
ISSUE_BODY = filled(PLACES["otlp-json"][0], b'""', PLACES["otlp-json"][1], 900_000)


def test_the_issues_otlp_json_body_of_empty_id_keys_is_refused_from_1kb_of_gzip(
    client: Client, token: str
) -> None:
    assert len(gzip.compress(ISSUE_BODY, 9)) < 1200
    with mock.patch.object(otlp.json_format, "ParseDict", wraps=otlp.json_format.ParseDict) as parse:
        status, error, _ = send(client, token, "otlp-json", ISSUE_BODY)
    assert status == 413 and "more than 50000 values" in error
    parse.assert_not_called()


def test_control_without_the_value_count_the_issues_body_goes_through_protobufs_json_parser(
    client: Client, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(input_budget, "json_value_bound", lambda raw: 0)  # the guard off
    with mock.patch.object(otlp.json_format, "ParseDict", wraps=otlp.json_format.ParseDict) as parse:
        status, _, _ = send(client, token, "otlp-json", ISSUE_BODY)
    assert status == 200  # parsed whole: ~300,000 strings built twice (json.loads, then protobuf)
    parse.assert_called_once()


def test_control_the_old_count_of_objects_arrays_and_keys_let_the_issues_body_through() -> None:
    old_count = ISSUE_BODY.count(b"{") + ISSUE_BODY.count(b"[") + ISSUE_BODY.count(b":")
    assert old_count < otlp.FIELDS_FLOOR < input_budget.json_value_bound(ISSUE_BODY)


@pytest.mark.django_db
@pytest.mark.parametrize("shape", list(ITEMS))
@pytest.mark.parametrize("parser", list(PLACES))
def test_control_without_the_value_count_each_shape_reaches_json_loads_whole(
    client: Client, token: str, monkeypatch: pytest.MonkeyPatch, parser: str, shape: str
) -> None:
    monkeypatch.setattr(input_budget, "json_value_bound", lambda raw: 0)  # the guard off
    prefix, suffix, cap = PLACES[parser]
    body = filled(prefix, ITEMS[shape], suffix, cap)
    # json.loads answers {} at once: what matters is that the whole body got to it (the real cost of
    # parsing each shape, and of a well-formed body of the same size, is bench/bench_input_budget.py).
    _, _, loads = send(client, token, parser, body, loads=mock.Mock(return_value={}))
    assert loads.call_count == 1 and len(loads.call_args.args[0]) == len(body)


# --- OTLP/protobuf: the same shapes on the wire ---------------------------------------------------


_delimited = payloads.length_delimited


def protobuf_id_keys(count: int) -> bytes:
    """resource_spans[0].resource.entity_refs[0].id_keys: ``count`` empty strings, 2 bytes each."""
    entity_ref = _delimited(3, b"") * count
    return _delimited(1, _delimited(1, _delimited(3, entity_ref)))


def test_otlp_protobuf_counts_each_item_of_the_same_array(client: Client, token: str) -> None:
    body = protobuf_id_keys(otlp.INFLATE_FLOOR // 2 - 16)
    with mock.patch.object(otlp, "ExportTraceServiceRequest", wraps=ExportTraceServiceRequest) as parsed:
        response = client.post(
            "/v1/traces",
            gzip.compress(body, 9),
            content_type="application/x-protobuf",
            headers={"Authorization": f"Bearer {token}", "Content-Encoding": "gzip"},
        )
    assert response.status_code == 413 and "protobuf fields" in response.json()["error"]
    parsed.assert_not_called()


def test_a_budget_refusal_names_the_limit() -> None:
    budget = input_budget.InputBudget("The body", 30, 5, 2)
    refusals: list[Callable[[], Any]] = [
        lambda: input_budget.load_json(b"[1,2,3,4,5]", budget),
        lambda: input_budget.load_json(b"[[[]]]", budget),
        lambda: input_budget.load_json(b"[" + b" " * 40 + b"]", budget),
    ]
    limits = []
    for refuse in refusals:
        with pytest.raises(input_budget.OverBudget) as exc:
            refuse()
        limits.append(exc.value.limit)
    assert limits == ["values", "depth", "bytes"]


def test_the_values_allowed_grow_with_the_bodys_own_size() -> None:
    budget = api.json_budget(api.MAX_BATCH_BYTES)  # one value per 8 bytes of the body, 1,024 at least
    for size in (64 * 1024, 512 * 1024, api.MAX_BATCH_BYTES):
        with pytest.raises(input_budget.OverBudget):  # 4 bytes a value, at any size
            input_budget.check_json_bytes(filled(b'{"reports": ', b"1.5", b"}", size), budget)
        input_budget.check_json_bytes(filled(b'{"reports": ', b'"abcdef"', b"}", size), budget)  # 9 bytes
    input_budget.check_json_bytes(b"[" + b"0," * 1000 + b"0]", budget)  # a small body: the floor
