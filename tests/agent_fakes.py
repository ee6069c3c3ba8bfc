"""Loopback fakes for meshdash-agent's storeless tests: one small HTTP server that answers from a table of
routes and records what it was asked, standing in for a node, the Hub, an engine or meshdash. The agent is
standard library only, so these tests need neither Django nor a store."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

SHA = "a" * 40


@dataclass
class Reply:
    """One answer: ``body`` is sent as it is when bytes, else as JSON. ``hold``: answered only once the
    server closes, like a node that hangs."""

    body: Any = field(default_factory=dict)
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    hold: bool = False


NOT_FOUND = Reply({"error": "not found"}, status=404)


class FakeServer:
    """Answers each path from ``routes`` (a Reply, or a list of them given in turn, the last one repeated),
    else ``default``. ``asked`` holds each request's target, ``posted`` each POST's path and JSON body;
    ``on_post`` is called with both before the answer."""

    def __init__(
        self,
        routes: dict[str, Reply | list[Reply]] | None = None,
        default: Reply = NOT_FOUND,
        on_post: Callable[[str, Any], None] | None = None,
    ) -> None:
        self.routes = dict(routes or {})
        self.default = default
        self.on_post = on_post
        self.asked: list[str] = []
        self.posted: list[tuple[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.closing = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.fake = self  # type: ignore[attr-defined]
        self.server.handle_error = lambda request, address: None  # type: ignore[method-assign]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeServer:
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()

    def bodies(self, path: str) -> list[Any]:
        return [body for posted, body in self.posted if posted == path]

    def reply(self, path: str) -> Reply:
        route = self.routes.get(path, self.default)
        if isinstance(route, list):
            return route.pop(0) if len(route) > 1 else route[0]
        return route


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        fake: FakeServer = self.server.fake  # type: ignore[attr-defined]
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
        path = urlsplit(self.path).path
        fake.posted.append((path, body))
        fake.headers.append(dict(self.headers))
        if fake.on_post is not None:
            fake.on_post(path, body)
        self._answer()

    def _answer(self) -> None:
        fake: FakeServer = self.server.fake  # type: ignore[attr-defined]
        fake.asked.append(self.path)
        reply = fake.reply(urlsplit(self.path).path)
        if reply.hold:
            fake.closing.wait()
        body = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        self.send_response(reply.status)
        for name, value in ({"Content-Type": "application/json"} | reply.headers).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def closed_port() -> str:
    """A loopback URL nothing listens on (the port was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def stage(**extra: Any) -> dict[str, Any]:
    """One stage of /api/runtime/stages as mesh-llm lists it, of run-1 at a commit sha."""
    return {
        "run_id": "run-1",
        "stage_id": "s0",
        "stage_index": 0,
        "layer_start": 0,
        "layer_end": 4,
        "package_ref": f"meshllm/a-layers@{SHA}",
    } | extra


def node_routes(stages: list[Any], status: Any = None) -> dict[str, Reply | list[Reply]]:
    """A node's console API: its stages and its /api/status (no split readiness: an older node)."""
    return {
        "/api/runtime/stages": Reply({"stages": stages}),
        "/api/status": Reply({"version": "0.78.0"} if status is None else status),
    }


MESHDASH_ROUTES: dict[str, Reply | list[Reply]] = {
    path: Reply({"ok": True}, status=201)
    for path in ("/api/v1/runs", "/api/v1/reports/batch", "/api/v1/baselines")
}
