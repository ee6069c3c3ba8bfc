"""meshdash-agent's OpenAI-compatible proxy (docs/api.md, "Run meshdash-agent beside the node"): every request
reaches the node and its answer comes back as the node gave it, errors included; a completion's timings, whole
or streamed, become one report on disk before the client hears back, and nothing else does. No Django, no
store: a fake node on loopback (tests/agent_fakes.py), and meshdash down, so what was reported stays in the
spool."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from packages_app.nodes import agent, agent_config
from tests.agent_fakes import SHA, FakeServer, Reply, closed_port

TIMINGS = {"predicted_n": 8, "predicted_ms": 100.0}
RUN = {"package": {"repo": "meshllm/a-layers", "revision": SHA}, "topology_id": "t", "stages": []}
EVENTS = "text/event-stream"


def stream(*events: Any) -> bytes:
    """Server-sent events as llama.cpp streams a completion: one ``data:`` line each."""
    lines = (e if isinstance(e, bytes) else json.dumps(e).encode() for e in events)
    return b"".join(b"data: " + line + b"\n\n" for line in lines)


NODE = {
    "/v1/models": Reply({"data": [{"id": "a-layers"}]}),
    "/v1/chat/completions": Reply({"choices": [], "timings": TIMINGS}),
    "/v1/completions": Reply(b"not json", headers={"Content-Type": "text/plain"}),
    "/v1/busy/completions": Reply({"error": {"message": "busy"}, "timings": TIMINGS}, status=503),
    "/v1/stream/completions": Reply(
        stream({"choices": [{"delta": "hi"}]}, {"choices": [], "timings": TIMINGS}, b"[DONE]"),
        headers={"Content-Type": EVENTS},
    ),
    "/v1/untimed/completions": Reply(stream({"choices": []}, b"[DONE]"), headers={"Content-Type": EVENTS}),
}


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[agent.Agent, str, FakeServer]]:
    """An agent whose proxy is in front of the fake node, meshdash down (one for the module: stopping a proxy
    waits out its half-second poll)."""
    with FakeServer(NODE) as node:
        config = agent_config.Config(
            node_url=node.url,
            meshdash_url=closed_port(),
            token="t",
            spool_dir=str(tmp_path_factory.mktemp("spool")),
            proxy_listen="127.0.0.1:0",
        )
        bot = agent.Agent(config)
        server = bot.serve_proxy()
        yield bot, f"http://127.0.0.1:{server.server_address[1]}", node
        server.shutdown()
        server.server_close()


@pytest.fixture
def proxied(proxy: tuple[agent.Agent, str, FakeServer]) -> tuple[agent.Agent, str, FakeServer]:
    """The proxy with nothing reported nor asked yet, and the node's run known."""
    bot, _, node = proxy
    for path, _, _ in bot.spool.pending():
        bot.spool.remove(path)
    node.asked.clear()
    bot.runs = [RUN]
    return proxy


def ask(url: str, data: bytes | None = None) -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers["Content-Type"], error.read()


def reported(bot: agent.Agent) -> list[Any]:
    return [body["reports"][0]["timings"] for _, kind, body in bot.spool.pending() if kind == "reports"]


@pytest.mark.parametrize(
    ("path", "data", "status", "body"),
    [
        ("/v1/models", None, 200, b'{"data": [{"id": "a-layers"}]}'),
        ("/v1/nothing", None, 404, b'{"error": "not found"}'),
        ("/v1/busy/completions", b"{}", 503, b'{"error": {"message": "busy"}, "timings": '),
        ("/v1/completions", b"{}", 200, b"not json"),
        ("/v1/untimed/completions", b"{}", 200, b'data: {"choices": []}\n\ndata: [DONE]\n\n'),
    ],
    ids=["get", "not-found", "node-error", "not-json", "stream-without-timings"],
)
def test_an_answer_without_a_completions_timings_passes_through_as_the_node_gave_it_unreported(
    proxied: tuple[agent.Agent, str, FakeServer], path: str, data: bytes | None, status: int, body: bytes
) -> None:
    bot, proxy, node = proxied
    answer = ask(proxy + path, data)
    assert answer[0] == status and answer[2].startswith(body)
    assert node.asked == [path] and reported(bot) == []


def test_a_completion_is_answered_and_its_timings_reported_once(
    proxied: tuple[agent.Agent, str, FakeServer],
) -> None:
    bot, proxy, _ = proxied
    status, _, body = ask(proxy + "/v1/chat/completions", b"{}")
    assert status == 200 and json.loads(body)["timings"] == TIMINGS
    assert reported(bot) == [TIMINGS]


def test_a_stream_passes_through_event_by_event_and_its_last_timings_are_reported(
    proxied: tuple[agent.Agent, str, FakeServer],
) -> None:
    bot, proxy, _ = proxied
    status, content_type, body = ask(proxy + "/v1/stream/completions", b"{}")
    assert (status, content_type) == (200, EVENTS)
    assert body == NODE["/v1/stream/completions"].body  # type: ignore[union-attr]
    assert reported(bot) == [TIMINGS]


def test_a_completion_before_the_nodes_package_is_known_is_answered_but_not_reported(
    proxied: tuple[agent.Agent, str, FakeServer], caplog: pytest.LogCaptureFixture
) -> None:
    bot, proxy, _ = proxied
    bot.runs = []  # the agent has not read its node yet
    assert ask(proxy + "/v1/chat/completions", b"{}")[0] == 200
    assert reported(bot) == [] and "timings dropped: the node's package is not known yet" in caplog.text


@pytest.mark.parametrize(
    ("base", "target"),
    [("http://", "/\t/attacker.example/v1/models"), ("http://127.0.0.1", "//attacker.example/")],
    ids=["a-stripped-tab-names-a-host", "scheme-relative"],
)
def test_whatever_the_target_the_upstream_keeps_the_configured_host(base: str, target: str) -> None:
    assert agent.upstream_target(base, target) is None
    assert agent.upstream_target("http://127.0.0.1:9337", "/v1/models") == "http://127.0.0.1:9337/v1/models"
