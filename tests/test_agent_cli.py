"""meshdash-agent's command line (docs/api.md, "Run meshdash-agent beside the node"): --help, a bad flag or
config is one sentence naming the setting and exit 2, --once exits 1 while what it read is unsent, the wait
for the node at start, the loop until Ctrl-C, and the proxy serving only once the node's package is known.
No Django, no store: fake servers on loopback (tests/agent_fakes.py)."""

from __future__ import annotations

import json
import logging
import runpy
import urllib.request
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from packages_app.nodes import agent, agent_config
from tests.agent_fakes import MESHDASH_ROUTES, FakeServer, Reply, closed_port, node_routes, stage

COMPLETION = {"choices": [], "timings": {"predicted_n": 8, "predicted_ms": 100.0}}


@pytest.fixture(autouse=True)
def token_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MESHDASH_TOKEN", "t")


def test_help_names_every_flag_and_the_token_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        agent.main(["--help"])
    shown = capsys.readouterr().out
    assert done.value.code == 0 and shown.startswith("usage: meshdash-agent ")
    for flag in ("--config", "--node-url", "--meshdash-url", "--hub-url", "--spool-dir", "--proxy"):
        assert flag in shown
    assert "--node-wait" in shown and "--once" in shown and "--dry-run" in shown and "MESHDASH_TOKEN" in shown


def test_run_as_a_file_it_is_the_same_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["agent.py", "--help"])  # python3 packages_app/nodes/agent.py --help
    with pytest.raises(SystemExit) as done:
        runpy.run_path(agent.__file__, run_name="__main__")
    assert done.value.code == 0 and capsys.readouterr().out.startswith("usage: meshdash-agent ")


@pytest.mark.parametrize("argv", [["--nodeurl", "http://x"], ["--node-wait", "soon"]], ids=["unknown", "nan"])
def test_a_flag_it_does_not_know_or_cannot_read_exits_2_naming_it(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        agent.main(argv)
    assert done.value.code == 2 and argv[0] in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "flags", "message"),
    [
        (None, [], "Cannot read the config file {path}: "),
        ("{", [], "Cannot read the config file {path}: "),
        ("[]", [], "The config file {path} must hold a JSON object of the agent's keys."),
        ('{"meshdash_url": "ftp://x"}', [], "meshdash_url must be an http:// or https:// URL."),
        ('{"node_url": 3131}', [], "node_url must be text."),
        ("{}", [], "A node token is required: token in the config file or MESHDASH_TOKEN."),
        ('{"baselines": {}}', [], "baselines must be a list of objects."),
        ('{"baselines": ["llama.cpp"]}', [], "baselines[0] must be an object."),
        ('{"interval": "30"}', [], "interval must be a positive number."),
        ("{}", ["--node-wait", "-1"], "node_wait must be a number of seconds, 0 or more."),
        ("{}", ["--proxy", "127.0.0.1"], "proxy_listen must be HOST:PORT, like 127.0.0.1:9338."),
        ("{}", ["--proxy", ":70000"], "proxy_listen must be HOST:PORT, like 127.0.0.1:9338."),
    ],
    ids=[
        "missing", "not-json", "not-an-object", "url", "not-text", "no-token", "baselines", "baseline",
        "interval", "node-wait", "no-port", "port-range",
    ],
)  # fmt: skip
def test_a_bad_setting_is_one_sentence_naming_it_and_exit_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    text: str | None,
    flags: list[str],
    message: str,
) -> None:
    if "token" in message:
        monkeypatch.delenv("MESHDASH_TOKEN")
    path = tmp_path / "agent.json"
    if text is not None:
        path.write_text(text)
    assert agent.main(["--config", str(path), "--once", *flags]) == 2
    assert capsys.readouterr().err.startswith("meshdash-agent: " + message.format(path=path))


def test_control_the_same_flags_with_good_values_start_the_agent(tmp_path: Path) -> None:
    config = agent_config.Config.load(None, {"token": "t", "proxy_listen": "127.0.0.1:9338", "node_wait": 0})
    assert (config.proxy_listen, config.node_wait, config.interval) == ("127.0.0.1:9338", 0, 30.0)


def once(node: str, meshdash: str, tmp_path: Path, *flags: str) -> int:
    spool = str(tmp_path / "spool")
    return agent.main(
        ["--node-url", node, "--meshdash-url", meshdash, "--spool-dir", spool, "--once", *flags]
    )


def test_once_exits_0_when_meshdash_took_the_runs_and_1_while_it_is_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MESHDASH_TOKEN", "mdn_from_the_environment")
    with FakeServer(node_routes([stage()])) as node, FakeServer(MESHDASH_ROUTES) as meshdash:
        assert once(node.url, meshdash.url, tmp_path) == 0
        assert once(node.url, closed_port(), tmp_path / "down") == 1
    ((run,),) = [body["runs"] for body in meshdash.bodies("/api/v1/runs")]
    assert run["run_id"] == "run-1"
    assert meshdash.headers[0]["Authorization"] == "Bearer mdn_from_the_environment"
    (waiting,) = (tmp_path / "down" / "spool").glob("*.runs.json")  # kept for the next start
    assert json.loads(waiting.read_text())["runs"][0]["run_id"] == "run-1"


def test_once_polls_at_once_and_waits_for_the_node_only_when_told(tmp_path: Path) -> None:
    with FakeServer(node_routes([stage()])) as node, FakeServer(MESHDASH_ROUTES) as meshdash:
        assert once(node.url, meshdash.url, tmp_path) == 0
        polled_at_once = list(node.asked)
        node.asked.clear()
        assert once(node.url, meshdash.url, tmp_path, "--node-wait", "5") == 0
    assert polled_at_once[0] == "/api/runtime/stages"
    assert node.asked[:2] == ["/api/status", "/api/runtime/stages"]  # the wait's question first


def interrupted(bot: agent.Agent) -> None:
    raise KeyboardInterrupt  # Ctrl-C, while the agent polls


def test_ctrl_c_stops_the_agent_with_exit_0_after_it_waited_for_its_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent.Agent, "run_forever", interrupted)
    spool = str(tmp_path / "spool")
    with FakeServer(node_routes([stage()])) as node:
        code = agent.main(["--node-url", node.url, "--spool-dir", spool, "--meshdash-url", closed_port()])
    assert code == 0 and node.asked == ["/api/status"]


def test_with_a_proxy_the_node_is_read_first_so_the_first_completion_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agents: list[tuple[agent.Agent, ThreadingHTTPServer]] = []
    serve_proxy = agent.Agent.serve_proxy

    def serve(bot: agent.Agent) -> ThreadingHTTPServer:
        agents.append((bot, serve_proxy(bot)))
        return agents[-1][1]

    def first_completion_then_ctrl_c(bot: agent.Agent) -> None:
        port = agents[0][1].server_address[1]
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=b"{}")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.loads(response.read()) == COMPLETION
        raise KeyboardInterrupt

    monkeypatch.setattr(agent.Agent, "serve_proxy", serve)
    monkeypatch.setattr(agent.Agent, "run_forever", first_completion_then_ctrl_c)
    routes = node_routes([stage()]) | {"/v1/chat/completions": Reply(COMPLETION)}
    spool = str(tmp_path / "spool")
    with FakeServer(routes) as node:
        argv = ["--node-url", node.url, "--spool-dir", spool, "--proxy", "127.0.0.1:0", "--node-wait", "0"]
        code = agent.main([*argv, "--meshdash-url", closed_port()])
    ((bot, proxy),) = agents
    proxy.shutdown()
    proxy.server_close()
    assert code == 0 and node.asked.index("/api/runtime/stages") < node.asked.index("/v1/chat/completions")
    reports = [body["reports"][0] for _, kind, body in bot.spool.pending() if kind == "reports"]
    assert [r["timings"] for r in reports] == [COMPLETION["timings"]]
    assert reports[0]["package"] == {"repo": "meshllm/a-layers", "revision": "a" * 40}


# --- the loop and the wait at start -----------------------------------------------------------------


def test_the_loop_polls_until_stopped_and_pauses_1_s_while_meshdash_is_down(tmp_path: Path) -> None:
    bots: list[agent.Agent] = []
    meshdash = FakeServer(MESHDASH_ROUTES, on_post=lambda path, body: bots[0].stop())
    with FakeServer(node_routes([stage()])) as node, meshdash:
        settings = {"node_url": node.url, "meshdash_url": meshdash.url, "spool_dir": str(tmp_path)}
        bots.append(agent.Agent(agent_config.Config(token="t", **settings)))
        bots[0].run_forever()  # returns: meshdash's first answer stopped it
    assert len(meshdash.bodies("/api/v1/runs")) == 1 and bots[0].pause() == 30.0
    down = agent.Agent(agent_config.Config(meshdash_url=closed_port(), token="t", spool_dir=str(tmp_path)))
    down.spool.put("reports", {"reports": []})
    assert down.sender.flush() is False and down.pause() == 1.0  # the sender's backoff decides the rest


def test_a_stopped_agent_does_not_wait_for_its_node(tmp_path: Path) -> None:
    with FakeServer(node_routes([stage()])) as node:
        bot = agent.Agent(agent_config.Config(node_url=node.url, token="t", spool_dir=str(tmp_path)))
        bot.stop()
        assert bot.wait_for_node() is False
    assert node.asked == []


def test_a_node_wait_of_0_polls_at_once_and_says_nothing_of_a_wait(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings: dict[str, Any] = {"node_url": closed_port(), "token": "t", "spool_dir": str(tmp_path)}
    with caplog.at_level(logging.INFO, logger="meshdash.agent"):
        assert agent.Agent(agent_config.Config(**settings, node_wait=0)).wait_for_node() is False
    assert caplog.records == []
