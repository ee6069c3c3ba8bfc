"""The gRPC receiver's slots (issue 48): one node token cannot hold them all, and a call that sends its
metadata but never its message is cancelled at the message deadline.

The attack: node A opens 8 calls (the receiver's MESHDASH_OTLP_GRPC_MAX_CALLS) that send the metadata with
its token and never the message; node B then sends 16 real exports. Each guard has its control with the
guard off (MESHDASH_OTLP_GRPC_MAX_CALLS_PER_NODE / MESHDASH_OTLP_GRPC_MESSAGE_DEADLINE = 0), where B gets
16 of 16 RESOURCE_EXHAUSTED, as in the issue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from packages_app.devnode import payloads
from packages_app.nodes import identity
from packages_app.web import otlp_grpc
from tests.test_otlp import PLAN, spans

METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
SLOTS = 8


@pytest.fixture(autouse=True)
def _quiet(settings: Any) -> None:
    settings.MESHDASH_OTLP_GRPC_MAX_CALLS = SLOTS
    settings.CELERY_BROKER_URL = "redis://broker.invalid:6379/0"
    settings.MESHDASH_NODE_RATE_LIMIT = 0
    settings.MESHDASH_NODE_SPAN_RATE_LIMIT = 0


def start(settings: Any, *, per_node: int, deadline: int) -> tuple[grpc.Server, int]:
    settings.MESHDASH_OTLP_GRPC_MAX_CALLS_PER_NODE = per_node
    settings.MESHDASH_OTLP_GRPC_MESSAGE_DEADLINE = deadline
    server, port = otlp_grpc.build_server("127.0.0.1", 0, workers=SLOTS + 2, close_connections=True)
    server.start()
    return server, port


class SilentCalls:
    """``count`` calls carrying ``token`` that send the metadata and then nothing, until ``release``."""

    def __init__(self, port: int, token: str, count: int) -> None:
        self.gate = threading.Event()
        self.channels = [grpc.insecure_channel(f"127.0.0.1:{port}") for _ in range(count)]
        self.futures = []
        for channel in self.channels:
            call = channel.stream_unary(METHOD, request_serializer=None, response_deserializer=None)
            self.futures.append(call.future(self._never(), metadata=[("authorization", f"Bearer {token}")]))

    def _never(self) -> Iterator[bytes]:
        self.gate.wait(60)
        return
        yield b""  # a generator that yields nothing

    def codes(self, wait: float) -> list[grpc.StatusCode | None]:
        """Each call's code once ended within ``wait`` seconds, None if it is still open."""
        end = time.monotonic() + wait
        out: list[grpc.StatusCode | None] = []
        for future in self.futures:
            try:
                future.exception(timeout=max(0.01, end - time.monotonic()))
                out.append(future.code())
            except grpc.FutureTimeoutError:
                out.append(None)
        return out

    def release(self) -> None:
        self.gate.set()
        for future in self.futures:
            future.cancel()
        for channel in self.channels:
            channel.close()


def exports(port: int, token: str, count: int) -> list[grpc.StatusCode]:
    body = payloads.export_request(spans(1, PLAN)).SerializeToString()
    codes: list[grpc.StatusCode] = []
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(
            METHOD, request_serializer=None, response_deserializer=ExportTraceServiceResponse.FromString
        )
        for _ in range(count):
            try:
                call(body, metadata=[("authorization", f"Bearer {token}")], timeout=10)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as exc:
                codes.append(exc.code())
    return codes


@contextmanager
def attack(settings: Any, *, per_node: int, deadline: int) -> Iterator[tuple[int, SilentCalls, str]]:
    """The receiver with these guards, node A's 8 silent calls open on it, and node B's token."""
    server, port = start(settings, per_node=per_node, deadline=deadline)
    a, b = identity.create_node("node-a").token, identity.create_node("node-b").token
    silent = SilentCalls(port, a, SLOTS)
    try:
        yield port, silent, b
    finally:
        silent.release()
        server.stop(grace=None).wait(10)  # every handler done: none writes while the test database is flushed


@pytest.mark.django_db(transaction=True)
def test_one_node_token_holds_at_most_its_share_of_the_slots(settings: Any) -> None:
    with attack(settings, per_node=2, deadline=60) as (port, silent, b):
        codes = silent.codes(wait=3)
        assert codes.count(grpc.StatusCode.UNAVAILABLE) == SLOTS - 2 and codes.count(None) == 2
        assert exports(port, b, 16) == [grpc.StatusCode.OK] * 16  # while A still holds its two
        assert silent.codes(wait=0).count(None) == 2


@pytest.mark.django_db(transaction=True)
def test_control_without_the_per_node_cap_one_token_holds_every_slot(settings: Any) -> None:
    with attack(settings, per_node=0, deadline=0) as (port, silent, b):
        assert silent.codes(wait=1) == [None] * SLOTS
        assert exports(port, b, 16) == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 16  # the 16/16


@pytest.mark.django_db(transaction=True)
def test_a_call_whose_message_never_arrives_ends_at_the_message_deadline(settings: Any) -> None:
    # the per-node cap off: A takes every slot
    with attack(settings, per_node=0, deadline=1) as (port, silent, b):
        started = time.monotonic()
        codes = silent.codes(wait=5)
        elapsed = time.monotonic() - started
        assert codes == [grpc.StatusCode.CANCELLED] * SLOTS  # the receiver cancelled each
        assert elapsed < 3  # the 1 s deadline, not the peer's patience
        assert exports(port, b, 16) == [grpc.StatusCode.OK] * 16


@pytest.mark.django_db(transaction=True)
def test_control_without_the_message_deadline_the_silent_calls_stay_open(settings: Any) -> None:
    with attack(settings, per_node=0, deadline=0) as (port, silent, b):
        assert silent.codes(wait=3) == [None] * SLOTS  # still held 3 s on
        assert exports(port, b, 4) == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 4


@pytest.mark.django_db(transaction=True)
def test_a_real_export_within_the_deadline_is_stored(settings: Any) -> None:
    server, port = start(settings, per_node=2, deadline=1)
    try:
        token = identity.create_node("node-a").token
        assert exports(port, token, 3) == [grpc.StatusCode.OK] * 3  # one after another: the slot comes back
    finally:
        server.stop(grace=None).wait(10)  # every handler done: none writes while the test database is flushed
