"""meshdash-agent against a hostile node and a meshdash that refuses: a bounded spool, a bounded proxy body,
and only the answers that condemn a body itself drop it.

Each guard is tested with the attack it stops and a control: the same attack with the guard switched off
(a cap raised, the old length parse, the old "any 4xx drops it" rule) does the damage. No Django here:
the agent is standard library only, so a fake node and a fake meshdash on loopback are enough.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from packages_app.nodes import agent, agent_common, agent_config, agent_runs, agent_spool


@dataclass
class Recorder:
    """What a fake server received, and what it answers."""

    status: int = 200
    body: bytes = b"{}"
    headers: dict[str, str] = field(default_factory=dict)
    received: list[int] = field(default_factory=list)  # body sizes, in order


def serve(recorder: Recorder) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._reply()

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            recorder.received.append(len(self.rfile.read(length)))
            self._reply()

        def _reply(self) -> None:
            self.send_response(recorder.status)
            for name, value in {"Content-Type": "application/json", **recorder.headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(recorder.body)))
            self.end_headers()
            self.wfile.write(recorder.body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


def url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def fake_meshdash() -> Iterator[tuple[Recorder, str]]:
    recorder = Recorder()
    server = serve(recorder)
    yield recorder, url(server)
    server.shutdown()
    server.server_close()


def closed_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"  # nothing listens once the probe closes


def make_agent(tmp_path: Path, meshdash_url: str, **config: Any) -> agent.Agent:
    settings = {"token": "mdn_test", "spool_dir": str(tmp_path / "spool"), "meshdash_url": meshdash_url}
    bot = agent.Agent(agent_config.Config(**(settings | config)))
    bot.runs = [
        {"package": {"repo": "meshllm/a-layers", "revision": "a" * 40}, "topology_id": "t", "stages": []}
    ]
    return bot


def completion(timings_bytes: int) -> bytes:
    """A chat completion whose timings carry ``timings_bytes`` of padding (what a hostile node can send)."""
    pad = ["x" * 200] * (timings_bytes // 204)
    return json.dumps(
        {"choices": [], "timings": {"predicted_n": 8, "predicted_ms": 100.0, "pad": pad}}
    ).encode()


def through_proxy(bot: agent.Agent, requests: int) -> None:
    proxy = bot.serve_proxy()
    port = proxy.server_address[1]
    try:
        for _ in range(requests):
            status, _ = raw_request(port, b"Content-Length: 2\r\n", b"{}")
            assert status == 200
    finally:
        proxy.shutdown()
        proxy.server_close()


def raw_request(port: int, headers: bytes, body: bytes) -> tuple[int, bytes]:
    """A POST written by hand, so the headers can lie; the status and body of the answer.

    The headers go first and the answer is read before the body is sent when the proxy answers at
    once (a refusal): a server that closes with unread bytes resets the connection, answer and all.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\n"
        sock.sendall(head + headers + b"\r\n")
        sock.settimeout(0.5)
        try:
            answer = sock.recv(65536)  # a refusal comes before any of the body
        except TimeoutError:
            answer = b""
        sock.settimeout(10)
        if not answer:
            sock.sendall(body)
            sock.shutdown(socket.SHUT_WR)
        while chunk := sock.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


# --- the spool: capped by size and by age ------------------------------------------------------------


@pytest.fixture
def hostile_node() -> Iterator[tuple[Recorder, str]]:
    recorder = Recorder(body=completion(512 * 1024))
    server = serve(recorder)
    yield recorder, url(server)
    server.shutdown()
    server.server_close()


def test_a_hostile_node_flooding_the_proxy_while_meshdash_is_down_fills_only_the_spool_cap(
    tmp_path: Path, hostile_node: tuple[Recorder, str], caplog: pytest.LogCaptureFixture
) -> None:
    cap = 2 * 1024 * 1024
    bot = make_agent(
        tmp_path, closed_port(), upstream_url=hostile_node[1], proxy_listen="127.0.0.1:0", spool_max_bytes=cap
    )
    with caplog.at_level(logging.WARNING, logger="meshdash.agent"):
        through_proxy(bot, requests=12)  # 12 completions of 0.5 MiB timings each: 6 MiB of reports
    on_disk = sum(p.stat().st_size for p in bot.spool.directory.glob("*.json"))
    assert on_disk <= cap and bot.spool.size == on_disk
    assert bot.spool.dropped >= 12 - cap // (512 * 1024) and bot.spool.count() + bot.spool.dropped == 12
    assert "dropped the oldest" in caplog.text


def test_negative_control_with_the_cap_raised_the_same_flood_fills_the_disk(
    tmp_path: Path, hostile_node: tuple[Recorder, str]
) -> None:
    bot = make_agent(
        tmp_path,
        closed_port(),
        upstream_url=hostile_node[1],
        proxy_listen="127.0.0.1:0",
        spool_max_bytes=2**40,
    )
    through_proxy(bot, requests=12)
    assert sum(p.stat().st_size for p in bot.spool.directory.glob("*.json")) > 6 * 1024 * 1024
    assert bot.spool.dropped == 0


def test_the_spool_drops_the_oldest_bodies_first_and_keeps_the_newest(tmp_path: Path) -> None:
    spool = agent_spool.Spool(tmp_path, max_bytes=3 * 1100)
    for index in range(5):
        spool.put("reports", {"index": index, "pad": "x" * 1000})
    kept = [body["index"] for _, _, body in spool.pending()]
    assert kept == [2, 3, 4] and spool.dropped == 2


def test_bodies_older_than_the_age_cap_are_dropped_and_counted(tmp_path: Path) -> None:
    spool = agent_spool.Spool(tmp_path, max_age=3600)
    stale = tmp_path / f"{time.time_ns() - 2 * 3600 * 10**9:020d}-00000000.reports.json"
    stale.write_text(json.dumps({"reports": []}))
    spool = agent_spool.Spool(tmp_path, max_age=3600)  # a restarted agent finds it on disk
    spool.put("reports", {"reports": [1]})
    assert [body for _, _, body in spool.pending()] == [{"reports": [1]}]
    assert spool.dropped == 1 and not stale.exists()


def test_negative_control_without_an_age_cap_a_week_old_body_is_still_sent(tmp_path: Path) -> None:
    stale = tmp_path / f"{time.time_ns() - 8 * 24 * 3600 * 10**9:020d}-00000000.reports.json"
    stale.write_text(json.dumps({"reports": []}))
    spool = agent_spool.Spool(tmp_path, max_age=365 * 24 * 3600)
    assert [path for path, _, _ in spool.pending()] == [stale] and spool.dropped == 0


@pytest.mark.parametrize("value", [0, -1, "64MB", True])
def test_a_spool_cap_that_is_not_a_positive_number_is_refused_at_start(tmp_path: Path, value: Any) -> None:
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"token": "t", "spool_max_bytes": value}))
    with pytest.raises(agent_common.AgentError, match="spool_max_bytes must be a positive number"):
        agent_config.Config.load(str(path), {})


# --- the proxy: a request body is bounded before it is read -----------------------------------------


@pytest.fixture
def upstream() -> Iterator[tuple[Recorder, str]]:
    recorder = Recorder(body=completion(0))
    server = serve(recorder)
    yield recorder, url(server)
    server.shutdown()
    server.server_close()


def proxy_for(tmp_path: Path, upstream_url: str) -> tuple[agent.Agent, int, ThreadingHTTPServer]:
    bot = make_agent(tmp_path, closed_port(), upstream_url=upstream_url, proxy_listen="127.0.0.1:0")
    proxy = bot.serve_proxy()
    return bot, proxy.server_address[1], proxy


@pytest.mark.parametrize(
    ("header", "status"),
    [
        (b"Content-Length: -1\r\n", 400),
        (b"Content-Length: 1e9\r\n", 400),
        (b"Content-Length: 99999999999999999999\r\n", 413),
        (b"Content-Length: 17000000\r\n", 413),
        (b"Transfer-Encoding: chunked\r\n", 411),
    ],
    ids=["negative", "not-an-integer", "huge", "over-16-MiB", "chunked"],
)
def test_the_proxy_refuses_a_body_length_it_cannot_bound_without_reading_it(
    tmp_path: Path, upstream: tuple[Recorder, str], header: bytes, status: int
) -> None:
    _, port, proxy = proxy_for(tmp_path, upstream[1])
    try:
        answer, body = raw_request(port, header, b"y" * (4 * 1024 * 1024))
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert answer == status and json.loads(body)["error"]["message"]
    assert upstream[0].received == [], "nothing was read, so nothing was forwarded"


def test_negative_control_the_old_length_parse_reads_a_negative_length_until_the_client_stops(
    tmp_path: Path, upstream: tuple[Recorder, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def old_parse(headers: Any) -> tuple[int, None]:
        return min(int(headers.get("Content-Length") or 0), agent_common.MAX_RESPONSE_BYTES), None

    monkeypatch.setattr(agent, "request_length", old_parse)
    _, port, proxy = proxy_for(tmp_path, upstream[1])
    try:
        raw_request(port, b"Content-Length: -1\r\n", b"y" * (4 * 1024 * 1024))
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert upstream[0].received == [4 * 1024 * 1024], "read(-1): the whole stream, whatever its size"


def test_a_well_formed_request_still_goes_through_the_proxy(
    tmp_path: Path, upstream: tuple[Recorder, str]
) -> None:
    _, port, proxy = proxy_for(tmp_path, upstream[1])
    try:
        status, body = raw_request(port, b"Content-Length: 2\r\n", b"{}")
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert status == 200 and json.loads(body)["timings"]["predicted_n"] == 8 and upstream[0].received == [2]


# --- meshdash's answers: only a refusal of the body itself drops it ---------------------------------


def spooled_and_flushed(tmp_path: Path, meshdash: tuple[Recorder, str], status: int) -> agent.Agent:
    meshdash[0].status = status
    bot = make_agent(tmp_path, meshdash[1])
    assert bot.report_timings({"predicted_n": 8, "predicted_ms": 100.0})
    bot.sender.flush()
    return bot


@pytest.mark.parametrize("status", [401, 403, 404, 409, 500, 502, 503])
def test_an_answer_not_about_the_report_keeps_it_and_backs_off(
    tmp_path: Path, fake_meshdash: tuple[Recorder, str], status: int
) -> None:
    bot = spooled_and_flushed(tmp_path, fake_meshdash, status)
    assert bot.spool.count() == 1 and bot.sender.wait_until > time.monotonic()
    assert bot.sender.flush() is False and len(fake_meshdash[0].received) == 1, "nothing sent while waiting"
    fake_meshdash[0].status = 200
    bot.sender.wait_until = 0.0  # the backoff has nothing to wait for in a test
    assert bot.sender.flush() is True and bot.spool.count() == 0 and bot.sender.sent == 1


@pytest.mark.parametrize("status", [400, 413, 422])
def test_a_refusal_of_the_report_itself_drops_it_so_it_cannot_block_the_rest(
    tmp_path: Path, fake_meshdash: tuple[Recorder, str], status: int
) -> None:
    bot = spooled_and_flushed(tmp_path, fake_meshdash, status)
    assert bot.spool.count() == 0 and bot.sender.refused == 1 and bot.sender.failures == 0


def test_negative_control_the_old_rule_drops_spooled_reports_on_a_401(
    tmp_path: Path, fake_meshdash: tuple[Recorder, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_spool, "DROP_STATUSES", frozenset(range(400, 500)) - {429})
    bot = spooled_and_flushed(tmp_path, fake_meshdash, 401)
    assert bot.spool.count() == 0, "a token being rotated would have cost the report"


def test_retry_after_of_a_503_is_waited_out(tmp_path: Path, fake_meshdash: tuple[Recorder, str]) -> None:
    fake_meshdash[0].headers = {"Retry-After": "40"}
    bot = spooled_and_flushed(tmp_path, fake_meshdash, 503)
    assert 35 < bot.sender.wait_until - time.monotonic() <= 40 and bot.spool.count() == 1


# --- issue 48: the proxy's upstream, and package refs that never resolve ----------------------------


def raw_target(port: int, target: str) -> int:
    """A request whose request line names ``target`` as it is (``:8080/x`` is not a path)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"POST {target} HTTP/1.1\r\nHost: node\r\nContent-Length: 0\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return int(answer.split(b"\r\n", 1)[0].split()[1])


def through_a_portless_upstream(tmp_path: Path, other: Recorder, targets: list[str]) -> list[int]:
    """The proxy in front of ``http://127.0.0.1`` (no port): each target is sent, the statuses returned."""
    bot = make_agent(tmp_path, closed_port(), upstream_url="http://127.0.0.1", proxy_listen="127.0.0.1:0")
    proxy = bot.serve_proxy()
    try:
        return [raw_target(proxy.server_address[1], target) for target in targets]
    finally:
        proxy.shutdown()
        proxy.server_close()


@pytest.fixture
def other_service() -> Iterator[tuple[Recorder, int]]:
    """A service on another port of the node's host, which the proxy must never reach."""
    recorder = Recorder(body=b'{"secret": true}')
    server = serve(recorder)
    yield recorder, server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_request_target_naming_another_port_or_host_is_refused_and_reaches_nothing(
    tmp_path: Path, other_service: tuple[Recorder, int]
) -> None:
    recorder, port = other_service
    targets = [f":{port}/v1/models", f":{port}/admin", f"@127.0.0.1:{port}/", f"//127.0.0.1:{port}/"]
    # The last one http.server itself turns into the path /127.0.0.1:PORT/ of the upstream (no one there).
    assert through_a_portless_upstream(tmp_path, recorder, targets) == [400, 400, 400, 502]
    assert recorder.received == []  # each request that reached the service would be counted here
    assert agent.upstream_target("http://127.0.0.1", "/v1/models?x=1") == "http://127.0.0.1/v1/models?x=1"


def test_negative_control_the_old_concatenation_lets_the_target_reach_another_port(
    tmp_path: Path, other_service: tuple[Recorder, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder, port = other_service
    monkeypatch.setattr(agent, "upstream_target", lambda base, target: base.rstrip("/") + target)
    assert through_a_portless_upstream(tmp_path, recorder, [f":{port}/v1/models"]) == [200]
    assert recorder.received == [0]  # the request reached the other port


@dataclass
class Counter:
    hub_requests: int = 0


def refs_node(runs: int) -> tuple[ThreadingHTTPServer, str]:
    """A node listing ``runs`` runs, each naming its own branch of a package no Hub has."""
    stages = [
        {
            "run_id": f"run-{i:05d}",
            "stage_id": "s0",
            "stage_index": 0,
            "layer_start": 0,
            "layer_end": 4,
            "package_ref": f"meshllm/junk-layers@branch-{i}",
        }
        for i in range(runs)
    ]
    recorder = Recorder(body=json.dumps({"stages": stages, "version": "0.78.0"}).encode())
    server = serve(recorder)
    return server, url(server)


def hub_requests_over_cycles(cycles: int, runs: int) -> list[int]:
    hub_recorder = Recorder(status=404, body=b'{"error": "Repository not found"}')
    hub = serve(hub_recorder)
    node, node_url = refs_node(runs)
    resolver = agent_runs.RefResolver(url(hub))
    config = agent_config.Config(node_url=node_url, token="t", hub_url=url(hub))
    per_cycle = []
    try:
        for _ in range(cycles):
            before = resolver.requests
            agent_runs.read_runs(config, resolver)
            per_cycle.append(resolver.requests - before)
    finally:
        for server in (hub, node):
            server.shutdown()
            server.server_close()
    return per_cycle


def test_a_node_naming_2000_unresolvable_refs_costs_a_bounded_few_hub_requests_then_none() -> None:
    per_cycle = hub_requests_over_cycles(cycles=6, runs=2_000)
    assert per_cycle == [16, 16, 16, 16, 0, 0]  # the first 64 runs, 16 new lookups a cycle, failures kept


def test_negative_control_without_the_cap_and_the_failure_cache_every_cycle_asks_2000_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(agent_runs, "MAX_RUNS", 10**6)
    monkeypatch.setattr(agent_runs, "MAX_REF_LOOKUPS", 10**6)
    monkeypatch.setattr(agent_runs, "FAILED_REF_TTL", 0.0)
    assert hub_requests_over_cycles(cycles=2, runs=2_000) == [2_000, 2_000]
