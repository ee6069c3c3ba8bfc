"""meshdash-agent: runs beside a mesh-llm node and tells meshdash what the node serves. No Django.

Each cycle it reads the node's console API (``GET /api/runtime/stages``, ``GET /api/status``, and
``GET /api/diagnostics/split-readiness`` where the node has it), resolves each run's ``package_ref`` to
a commit sha (through the Hub API, for a branch or tag; a ref that does not resolve is not asked again
for ``FAILED_REF_TTL``), and registers the runs with meshdash (``POST /api/v1/runs``) with what the node
says about itself (docs/node-report.md section 5: its serving strategy, twin policy, draft model, each
stage's admission, the split readiness and, from an ``exchange_log``, the newest exchange's serving
provenance), so the node's OTLP spans, which carry only a run id, link to a package revision. What a
node does not report is named in ``not_reported``; what a hostile node sends past the bounds below is
cut and named in ``trimmed``. As an optional transparent OpenAI-compatible proxy it forwards
each completion's ``timings`` as a report. Everything it sends is first written to an on-disk spool
and deleted only once meshdash has answered, so a meshdash outage loses nothing (at-least-once;
meshdash deduplicates by report id and run id). 429 and 503 are honoured with Retry-After (capped).
The spool is capped by size and age (the oldest bodies are dropped first, counted and logged): a node
that produces reports faster than a down meshdash can take them fills a bounded folder, not the disk.

Only the standard library: it runs on GPU hosts next to a node, not in meshdash's environment.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

try:
    from packages_app.nodes.agent_baseline import BaselineScraper
except ModuleNotFoundError:  # run as a file (python3 packages_app/nodes/agent.py): its neighbour
    from agent_baseline import BaselineScraper  # type: ignore[no-redef]
try:
    from packages_app.nodes.agent_common import MAX_RESPONSE_BYTES, TIMEOUT, AgentError, http
except ModuleNotFoundError:  # run as a file (python3 packages_app/nodes/agent.py): its neighbour
    from agent_common import MAX_RESPONSE_BYTES, TIMEOUT, AgentError, http  # type: ignore[no-redef]
try:
    from packages_app.nodes.agent_config import Config
except ModuleNotFoundError:  # run as a file (python3 packages_app/nodes/agent.py): its neighbour
    from agent_config import Config  # type: ignore[no-redef]
try:
    from packages_app.nodes.agent_runs import RefResolver, read_runs
except ModuleNotFoundError:  # run as a file (python3 packages_app/nodes/agent.py): its neighbour
    from agent_runs import RefResolver, read_runs  # type: ignore[no-redef]
try:
    from packages_app.nodes.agent_spool import Sender, Spool
except ModuleNotFoundError:  # run as a file (python3 packages_app/nodes/agent.py): its neighbour
    from agent_spool import Sender, Spool  # type: ignore[no-redef]

log = logging.getLogger("meshdash.agent")

MAX_REQUEST_BYTES = 16 * 1024 * 1024  # a proxied OpenAI request; a long prompt is a few MiB at most
FORWARDED_HEADERS = ("content-type", "authorization", "accept")
STREAM_TAIL_BYTES = 256 * 1024  # the last events of a stream, where the timings are
DECIMAL = re.compile(r"[0-9]+")


def _answers(url: str) -> bool:
    try:
        return http("GET", url).status == 200
    except OSError:
        return False


# --- The agent and its proxy: timings of each completion become a report ----------------------


class Agent:
    def __init__(self, config: Config, *, dry_run: bool = False) -> None:
        self.config = config
        self.spool = Spool(config.spool, config.spool_max_bytes, config.spool_max_age)
        self.sender = Sender(config, self.spool, dry_run=dry_run)
        self.resolver = RefResolver(config.hub_url)
        self.runs: list[dict[str, Any]] = []
        self._spooled_runs: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self.scrapers = [BaselineScraper(b) for b in config.baseline_list()]

    def cycle(self) -> bool:
        """Poll the node, spool its runs, scrape the baseline engines, flush; True when all was sent."""
        if self.config.node_url:
            try:
                self.runs = read_runs(self.config, self.resolver)
            except AgentError as exc:
                log.warning("%s", exc)
            else:
                # Registrations are upserts of the node's current state: spool one only when it changed.
                if self.runs and self.runs != self._spooled_runs:
                    self.spool.put("runs", {"runs": self.runs})
                    self._spooled_runs = self.runs
        baseline_reports = []
        for scraper in self.scrapers:
            try:
                report = scraper.scrape()
            except AgentError as exc:
                log.warning("%s", exc)
                continue
            if report is not None:
                baseline_reports.append(report)
        if baseline_reports:
            self.spool.put("baselines", {"reports": baseline_reports})
        return self.sender.flush()

    def wait_for_node(self) -> bool:
        """Wait, quietly, until the node's console API answers (for an agent of baseline engines only, each
        engine's /metrics) or ``node_wait`` seconds pass; True when it answered. A node or engine that is
        still starting is normal: only one that never answers is worth a line."""
        if self.config.node_url:
            urls = [self.config.node_url + "/api/status"]
        else:
            urls = [b.metrics_url for b in self.config.baseline_list()]
        deadline = time.monotonic() + self.config.node_wait
        delay = 0.2
        while urls and not self._stop.is_set():
            urls = [url for url in urls if not _answers(url)]
            if not urls:
                return True
            if time.monotonic() + delay > deadline:
                break
            self._stop.wait(delay)
            delay = min(delay * 2, 5.0)
        if urls and self.config.node_wait:
            log.warning(
                "%s did not answer in %g s; polling anyway", ", ".join(urls)[:500], self.config.node_wait
            )
        return False

    def pause(self) -> float:
        """Seconds until the next cycle: the interval, or 1 s while meshdash is not taking what waits (the
        sender's own backoff then decides when it is asked again)."""
        return self.config.interval if self.sender.failures == 0 else 1.0

    def run_forever(self) -> None:
        while not self._stop.is_set():
            self.cycle()
            self._stop.wait(self.pause())

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
        upstream = upstream_target(agent.config.upstream_url or agent.config.node_url, self.path)
        if upstream is None:
            self.close_connection = True
            path_only = "The request target must be a path, like /v1/chat/completions."
            return self._answer(
                400, "application/json", json.dumps({"error": {"message": path_only}}).encode()
            )
        body = self.rfile.read(length) if length else None
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


def upstream_target(base: str, target: str) -> str | None:
    """The node URL a proxied request goes to: ``base`` with the request's path and query, or None when
    the request target is not a plain path. Only the origin-form (``/v1/...``) is forwarded, and the
    result must keep ``base``'s scheme and host:port: a target like ``:8080/admin`` or ``@host/`` glued
    to a base without a port would otherwise reach another port or host (issue 48)."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return None
    url = base.rstrip("/") + target
    want, got = urlsplit(base), urlsplit(url)
    if (got.scheme, got.netloc) != (want.scheme, want.netloc):
        return None
    return url


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
upstream_url, spool_max_bytes, spool_max_age, node_wait and baselines: the llama.cpp or vLLM servers
whose /metrics is scraped as a baseline (see docs/api.md, "Run meshdash-agent beside the node", and
"Baseline engines")."""


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
