"""What reading a baseline engine's /metrics costs meshdash-agent, honest and hostile (issue 46).

Parses, interleaved, --rounds times each (packages_app/nodes/exposition.py: parse + snapshot):
  llama.cpp: a llama-server exposition with the spec-decode counters (about 40 lines);
  vllm:      a vLLM exposition, 22 histograms with their buckets for 2 models (1,076 lines, 111 kB);
  hostile:   4 MiB (the body cap) of wanted-counter lines, each with 17 labels (one past the bound);
  hostile, unguarded: the same with the label, line and series bounds raised (what the bounds save).
It prints each case's median time and its ratio to the vLLM case, measured side by side in one run.

    .venv/bin/python bench/bench_exposition.py --rounds 15
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from packages_app.devnode.baseline import Counters, metrics_text  # noqa: E402
from packages_app.nodes import exposition  # noqa: E402

BUCKETS = ("0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0",
           "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "+Inf")  # fmt: skip
HISTOGRAMS = (
    "time_to_first_token_seconds",
    "time_per_output_token_seconds",
    "e2e_request_latency_seconds",
    "request_queue_time_seconds",
    "request_inference_time_seconds",
    "request_prefill_time_seconds",
    "request_decode_time_seconds",
    "request_prompt_tokens",
    "request_generation_tokens",
    "iteration_tokens_total",
    "request_params_n",
    "request_params_max_tokens",
    "inter_token_latency_seconds",
    "request_time_per_output_token_seconds",
    "request_max_num_generation_tokens",
    "cache_hit_rate_histogram",
    "spec_decode_draft_acceptance_rate",
    "kv_block_lifetime_seconds",
    "kv_block_idle_before_evict_seconds",
    "kv_block_reuse_gap_seconds",
    "request_success_latency_seconds",
    "num_preemptions_histogram",
)


COUNTERS = (
    "generation_tokens",
    "prompt_tokens",
    "spec_decode_num_drafts",
    "spec_decode_num_draft_tokens",
    "spec_decode_num_accepted_tokens",
    "num_preemptions",
    "request_success",
)


def vllm_body() -> bytes:
    lines = []
    for model in ("Qwen/Qwen3.5-35B-A3B", "meta-llama/Llama-3.2-1B-Instruct"):
        labels = f'engine="0",model_name="{model}"'
        for name in HISTOGRAMS:
            lines.append(f"# HELP vllm:{name} Histogram of {name}.\n# TYPE vllm:{name} histogram")
            lines += [f'vllm:{name}_bucket{{{labels},le="{le}"}} {i * 37}.0' for i, le in enumerate(BUCKETS)]
            lines += [f"vllm:{name}_sum{{{labels}}} 1234.5", f"vllm:{name}_count{{{labels}}} 740.0"]
        for name in COUNTERS:
            lines.append(f"vllm:{name}_total{{{labels}}} 98765.0")
        lines += [
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {900 - i * 200}.0'
            for i in range(3)
        ]
    return ("\n".join(lines) + "\n").encode()


def hostile_body() -> bytes:
    labels = ",".join(f'l{i}="{i}"' for i in range(17))
    line = f"llamacpp:tokens_predicted_total{{{labels}}} 1000000\n".encode()
    return line * (exposition.MAX_BODY_BYTES // len(line))


def read(body: bytes, engine: str) -> int:
    parsed = exposition.parse(body, exposition.wanted_names(engine))
    return len(exposition.snapshot(parsed, engine)) + len(parsed.series)


def unguarded(body: bytes) -> Callable[[], int]:
    def run() -> int:
        saved = (exposition.MAX_LABELS, exposition.MAX_LINE_CHARS, exposition.MAX_SERIES)
        exposition.MAX_LABELS = exposition.MAX_LINE_CHARS = exposition.MAX_SERIES = 10**9
        try:
            return read(body, "llama.cpp")
        finally:
            exposition.MAX_LABELS, exposition.MAX_LINE_CHARS, exposition.MAX_SERIES = saved

    return run


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--rounds", type=int, default=15)
    rounds = cli.parse_args().rounds
    llama = metrics_text(Counters(predicted=10**6, predicted_seconds=2.5e5, drafts=4000), True).encode()
    vllm, hostile = vllm_body(), hostile_body()
    cases: dict[str, tuple[bytes, Callable[[], int]]] = {
        "llama.cpp": (llama, lambda: read(llama, "llama.cpp")),
        "vllm": (vllm, lambda: read(vllm, "vllm")),
        "hostile": (hostile, lambda: read(hostile, "llama.cpp")),
        "hostile, unguarded": (hostile, unguarded(hostile)),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    kept: dict[str, int] = {}
    for _ in range(rounds):  # interleaved: each round runs every case once
        for name, (_, run) in cases.items():
            began = time.perf_counter()
            kept[name] = run()
            times[name].append(time.perf_counter() - began)
    base = statistics.median(times["vllm"])
    print(f"{'case':<20} {'body':>10} {'lines':>8} {'median ms':>10} {'x vllm':>8} {'kept':>8}")
    for name, (body, _) in cases.items():
        median, lines = statistics.median(times[name]), body.count(b"\n")
        print(
            f"{name:<20} {len(body):>10,} {lines:>8,} {median * 1000:>10.1f} "
            f"{median / base:>8.2f} {kept[name]:>8,}"
        )


if __name__ == "__main__":
    main()
