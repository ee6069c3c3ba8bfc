"""devnode's baseline mode, scraped by meshdash-agent over loopback as the demo does: the figures of each
window are the counters' growth, and a speculating baseline's acceptance by position is what it drafted."""

from __future__ import annotations

import pytest

from packages_app.devnode.baseline import BUILD_INFO, BaselineEngine, metrics_text
from packages_app.nodes import agent_baseline, exposition


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def scraper(url: str) -> agent_baseline.BaselineScraper:
    item = {
        "engine": "llama.cpp",
        "metrics_url": f"{url}/metrics",
        "source_model": "unsloth/Qwen3.5-35B-A3B-MTP-GGUF",
    }
    return agent_baseline.BaselineScraper(agent_baseline.Baseline.of(item, 0))


def test_a_plain_baseline_reports_its_decode_rate_and_no_speculation() -> None:
    clock = Clock()
    with BaselineEngine(4.0, seed=7, clock=clock) as engine:
        s = scraper(engine.url)
        assert s.scrape() is None
        before = engine.counters.predicted
        clock.now += 10
        report = s.scrape()
    assert report is not None
    f = report["figures"]
    assert f["predicted_n"] == engine.counters.predicted - before and f["predicted_seconds"] == 10.0
    assert f["predicted_per_second"] == pytest.approx(f["predicted_n"] / 10)
    assert 3.0 < f["predicted_per_second"] < 5.0
    assert report["engine_version"] == BUILD_INFO  # asked of /props
    assert report["not_reported"] == ["drafts", "draft_tokens", "accepted_tokens", "accepted_per_position"]


def test_a_speculating_baseline_reports_acceptance_by_position() -> None:
    clock = Clock()
    with BaselineEngine(40.0, acceptance=0.6, seed=7, clock=clock) as engine:
        s = scraper(engine.url)
        s.scrape()
        clock.now += 30
        report = s.scrape()
    assert report is not None
    f = report["figures"]
    drafts = f["predicted_n"] // 2
    assert f["drafts"] == drafts and f["draft_tokens"] == 3 * drafts
    assert f["accepted_per_position"] == [int(drafts * 0.6), int(drafts * 0.36), int(drafts * 0.216)]
    assert exposition.acceptance_by_position(f["accepted_per_position"], f["drafts"]) == pytest.approx(
        [0.6, 0.36, 0.216], abs=0.01
    )
    assert exposition.mean_acceptance_length(f["accepted_tokens"], f["drafts"]) == pytest.approx(
        2.176, abs=0.02
    )


def test_the_exposition_is_what_the_parser_reads() -> None:
    with BaselineEngine(4.0, acceptance=0.5, seed=1) as engine:
        counters = engine.advance()
    parsed = exposition.parse(metrics_text(counters, True).encode(), exposition.wanted_names("llama.cpp"))
    assert parsed.trimmed == []
    snap = exposition.snapshot(parsed, "llama.cpp")
    assert snap["predicted_n"] == counters.predicted and snap["accepted_at:2"] == counters.accepted_at[2]
