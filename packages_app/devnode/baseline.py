"""devnode's baseline mode: a plain llama.cpp server's ``/metrics`` (``llama-server --metrics``), demo.

A baseline engine is what mesh-llm's MTP is compared with (docs/node-report.md section 6): the same source
GGUF decoded by one plain llama.cpp process. This imitation decodes all the time at about ``tps`` tokens a
second (8 % noise each scrape window), so each scrape finds ``llamacpp:tokens_predicted_total`` and
``llamacpp:tokens_predicted_seconds_total`` grown as a busy server's would; with ``acceptance`` it speculates
with a draft model too and publishes the ``llamacpp:spec_decode_*`` counters of PR #26389 (position 0 accepted
most often, each later position less). ``GET /props`` answers its ``build_info``, as llama-server's does.
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

BUILD_INFO = "b7142-3f2a1c9"
DRAFT_TOKENS = 3  # tokens a draft proposes, when speculating


@dataclass
class Counters:
    """What llama-server's metrics endpoint accumulates since it started."""

    prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    predicted: int = 0
    predicted_seconds: float = 0.0
    decodes: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accepted_at: list[int] = field(default_factory=lambda: [0] * DRAFT_TOKENS)


class BaselineEngine:
    """``with BaselineEngine(tps=4.1) as engine: engine.url`` serves /metrics and /props."""

    def __init__(
        self,
        tps: float,
        *,
        acceptance: float | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int | None = None,
        clock: Any = time.monotonic,
    ) -> None:
        self.tps, self.acceptance, self.clock = tps, acceptance, clock
        self.counters = Counters()
        self.rng = random.Random(seed)
        self._lock = threading.Lock()
        self._last = clock()
        self._carry = 0.0
        self.httpd = ThreadingHTTPServer((host, port), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.engine = self  # type: ignore[attr-defined]

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> BaselineEngine:
        threading.Thread(target=self.httpd.serve_forever, name="devnode-baseline", daemon=True).start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> BaselineEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def advance(self) -> Counters:
        """Decode for the time since the last call, at this window's rate."""
        with self._lock:
            now = self.clock()
            seconds, self._last = max(0.0, now - self._last), now
            c = self.counters
            decoded = max(0.5, self.rng.gauss(self.tps, self.tps * 0.08)) * seconds + self._carry
            tokens = int(decoded)
            self._carry = decoded - tokens  # a token half decoded counts in the next window, not never
            c.predicted += tokens
            c.predicted_seconds += seconds
            c.decodes += tokens
            c.prompt_tokens += tokens // 4
            c.prompt_seconds += seconds / 40
            if self.acceptance is not None and tokens:
                self._speculate(c, tokens)
            return Counters(**{**vars(c), "accepted_at": list(c.accepted_at)})

    def _speculate(self, c: Counters, tokens: int) -> None:
        drafts = max(1, tokens // 2)
        c.drafts += drafts
        c.draft_tokens += drafts * DRAFT_TOKENS
        share = float(self.acceptance or 0.0)
        for position in range(DRAFT_TOKENS):
            taken = int(drafts * share ** (position + 1))
            c.accepted_at[position] += taken
            c.accepted += taken


def metrics_text(c: Counters, speculating: bool) -> str:
    """The exposition llama-server writes (server.cpp's metrics handler; spec-decode since PR #26389)."""
    rows: list[tuple[str, str, str, Any]] = [
        ("prompt_tokens_total", "counter", "Number of prompt tokens processed.", c.prompt_tokens),
        ("prompt_seconds_total", "counter", "Prompt process time", round(c.prompt_seconds, 3)),
        ("tokens_predicted_total", "counter", "Number of generation tokens processed.", c.predicted),
        ("tokens_predicted_seconds_total", "counter", "Predict process time", round(c.predicted_seconds, 3)),
        ("n_decode_total", "counter", "Total number of llama_decode() calls", c.decodes),
        ("n_busy_slots_per_decode", "counter", "Average number of busy slots per llama_decode() call", 1),
        ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.", 40.0),
        ("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.", _rate(c)),
        ("requests_processing", "gauge", "Number of requests processing.", 1),
        ("requests_deferred", "gauge", "Number of requests deferred.", 0),
    ]
    if speculating:
        rows += [
            ("spec_decode_num_drafts", "counter", "Number of drafts.", c.drafts),
            ("spec_decode_num_draft_tokens", "counter", "Number of draft tokens.", c.draft_tokens),
            ("spec_decode_num_accepted_tokens", "counter", "Number of accepted draft tokens.", c.accepted),
        ]
    lines = []
    for name, kind, text, value in rows:
        lines += [
            f"# HELP llamacpp:{name} {text}",
            f"# TYPE llamacpp:{name} {kind}",
            f"llamacpp:{name} {value}",
        ]
    if speculating:
        name = "llamacpp:spec_decode_num_accepted_tokens_per_pos"
        lines += [f"# HELP {name} Accepted draft tokens by position.", f"# TYPE {name} counter"]
        lines += [f'{name}{{position="{i}"}} {v}' for i, v in enumerate(c.accepted_at)]
    return "\n".join(lines) + "\n"


def _rate(c: Counters) -> float:
    return round(c.predicted / c.predicted_seconds, 3) if c.predicted_seconds else 0.0


class _Handler(BaseHTTPRequestHandler):
    server_version = "llama.cpp"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        engine: BaselineEngine = self.server.engine  # type: ignore[attr-defined]
        path = urlsplit(self.path).path
        if path == "/metrics":
            body = metrics_text(engine.advance(), engine.acceptance is not None).encode()
            return self._answer(200, "text/plain; version=0.0.4", body)
        if path == "/props":
            props = {"build_info": BUILD_INFO, "total_slots": 1, "model_path": "/models/source.gguf"}
            return self._answer(200, "application/json", json.dumps(props).encode())
        if path == "/health":
            return self._answer(200, "application/json", b'{"status":"ok"}')
        self._answer(404, "application/json", json.dumps({"error": f"No route {path}"}).encode())

    def _answer(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
