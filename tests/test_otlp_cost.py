"""OTLP cost per byte: a small body cannot buy a large parse, and gRPC checks the token before any parse.

The attacks of issue 22: an 8 KB gzip body of empty spans inflates to 8 MiB, four million spans and
~700 MB of parsed messages; the generated gRPC servicer parsed a message before the token was looked at;
a malformed gRPC message answered INTERNAL. Each guard has a control: the same body with the guard off
does the work. Figures (RSS, CPU, a dashboard page during the attack) are measured by
bench/bench_otlp_attack.py, not here.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from typing import Any
from unittest import mock

import grpc
import pytest
from django.core.cache import cache
from django.test import Client
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from packages_app import input_budget
from packages_app.devnode import payloads
from packages_app.nodes import identity, otlp
from packages_app.web import otlp_grpc
from tests.test_otlp import PLAN, answer, post_traces, spans

METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _length_delimited(field: int, payload: bytes) -> bytes:
    n, size = len(payload), bytearray()
    while True:
        size.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            break
    return bytes([field << 3 | 2]) + bytes(size) + payload


def empty_spans(count: int) -> bytes:
    """An export of ``count`` empty spans: 2 bytes each on the wire, a whole Span message each parsed."""
    scope = b"\x12\x00" * count  # ScopeSpans.spans (field 2), empty
    return _length_delimited(1, _length_delimited(2, scope))  # Export.resource_spans / .scope_spans


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    cache.clear()


@pytest.fixture
def token(db: None) -> str:
    return identity.create_node("node-a").token


@pytest.fixture
def no_budget(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    """The guard switched off: caps so high that the body is inflated and parsed whole, as before."""
    settings.MESHDASH_NODE_SPAN_RATE_LIMIT = 0
    for name, value in [
        ("MAX_SPANS", 10**9),
        ("MAX_FIELDS", 10**9),
        ("INFLATE_RATIO", 10**6),
        ("FIELDS_PER_BYTE", 10**6),
    ]:
        monkeypatch.setattr(otlp, name, value)


# --- OTLP/HTTP ----------------------------------------------------------------------------------

BOMB_SPANS = 1_000_000  # 2 MB inflated from ~2 KB of gzip; the 8 KB bomb is four times this


def test_a_gzip_bomb_of_empty_spans_is_refused_before_it_is_parsed(client: Client, token: str) -> None:
    body = gzip.compress(empty_spans(BOMB_SPANS), 9)
    assert len(body) < 4096
    with mock.patch.object(otlp, "ExportTraceServiceRequest", wraps=ExportTraceServiceRequest) as parsed:
        response = post_traces(client, token, body, content_encoding="gzip")
    assert response.status_code == 413 and "times its compressed size" in response.json()["error"]
    parsed.assert_not_called()


def test_negative_control_without_the_budget_the_bomb_is_parsed_into_a_million_spans(
    client: Client, token: str, no_budget: None
) -> None:
    response = post_traces(client, token, gzip.compress(empty_spans(BOMB_SPANS), 9), content_encoding="gzip")
    assert response.status_code == 200
    assert answer(response).partial_success.rejected_spans == BOMB_SPANS  # each one built and looked at


def test_an_uncompressed_export_over_the_span_cap_is_refused_without_parsing(
    client: Client, token: str
) -> None:
    with mock.patch.object(otlp, "ExportTraceServiceRequest", wraps=ExportTraceServiceRequest) as parsed:
        response = post_traces(client, token, empty_spans(otlp.MAX_SPANS + 1))
    assert response.status_code == 413 and f"at most {otlp.MAX_SPANS} spans" in response.json()["error"]
    parsed.assert_not_called()


def test_one_span_with_a_million_attributes_is_refused_by_the_field_budget(
    client: Client, token: str
) -> None:
    attribute = _length_delimited(9, b"")  # Span.attributes (field 9): an empty KeyValue
    span = _length_delimited(2, attribute * 1_000_000)  # ScopeSpans.spans
    body = _length_delimited(1, _length_delimited(2, span))  # 2 MB, sent as it is
    response = post_traces(client, token, body)
    assert response.status_code == 413 and "protobuf fields" in response.json()["error"]


def test_a_json_export_of_a_million_empty_objects_is_refused_before_json_loads(
    client: Client, token: str
) -> None:
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{}] * BOMB_SPANS}]}]}).encode()
    with mock.patch.object(input_budget.json, "loads", wraps=json.loads) as loads:
        response = post_traces(
            client, token, gzip.compress(body), content_encoding="gzip", content_type="application/json"
        )
    assert response.status_code == 413
    loads.assert_not_called()


def test_negative_control_without_the_budget_the_json_export_goes_through_protobufs_json_parser(
    client: Client, token: str, no_budget: None
) -> None:
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{}] * 20_000}]}]}).encode()
    response = post_traces(client, token, body, content_type="application/json")
    assert response.status_code == 200 and response.json()["partialSuccess"]["rejectedSpans"] == "20000"


def test_a_real_export_of_512_decode_spans_fits_the_budget(client: Client, token: str) -> None:
    body = gzip.compress(payloads.export_request(spans(512)).SerializeToString())
    response = post_traces(client, token, body, content_encoding="gzip")
    assert response.status_code == 200


def test_the_node_rate_limit_counts_spans_not_requests(client: Client, token: str, settings: Any) -> None:
    settings.MESHDASH_NODE_SPAN_RATE_LIMIT = 100
    body = payloads.export_request(spans(60)).SerializeToString()
    assert post_traces(client, token, body).status_code == 200
    limited = post_traces(client, token, body)
    assert limited.status_code == 429 and int(limited["Retry-After"]) >= 1


def test_negative_control_counting_requests_lets_a_node_send_any_number_of_spans(
    client: Client, token: str, settings: Any
) -> None:
    settings.MESHDASH_NODE_SPAN_RATE_LIMIT = 0  # only the request limit (1200 a minute) is left
    body = payloads.export_request(spans(60)).SerializeToString()
    assert [post_traces(client, token, body).status_code for _ in range(3)] == [200, 200, 200]


# --- OTLP/gRPC ----------------------------------------------------------------------------------


@pytest.fixture
def receiver(transactional_db: None, settings: Any) -> Iterator[tuple[int, grpc.Channel]]:
    settings.MESHDASH_OTLP_GRPC_MAX_CALLS = 2
    server, port = otlp_grpc.build_server("127.0.0.1", 0, workers=4, close_connections=True)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield port, channel
    channel.close()
    server.stop(grace=None).wait(10)  # every handler done: none writes while the test database is flushed


def raw_export(
    channel: grpc.Channel, body: bytes, token: str, timeout: float = 20
) -> ExportTraceServiceResponse:
    call = channel.unary_unary(
        METHOD, request_serializer=None, response_deserializer=ExportTraceServiceResponse.FromString
    )
    return call(body, metadata=[("authorization", f"Bearer {token}")], timeout=timeout)  # type: ignore[no-any-return]


def test_grpc_checks_the_token_before_parsing_a_message(receiver: tuple[int, grpc.Channel]) -> None:
    with (
        mock.patch.object(otlp, "parse_protobuf", wraps=otlp.parse_protobuf) as parsed,
        pytest.raises(grpc.RpcError) as refused,
    ):
        raw_export(receiver[1], empty_spans(BOMB_SPANS), "mdn_not-a-token")
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    parsed.assert_not_called()


class GeneratedServicer(trace_service_pb2_grpc.TraceServiceServicer):
    """The receiver as it was: protobuf's generated servicer, which deserializes before Export runs."""

    def __init__(self) -> None:
        self.spans_at_token_check: list[int] = []

    def Export(
        self, request: ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> ExportTraceServiceResponse:
        self.spans_at_token_check.append(otlp.span_count(request))
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "A valid node token is required (Bearer).")
        raise AssertionError("unreachable")


@pytest.fixture
def generated_receiver() -> Iterator[tuple[GeneratedServicer, grpc.Channel]]:
    from concurrent.futures import ThreadPoolExecutor

    server = grpc.server(
        ThreadPoolExecutor(max_workers=2), options=[("grpc.max_receive_message_length", otlp.MAX_BODY_BYTES)]
    )
    servicer = GeneratedServicer()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield servicer, channel
    channel.close()
    server.stop(grace=None).wait(10)  # every handler done: none writes while the test database is flushed


@pytest.mark.cache
def test_negative_control_the_generated_servicer_parses_a_million_spans_before_the_token_check(
    generated_receiver: tuple[GeneratedServicer, grpc.Channel],
) -> None:
    servicer, channel = generated_receiver
    with pytest.raises(grpc.RpcError):
        raw_export(channel, empty_spans(BOMB_SPANS), "mdn_not-a-token")
    assert servicer.spans_at_token_check == [BOMB_SPANS]


def test_a_malformed_grpc_message_answers_invalid_argument(receiver: tuple[int, grpc.Channel]) -> None:
    token = identity.create_node("node-g").token
    with pytest.raises(grpc.RpcError) as refused:
        raw_export(receiver[1], b"\x0a\xff\xff\xff\x0f", token)  # a length far past the end
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.cache
def test_negative_control_the_generated_servicer_answers_internal_for_a_malformed_message(
    generated_receiver: tuple[GeneratedServicer, grpc.Channel],
) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        raw_export(generated_receiver[1], b"\x0a\xff\xff\xff\x0f", "mdn_x")
    assert refused.value.code() == grpc.StatusCode.INTERNAL


def test_a_grpc_bomb_with_a_valid_token_is_refused_by_the_budget(receiver: tuple[int, grpc.Channel]) -> None:
    token = identity.create_node("node-g").token
    with pytest.raises(grpc.RpcError) as refused:
        raw_export(receiver[1], empty_spans(BOMB_SPANS), token)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"at most {otlp.MAX_SPANS} spans" in (refused.value.details() or "")


def held_calls(port: int, token: str, gate: threading.Event, calls: int) -> list[grpc.StatusCode | None]:
    """``calls`` exports at once while the receiver's handlers are held at the gate."""
    entered = threading.Semaphore(0)

    def slow_authenticate(value: str) -> Any:
        entered.release()
        gate.wait(20)
        return None  # refused once let through: no handler touches the database after the test

    codes: list[grpc.StatusCode | None] = []

    def call(channel: grpc.Channel) -> None:
        try:
            raw_export(channel, payloads.export_request(spans(1, PLAN)).SerializeToString(), token, timeout=3)
            codes.append(None)
        except grpc.RpcError as exc:
            codes.append(exc.code())

    with mock.patch.object(identity, "authenticate_node", slow_authenticate):
        channels = [grpc.insecure_channel(f"127.0.0.1:{port}") for _ in range(calls)]
        threads = [threading.Thread(target=call, args=(c,)) for c in channels]
        for thread in threads[:2]:
            thread.start()
        assert entered.acquire(timeout=10) and entered.acquire(timeout=10)  # two calls being handled
        for thread in threads[2:]:
            thread.start()
        for thread in threads[2:]:
            thread.join(10)
        gate.set()
        for thread in threads[:2]:
            thread.join(10)
        for channel in channels:
            channel.close()
    return codes


def test_grpc_calls_past_the_concurrency_cap_are_refused_at_once(receiver: tuple[int, grpc.Channel]) -> None:
    token = identity.create_node("node-g").token
    codes = held_calls(receiver[0], token, threading.Event(), calls=5)
    assert codes[:3] == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 3  # the three past the cap of 2, first


def test_negative_control_without_the_cap_extra_calls_wait_for_a_worker_until_their_deadline(
    transactional_db: None, settings: Any
) -> None:
    settings.MESHDASH_OTLP_GRPC_MAX_CALLS = None
    server, port = otlp_grpc.build_server("127.0.0.1", 0, workers=2, close_connections=True)
    server.start()
    try:
        codes = held_calls(port, identity.create_node("node-g").token, threading.Event(), calls=5)
    finally:
        server.stop(grace=None).wait(10)  # every handler done: none writes while the test database is flushed
    assert codes[:3] == [grpc.StatusCode.DEADLINE_EXCEEDED] * 3  # queued behind the held ones
