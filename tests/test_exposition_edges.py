"""nodes/exposition (pure): the edges of a baseline engine's /metrics text the shaped tests do not reach:
a value that is no number, labels spaced so a quick count misses them, another engine's series, and
acceptance figures that contradict each other."""

from __future__ import annotations

from packages_app.nodes import exposition
from packages_app.nodes.exposition import COUNTERS, MAX_LABELS, acceptance_rate, parse, snapshot

LLAMA = frozenset(COUNTERS["llama.cpp"])
BOTH = LLAMA | frozenset(COUNTERS["vllm"])


def test_a_sample_whose_value_is_no_number_is_counted_as_unreadable() -> None:
    parsed = parse(b"llamacpp:tokens_predicted_total abc\nllamacpp:tokens_predicted_total 12\n", LLAMA)
    assert [s.value for s in parsed.series] == [12.0]
    assert parsed.trimmed == ["1 sample lines that are not exposition format"]


def test_labels_spaced_around_their_equals_sign_are_still_bounded() -> None:
    # 'k = "v"' escapes the quick count of '="' before the regex; the count while reading still stops it.
    labels = ",".join(f'l{i} = "v"' for i in range(MAX_LABELS + 1))
    parsed = parse(f"llamacpp:tokens_predicted_total{{{labels}}} 5\n".encode(), LLAMA)
    assert parsed.series == []
    assert parsed.trimmed == [f"1 series with more than {MAX_LABELS} labels"]


def test_another_engines_series_are_left_out_of_a_snapshot() -> None:
    body = b"vllm:generation_tokens_total 900\nllamacpp:tokens_predicted_total 40\n"
    assert snapshot(parse(body, BOTH), "llama.cpp")["predicted_n"] == 40


def test_acceptance_that_contradicts_its_drafts_is_no_rate() -> None:
    assert acceptance_rate(30, 40) == 0.75
    assert acceptance_rate(50, 40) is None  # more accepted than drafted: not a rate
    assert acceptance_rate(None, 40) is None and acceptance_rate(3, 0) is None
    assert exposition.mean_acceptance_length(30, 20) == 2.5
