"""meshdash-agent: runs beside a mesh-llm node and tells meshdash what the node serves. No Django.

Each cycle it reads the node's console API (``GET /api/runtime/stages``, ``GET /api/status``),
resolves each run's ``package_ref`` to a commit sha (through the Hub API, for a branch or tag), and
registers the runs with meshdash (``POST /api/v1/runs``), so the node's OTLP spans, which carry only a
run id, link to a package revision. As an optional transparent OpenAI-compatible proxy it forwards
each completion's ``timings`` as a report. Everything it sends is first written to an on-disk spool
and deleted only once meshdash has answered, so a meshdash outage loses nothing (at-least-once;
meshdash deduplicates by report id and run id). 429 and 503 are honoured with Retry-After (capped).
The spool is capped by size and age (the oldest bodies are dropped first, counted and logged): a node
that produces reports faster than a down meshdash can take them fills a bounded folder, not the disk.

Only the standard library: it runs on GPU hosts next to a node, not in meshdash's environment.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

log = logging.getLogger("meshdash.agent")

TIMEOUT = 10.0
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
MAX_REQUEST_BYTES = 16 * 1024 * 1024  # a proxied OpenAI request; a long prompt is a few MiB at most
FORWARDED_HEADERS = ("content-type", "authorization", "accept")
STREAM_TAIL_BYTES = 256 * 1024  # the last events of a stream, where the timings are
MAX_RETRY_AFTER = 300.0
MAX_BACKOFF = 60.0
REPORT_BATCH = 200
SPOOL_MAX_BYTES = 64 * 1024 * 1024  # ~20,000 reports of ~3 KiB
SPOOL_MAX_AGE = 7 * 24 * 3600.0  # a body meshdash has not taken in a week is not worth a backlog
# meshdash's answers that say the body itself is wrong: sending it again would be refused again.
DROP_STATUSES = frozenset({400, 413, 422})
SHA = re.compile(r"^[0-9a-f]{40}$")
DECIMAL = re.compile(r"[0-9]+")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
REF = re.compile(r"^(?:hf://)?(?P<repo>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)(?:@(?P<rev>[^\s@]+))?$")
# A stage's split-certification status (docs/rules.md 6a: "certified", or "uncertified_override" when the node
# split-serves with --allow-uncertified-split). Which JSON key /api/runtime/stages uses is not pinned down,
# so the spellings mesh-llm's own names suggest are all read (its log field is `split_certification`).
CERTIFICATION_KEYS = (
    "split_certification",
    "certification",
    "certification_status",
    "split_certification_status",
    "split_certification_admission",
)
CERTIFICATIONS = {"certified": "certified", "uncertifiedoverride": "uncertified_override"}
MAX_RAW_STAGE_BYTES = 4 * 1024  # meshdash caps each stored stage object; a bigger one is trimmed, never lost


class AgentError(Exception):
    """A configuration or node problem the operator must fix; printed as one sentence."""


@dataclass(frozen=True)
class Config:
    node_url: str = "http://127.0.0.1:3131"  # the node's console API
    meshdash_url: str = "http://127.0.0.1:8000"
    token: str = ""
    hub_url: str = "https://huggingface.co"
    spool_dir: str = ""
    interval: float = 30.0
    proxy_listen: str = ""  # host:port; empty = no proxy
    upstream_url: str = ""  # the node's OpenAI API; empty = node_url
    spool_max_bytes: int = SPOOL_MAX_BYTES
    spool_max_age: float = SPOOL_MAX_AGE  # seconds
    # At start-up, how long to wait quietly for the node's console API to answer before the first poll:
    # the agent usually starts with its node, which takes a while to listen (0 = poll at once).
    node_wait: float = 120.0

    @classmethod
    def load(cls, path: str | None, overrides: dict[str, Any]) -> Config:
        data: dict[str, Any] = {}
        if path:
            try:
                data = json.loads(Path(path).read_text())
            except (OSError, ValueError) as exc:
                raise AgentError(f"Cannot read the config file {path}: {exc}") from None
            unknown = set(data) - set(cls.__dataclass_fields__)
            if unknown:
                raise AgentError(f"Unknown config keys in {path}: {', '.join(sorted(unknown))}")
        data.update({k: v for k, v in overrides.items() if v is not None})
        data.setdefault("token", os.environ.get("MESHDASH_TOKEN", ""))
        config = cls(**data)
        config.check()
        return config

    def check(self) -> None:
        for name in ("node_url", "meshdash_url", "hub_url"):
            if not getattr(self, name).startswith(("http://", "https://")):
                raise AgentError(f"{name} must be an http:// or https:// URL.")
        if not self.token:
            raise AgentError("A node token is required: token in the config file or MESHDASH_TOKEN.")
        for name in ("spool_max_bytes", "spool_max_age"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise AgentError(f"{name} must be a positive number.")
        wait = self.node_wait
        if isinstance(wait, bool) or not isinstance(wait, int | float) or wait < 0:
            raise AgentError("node_wait must be a number of seconds, 0 or more.")

    @property
    def spool(self) -> Path:
        return Path(self.spool_dir or Path(tempfile.gettempdir()) / "meshdash-agent")


# --- HTTP (stdlib) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    retry_after: float | None = None

    def json(self) -> Any:
        return json.loads(self.body)


def http(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> Answer:
    """One request with a timeout and a capped body; HTTP errors are answers, not exceptions."""
    request = urllib.request.Request(url, data=body, headers=headers or {}, method=method)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310
            return Answer(response.status, response.read(MAX_RESPONSE_BYTES))
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, exc.read(64 * 1024), _retry_after(exc.headers.get("Retry-After")))


def _retry_after(value: str | None) -> float | None:
    try:
        return min(MAX_RETRY_AFTER, max(0.0, float(value))) if value else None
    except ValueError:
        return None


# --- The node's console API -> runs -----------------------------------------------------------


def read_runs(config: Config, resolver: RefResolver) -> list[dict[str, Any]]:
    """The runs the node serves, as meshdash's ``POST /api/v1/runs`` takes them."""
    stages = _get_json(config.node_url + "/api/runtime/stages")
    status = _get_json(config.node_url + "/api/status")
    version = status.get("version") if isinstance(status, dict) else None
    by_run: dict[str, list[dict[str, Any]]] = {}
    for stage in stages.get("stages") or [] if isinstance(stages, dict) else []:
        if isinstance(stage, dict) and isinstance(stage.get("run_id"), str) and stage["run_id"]:
            by_run.setdefault(stage["run_id"], []).append(stage)
    return [_run(run_id, rows, version, resolver) for run_id, rows in sorted(by_run.items())]


def _get_json(url: str) -> Any:
    try:
        answer = http("GET", url)
    except OSError as exc:
        raise AgentError(f"The node does not answer at {url}: {exc}") from None
    if answer.status != 200:
        raise AgentError(f"The node answered {answer.status} for {url}.")
    try:
        return answer.json()
    except ValueError:
        raise AgentError(f"The node's {url} is not JSON.") from None


def _run(run_id: str, stages: list[dict[str, Any]], version: Any, resolver: RefResolver) -> dict[str, Any]:
    first = stages[0]
    ref = _text(first.get("package_ref"), 300)
    run: dict[str, Any] = {
        "run_id": run_id[:200],
        "topology_id": _text(first.get("topology_id")),
        "model_id": _text(first.get("model_id")),
        "package_ref": ref,
        "version": _text(version)[:100],
        "stages": [_stage(s) for s in stages if _stage(s) is not None][:64],
        "devices": [s["selected_device"] for s in stages if isinstance(s.get("selected_device"), dict)][:64],
    }
    package = resolver.package(ref, first.get("manifest_sha256"))
    if package:
        run["package"] = package
    return run


def _stage(stage: dict[str, Any]) -> dict[str, Any] | None:
    ints = [stage.get(k) for k in ("stage_index", "layer_start", "layer_end")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints):
        return None
    device = stage.get("selected_device")
    return {
        "stage_id": _text(stage.get("stage_id")),
        "stage_index": ints[0],
        "node_id": _text(stage.get("node_id")),
        "layer_start": ints[1],
        "layer_end": ints[2],
        "state": _text(stage.get("state")),
        "device": _text(device.get("backend_device")) if isinstance(device, dict) else "",
        "ctx_size": stage.get("ctx_size") if isinstance(stage.get("ctx_size"), int) else None,
        "lane_count": stage.get("lane_count") if isinstance(stage.get("lane_count"), int) else None,
        "certification": certification_of(stage),
        "weight_quantization": _text(stage.get("weight_quantization"), 64),
        "raw": raw_stage(stage),
    }


def certification_of(stage: dict[str, Any]) -> str:
    """``certified`` / ``uncertified_override`` under any of CERTIFICATION_KEYS (``UncertifiedOverride``,
    ``uncertified-override`` and ``{"status": ...}`` too); another value is kept as the node wrote it."""
    for key in CERTIFICATION_KEYS:
        value = stage.get(key)
        if isinstance(value, dict):
            inner = (value.get(k) for k in ("status", "admission", "state"))
            value = next((v for v in inner if isinstance(v, str)), "")
        if isinstance(value, str) and value.strip():
            return CERTIFICATIONS.get(re.sub(r"[^a-z]", "", value.lower()), value.strip()[:64])
    return ""


def raw_stage(stage: dict[str, Any]) -> dict[str, Any]:
    """The stage object as the node sent it, so fields meshdash does not read yet are kept. Over
    MAX_RAW_STAGE_BYTES, the largest values are dropped first and named in ``_trimmed``."""
    if len(json.dumps(stage)) <= MAX_RAW_STAGE_BYTES:
        return stage
    sizes = sorted(((len(json.dumps(v)), k) for k, v in stage.items()), reverse=True)
    kept = dict(stage)
    trimmed: list[str] = []
    for _, key in sizes:
        if len(json.dumps(kept | {"_trimmed": trimmed})) <= MAX_RAW_STAGE_BYTES:
            break
        del kept[key]
        trimmed.append(key[:64])
    raw = kept | {"_trimmed": trimmed[:32]}
    return raw if len(json.dumps(raw)) <= MAX_RAW_STAGE_BYTES else {"_trimmed": ["(every key)"]}


def _text(value: Any, limit: int = 200) -> str:
    return value[:limit] if isinstance(value, str) else ""


class RefResolver:
    """``owner/repo@ref`` -> ``{repo, revision, manifest_sha256}``; a branch or tag via the Hub API."""

    def __init__(self, hub_url: str) -> None:
        self.hub_url = hub_url.rstrip("/")
        self._cache: dict[tuple[str, str], str] = {}

    def package(self, ref: str, manifest: Any) -> dict[str, Any] | None:
        match = REF.match(ref or "")
        if not match:
            return None
        repo, rev = match["repo"], match["rev"] or "main"
        sha = rev if SHA.match(rev) else self._resolve(repo, rev)
        if sha is None:
            return None
        package: dict[str, Any] = {"repo": repo, "revision": sha}
        if isinstance(manifest, str) and SHA256.match(manifest):
            package["manifest_sha256"] = manifest
        return package

    def _resolve(self, repo: str, rev: str) -> str | None:
        if (repo, rev) not in self._cache:
            url = f"{self.hub_url}/api/models/{repo}/revision/{quote(rev, safe='')}"
            try:
                answer = http("GET", url)
                sha = answer.json().get("sha") if answer.status == 200 else None
            except (OSError, ValueError, AttributeError):
                sha = None
            if not (isinstance(sha, str) and SHA.match(sha)):
                log.warning("could not resolve %s@%s to a commit", repo, rev)
                return None  # not cached: try again next cycle
            self._cache[(repo, rev)] = sha
        return self._cache[(repo, rev)]


# --- The spool: nothing is lost while meshdash is down ----------------------------------------


class Spool:
    """Outgoing bodies as files, oldest first; a file is deleted once meshdash has answered it.

    Capped: past ``max_bytes`` in all, or ``max_age`` seconds old, the oldest files are dropped (and
    counted in ``dropped``). The sizes are kept in memory, so a put costs no directory listing.
    """

    def __init__(
        self, directory: Path, max_bytes: int = SPOOL_MAX_BYTES, max_age: float = SPOOL_MAX_AGE
    ) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_bytes, self.max_age = max_bytes, max_age
        self.dropped = 0
        self._lock = threading.Lock()
        self._sizes: dict[Path, int] = {}
        for path in sorted(self.directory.glob("*.json")):
            with contextlib.suppress(OSError):
                self._sizes[path] = path.stat().st_size
        self._bytes = sum(self._sizes.values())

    def put(self, kind: str, body: dict[str, Any]) -> Path:
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.{kind}.json"
        data = json.dumps(body).encode()
        tmp = self.directory / (name + ".tmp")
        tmp.write_bytes(data)
        path = self.directory / name
        tmp.replace(path)  # atomic: a crash leaves a whole file or none
        with self._lock:
            self._sizes[path] = len(data)
            self._bytes += len(data)
            self._trim()
        return path

    def pending(self) -> Iterator[tuple[Path, str, dict[str, Any]]]:
        with self._lock:
            self._trim()
            paths = sorted(self._sizes)
        for path in paths:
            try:
                body = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # being written, or already sent by another thread
            yield path, path.name.split(".")[-2], body

    def remove(self, path: Path) -> None:
        """A body meshdash has answered."""
        path.unlink(missing_ok=True)
        with self._lock:
            self._bytes -= self._sizes.pop(path, 0)

    def count(self) -> int:
        with self._lock:
            return len(self._sizes)

    @property
    def size(self) -> int:
        with self._lock:
            return self._bytes

    def _trim(self) -> None:
        """Drop the oldest files past the size cap, and every file past the age cap (lock held)."""
        oldest_kept = time.time_ns() - int(self.max_age * 1e9)
        too_old = [p for p in self._sizes if _spooled_at(p) < oldest_kept]
        dropped_bytes = sum(self._sizes[p] for p in too_old)
        for path in too_old:
            self._drop(path)
        over = sorted(self._sizes) if self._bytes > self.max_bytes else []
        for path in over:
            if self._bytes <= self.max_bytes:
                break
            dropped_bytes += self._sizes[path]
            self._drop(path)
        if dropped_bytes:
            log.warning(
                "spool over its caps (%d bytes, %.0f s): dropped the oldest %d bytes; %d bodies since start",
                self.max_bytes,
                self.max_age,
                dropped_bytes,
                self.dropped,
            )

    def _drop(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        self._bytes -= self._sizes.pop(path)
        self.dropped += 1


def _spooled_at(path: Path) -> int:
    """The time_ns a spool file was written, from its name (a foreign name counts as new)."""
    stamp = path.name.split("-", 1)[0]
    return int(stamp) if stamp.isdigit() else time.time_ns()


@dataclass
class Sender:
    """Sends spooled bodies in order; stops at the first that meshdash cannot take now."""

    config: Config
    spool: Spool
    dry_run: bool = False
    wait_until: float = 0.0
    failures: int = 0
    sent: int = 0
    refused: int = 0
    endpoints: dict[str, str] = field(
        default_factory=lambda: {"runs": "/api/v1/runs", "reports": "/api/v1/reports/batch"}
    )

    def flush(self) -> bool:
        """True when the spool is empty afterwards."""
        if time.monotonic() < self.wait_until:
            return False
        for path, kind, body in self.spool.pending():
            if not self._send(kind, body):
                return False
            self.spool.remove(path)
        return True

    def _send(self, kind: str, body: dict[str, Any]) -> bool:
        if self.dry_run:
            print(json.dumps({"would_send": kind, "body": body}, indent=2))
            return True
        url = self.config.meshdash_url.rstrip("/") + self.endpoints[kind]
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.config.token}"}
        try:
            answer = http("POST", url, json.dumps(body).encode(), headers)
        except OSError as exc:
            return self._back_off(None, f"meshdash unreachable ({exc})")
        if answer.status in DROP_STATUSES:
            # The body itself is wrong: sending it again would be refused again, and block the rest.
            log.error("meshdash refused a %s body with %s: %s", kind, answer.status, answer.body[:500])
            self.refused += 1
        elif not 200 <= answer.status < 300:
            # 401/403 (a token being rotated), 404 (a proxy or an old meshdash), 429, 5xx: not about
            # the body, so it is kept and sent again later; the spool's caps bound what waits.
            return self._back_off(answer.retry_after, f"meshdash answered {answer.status}")
        else:
            self.sent += 1
        self.failures = 0
        return True

    def _back_off(self, retry_after: float | None, reason: str) -> bool:
        self.failures += 1
        delay = retry_after if retry_after is not None else min(MAX_BACKOFF, 2.0 ** min(self.failures, 6))
        self.wait_until = time.monotonic() + delay
        log.warning("%s; %d waiting in the spool, retrying in %.0f s", reason, self.spool.count(), delay)
        return False


# --- The proxy: timings of each completion become a report ------------------------------------


class Agent:
    def __init__(self, config: Config, *, dry_run: bool = False) -> None:
        self.config = config
        self.spool = Spool(config.spool, config.spool_max_bytes, config.spool_max_age)
        self.sender = Sender(config, self.spool, dry_run=dry_run)
        self.resolver = RefResolver(config.hub_url)
        self.runs: list[dict[str, Any]] = []
        self._spooled_runs: list[dict[str, Any]] = []
        self._stop = threading.Event()

    def cycle(self) -> bool:
        """Poll the node, spool its runs, flush; True when everything was sent."""
        try:
            self.runs = read_runs(self.config, self.resolver)
        except AgentError as exc:
            log.warning("%s", exc)
        else:
            # Registrations are upserts of the node's current state: spool one only when it changed.
            if self.runs and self.runs != self._spooled_runs:
                self.spool.put("runs", {"runs": self.runs})
                self._spooled_runs = self.runs
        return self.sender.flush()

    def wait_for_node(self) -> bool:
        """Wait, quietly, until the node's console API answers or ``node_wait`` seconds pass; True when it
        answered. A node that is still starting is normal: only one that never answers is worth a line."""
        deadline = time.monotonic() + self.config.node_wait
        delay = 0.2
        while not self._stop.is_set():
            try:
                if http("GET", self.config.node_url + "/api/status").status == 200:
                    return True
            except OSError:
                pass
            if time.monotonic() + delay > deadline:
                break
            self._stop.wait(delay)
            delay = min(delay * 2, 5.0)
        if self.config.node_wait:
            log.warning(
                "the node at %s did not answer in %g s; polling anyway",
                self.config.node_url,
                self.config.node_wait,
            )
        return False

    def run_forever(self) -> None:
        while not self._stop.is_set():
            self.cycle()
            self._stop.wait(self.config.interval if self.sender.failures == 0 else 1.0)

    def stop(self) -> None:
        self._stop.set()

    def report_timings(self, timings: dict[str, Any]) -> bool:
        """Spool one report of a completion's timings, for the run the node serves now."""
        run = next((r for r in self.runs if "package" in r), None)
        if run is None:
            log.warning("timings dropped: the node's package is not known yet")
            return False
        report = {
            "report_id": str(uuid.uuid4()),
            "observed_at": datetime.now(UTC).isoformat(),
            "package": run["package"],
            "topology": {
                "topology_id": run["topology_id"],
                "stages": [
                    {
                        "node": s["node_id"] or "?",
                        "layer_start": s["layer_start"],
                        "layer_end": s["layer_end"],
                        "device": s["device"] or None,
                        "stage_index": min(s["stage_index"], 63),
                    }
                    for s in run["stages"]
                    if s["layer_end"] > s["layer_start"]
                ][:16],
            },
            "timings": timings,
        }
        self.spool.put("reports", {"reports": [report]})
        return True

    def serve_proxy(self) -> ThreadingHTTPServer:
        host, _, port = self.config.proxy_listen.rpartition(":")
        server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), _ProxyHandler)
        server.daemon_threads = True
        server.agent = self  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, name="agent-proxy", daemon=True).start()
        return server


class _ProxyHandler(BaseHTTPRequestHandler):
    """Forwards every request to the node unchanged; reads ``timings`` from JSON completions."""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("proxy: " + format, *args)

    def do_GET(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def _forward(self) -> None:
        agent: Agent = self.server.agent  # type: ignore[attr-defined]
        length, refusal = request_length(self.headers)
        if refusal is not None:
            self.close_connection = True  # the unread body must not be parsed as the next request
            message = json.dumps({"error": {"message": refusal[1]}}).encode()
            return self._answer(refusal[0], "application/json", message)
        body = self.rfile.read(length) if length else None
        upstream = (agent.config.upstream_url or agent.config.node_url).rstrip("/") + self.path
        headers = {k: v for k, v in self.headers.items() if k.lower() in FORWARDED_HEADERS}
        request = urllib.request.Request(upstream, data=body, headers=headers, method=self.command)  # noqa: S310
        try:
            response = urllib.request.urlopen(request, timeout=TIMEOUT)  # noqa: S310
        except urllib.error.HTTPError as exc:
            response = exc  # an answer like any other: forwarded as the node gave it
        except OSError as exc:
            message = json.dumps({"error": {"message": f"upstream unreachable: {exc}"}}).encode()
            return self._answer(502, "application/json", message)
        with response:
            completion = response.status == 200 and urlsplit(self.path).path.endswith("completions")
            content_type = response.headers.get("Content-Type", "application/json")
            if content_type.startswith("text/event-stream"):
                return self._stream(agent, response, content_type, completion)
            self._forward_whole(
                agent, response.status, content_type, response.read(MAX_RESPONSE_BYTES), completion
            )

    def _forward_whole(
        self, agent: Agent, status: int, content_type: str, body: bytes, completion: bool
    ) -> None:
        # Spooled before the client hears back (a local file write), sent after: the node's client
        # never waits on meshdash, and a report exists on disk once its completion was answered.
        reported = completion and self._spool_report(agent, _timings_of(body))
        self._answer(status, content_type, body)
        if reported:
            agent.sender.flush()

    def _stream(self, agent: Agent, response: Any, content_type: str, completion: bool) -> None:
        """Server-sent events pass through as they come; the last event holding ``timings`` is reported."""
        self.send_response(response.status)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        tail = b""
        while chunk := response.read1(64 * 1024):
            self.wfile.write(chunk)
            self.wfile.flush()
            tail = (tail + chunk)[-STREAM_TAIL_BYTES:]
        if completion and self._spool_report(agent, _last_event_timings(tail)):
            agent.sender.flush()

    def _answer(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _spool_report(self, agent: Agent, timings: Any) -> bool:
        return isinstance(timings, dict) and agent.report_timings(timings)


def request_length(headers: Any) -> tuple[int, tuple[int, str] | None]:
    """The body length a proxied request declares, or the status and sentence that refuse it unread."""
    if headers.get("Transfer-Encoding"):
        return 0, (411, "A request body must be sent with a Content-Length, not chunked.")
    declared = (headers.get("Content-Length") or "0").strip()
    if not DECIMAL.fullmatch(declared):  # "-1", "1e9", "0x10", "5, 5": never read as "until the end"
        return 0, (400, f"Content-Length must be a non-negative integer, not {declared[:40]!r}.")
    if len(declared) > 12 or int(declared) > MAX_REQUEST_BYTES:
        return 0, (413, f"A request body must be at most {MAX_REQUEST_BYTES // (1024 * 1024)} MiB.")
    return int(declared), None


def _timings_of(body: bytes) -> Any:
    try:
        return json.loads(body).get("timings")
    except (ValueError, AttributeError):
        return None  # not a JSON object: forwarded untouched, nothing to report


def _last_event_timings(tail: bytes) -> Any:
    """``timings`` of the last ``data:`` event that has them (llama.cpp-style streams put them last)."""
    for line in reversed(tail.split(b"\n")):
        if line.startswith(b"data:") and b'"timings"' in line:
            return _timings_of(line[5:].strip())
    return None


# --- Command line -----------------------------------------------------------------------------


EPILOG = """\
environment:
  MESHDASH_TOKEN  the node's token (manage.py create_node NAME prints it), used when the config file has
                  no "token"; prefer it (or a config file of mode 600) to a token on the command line

A flag overrides the config file's key of the same name; the config file also takes interval,
upstream_url, spool_max_bytes, spool_max_age and node_wait (see the README, "The agent")."""


def parser() -> argparse.ArgumentParser:
    defaults = Config()
    cli = argparse.ArgumentParser(
        prog="meshdash-agent",
        description=__doc__.split("\n\n")[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cli.add_argument(
        "--config",
        metavar="FILE",
        help="JSON file with the keys of the agent's config (node_url, meshdash_url, token, ...)",
    )
    cli.add_argument(
        "--node-url",
        dest="node_url",
        metavar="URL",
        help=f"the mesh-llm node's console API, read for its runs (default {defaults.node_url})",
    )
    cli.add_argument(
        "--meshdash-url",
        dest="meshdash_url",
        metavar="URL",
        help=f"meshdash, where runs and reports are posted (default {defaults.meshdash_url})",
    )
    cli.add_argument(
        "--hub-url",
        dest="hub_url",
        metavar="URL",
        help=f"the Hub that resolves a package ref's branch or tag to a commit (default {defaults.hub_url})",
    )
    cli.add_argument(
        "--spool-dir",
        dest="spool_dir",
        metavar="DIR",
        help="where bodies wait until meshdash has answered (default: meshdash-agent in the temp folder)",
    )
    cli.add_argument(
        "--proxy",
        dest="proxy_listen",
        metavar="HOST:PORT",
        help="serve an OpenAI-compatible proxy to the node there, reporting each completion's timings",
    )
    cli.add_argument(
        "--node-wait",
        dest="node_wait",
        type=float,
        metavar="SECONDS",
        help=f"wait this long for the node to answer before the first poll (default {defaults.node_wait:g}; "
        "with --once, 0)",
    )
    cli.add_argument("--once", action="store_true", help="one poll and flush, then exit (1 if unsent)")
    cli.add_argument("--dry-run", action="store_true", help="print what would be sent; send nothing")
    return cli


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    keys = ("node_url", "meshdash_url", "hub_url", "spool_dir", "proxy_listen", "node_wait")
    overrides = {k: getattr(args, k) for k in keys}
    try:
        config = Config.load(args.config, overrides)
    except (AgentError, TypeError) as exc:
        print(f"meshdash-agent: {exc}", file=sys.stderr)
        return 2
    agent = Agent(config, dry_run=args.dry_run)
    if not args.once or args.node_wait is not None:  # --once polls at once unless told to wait
        agent.wait_for_node()
    if args.once:
        return 0 if agent.cycle() else 1
    if config.proxy_listen:
        agent.cycle()  # learn the node's package first, so the first completions are reported too
        agent.serve_proxy()
    try:
        agent.run_forever()
    except KeyboardInterrupt:
        agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
