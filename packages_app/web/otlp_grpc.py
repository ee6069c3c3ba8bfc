"""The OTLP/gRPC edge: a TraceService server whose Export stores decode spans (telemetry.store_spans).

mesh-llm exports with ``--skippy-metrics-otlp-grpc URL``; the node token travels as the standard
``authorization: Bearer <token>`` metadata. Run by ``manage.py otlp_receiver``; the tests start it on
port 0 in-process.

The method is registered by hand, rather than through the generated servicer: gRPC would otherwise
receive and parse every message before our code runs, so an unauthenticated peer could make it build
hundreds of MB per message. It is registered as a client-streaming method with no deserializer (on the
wire a unary call is the same): the handler runs as soon as the call's metadata arrives, checks the
token, and only then reads the one message, as bytes, so an unauthenticated message is never read.
The bytes are weighed against the export's budget (nodes/otlp.py) and only then parsed; a malformed
message answers INVALID_ARGUMENT. ``maximum_concurrent_rpcs`` refuses calls past
MESHDASH_OTLP_GRPC_MAX_CALLS at once (RESOURCE_EXHAUSTED) instead of queueing them without bound.

No call holds a slot for long (issue 48: 8 calls that sent their metadata and never the message held every
slot for as long as their peer liked): one node token holds at most MESHDASH_OTLP_GRPC_MAX_CALLS_PER_NODE
calls at once (the rest UNAVAILABLE at once, which exporters retry), and a call whose message has not
arrived whole MESHDASH_OTLP_GRPC_MESSAGE_DEADLINE seconds after it started is cancelled (CANCELLED to the
peer, counted as a ``deadline`` refusal), its slot free again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import NoReturn

import grpc
from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection
from django.utils import timezone
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from packages_app import metrics, queueing, telemetry
from packages_app.models import Node
from packages_app.nodes import identity, otlp

log = logging.getLogger(__name__)

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


class TraceReceiver:
    """OTLP TraceService Export: authenticate, weigh, parse, rate-limit, store; errors as gRPC codes.

    Worker threads keep their database connection (CONN_MAX_AGE) unless ``close_connections`` is
    set, which a server that is stopped before its process ends (the tests) needs.
    """

    def __init__(
        self,
        *,
        close_connections: bool = False,
        per_node: int | None = None,
        message_deadline: float | None = None,
    ) -> None:
        self.close_connections = close_connections
        self.per_node = per_node  # None: no per-node cap
        self.message_deadline = message_deadline  # None: wait for the message as long as the peer likes
        self._lock = threading.Lock()
        self._calls: dict[int, int] = {}  # node pk -> calls in progress

    def Export(self, messages: Iterator[bytes], context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        close_old_connections()
        deadline = _MessageDeadline(context, self.message_deadline)
        held: Node | None = None
        try:
            node = self._node(context)
            self._hold(node, context)
            held = node
            raw = deadline.read(messages)  # read only now, once the token is known good
            if raw is None:
                _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "The call carried no export message.")
            try:
                request = otlp.parse_protobuf(raw, otlp.Budget(len(raw)))
            except otlp.OtlpTooLarge as exc:
                _abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
            except otlp.OtlpError as exc:
                _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            retry_after = identity.count_node_spans(node, otlp.span_count(request))
            if retry_after is not None:
                _abort(context, grpc.StatusCode.UNAVAILABLE, f"Too many spans; retry in {retry_after} s.")
            identity.touch_node(node)
            response = telemetry.store_spans(node, request, timezone.now()).response
            queueing.request_node_check(node.pk)
            return response
        except telemetry.RunConflict as exc:
            # ALREADY_EXISTS: HTTP's 409, and not a code OTLP exporters retry.
            _abort(context, grpc.StatusCode.ALREADY_EXISTS, str(exc))
        except (OperationalError, InterfaceError):
            log.warning("database unavailable during an OTLP export", exc_info=True)
            _abort(context, grpc.StatusCode.UNAVAILABLE, "The database is unavailable; retry later.")
        finally:
            deadline.cancel()
            if held is not None:
                self._release(held)
            connection.close() if self.close_connections else close_old_connections()

    def _hold(self, node: Node, context: grpc.ServicerContext) -> None:
        """Count the call against its node; past the node's share of the slots, refuse it at once."""
        with self._lock:
            held = self._calls.get(node.pk, 0)
            if self.per_node is None or held < self.per_node:
                self._calls[node.pk] = held + 1
                return
        _abort(
            context,
            grpc.StatusCode.UNAVAILABLE,
            f"Too many calls from this node at once (at most {self.per_node}); retry when one has ended.",
        )

    def _release(self, node: Node) -> None:
        with self._lock:
            held = self._calls.get(node.pk, 0)
            if held <= 1:
                self._calls.pop(node.pk, None)
            else:
                self._calls[node.pk] = held - 1

    def _node(self, context: grpc.ServicerContext) -> Node:
        metadata = {key: value for key, value in context.invocation_metadata() if isinstance(value, str)}
        token = otlp.bearer_token(metadata)
        node = identity.authenticate_node(token) if token else None
        if node is None:
            _abort(context, grpc.StatusCode.UNAUTHENTICATED, "A valid node token is required (Bearer).")
        retry_after = identity.count_node_request(node)
        if retry_after is not None:
            # UNAVAILABLE, which OTLP exporters retry with backoff: nothing the node measured is lost.
            _abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                f"Too many requests from this node; retry in {retry_after} s.",
            )
        return node


class _MessageDeadline:
    """Cancels the call when its message has not arrived whole ``seconds`` after the call started."""

    def __init__(self, context: grpc.ServicerContext, seconds: float | None) -> None:
        self.context = context
        self.lock = threading.Lock()
        self.done = False
        self.expired = False
        self.timer = threading.Timer(seconds, self._expire) if seconds is not None else None
        if self.timer is not None:
            self.timer.daemon = True
            self.timer.start()

    def read(self, messages: Iterator[bytes]) -> bytes | None:
        try:
            raw = next(messages, None)
        except grpc.RpcError:  # cancelled (by the deadline, or by the peer) while waiting
            raw = None
        with self.lock:
            self.done = True
            expired = self.expired
        if expired:
            _abort(
                self.context, grpc.StatusCode.DEADLINE_EXCEEDED, "The export message did not arrive in time."
            )
        return raw

    def cancel(self) -> None:
        with self.lock:
            self.done = True
        if self.timer is not None:
            self.timer.cancel()

    def _expire(self) -> None:
        with self.lock:
            if self.done:
                return
            self.expired = True
        log.warning("OTLP/gRPC call from %s cancelled: no message within the deadline", self.context.peer())
        self.context.cancel()


GRPC_REFUSAL_REASON = {
    grpc.StatusCode.INVALID_ARGUMENT: "invalid",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "too-large",
    grpc.StatusCode.UNAUTHENTICATED: "unauthorized",
    grpc.StatusCode.ALREADY_EXISTS: "conflict",
    grpc.StatusCode.DEADLINE_EXCEEDED: "deadline",
}


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    reason = GRPC_REFUSAL_REASON.get(code, "rate-limited" if "Too many" in message else "error")
    metrics.count_refused("otlp", reason)
    context.abort(code, message)
    raise AssertionError("unreachable: abort raises")


def build_server(
    host: str, port: int, workers: int = 4, *, close_connections: bool = False
) -> tuple[grpc.Server, int]:
    """A started-ready (not started) server and the port it bound (port 0 picks a free one)."""
    server = grpc.server(
        ThreadPoolExecutor(max_workers=workers),
        options=[
            ("grpc.max_receive_message_length", otlp.MAX_BODY_BYTES),  # checked after gzip inflation
            ("grpc.max_send_message_length", 1024 * 1024),
            # No window growth: a call's message waits at the peer (64 KiB in flight) until the handler
            # reads it, so calls refused before reading (a bad token) cost no buffered megabytes.
            ("grpc.http2.bdp_probe", 0),
        ],
        maximum_concurrent_rpcs=settings.MESHDASH_OTLP_GRPC_MAX_CALLS,
    )
    receiver = TraceReceiver(
        close_connections=close_connections,
        per_node=settings.MESHDASH_OTLP_GRPC_MAX_CALLS_PER_NODE or None,
        message_deadline=settings.MESHDASH_OTLP_GRPC_MESSAGE_DEADLINE or None,
    )
    export = grpc.stream_unary_rpc_method_handler(
        receiver.Export,
        request_deserializer=None,  # raw bytes, read after the token is checked
        response_serializer=ExportTraceServiceResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": export}),))
    bound = server.add_insecure_port(f"{host}:{port}")
    return server, bound
