"""meshdash-agent beside devnode: runs registered, timings reported, nothing lost through a restart."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from django.core.cache import cache
from django.core.handlers.wsgi import WSGIHandler
from django.db import connection

from packages_app.devhub import DevHub
from packages_app.devhub.generator import QWEN35_REPO
from packages_app.devnode import payloads
from packages_app.devnode.server import DevNode
from packages_app.models import Node, NodeRun, Report
from packages_app.nodes import agent, agent_config, identity

SHA = "d" * 40


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class Meshdash:
    """meshdash served from a thread on a fixed port, so that it can be stopped and started again."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.server: WSGIServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.server = make_server("127.0.0.1", self.port, WSGIHandler(), handler_class=_Quiet)
        threading.Thread(target=self._serve, args=(self.server,), daemon=True).start()

    @staticmethod
    def _serve(server: WSGIServer) -> None:
        server.serve_forever(poll_interval=0.05)
        connection.close()  # this thread's connection, so the test database can be dropped

    def stop(self) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()
        self.server = None


@pytest.fixture
def meshdash(transactional_db: None) -> Iterator[Meshdash]:
    cache.clear()
    server = Meshdash()
    server.start()
    yield server
    if server.server is not None:
        server.stop()


def make_agent(
    node: DevNode, meshdash: Meshdash, tmp_path: Path, hub: str = "http://127.0.0.1:9"
) -> agent.Agent:
    token = identity.create_node("gpu-1").token
    config = agent_config.Config(
        node_url=node.url,
        meshdash_url=meshdash.url,
        token=token,
        hub_url=hub,
        spool_dir=str(tmp_path / "spool"),
    )
    return agent.Agent(config)


def chat(proxy_url: str) -> dict[str, Any]:
    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}
    ).encode()
    request = urllib.request.Request(
        proxy_url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def test_the_agent_imports_without_django() -> None:
    code = "import sys, packages_app.nodes.agent; sys.exit(any(m.startswith('django') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_once_registers_the_nodes_run_with_its_ref_resolved_through_the_hub(
    meshdash: Meshdash, devhub: DevHub, tmp_path: Path
) -> None:
    plan = payloads.RunPlan(repo=QWEN35_REPO, ref="main", run_id="run-7", manifest_sha256="e" * 64)
    with DevNode(plan) as node:
        assert make_agent(node, meshdash, tmp_path, hub=devhub.url).cycle() is True
    run = NodeRun.objects.get()
    assert (run.run_id, run.repo_id, run.version) == ("run-7", QWEN35_REPO, payloads.VERSION)
    assert len(run.commit_sha) == 40 and run.manifest_sha256 == "e" * 64
    assert run.stage_splits == "0..21|21..41"
    assert [d["backend_device"] for d in run.devices] == ["CUDA0", "Metal"]


def test_the_agent_loses_and_duplicates_nothing_through_a_meshdash_restart(
    meshdash: Meshdash, tmp_path: Path
) -> None:
    plan = payloads.RunPlan(repo=QWEN35_REPO, ref=SHA, run_id="run-8", decode_tps=30.0)
    with DevNode(plan, seed=5) as node:
        bot = make_agent(node, meshdash, tmp_path)
        bot.config = agent_config.Config(**{**bot.config.__dict__, "proxy_listen": "127.0.0.1:0"})
        proxy = bot.serve_proxy()
        proxy_url = f"http://127.0.0.1:{proxy.server_address[1]}"
        assert bot.cycle() is True
        chat(proxy_url)
        assert bot.sender.flush() is True  # the proxy's own flush may still be under way
        meshdash.stop()
        answers = [chat(proxy_url) for _ in range(3)]  # the node keeps serving while meshdash is down
        assert bot.cycle() is False
        assert bot.spool.count() == 3  # the three reports, waiting on disk
        replay = tmp_path / "replay"
        shutil.copytree(bot.spool.directory, replay)
        meshdash.start()
        bot.sender.wait_until = 0.0  # the backoff has nothing to wait for in a test
        assert bot.sender.flush() is True
        for path in sorted(replay.glob("*.json")):  # a crash after sending, before deleting: sent again
            shutil.copy(path, bot.spool.directory / path.name)
        assert bot.sender.flush() is True
        proxy.shutdown()
        proxy.server_close()
    reports = Report.objects.filter(node__name="gpu-1")
    assert reports.count() == 4
    stored = {r.body["timings"]["predicted_ms"] for r in reports}
    assert {a["timings"]["predicted_ms"] for a in answers} <= stored
    assert NodeRun.objects.count() == 1
    assert {r.commit_sha for r in reports} == {SHA}


def test_a_429_is_waited_out_for_as_long_as_retry_after_says(meshdash: Meshdash, tmp_path: Path) -> None:
    plan = payloads.RunPlan(repo=QWEN35_REPO, ref=SHA)
    with DevNode(plan) as node:
        bot = make_agent(node, meshdash, tmp_path)
        Node.objects.update(rate_limit_per_minute=1)
        assert bot.cycle() is True
        assert bot.report_timings({"predicted_n": 8, "predicted_ms": 100.0, "predicted_per_second": 80.0})
        assert bot.sender.flush() is False  # the second request of the minute
    wait = bot.sender.wait_until - time.monotonic()
    assert 0 < wait <= 60 and bot.spool.count() == 1
    assert bot.sender.flush() is False  # still waiting: nothing is sent before Retry-After


def test_dry_run_prints_what_it_would_send_and_sends_nothing(
    meshdash: Meshdash, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with DevNode(payloads.RunPlan(repo=QWEN35_REPO, ref=SHA)) as node:
        token = identity.create_node("dry").token
        code = agent.main(
            [
                "--node-url",
                node.url,
                "--meshdash-url",
                meshdash.url,
                "--spool-dir",
                str(tmp_path),
                "--once",
                "--dry-run",
                "--config",
                str(_config(tmp_path, token)),
            ]
        )
    assert code == 0
    assert '"would_send": "runs"' in capsys.readouterr().out
    assert not NodeRun.objects.exists()


def _config(tmp_path: Path, token: str) -> Path:
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"token": token, "interval": 5}))
    return path


def test_a_bad_config_is_one_clear_sentence_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"token": "t", "nodeurl": "x"}))
    assert agent.main(["--config", str(path), "--once"]) == 2
    assert "Unknown config keys" in capsys.readouterr().err


def test_the_proxy_streams_events_through_and_reports_the_last_events_timings(
    meshdash: Meshdash, tmp_path: Path
) -> None:
    with DevNode(payloads.RunPlan(repo=QWEN35_REPO, ref=SHA), seed=2) as node:
        bot = make_agent(node, meshdash, tmp_path)
        bot.config = agent_config.Config(**{**bot.config.__dict__, "proxy_listen": "127.0.0.1:0"})
        assert bot.cycle() is True
        proxy = bot.serve_proxy()
        body = json.dumps({"model": "m", "messages": [], "max_tokens": 32, "stream": True}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{proxy.server_address[1]}/v1/chat/completions",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.headers["Content-Type"] == "text/event-stream"
            events = [line for line in response.read().split(b"\n") if line.startswith(b"data:")]
        assert bot.sender.flush() is True
        proxy.shutdown()
        proxy.server_close()
    assert events[-1] == b"data: [DONE]" and len(events) == 5
    timings = json.loads(events[-2][5:])["timings"]
    assert Report.objects.get().body["timings"] == timings
