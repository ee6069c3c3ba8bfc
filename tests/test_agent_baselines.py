"""meshdash-agent scraping a baseline engine's Prometheus /metrics (docs/node-report.md section 6).

Expositions shaped as llama.cpp's server (``llamacpp:*``, spec-decode counters without ``_total``) and vLLM's
(``vllm:*_total`` with ``engine`` and ``model_name`` labels) go through the agent's scraper: each window's
counter deltas, a counter reset, a missing per-position series, and every derived figure asserted by value.
Hostile expositions (a 10 MB body, a 100 kB line, a huge label set, NaN and Inf, ten thousand series) are each
bounded, with a control that switches the bound off and shows the damage. No Django: the agent is stdlib only.
"""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from packages_app.nodes import agent, agent_baseline, agent_common, agent_config, exposition
from tests.agent_fakes import FakeServer, Reply, closed_port

SOURCE = "unsloth/Qwen3.5-35B-A3B-GGUF"


def llama_metrics(
    predicted: float,
    seconds: float,
    drafts: float,
    draft_tokens: float,
    accepted: float,
    per_pos: list[float] | None,
    extra: str = "",
) -> bytes:
    """A llama.cpp server's /metrics as it writes it (server.cpp, --metrics; spec-decode since PR #26389)."""
    lines = [
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.",
        "# TYPE llamacpp:prompt_tokens_total counter",
        "llamacpp:prompt_tokens_total 1200",
        "# HELP llamacpp:prompt_seconds_total Prompt process time",
        "# TYPE llamacpp:prompt_seconds_total counter",
        "llamacpp:prompt_seconds_total 2.5",
        "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.",
        "# TYPE llamacpp:tokens_predicted_total counter",
        f"llamacpp:tokens_predicted_total {predicted}",
        "# HELP llamacpp:tokens_predicted_seconds_total Predict process time",
        "# TYPE llamacpp:tokens_predicted_seconds_total counter",
        f"llamacpp:tokens_predicted_seconds_total {seconds}",
        "# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s.",
        "# TYPE llamacpp:predicted_tokens_seconds gauge",
        "llamacpp:predicted_tokens_seconds 50",
        "# TYPE llamacpp:n_decode_total counter",
        "llamacpp:n_decode_total 3000",
        "# TYPE llamacpp:spec_decode_num_drafts counter",
        f"llamacpp:spec_decode_num_drafts {drafts}",
        "# TYPE llamacpp:spec_decode_num_draft_tokens counter",
        f"llamacpp:spec_decode_num_draft_tokens {draft_tokens}",
        "# TYPE llamacpp:spec_decode_num_accepted_tokens counter",
        f"llamacpp:spec_decode_num_accepted_tokens {accepted}",
    ]
    if per_pos is not None:
        lines.append("# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos counter")
        lines += [
            f'llamacpp:spec_decode_num_accepted_tokens_per_pos{{position="{i}"}} {v}'
            for i, v in enumerate(per_pos)
        ]
    return ("\n".join(lines) + "\n" + extra).encode()


def vllm_metrics(
    generated: float,
    decode_seconds: float,
    drafts: float,
    draft_tokens: float,
    accepted: float,
    per_pos: list[float],
) -> bytes:
    """vLLM's /metrics (v1 engine): every counter ends in _total, labelled with engine and model_name; a
    second model's series (another engine in the same process) must not be summed in."""
    mine = 'engine="0",model_name="Qwen/Qwen3.5-35B-A3B"'
    other = 'engine="1",model_name="meta-llama/Llama-3.2-1B"'
    lines = [
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
        f"vllm:generation_tokens_total{{{mine}}} {generated}",
        f"vllm:generation_tokens_total{{{other}}} 99999.0",
        "# TYPE vllm:request_decode_time_seconds histogram",
        f'vllm:request_decode_time_seconds_bucket{{{mine},le="1.0"}} 3.0',
        f'vllm:request_decode_time_seconds_bucket{{{mine},le="+Inf"}} 40.0',
        f"vllm:request_decode_time_seconds_count{{{mine}}} 40.0",
        f"vllm:request_decode_time_seconds_sum{{{mine}}} {decode_seconds}",
        f"vllm:request_decode_time_seconds_sum{{{other}}} 1.0",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f"vllm:spec_decode_num_drafts_total{{{mine}}} {drafts}",
        f"vllm:spec_decode_num_draft_tokens_total{{{mine}}} {draft_tokens}",
        f"vllm:spec_decode_num_accepted_tokens_total{{{mine}}} {accepted}",
        f"vllm:spec_decode_num_accepted_tokens_total{{{other}}} 77777.0",
    ]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{mine},position="{i}"}} {v}'
        for i, v in enumerate(per_pos)
    ]
    return ("\n".join(lines) + "\n").encode()


class Engine:
    """Bodies the fake engine's /metrics answers, one per scrape (the last one repeats)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, bodies: list[bytes]) -> None:
        self.bodies = list(bodies)
        self.asked: list[str] = []
        monkeypatch.setattr(agent_baseline, "fetch_capped", self.fetch)

    def fetch(self, url: str, cap: int) -> bytes:
        self.asked.append(url)
        if url.endswith("/props"):
            return json.dumps({"build_info": "b6105-1a2b3c4"}).encode()
        if url.endswith("/version"):
            return json.dumps({"version": "0.11.0"}).encode()
        body = self.bodies.pop(0) if len(self.bodies) > 1 else self.bodies[0]
        if len(body) > cap:
            raise agent_common.AgentError(f"over {cap}")
        return body


def scraper(engine: str = "llama.cpp", **more: str) -> agent_baseline.BaselineScraper:
    item = {"engine": engine, "metrics_url": "http://127.0.0.1:8080/metrics", "source_model": SOURCE} | more
    return agent_baseline.BaselineScraper(agent_baseline.Baseline.of(item, 0))


FIRST = llama_metrics(5000, 100, 1000, 3000, 1800, [900, 600, 300])
SECOND = llama_metrics(5600, 110, 1200, 3600, 2160, [1080, 720, 360])


# --- llama.cpp -----------------------------------------------------------------------------------


def test_llamacpp_window_figures_and_derivations(monkeypatch: pytest.MonkeyPatch) -> None:
    Engine(monkeypatch, [FIRST, SECOND])
    s = scraper(
        served_model="qwen3.5", source_file="Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf", quantization="UD-Q4_K_XL"
    )
    assert s.scrape() is None  # the first scrape only sets where the window starts
    report = s.scrape()
    assert report is not None
    f = report["figures"]
    assert f["predicted_n"] == 600 and f["predicted_seconds"] == 10.0
    assert f["predicted_per_second"] == 60.0  # 600 tokens / 10 s of decoding
    assert (f["drafts"], f["draft_tokens"], f["accepted_tokens"]) == (200, 600, 360)
    assert f["accepted_per_position"] == [180, 120, 60]
    assert exposition.acceptance_rate(f["accepted_tokens"], f["draft_tokens"]) == pytest.approx(0.6)
    assert exposition.mean_acceptance_length(f["accepted_tokens"], f["drafts"]) == pytest.approx(2.8)
    assert exposition.acceptance_by_position(f["accepted_per_position"], f["drafts"]) == pytest.approx(
        [0.9, 0.6, 0.3]
    )
    assert report["engine"] == "llama.cpp" and report["engine_version"] == "b6105-1a2b3c4"  # from /props
    assert report["source_model"] == SOURCE and report["quantization"] == "UD-Q4_K_XL"
    assert report["counter_reset"] is False and report["not_reported"] == [] and report["trimmed"] == []
    json.dumps(report, allow_nan=False)  # what the spool writes and meshdash reads


def test_llamacpp_counter_reset_is_the_window_since_the_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    restarted = llama_metrics(300, 5, 100, 300, 150, [80, 50, 20])
    Engine(monkeypatch, [FIRST, SECOND, restarted])
    s = scraper()
    s.scrape(), s.scrape()
    report = s.scrape()
    assert report is not None and report["counter_reset"] is True
    f = report["figures"]
    # Not 300 - 5600 (negative): the restarted server's counts since it started.
    assert (f["predicted_n"], f["predicted_per_second"]) == (300, 60.0)
    assert (f["drafts"], f["draft_tokens"], f["accepted_tokens"]) == (100, 300, 150)
    assert f["accepted_per_position"] == [80, 50, 20]
    assert exposition.mean_acceptance_length(f["accepted_tokens"], f["drafts"]) == pytest.approx(2.5)


def test_deltas_without_the_reset_rule_would_go_negative() -> None:
    """The control of the reset rule: plain subtraction across a restart gives negative counts."""
    before = {"predicted_n": 5600.0, "predicted_seconds": 110.0}
    now = {"predicted_n": 300.0, "predicted_seconds": 5.0}
    assert exposition.deltas(before, now) == (now, True)
    assert {k: now[k] - before[k] for k in now}["predicted_n"] < 0


def test_llamacpp_missing_per_position_series_is_named_not_invented(monkeypatch: pytest.MonkeyPatch) -> None:
    # A llama.cpp build before PR #26389's per-position counter: totals only.
    Engine(monkeypatch, [llama_metrics(0, 0, 0, 0, 0, None), llama_metrics(400, 8, 100, 200, 50, None)])
    s = scraper(version="b6000")
    s.scrape()
    report = s.scrape()
    assert report is not None
    f = report["figures"]
    assert f["accepted_per_position"] is None and report["not_reported"] == ["accepted_per_position"]
    assert f["predicted_per_second"] == 50.0
    assert exposition.acceptance_rate(f["accepted_tokens"], f["draft_tokens"]) == pytest.approx(0.25)
    assert exposition.mean_acceptance_length(f["accepted_tokens"], f["drafts"]) == pytest.approx(1.5)
    assert exposition.acceptance_by_position(f["accepted_per_position"], f["drafts"]) is None
    assert report["engine_version"] == "b6000"  # configured: the engine is not asked


def test_a_position_that_appears_counts_from_zero_and_a_gap_is_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    before = llama_metrics(100, 2, 10, 30, 10, [10])
    after = (
        llama_metrics(200, 4, 20, 60, 25, [15])
        + b'llamacpp:spec_decode_num_accepted_tokens_per_pos{position="2"} 4\n'
    )
    Engine(monkeypatch, [before, after])
    s = scraper(version="b1")
    s.scrape()
    report = s.scrape()
    assert report is not None and report["figures"]["accepted_per_position"] == [5, 0, 4]


def test_an_idle_engine_sends_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    Engine(monkeypatch, [FIRST, FIRST])
    s = scraper(version="b1")
    assert s.scrape() is None and s.scrape() is None


def test_a_plain_engine_without_speculation_reports_decode_only(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = b"llamacpp:tokens_predicted_total %d\nllamacpp:tokens_predicted_seconds_total %d\n"
    Engine(monkeypatch, [plain % (1000, 40), plain % (1450, 50)])
    s = scraper(version="b1")
    s.scrape()
    report = s.scrape()
    assert report is not None and report["figures"]["predicted_per_second"] == 45.0
    assert report["not_reported"] == ["drafts", "draft_tokens", "accepted_tokens", "accepted_per_position"]
    assert exposition.mean_acceptance_length(None, None) is None


# --- vLLM ------------------------------------------------------------------------------------------


def test_vllm_window_figures_only_for_the_served_model(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = Engine(
        monkeypatch,
        [
            vllm_metrics(10000, 200, 2000, 6000, 3000, [1500, 1000, 500]),
            vllm_metrics(10900, 215, 2300, 6900, 3300, [1650, 1100, 550]),
        ],
    )
    s = scraper("vllm", served_model="Qwen/Qwen3.5-35B-A3B")
    s.scrape()
    report = s.scrape()
    assert report is not None
    f = report["figures"]
    assert (f["predicted_n"], f["predicted_seconds"], f["predicted_per_second"]) == (900, 15.0, 60.0)
    assert (f["drafts"], f["draft_tokens"], f["accepted_tokens"]) == (300, 900, 300)
    assert f["accepted_per_position"] == [150, 100, 50]
    assert exposition.acceptance_rate(300, 900) == pytest.approx(1 / 3)
    assert exposition.mean_acceptance_length(300, 300) == pytest.approx(2.0)
    assert exposition.acceptance_by_position([150, 100, 50], 300) == pytest.approx([0.5, 1 / 3, 1 / 6])
    assert report["engine"] == "vllm" and report["engine_version"] == "0.11.0"
    assert engine.asked[-1] == "http://127.0.0.1:8080/version"


def test_vllm_counter_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    Engine(
        monkeypatch,
        [
            vllm_metrics(10000, 200, 2000, 6000, 3000, [1500, 1000, 500]),
            vllm_metrics(500, 10, 100, 300, 120, [60, 40, 20]),
        ],
    )
    s = scraper("vllm", served_model="Qwen/Qwen3.5-35B-A3B", version="0.11.0")
    s.scrape()
    report = s.scrape()
    assert report is not None and report["counter_reset"] is True
    f = report["figures"]
    assert (f["predicted_n"], f["predicted_per_second"], f["drafts"]) == (500, 50.0, 100)
    assert f["accepted_per_position"] == [60, 40, 20]
    assert exposition.mean_acceptance_length(f["accepted_tokens"], f["drafts"]) == pytest.approx(2.2)


# --- Hostile expositions: each bound, and its control ---------------------------------------------


def _figures(body_before: bytes, body_after: bytes) -> dict[str, Any]:
    window, _ = exposition.deltas(
        exposition.snapshot(exposition.parse(body_before, exposition.wanted_names("llama.cpp")), "llama.cpp"),
        exposition.snapshot(exposition.parse(body_after, exposition.wanted_names("llama.cpp")), "llama.cpp"),
    )
    return exposition.figures(window)


def test_a_10mb_exposition_is_refused_unread(monkeypatch: pytest.MonkeyPatch) -> None:
    huge = SECOND + b'llamacpp:tokens_predicted_total{x="' + b"a" * (10 * 1024 * 1024) + b'"} 1\n'
    with pytest.raises(exposition.ExpositionError, match="over 4 MiB"):
        exposition.parse(huge, exposition.wanted_names("llama.cpp"))
    # Control: without the body cap the parser walks all 10 MB (and the line bound is all that is left).
    monkeypatch.setattr(exposition, "MAX_BODY_BYTES", 64 * 1024 * 1024)
    parsed = exposition.parse(huge, exposition.wanted_names("llama.cpp"))
    assert parsed.trimmed == [f"1 lines over {exposition.MAX_LINE_CHARS} characters"]


def test_the_scraper_reads_at_most_the_cap_over_http() -> None:
    """The real fetch: a 10 MB /metrics is cut at the cap and refused, named in the error."""
    body = b"# " + b"x" * (10 * 1024 * 1024) + b"\n"
    with fake_engine(body) as url, pytest.raises(agent_common.AgentError, match="over 4096 KiB"):
        agent_baseline.fetch_capped(url, exposition.MAX_BODY_BYTES)
    with fake_engine(body) as url:  # control: a cap above the body reads it all
        assert len(agent_baseline.fetch_capped(url, 16 * 1024 * 1024)) == len(body)


def test_a_long_line_cannot_inflate_a_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    hostile = SECOND + b'llamacpp:tokens_predicted_total{pad="' + b"p" * 100_000 + b'"} 1000000\n'
    f = _figures(FIRST, hostile)
    assert f["predicted_n"] == 600
    monkeypatch.setattr(exposition, "MAX_LINE_CHARS", 10**9)  # control: the line is read and summed in
    assert _figures(FIRST, hostile)["predicted_n"] == 1_000_600


def test_a_huge_label_set_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    labels = ",".join(f'l{i}="{i}"' for i in range(60))
    hostile = SECOND + f"llamacpp:tokens_predicted_total{{{labels}}} 1000000\n".encode()
    parsed = exposition.parse(hostile, exposition.wanted_names("llama.cpp"))
    assert f"1 series with more than {exposition.MAX_LABELS} labels" in parsed.trimmed
    assert _figures(FIRST, hostile)["predicted_n"] == 600
    monkeypatch.setattr(exposition, "MAX_LABELS", 10**6)  # control
    assert _figures(FIRST, hostile)["predicted_n"] == 1_000_600


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "-5"])
def test_nan_inf_and_negative_counters_are_dropped(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    hostile = SECOND.replace(
        b"llamacpp:tokens_predicted_seconds_total 110",
        f"llamacpp:tokens_predicted_seconds_total {value}".encode(),
    )
    parsed = exposition.parse(hostile, exposition.wanted_names("llama.cpp"))
    assert "1 samples that are not a finite count (NaN, Inf, negative)" in parsed.trimmed
    f = _figures(FIRST, hostile)
    # The seconds series is missing now, not NaN: no decode rate, and the report stays valid JSON.
    assert f["predicted_per_second"] is None and f["predicted_n"] == 600
    json.dumps(f, allow_nan=False)
    # Control: taking any float, a decode rate is reported and it is garbage (NaN, 0 or negative; -Inf
    # and -5 also fake a counter reset).
    monkeypatch.setattr(exposition, "finite", lambda v: True)
    rate = _figures(FIRST, hostile)["predicted_per_second"]
    assert rate is not None and not (math.isfinite(rate) and rate > 0)


def test_ten_thousand_series_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    flood = b"".join(
        b'llamacpp:spec_decode_num_accepted_tokens_per_pos{position="%d"} 1\n' % i for i in range(10_000)
    )
    parsed = exposition.parse(SECOND + flood, exposition.wanted_names("llama.cpp"))
    assert len(parsed.series) == exposition.MAX_SERIES
    positions = exposition.figures(exposition.snapshot(parsed, "llama.cpp"))["accepted_per_position"]
    assert len(positions) == exposition.MAX_POSITIONS
    assert parsed.trimmed == [
        f"series past the first {exposition.MAX_SERIES} of the counters read",
        f"draft positions past the first {exposition.MAX_POSITIONS}",
    ]
    # Control: without the bounds every one of them would be kept and sent.
    monkeypatch.setattr(exposition, "MAX_SERIES", 10**6)
    monkeypatch.setattr(exposition, "MAX_POSITIONS", 10**6)
    parsed = exposition.parse(SECOND + flood, exposition.wanted_names("llama.cpp"))
    assert len(exposition.snapshot(parsed, "llama.cpp")) > 1000


def test_garbage_lines_and_other_metrics_cost_nothing() -> None:
    body = (
        SECOND + b'llamacpp:tokens_predicted_total {{{ not a sample\nnot_ours{a="' + b"b" * 3000 + b'"} 5\n'
    )
    parsed = exposition.parse(body, exposition.wanted_names("llama.cpp"))
    assert parsed.trimmed == ["1 sample lines that are not exposition format"]


# --- Configuration and the agent's cycle ------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"engine": "ollama"}, "engine must be one of"),
        ({"metrics_url": "file:///etc/passwd"}, "metrics_url must be an http"),
        ({"source_model": "not a repo"}, "source_model must be a Hub repo id"),
        ({"quantization": "Q" * 100}, "quantization must be text of at most 64"),
        ({"colour": "red"}, "Unknown keys in baselines"),
    ],
)
def test_a_bad_baseline_config_names_what_is_wrong(item: dict[str, str], message: str) -> None:
    good = {"engine": "llama.cpp", "metrics_url": "http://127.0.0.1:8080/metrics", "source_model": SOURCE}
    with pytest.raises(agent_common.AgentError, match=message):
        agent_config.Config(token="t", node_url="", baselines=[good | item]).check()
    agent_config.Config(token="t", node_url="", baselines=[good]).check()  # control: the good one passes


def test_the_agent_cycle_spools_baseline_reports_for_meshdash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bodies = [FIRST, FIRST, SECOND]  # the first answers the agent's wait for its engine
    with fake_engine(bodies) as url:
        config = agent_config.Config(
            token="t",
            node_url="",  # only a baseline engine beside this agent
            spool_dir=str(tmp_path),
            baselines=[{"engine": "llama.cpp", "metrics_url": url, "source_model": SOURCE, "version": "b1"}],
        )
        config.check()
        a = agent.Agent(config, dry_run=True)
        assert a.wait_for_node() is True  # its engine answers
        assert a.cycle() is True and a.cycle() is True
    printed = capsys.readouterr().out
    sent = json.loads(printed)
    assert sent["would_send"] == "baselines"
    assert a.sender.endpoints["baselines"] == "/api/v1/baselines"
    (report,) = sent["body"]["reports"]
    assert report["figures"]["predicted_per_second"] == 60.0 and report["engine_version"] == "b1"


def test_a_baseline_only_agent_waits_quietly_for_its_engine(caplog: pytest.LogCaptureFixture) -> None:
    """As `make run` starts them: the agent before its engine listens. No 'does not answer' line."""
    import logging
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/metrics"
    config = agent_config.Config(
        token="t",
        node_url="",
        baselines=[{"engine": "llama.cpp", "metrics_url": url, "source_model": SOURCE}],
    )
    engine = _LateEngine(port)
    starter = threading.Timer(1.0, engine.start)
    starter.start()
    try:
        with caplog.at_level(logging.INFO, logger="meshdash.agent"):
            assert agent.Agent(config).wait_for_node() is True
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    finally:
        starter.join()
        engine.stop()
    # Control: an engine that never listens is one warning once the wait is over.
    config = agent_config.Config(
        token="t",
        node_url="",
        node_wait=0.5,
        baselines=[{"engine": "llama.cpp", "metrics_url": url, "source_model": SOURCE}],
    )
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="meshdash.agent"):
        assert agent.Agent(config).wait_for_node() is False
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning == f"{url} did not answer in 0.5 s; polling anyway"


class _LateEngine:
    def __init__(self, port: int) -> None:
        self.port = port
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), _Bodies)
        self.server.bodies = [FIRST]  # type: ignore[attr-defined]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


class _Bodies(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        bodies: list[bytes] = self.server.bodies  # type: ignore[attr-defined]
        body = bodies.pop(0) if len(bodies) > 1 else bodies[0]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class fake_engine:
    def __init__(self, bodies: bytes | list[bytes]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Bodies)
        self.server.bodies = list(bodies) if isinstance(bodies, list) else [bodies]  # type: ignore[attr-defined]

    def __enter__(self) -> str:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_documented_baseline_config_is_accepted_as_written() -> None:
    import re

    readme = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text(encoding="utf-8")
    block = re.search(r"```json\n(\{[^`]*\"baselines\"[^`]*)```", readme)
    assert block is not None, "docs/api.md's baseline config example moved"
    config = agent_config.Config(**json.loads(block.group(1)))
    config.check()
    assert [b.engine for b in config.baseline_list()] == ["llama.cpp", "vllm"]


def test_an_engine_that_keeps_its_version_to_itself_is_reported_with_it_named_not_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    garbage = SECOND + b"llamacpp:tokens_predicted_total{ not exposition\n"
    routes: dict[str, Reply | list[Reply]] = {"/metrics": [Reply(FIRST), Reply(garbage)]}  # /props: 404
    with FakeServer(routes) as engine:
        item = {"engine": "llama.cpp", "metrics_url": engine.url + "/metrics", "source_model": SOURCE}
        s = agent_baseline.BaselineScraper(agent_baseline.Baseline.of(item, 0))
        assert s.scrape() is None
        report = s.scrape()
    assert report is not None and engine.asked == ["/metrics", "/metrics", "/props"]
    assert report["engine_version"] == "" and report["not_reported"] == ["engine_version"]
    assert report["figures"]["predicted_n"] == 600  # the window is reported all the same
    assert report["trimmed"] == ["1 sample lines that are not exposition format"]
    assert f"{item['metrics_url']}: left out 1 sample lines" in caplog.text


def test_an_engine_that_is_down_or_refuses_is_a_warning_and_the_cycle_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    down = closed_port() + "/metrics"
    with FakeServer({"/metrics": Reply(b"", status=403)}) as refusing:
        config = agent_config.Config(
            token="t",
            node_url="",
            spool_dir=str(tmp_path),
            baselines=[
                {"engine": "vllm", "metrics_url": url, "source_model": SOURCE}
                for url in (down, refusing.url + "/metrics")
            ],
        )
        assert agent.Agent(config).cycle() is True  # nothing read, nothing waiting: nothing unsent
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings[0].startswith(f"The engine does not answer at {down}: ")
    assert warnings[1] == f"The engine answered 403 for {refusing.url}/metrics."
