"""meshdash-agent reads what a node says about itself (docs/node-report.md section 5) and bounds what a
hostile node sends there: huge lists, deep nesting, wrong types and 10 MB strings are cut and named in
``trimmed``, never posted as they came; what an older node does not report is named in ``not_reported``.
Standard library only, like the agent: a fake node on loopback, and meshdash's own validation of the
result (nodes/run_schema.py), which must take what the agent posts."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from packages_app.devnode import payloads
from packages_app.devnode.server import DevNode
from packages_app.nodes import agent_common, agent_config, agent_runs
from packages_app.nodes.run_schema import MAX_OBSERVED_BYTES, validate_run
from tests.agent_fakes import stage

TEN_MB = "x" * (10 * 1024 * 1024)
DEPTH = 500


def deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"down": value}
    return value


HOSTILE_STATUS: dict[str, Any] = {
    "version": "0.78.0",
    "runtime": {
        "serving_strategy": {
            "strategy": TEN_MB,
            "applied": [{"axis": "speculative.strategy", "value": "ngram-suffix", "because": "x" * 5_000}]
            + [{"axis": "a", "value": "b"}] * 5_000,
            "declined": "not a list",
        }
    },
    "twin_policy": "DEEP",  # replaced on the wire by 500 levels
    "draft_name": {"wrong": "type"},
}


@pytest.fixture
def hostile_node(tmp_path: Path) -> Iterator[str]:
    """A node whose /api/status, stages and split readiness are all hostile."""
    readiness = {
        "verdict": ["wrong type"],
        "participant_count": -5,
        "blockers": [{"reason": TEN_MB, "count": "many", "short_node_ids": list(range(10_000))}]
        + [{"reason": "r"}] * 5_000,
        "recommendations": ["r" * 5_000] + ["r"] * 5_000,
        "exclusions": [deep(100)] * 100,
    }
    bodies = {
        "/api/status": HOSTILE_STATUS,
        "/api/runtime/stages": {"stages": [stage(admission={"package_id": TEN_MB, "plan_id": 7})]},
        "/api/diagnostics/split-readiness": readiness,
    }

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            text = json.dumps(bodies.get(self.path.split("?")[0], {}))
            body = text.replace('"DEEP"', '{"down":' * DEPTH + '"bottom"' + "}" * DEPTH).encode()
            self.send_response(200 if self.path.split("?")[0] in bodies else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def read(node_url: str, exchange_log: str = "") -> dict[str, Any]:
    config = agent_config.Config(
        node_url=node_url, token="t", hub_url="http://127.0.0.1:9", exchange_log=exchange_log
    )
    (run,) = agent_runs.read_runs(config, agent_runs.RefResolver(config.hub_url))
    return run


def test_a_hostile_nodes_observations_are_cut_to_the_bounds_and_named_and_meshdash_takes_them(
    hostile_node: str, tmp_path: Path
) -> None:
    log = tmp_path / "lifecycle-events.jsonl"
    event = {
        "model": "a-layers",
        "phase": "terminal",
        # A line longer than the log tail the agent reads (256 KiB) would not be read at all.
        "serving_provenance": {"model_revision": "r" * 100_000, "x": deep(50)},
    }
    log.write_text("\n".join([json.dumps(event), "not json", json.dumps({"model": 5})]) + "\n")
    run = read(hostile_node, str(log))
    said = run["observations"]
    body = json.dumps(run)
    assert len(body) < 64 * 1024  # from about 50 MB of hostile JSON
    for group in ("serving_strategy", "split_readiness", "provenance", "twin_policy"):
        assert len(json.dumps(said[group])) <= MAX_OBSERVED_BYTES, group
    trimmed = " ".join(said["trimmed"])
    assert "serving_strategy.strategy (10485760 characters, kept 600)" in trimmed
    assert "twin_policy" in trimmed and "(too deep)" in trimmed
    assert "draft_name (not a string)" in trimmed and "split_readiness.verdict (not a string)" in trimmed
    assert "split_readiness.participant_count (not a count)" in trimmed
    assert "serving_strategy.declined (not a list)" in trimmed
    assert run["stages"][0]["admission"] == {"package_id": TEN_MB[:200]}  # plan_id of the wrong type dropped
    stored = validate_run(run)  # what meshdash's runs API validates: it takes the bounded body
    assert stored.observations is not None and stored.observations.trimmed


def test_the_control_unbounded_the_same_node_posts_what_meshdash_refuses(hostile_node: str) -> None:
    """Without the agent's bounds (the node's values posted as they came), meshdash refuses the run."""
    from packages_app.nodes.report_schema import BodyError

    run = read(hostile_node)
    run["observations"]["serving_strategy"] = HOSTILE_STATUS["runtime"]["serving_strategy"]
    with pytest.raises(BodyError) as refused:
        validate_run(run)
    assert refused.value.field.startswith("observations.serving_strategy")


def test_an_older_node_says_nothing_of_it_and_each_field_is_named_not_reported() -> None:
    old = payloads.RunPlan(repo="meshllm/a-layers", ref="a" * 40, version="0.72.1", reports=())
    with DevNode(old) as node:
        run = read(node.url)
    said = run["observations"]
    assert said["not_reported"] == ["serving_strategy", "twin_policy", "split_readiness", "provenance"]
    assert "admission" not in run["stages"][0] and "serving_strategy" not in said


def test_a_current_node_reports_the_fields_as_section_5_gives_them(tmp_path: Path) -> None:
    log = tmp_path / "lifecycle-events.jsonl"
    current = payloads.RunPlan(
        repo="meshllm/a-layers",
        ref="a" * 40,
        model_id="a-layers",
        serving_strategy="interactive",
        operator_strategy=False,
        package_id="sha256:" + "1" * 64,
        weights_digest="d" * 64,
    )
    with DevNode(current, exchange_log=str(log)) as node:
        node.complete({"messages": [], "max_tokens": 8})
        run = read(node.url, str(log))
    said = run["observations"]
    assert said["serving_strategy"]["strategy"] == "interactive"
    assert {"axis": "speculative.strategy", "value": "ngram-suffix"}.items() <= said["serving_strategy"][
        "applied"
    ][0].items()
    assert said["split_readiness"]["verdict"] == "ready" and said["provenance"]["weights_digest"] == "d" * 64
    assert (
        said["provenance"]["model_revision"] == "a" * 40
        and said["provenance"]["usage"]["completion_tokens"] > 0
    )
    assert run["stages"][0]["admission"]["package_id"] == "sha256:" + "1" * 64
    assert said["not_reported"] == ["twin_policy"]  # its shape is not pinned down: devnode does not emit it
    assert validate_run(run).observations is not None


def test_a_status_nested_past_what_json_reads_is_a_clear_error_not_a_crash(hostile_node: str) -> None:
    global DEPTH
    DEPTH, before = 50_000, DEPTH
    try:
        with pytest.raises(agent_common.AgentError, match="is not JSON"):
            read(hostile_node)
    finally:
        DEPTH = before
