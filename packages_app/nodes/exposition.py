"""Pure, standard library only: a baseline engine's Prometheus ``/metrics`` -> the figures of one window.

A plain llama.cpp server (``--metrics``) or a vLLM server publishes the decode and speculative-decoding
counters meshdash compares mesh-llm against (docs/node-report.md section 6): llama.cpp's
``llamacpp:tokens_predicted_total`` and ``llamacpp:tokens_predicted_seconds_total``, and since
ggml-org/llama.cpp PR #26389 ``llamacpp:spec_decode_num_{drafts,draft_tokens,accepted_tokens}`` and
``llamacpp:spec_decode_num_accepted_tokens_per_pos{position}``, in vLLM's schema
(``vllm:spec_decode_*_total``).

``parse`` reads the text exposition format within bounds (body, line length, labels per series, series
kept, non-finite or negative values), keeping only the counters above and naming in ``trimmed`` what it
left out. ``snapshot`` sums them into one flat dict per engine; ``deltas`` turns two snapshots into the
counts of the window between them (a counter that went down means the server restarted: the window is
then everything since the restart); ``figures`` derives what a report carries, and the derivations
meshdash shows (``acceptance_rate``, ``mean_acceptance_length``, ``acceptance_by_position``) are here
too, so the agent and the dashboard compute them one way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_BODY_BYTES = 4 * 1024 * 1024  # a vLLM /metrics with every histogram is a few hundred kB
MAX_LINE_CHARS = 4096
MAX_LABELS = 16
MAX_SERIES = 512  # series of the wanted counters kept; the rest of the exposition is skipped unread
MAX_POSITIONS = 32  # draft positions kept (a speculative window is at most a few dozen tokens)
MAX_COUNT = 10**15  # a counter past this is not a count a server made

ENGINES = ("llama.cpp", "vllm")
# The counters each engine publishes, by what meshdash calls them; a trailing ``_total`` is ignored
# (llama.cpp names some counters with it and some without; vLLM's client library always adds it).
COUNTERS: Mapping[str, Mapping[str, str]] = {
    "llama.cpp": {
        "llamacpp:tokens_predicted": "predicted_n",
        "llamacpp:tokens_predicted_seconds": "predicted_seconds",
        "llamacpp:spec_decode_num_drafts": "drafts",
        "llamacpp:spec_decode_num_draft_tokens": "draft_tokens",
        "llamacpp:spec_decode_num_accepted_tokens": "accepted_tokens",
        "llamacpp:spec_decode_num_accepted_tokens_per_pos": "accepted_at",
    },
    "vllm": {
        "vllm:generation_tokens": "predicted_n",
        "vllm:request_decode_time_seconds_sum": "predicted_seconds",
        "vllm:spec_decode_num_drafts": "drafts",
        "vllm:spec_decode_num_draft_tokens": "draft_tokens",
        "vllm:spec_decode_num_accepted_tokens": "accepted_tokens",
        "vllm:spec_decode_num_accepted_tokens_per_pos": "accepted_at",
    },
}
SCALARS = ("predicted_n", "predicted_seconds", "drafts", "draft_tokens", "accepted_tokens")
# Label names that say which model a series is about (vLLM: model_name); another model's series is skipped.
MODEL_LABELS = ("model_name", "model")

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+\S+)?")
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')


class ExpositionError(ValueError):
    """An exposition that cannot be read at all (too large): one sentence."""


@dataclass
class Series:
    name: str  # without a trailing _total
    labels: dict[str, str]
    value: float


@dataclass
class Parsed:
    series: list[Series] = field(default_factory=list)
    trimmed: list[str] = field(default_factory=list)


def _base_name(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


def finite(value: float) -> bool:
    """A sample value a counter can have: finite, 0 or more, below MAX_COUNT (NaN and +Inf are legal
    exposition, and a hostile server sends them)."""
    return math.isfinite(value) and 0 <= value <= MAX_COUNT


def parse(body: bytes, wanted: frozenset[str]) -> Parsed:
    """The samples of ``wanted`` metric names (without ``_total``), bounded; comments and other names are
    skipped without parsing their labels."""
    if len(body) > MAX_BODY_BYTES:
        raise ExpositionError(f"the exposition is over {MAX_BODY_BYTES // (1024 * 1024)} MiB")
    parsed = Parsed()
    long_lines = many_labels = bad_values = unreadable = 0
    for line in body.decode("utf-8", errors="replace").split("\n"):
        if not line or line.startswith("#"):
            continue
        if len(line) > MAX_LINE_CHARS:
            long_lines += 1
            continue
        name = _NAME.match(line)
        if name is None or _base_name(name[0]) not in wanted:
            continue
        match = _SAMPLE.fullmatch(line.strip())
        if match is None:
            unreadable += 1
            continue
        labels = _labels(match[2] or "")
        if labels is None:
            many_labels += 1
            continue
        try:
            value = float(match[3])
        except ValueError:
            unreadable += 1
            continue
        if not finite(value):
            bad_values += 1
            continue
        if len(parsed.series) >= MAX_SERIES:
            parsed.trimmed.append(f"series past the first {MAX_SERIES} of the counters read")
            break
        parsed.series.append(Series(_base_name(match[1]), labels, value))
    for count, what in (
        (long_lines, f"lines over {MAX_LINE_CHARS} characters"),
        (many_labels, f"series with more than {MAX_LABELS} labels"),
        (bad_values, "samples that are not a finite count (NaN, Inf, negative)"),
        (unreadable, "sample lines that are not exposition format"),
    ):
        if count:
            parsed.trimmed.append(f"{count} {what}")
    return parsed


def _labels(text: str) -> dict[str, str] | None:
    """``a="1",b="x"`` -> a dict; None past MAX_LABELS (counted before any is kept)."""
    if text.count('="') > MAX_LABELS:  # every label has one: refused before the regex walks a huge set
        return None
    labels: dict[str, str] = {}
    for match in _LABEL.finditer(text):
        labels[match[1]] = re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], match[2])
        if len(labels) > MAX_LABELS:
            return None
    return labels


def snapshot(parsed: Parsed, engine: str, model: str = "") -> dict[str, float]:
    """The engine's counters summed over series (``accepted_at:N`` per draft position); a series labelled
    with another model than ``model`` is left out."""
    names = COUNTERS[engine]
    out: dict[str, float] = {}
    positions: set[int] = set()
    for series in parsed.series:
        key = names.get(series.name)
        if key is None:
            continue
        named = next((series.labels[k] for k in MODEL_LABELS if k in series.labels), None)
        if model and named is not None and named != model:
            continue
        if key == "accepted_at":
            position = series.labels.get("position", "")
            if not position.isdigit() or len(position) > 3:
                continue
            if int(position) not in positions and len(positions) >= MAX_POSITIONS:
                too_many = f"draft positions past the first {MAX_POSITIONS}"
                if too_many not in parsed.trimmed:
                    parsed.trimmed.append(too_many)
                continue
            positions.add(int(position))
            key = f"accepted_at:{int(position)}"
        out[key] = out.get(key, 0.0) + series.value
    return out


def wanted_names(engine: str) -> frozenset[str]:
    return frozenset(COUNTERS[engine])


def deltas(before: Mapping[str, float], now: Mapping[str, float]) -> tuple[dict[str, float], bool]:
    """The counts of the window between two snapshots, and whether the server restarted in it.

    A counter lower than before means a restart (every counter of a process restarts together): the
    window's counts are then the new values, everything since the restart (Prometheus's ``increase``
    does the same per series). A series absent now is absent from the window; one that appeared since
    (llama.cpp makes a draft position's series when first used) counts from 0.
    """
    reset = any(key in now and now[key] < value for key, value in before.items())
    if reset:
        return dict(now), True
    return {key: value - before.get(key, 0.0) for key, value in now.items()}, False


def figures(window: Mapping[str, float]) -> dict[str, Any]:
    """A window's counts as a baseline report carries them: ``predicted_n``, ``predicted_seconds``,
    ``predicted_per_second`` (the decode rate, tokens over the seconds spent decoding them), ``drafts``,
    ``draft_tokens``, ``accepted_tokens`` and ``accepted_per_position`` (index = draft position), each
    None when the engine does not publish its series (named in ``not_reported``)."""
    out: dict[str, Any] = {}
    for key in SCALARS:
        value = window.get(key)
        out[key] = None if value is None else (round(value, 6) if key == "predicted_seconds" else int(value))
    seconds, tokens = out["predicted_seconds"], out["predicted_n"]
    out["predicted_per_second"] = round(tokens / seconds, 4) if tokens is not None and seconds else None
    at = {int(k.split(":", 1)[1]): int(v) for k, v in window.items() if k.startswith("accepted_at:")}
    out["accepted_per_position"] = [at.get(i, 0) for i in range(max(at) + 1)] if at else None
    out["not_reported"] = [k for k in (*SCALARS, "accepted_per_position") if out[k] is None]
    return out


# --- The derivations meshdash shows (vLLM's, docs/node-report.md section 6) ------------------------


def acceptance_rate(accepted: float | None, draft_tokens: float | None) -> float | None:
    """Accepted draft tokens over drafted tokens."""
    if accepted is None or not draft_tokens or accepted > draft_tokens:
        return None
    return accepted / draft_tokens


def mean_acceptance_length(accepted: float | None, drafts: float | None) -> float | None:
    """1 + accepted tokens per draft: the tokens one verification step yields (the target model's own
    token plus the accepted drafts). 1.0 means speculation saved no forward pass."""
    if accepted is None or not drafts:
        return None
    return 1 + accepted / drafts


def acceptance_by_position(per_position: Sequence[float] | None, drafts: float | None) -> list[float] | None:
    """The share of drafts whose token at each position was accepted (position 0 first)."""
    if not per_position or not drafts:
        return None
    return [min(1.0, accepted / drafts) for accepted in per_position]
