"""A quiet first run: known-harmless library lines filtered at their source, the agent waiting for its node,
and `make install` putting meshdash-agent on the venv's PATH with help for every flag."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from gguf import GGUFWriter

from packages_app.devhub import weights
from packages_app.devnode import payloads
from packages_app.devnode.server import DevNode
from packages_app.nodes import agent, agent_common, agent_config

ROOT = Path(__file__).resolve().parent.parent
GGUF_LOGGER = logging.getLogger(GGUFWriter.__module__)


# --- the GGUF endianness note ---------------------------------------------------------------------------


def endian_notes(caplog: pytest.LogCaptureFixture) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=GGUF_LOGGER.name):
        GGUFWriter(None, "llama")
        GGUF_LOGGER.info("Writing the following files:")  # any other line of that logger
    return [r.getMessage() for r in caplog.records if r.name == GGUF_LOGGER.name]


def test_gguf_writers_little_endian_note_is_dropped_and_its_other_lines_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert weights.__name__  # importing devhub's writer installs the filter
    assert endian_notes(caplog) == ["Writing the following files:"]


def test_without_the_filter_every_writer_logs_the_note(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(GGUF_LOGGER, "filters", [])
    assert endian_notes(caplog) == [
        "gguf: This GGUF file is for Little Endian only",
        "Writing the following files:",
    ]


# --- Django's W040 on SQLite --------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.skipif(bool(os.environ.get("DATABASE_URL")), reason="W040 is SQLite's: PostgreSQL has INCLUDE")
def test_the_system_check_is_quiet_about_sqlites_covering_index(settings: pytest.FixtureRequest) -> None:
    out, err = StringIO(), StringIO()
    call_command("check", "--database", "default", stdout=out, stderr=err)
    assert "W040" not in out.getvalue() + err.getvalue()
    settings.SILENCED_SYSTEM_CHECKS = []  # type: ignore[attr-defined]
    err = StringIO()
    call_command("check", "--database", "default", stdout=StringIO(), stderr=err)
    assert "models.W040" in err.getvalue()  # the control: Serving's INCLUDE columns


# --- the agent waits for its node --------------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_agent_waits_quietly_for_a_node_that_starts_after_it(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    config = agent_config.Config(node_url=f"http://127.0.0.1:{port}", token="t", node_wait=30)
    node = DevNode(payloads.RunPlan(repo="meshllm/x-layers"), port=port)
    starter = threading.Timer(1.5, node.start)
    starter.start()
    try:
        with caplog.at_level(logging.INFO, logger="meshdash.agent"):
            began = time.monotonic()
            assert agent.Agent(config).wait_for_node() is True
        assert time.monotonic() - began >= 1.0  # it did wait for the node
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    finally:
        starter.join()
        node.stop()


def test_a_node_that_never_answers_is_one_warning_once_the_wait_is_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = agent_config.Config(node_url=f"http://127.0.0.1:{free_port()}", token="t", node_wait=0.5)
    with caplog.at_level(logging.INFO, logger="meshdash.agent"):
        assert agent.Agent(config).wait_for_node() is False
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "did not answer in 0.5 s" in warning


def test_a_negative_node_wait_is_refused() -> None:
    with pytest.raises(agent_common.AgentError, match="node_wait"):
        agent_config.Config.load(None, {"token": "t", "node_wait": -1})


# --- meshdash-agent on the venv's PATH, with help -----------------------------------------------------------


def test_every_agent_flag_has_help_and_the_help_names_the_token_variable() -> None:
    cli = agent.parser()
    flags = [a for a in cli._actions if a.option_strings]
    assert {f for a in flags for f in a.option_strings} >= {
        "--node-url",
        "--meshdash-url",
        "--hub-url",
        "--spool-dir",
        "--proxy",
        "--node-wait",
        "--once",
        "--dry-run",
        "--config",
    }
    assert [a.option_strings for a in flags if not (a.help or "").strip()] == []
    assert "MESHDASH_TOKEN" in cli.format_help()


def test_make_install_puts_meshdash_agent_on_the_venvs_path(tmp_path: Path) -> None:
    command = ROOT / ".venv" / "bin" / "meshdash-agent"
    assert command.exists(), "make install puts meshdash-agent in .venv/bin"
    # From anywhere, as an operator runs it: the command does not need the project folder.
    env = {"PATH": f"{command.parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    shown = subprocess.run(
        ["meshdash-agent", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    )
    assert "--node-url URL" in shown.stdout and "MESHDASH_TOKEN" in shown.stdout
    refused = subprocess.run(
        ["meshdash-agent", "--once"], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert refused.returncode == 2 and "MESHDASH_TOKEN" in refused.stderr  # no token: one sentence naming it
    assert sys.executable  # the suite's interpreter is not what runs it: the venv's, from the first line
    assert command.read_bytes().splitlines()[0].endswith(b"/.venv/bin/python")


def test_the_agent_runs_as_a_file_with_only_the_standard_library(tmp_path: Path) -> None:
    # docs/api.md: `python3 packages_app/nodes/agent.py` on a node without the project installed; its
    # parser of baseline engines' /metrics (nodes/exposition.py) is found beside it.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    script = ROOT / "packages_app" / "nodes" / "agent.py"
    shown = subprocess.run(
        [sys.executable, "-s", str(script), "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 0, shown.stderr
    assert "--node-url URL" in shown.stdout
