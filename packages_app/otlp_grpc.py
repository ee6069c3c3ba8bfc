"""The OTLP/gRPC edge: a TraceService server whose Export stores decode spans (telemetry.traces_export).

mesh-llm exports with ``--skippy-metrics-otlp-grpc URL``; the node token travels as the standard
``authorization: Bearer <token>`` metadata. Run by ``manage.py otlp_receiver``; the tests start it on
port 0 in-process.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import grpc
from django.db import InterfaceError, OperationalError, close_old_connections, connection
from django.utils import timezone
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from packages_app import telemetry
from packages_app.models import Node
from packages_app.nodes import identity, otlp

log = logging.getLogger(__name__)


class TraceReceiver(trace_service_pb2_grpc.TraceServiceServicer):
    """OTLP TraceService: authenticate, rate-limit, store; errors as the OTLP spec's gRPC codes.

    Worker threads keep their database connection (CONN_MAX_AGE) unless ``close_connections`` is
    set, which a server that is stopped before its process ends (the tests) needs.
    """

    def __init__(self, *, close_connections: bool = False) -> None:
        self.close_connections = close_connections

    def Export(
        self, request: ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> ExportTraceServiceResponse:
        close_old_connections()
        try:
            node = self._node(context)
            return telemetry.traces_export(node, request, timezone.now()).response
        except telemetry.RunConflict as exc:
            # ALREADY_EXISTS: HTTP's 409, and not a code OTLP exporters retry.
            context.abort(grpc.StatusCode.ALREADY_EXISTS, str(exc))
            raise  # abort raises; this line is for the type checker
        except (OperationalError, InterfaceError):
            log.warning("database unavailable during an OTLP export", exc_info=True)
            context.abort(grpc.StatusCode.UNAVAILABLE, "The database is unavailable; retry later.")
            raise  # abort raises; this line is for the type checker
        finally:
            connection.close() if self.close_connections else close_old_connections()

    def _node(self, context: grpc.ServicerContext) -> Node:
        metadata = {key: value for key, value in context.invocation_metadata() if isinstance(value, str)}
        token = otlp.bearer_token(metadata)
        node = identity.node_authenticate(token) if token else None
        if node is None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "A valid node token is required (Bearer).")
            raise AssertionError("unreachable")
        retry_after = identity.node_rate_limit(node)
        if retry_after is not None:
            # UNAVAILABLE, which OTLP exporters retry with backoff: nothing the node measured is lost.
            context.abort(
                grpc.StatusCode.UNAVAILABLE, f"Too many requests from this node; retry in {retry_after} s."
            )
        identity.node_touch(node)
        return node


def build_server(
    host: str, port: int, workers: int = 4, *, close_connections: bool = False
) -> tuple[grpc.Server, int]:
    """A started-ready (not started) server and the port it bound (port 0 picks a free one)."""
    server = grpc.server(
        ThreadPoolExecutor(max_workers=workers),
        options=[
            ("grpc.max_receive_message_length", otlp.MAX_BODY_BYTES),  # checked after gzip inflation
            ("grpc.max_send_message_length", 1024 * 1024),
        ],
    )
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(
        TraceReceiver(close_connections=close_connections), server
    )  # type: ignore[no-untyped-call]
    bound = server.add_insecure_port(f"{host}:{port}")
    return server, bound
