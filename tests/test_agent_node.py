"""meshdash-agent reading its node (docs/api.md, "Run meshdash-agent beside the node"): a node that is down,
hangs, or answers an error or junk is one clear error naming the URL, and the cycle goes on; stages it cannot
read are left out; a package ref is resolved through the Hub once and remembered, within a bound; a run is
registered again only when the node's state changes. What a node says about itself is bounded (the
functions of agent_observations, with what an older or hostile node sends). No Django, no store: fake
servers on loopback (tests/agent_fakes.py)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest

from packages_app.nodes import agent, agent_common, agent_config, agent_observations, agent_runs
from tests.agent_fakes import MESHDASH_ROUTES, SHA, FakeServer, Reply, closed_port, node_routes, stage


def config(node_url: str, **more: Any) -> agent_config.Config:
    return agent_config.Config(node_url=node_url, token="t", hub_url=closed_port(), **more)


def read(node_url: str, resolver: agent_runs.RefResolver | None = None) -> list[dict[str, Any]]:
    settings = config(node_url)
    return agent_runs.read_runs(settings, resolver or agent_runs.RefResolver(settings.hub_url))


# --- a node that is down, hangs, or answers junk ---------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (Reply({"error": "boom"}, status=500), "The node answered 500 for {url}/api/runtime/stages."),
        (Reply(b"<html>starting</html>"), "The node's {url}/api/runtime/stages is not JSON."),
        (Reply(hold=True), "The node does not answer at {url}/api/runtime/stages: "),
    ],
    ids=["error", "not-json", "hangs"],
)
def test_a_node_that_answers_an_error_or_junk_or_hangs_is_one_sentence_naming_the_url(
    monkeypatch: pytest.MonkeyPatch, reply: Reply, message: str
) -> None:
    monkeypatch.setattr(agent_common, "TIMEOUT", 0.2)  # the hanging node: the deadline is what ends it
    with FakeServer({"/api/runtime/stages": reply}) as node, pytest.raises(agent_common.AgentError) as error:
        read(node.url)
    assert str(error.value).startswith(message.format(url=node.url))


def test_a_cycle_with_its_node_down_warns_once_and_still_sends_what_waits(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    node_url = closed_port()
    with FakeServer(MESHDASH_ROUTES) as meshdash:
        bot = agent.Agent(config(node_url, meshdash_url=meshdash.url, spool_dir=str(tmp_path)))
        bot.spool.put("reports", {"reports": [{"report_id": "r-1"}]})  # spooled before the node went down
        with caplog.at_level(logging.WARNING, logger="meshdash.agent"):
            assert bot.cycle() is True
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith(f"The node does not answer at {node_url}/api/runtime/stages")
    assert meshdash.bodies("/api/v1/reports/batch") == [{"reports": [{"report_id": "r-1"}]}]
    assert meshdash.bodies("/api/v1/runs") == []


def test_stages_it_cannot_read_are_left_out_and_the_readable_run_is_registered() -> None:
    junk: list[Any] = [
        "not an object",
        {"run_id": ""},
        {"run_id": 7},
        stage(),
        stage(stage_id="s1", stage_index=1, layer_start=-4),  # a negative layer
        stage(stage_id="s2", stage_index=True),  # a bool is not an index
    ]
    with FakeServer(node_routes(junk, status=["not", "an object"])) as node:
        (run,) = read(node.url)
    assert run["run_id"] == "run-1" and run["version"] == ""
    assert [s["stage_id"] for s in run["stages"]] == ["s0"]
    assert run["package"] == {"repo": "meshllm/a-layers", "revision": SHA}
    with FakeServer({"/api/runtime/stages": Reply([stage()]), "/api/status": Reply({})}) as node:
        assert read(node.url) == []  # stages not under "stages": no run, and no error


def test_a_run_is_registered_again_only_when_the_nodes_state_changes(tmp_path: Path) -> None:
    with FakeServer(node_routes([stage()])) as node, FakeServer(MESHDASH_ROUTES) as meshdash:
        bot = agent.Agent(config(node.url, meshdash_url=meshdash.url, spool_dir=str(tmp_path)))
        assert bot.cycle() is True and bot.cycle() is True
        assert len(meshdash.bodies("/api/v1/runs")) == 1  # the same state: not sent again
        node.routes.update(node_routes([stage(layer_end=6)]))
        assert bot.cycle() is True
    registered = meshdash.bodies("/api/v1/runs")
    assert [body["runs"][0]["stages"][0]["layer_end"] for body in registered] == [4, 6]
    assert meshdash.headers[0]["Authorization"] == "Bearer t"


# --- package refs: resolved through the Hub once, remembered within a bound -------------------------


def test_a_branch_is_resolved_through_the_hub_once_and_remembered() -> None:
    ref = {"package_ref": "meshllm/a-layers", "manifest_sha256": "e" * 64}  # no @: the main branch
    with FakeServer(node_routes([stage(**ref)])) as node, FakeServer(default=Reply({"sha": SHA})) as hub:
        resolver = agent_runs.RefResolver(hub.url)
        first, again = read(node.url, resolver), read(node.url, resolver)
    assert first[0]["package"] == {"repo": "meshllm/a-layers", "revision": SHA, "manifest_sha256": "e" * 64}
    assert again == first and hub.asked == ["/api/models/meshllm/a-layers/revision/main"]


@pytest.mark.parametrize(
    ("ref", "manifest", "package"),
    [
        ("meshllm/a-layers@" + SHA, "not a digest", {"repo": "meshllm/a-layers", "revision": SHA}),
        ("a path/with spaces", "e" * 64, None),
        ("", None, None),
    ],
    ids=["digest-not-sha256", "not-a-repo-id", "no-ref"],
)
def test_a_ref_or_digest_that_is_not_one_is_not_registered_and_costs_no_hub_request(
    ref: str, manifest: Any, package: dict[str, str] | None
) -> None:
    with FakeServer(default=Reply({"sha": SHA})) as hub:
        assert agent_runs.RefResolver(hub.url).package(ref, manifest) == package
    assert hub.asked == []


def test_the_refs_remembered_are_bounded_and_the_oldest_is_forgotten_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(agent_runs, "MAX_REF_CACHE", 2)
    with FakeServer(default=Reply({"sha": SHA})) as hub:
        resolver = agent_runs.RefResolver(hub.url)
        for branch in ("b1", "b2", "b3", "b3", "b1"):
            assert resolver.package(f"meshllm/a-layers@{branch}", None) == {
                "repo": "meshllm/a-layers",
                "revision": SHA,
            }
    asked = [path.rsplit("/", 1)[1] for path in hub.asked]
    assert asked == ["b1", "b2", "b3", "b1"]  # b3 remembered; b1, the oldest, was forgotten


def test_a_stage_of_one_value_over_4_kib_keeps_only_the_name_of_what_was_dropped() -> None:
    assert agent_runs.raw_stage({"notes": "x" * 5000}) == {"_trimmed": ["notes"]}


# --- what the node says about itself ---------------------------------------------------------------


def test_a_strategy_that_is_not_an_object_is_named_and_a_long_draft_name_is_cut() -> None:
    said = agent_observations.status_observations(
        {"runtime": {"serving_strategy": "interactive"}, "twin_policy": {}, "draft_name": "d" * 400}
    )
    assert "serving_strategy" not in said and said["draft_name"] == "d" * 300
    assert said["trimmed"] == ["serving_strategy (not an object)", "draft_name (400 characters, kept 300)"]
    assert said["not_reported"] == [] and said["twin_policy"] == {}


def test_a_strategy_of_wrong_types_keeps_only_the_decisions_with_a_string_axis() -> None:
    strategy = {
        "strategy": 5,
        "applied": [{"axis": 1}, {"axis": "speculative.strategy", "value": "ngram-suffix", "because": 3}],
        "declined": [],
    }
    said = agent_observations.status_observations({"serving_strategy": strategy})
    assert said["serving_strategy"] == {
        "applied": [{"axis": "speculative.strategy", "value": "ngram-suffix"}],
        "declined": [],
    }
    assert said["trimmed"] == [
        "serving_strategy.strategy (not a string)",
        "serving_strategy.applied (entries without a string axis)",
    ]


def test_a_twin_policy_past_the_bounds_is_cut_to_fit_and_what_was_cut_is_named() -> None:
    policy: dict[str, Any] = {f"k{i:03d}": "v" * 600 for i in range(100)} | {"ratio": math.nan}
    said = agent_observations.status_observations({"twin_policy": json.loads(json.dumps(policy))})
    kept = said["twin_policy"]
    assert len(json.dumps(kept)) <= agent_observations.MAX_OBSERVED_BYTES and "ratio" not in kept
    assert said["trimmed"][0] == "twin_policy (101 keys, kept 64)"
    assert "twin_policy.k000 (too large)" in said["trimmed"]
    small = agent_observations.status_observations({"twin_policy": {"ratio": math.nan, "on": True}})
    assert small["twin_policy"] == {"ratio": None, "on": True}  # JSON has no NaN: None, and nothing cut


def readiness(report: Any, run: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    routes = {"/api/diagnostics/split-readiness": Reply(report)}
    with FakeServer(routes) as node:
        said = agent_observations.readiness_of(config(node.url), run)
    return said, node.asked


def test_split_readiness_of_wrong_shapes_is_kept_where_it_can_be_and_named() -> None:
    report = {
        "verdict": "blocked",
        "blockers": [{"reason": 5, "recommendation": "upgrade", "count": 2, "short_node_ids": ["n1", 3]}],
        "recommendations": "upgrade the peers",
    }
    said, asked = readiness(report, {"package_ref": f"meshllm/a-layers@{SHA}"})
    assert asked == ["/api/diagnostics/split-readiness?model_ref=meshllm/a-layers"]
    assert said == {
        "report": {
            "verdict": "blocked",
            "blockers": [{"recommendation": "upgrade", "count": 2, "short_node_ids": ["n1"]}],
            "recommendations": [],
        },
        "trimmed": [
            "split_readiness.blockers.reason (not a string)",
            "split_readiness.recommendations (not a list)",
        ],
    }


def test_a_run_without_a_package_ref_or_model_asks_no_split_readiness() -> None:
    assert readiness({"verdict": "ready"}, {"package_ref": "", "model_id": ""}) == (None, [])
    said, asked = readiness({"verdict": "ready"}, {"package_ref": "", "model_id": "qwen3.5"})  # control
    assert asked == ["/api/diagnostics/split-readiness?model_ref=qwen3.5"] and said is not None


def test_an_exchange_of_another_model_gives_no_provenance_and_a_wrong_type_is_named() -> None:
    said = agent_observations.status_observations({})
    event = {"model": "a-layers", "serving_provenance": {"model_revision": 7, "weights_digest": "d" * 64}}
    run = {"model_id": "a-layers", "package_ref": ""}
    other = agent_observations.run_observations(said, None, {"b-layers": event}, run)
    assert "provenance" not in other and "provenance" not in other["not_reported"]
    mine = agent_observations.run_observations(said, None, {"a-layers": event}, run)
    assert mine["provenance"] == {"weights_digest": "d" * 64}
    assert mine["trimmed"] == ["provenance.model_revision (not a string)"]
