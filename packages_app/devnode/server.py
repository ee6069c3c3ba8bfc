"""devnode's HTTP server: the console API, an OpenAI endpoint, and OTLP export of each decode span.

Routes: ``GET /api/runtime/stages``, ``GET /api/status``, ``GET /api/diagnostics/split-readiness``
(404 for a plan whose version does not report it, as an older node answers), ``POST
/v1/chat/completions`` (and ``/v1/completions``). With an exchange log, each completion's
``openai.exchange.v1`` terminal event is appended to it as a plugin subscribed to that channel logs it.
Each completion's ``stage.openai_decode`` span is exported to the configured OTLP endpoint (gRPC, as
``mesh-llm --skippy-metrics-otlp-grpc URL`` does, or OTLP/HTTP protobuf), with the node token as the
standard ``authorization: Bearer`` header.
"""

from __future__ import annotations

import gzip
import json
import logging
import random
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from packages_app.devnode import payloads

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 1024 * 1024
EXPORT_TIMEOUT = 10.0


@dataclass(frozen=True)
class OtlpTarget:
    """Where spans go: ``grpc://host:port`` or ``http(s)://host:port`` (the /v1/traces path is added)."""

    url: str
    token: str
    gzip: bool = False

    @property
    def is_grpc(self) -> bool:
        return self.url.startswith("grpc://")


class SpanExporter:
    """Sends spans one export at a time; failures are counted and logged, as skippy's exporter does."""

    def __init__(self, target: OtlpTarget) -> None:
        self.target = target
        self.exported = 0
        self.errors = 0
        self._lock = threading.Lock()
        self._channel = grpc.insecure_channel(urlsplit(target.url).netloc) if target.is_grpc else None

    def export(self, spans: list[Span]) -> bool:
        request = payloads.export_request(spans)
        try:
            self._send_grpc(request) if self._channel is not None else self._send_http(
                request.SerializeToString()
            )
        except (grpc.RpcError, OSError, urllib.error.URLError) as exc:
            with self._lock:
                self.errors += 1
            log.warning("devnode: OTLP export to %s failed: %s", self.target.url, exc)
            return False
        with self._lock:
            self.exported += len(spans)
        return True

    def _send_grpc(self, request: Any) -> None:
        stub = trace_service_pb2_grpc.TraceServiceStub(self._channel)  # type: ignore[no-untyped-call]
        metadata = (("authorization", f"Bearer {self.target.token}"),)
        stub.Export(request, metadata=metadata, timeout=EXPORT_TIMEOUT)

    def _send_http(self, body: bytes) -> None:
        headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {self.target.token}"}
        if self.target.gzip:
            body = gzip.compress(body)
            headers["Content-Encoding"] = "gzip"
        url = self.target.url.rstrip("/") + "/v1/traces"
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310
        with urllib.request.urlopen(request, timeout=EXPORT_TIMEOUT) as response:  # noqa: S310
            response.read(1024 * 1024)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()


class DevNode:
    """A running imitation node; ``with DevNode(plan) as node: node.url``."""

    def __init__(
        self,
        plan: payloads.RunPlan,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        otlp: OtlpTarget | None = None,
        seed: int | None = None,
        exchange_log: str | None = None,
    ) -> None:
        self.plan = payloads.composed(plan)
        self.exchange_log = exchange_log if "exchange" in plan.reports else None
        self.exporter = SpanExporter(otlp) if otlp else None
        self.rng = random.Random(seed)
        self.rng_lock = threading.Lock()
        self.completions = 0
        self.httpd = ThreadingHTTPServer((host, port), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.devnode = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> DevNode:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="devnode", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self.exporter:
            self.exporter.close()

    def __enter__(self) -> DevNode:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """One OpenAI completion: the response with real-shaped timings; its decode span exported."""
        requested = body.get("max_tokens")
        max_tokens = requested if isinstance(requested, int) else 256
        with self.rng_lock:
            measured = payloads.decode(self.plan, self.rng, max(1, max_tokens))
            span = payloads.decode_span(
                payloads.span_attributes(self.plan, measured, self.plan.stages[0].stage_id),
                self.rng,
                measured.predicted_ms,
            )
            self.completions += 1
        if self.exporter:
            self.exporter.export([span])
        answer = _completion(self.plan, measured, chat="messages" in body)
        if self.exchange_log:
            event = payloads.exchange_event(self.plan, measured, answer["id"])
            with self.rng_lock, open(self.exchange_log, "a", encoding="utf-8") as log_file:
                log_file.write(json.dumps(event) + "\n")
        return answer


def _completion(plan: payloads.RunPlan, measured: payloads.Decode, *, chat: bool) -> dict[str, Any]:
    text = "The mesh answered."
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
    choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
    return {
        "id": f"chatcmpl-{int(time.time() * 1000)}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": plan.model_id,
        "choices": [choice],
        "usage": {
            "prompt_tokens": measured.prompt_n,
            "completion_tokens": measured.predicted_n,
            "total_tokens": measured.prompt_n + measured.predicted_n,
        },
        "timings": payloads.timings(plan, measured),
    }


class _Handler(BaseHTTPRequestHandler):
    server_version = "devnode"

    @property
    def node(self) -> DevNode:
        return self.server.devnode  # type: ignore[attr-defined,no-any-return]

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("devnode: " + format, *args)

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/api/runtime/stages":
            return self._json(200, payloads.stages_payload(self.node.plan))
        if path == "/api/status":
            return self._json(200, payloads.status_payload(self.node.plan))
        if path == "/api/diagnostics/split-readiness" and "split_readiness" in self.node.plan.reports:
            return self._readiness()
        if path == "/v1/models":
            return self._json(
                200, {"object": "list", "data": [{"id": self.node.plan.model_id, "object": "model"}]}
            )
        self._json(404, {"error": {"message": f"No route {path}", "type": "not_found"}})

    def _readiness(self) -> None:
        """As diagnostics.rs answers: 400 without ``model_ref`` (or ``model``), else the report."""
        query = parse_qs(urlsplit(self.path).query)
        model_ref = next(
            (v[0].strip() for k, v in query.items() if k in ("model_ref", "model") and v[0].strip()), ""
        )
        if not model_ref:
            return self._json(400, {"error": "Missing required 'model_ref' query parameter"})
        self._json(200, payloads.split_readiness_payload(self.node.plan, model_ref))

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if path not in ("/v1/chat/completions", "/v1/completions"):
            return self._json(404, {"error": {"message": f"No route {path}", "type": "not_found"}})
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            return self._json(
                413, {"error": {"message": "Request too large", "type": "invalid_request_error"}}
            )
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return self._json(400, {"error": {"message": "Invalid JSON", "type": "invalid_request_error"}})
        if not isinstance(body, dict):
            return self._json(
                400, {"error": {"message": "Expected an object", "type": "invalid_request_error"}}
            )
        answer = self.node.complete(body)
        if body.get("stream") is True:
            return self._events(answer)
        self._json(200, answer)

    def _events(self, answer: dict[str, Any]) -> None:
        """The completion as server-sent events, ``timings`` on the last chunk (as llama.cpp's does)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.close_connection = True
        base = {k: answer[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
        for word in ("The ", "mesh ", "answered."):
            delta = {"index": 0, "delta": {"content": word}, "finish_reason": None}
            self.wfile.write(b"data: " + json.dumps(base | {"choices": [delta]}).encode() + b"\n\n")
            self.wfile.flush()
        last = base | {
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "timings": answer["timings"],
        }
        self.wfile.write(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")

    def _json(self, status: int, body: Any) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)
