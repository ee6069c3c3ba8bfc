"""The one table of report metrics (issue 21, item 6): every number a node report carries in ``timings``,
and what the site does with it. Pure: no Django, no I/O.

Each surface reads this table instead of keeping its own list:

- the report schema: the typed ``timings`` fields (nodes/report_schema.build_timings: ``type``, and
  ``label``, ``unit`` and ``bound`` in each field's OpenAPI description) and the plausibility bounds
  (nodes/report_schema.PLAUSIBLE);
- the Report columns ingest fills (reports.TIMING_COLUMNS: ``stored``);
- the rollups, both the Python path and the SQL rebuild (rollups.cells.METRICS, ``rollup``: count, sum, min,
  max and a quantile sketch per cell);
- the recent reports table and the reports CSV (``shown``: throughput.recent_fields,
  fleet_pages.report_columns).

Every derived list is a function that takes a table (the real one by default), so a test can hand it
one more row and see where it lands.

A new charted metric is a row here with ``stored`` and ``rollup``, the Report and Rollup fields, and
their migration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

# Plausibility bounds: a value outside them is stored in the body and flagged, never refused.
MAX_COUNT = 10**12  # fits a 64-bit column with room; no node serves a trillion tokens per request
MAX_MS = 7 * 24 * 3600 * 1000.0  # a request longer than a week is a broken clock, not a measurement
MAX_US = MAX_MS * 1000.0
# tokens/s; far above any decode, so a unit mistake stands out. prompt_per_second divides cached
# tokens by the uncached prefill time, so a prefix-cache hit legitimately exceeds it (it is flagged).
MAX_RATE = 1_000_000.0

COUNT = (0.0, float(MAX_COUNT))
MS = (0.0, MAX_MS)
US = (0.0, MAX_US)
RATE = (0.0, MAX_RATE)
RATIO = (0.0, 1.0)


@dataclass(frozen=True)
class ReportMetric:
    """One metric. ``name`` is its key in the report's ``timings`` and, when ``stored``, its Report column.

    ``aggregation``: ``sketch`` (rollups keep count, sum, min, max and a quantile sketch under the
    ``rollup`` prefix), ``sum`` (rollups add it up into the Rollup counter ``total``), ``none`` (kept in
    the body only). When several ``sum`` rows share a ``total``, a report adds the first of them it has,
    in table order (mesh-llm sends ``speculative_*``, llama-server style nodes ``draft_n*``). ``derived``
    metrics are not sent by nodes: the rollups work them out per report as the ``ratio`` of two totals
    (``acceptance`` = accepted / proposed).
    """

    name: str
    type: Literal["int", "float"]
    unit: str
    label: str
    aggregation: Literal["sketch", "sum", "none"] = "none"
    bound: tuple[float, float] | None = None
    stored: bool = False
    shown: bool = False  # a column of the recent reports table and the reports CSV
    rollup: str = ""  # the Rollup column prefix of a sketched metric
    derived: bool = False
    total: str = ""  # the Rollup counter a ``sum`` metric adds to
    ratio: tuple[str, str] = ("", "")  # a derived metric: (numerator, denominator) totals


METRICS: tuple[ReportMetric, ...] = (
    ReportMetric(
        "predicted_per_second", "float", "tokens/s", "Decode tokens/s", "sketch", RATE, True, True, "tps"
    ),
    ReportMetric(
        "prompt_per_second", "float", "tokens/s", "Prompt tokens/s", "sketch", RATE, True, True, "prompt"
    ),
    ReportMetric("predicted_n", "int", "tokens", "Tokens generated", "none", COUNT, True, True),
    ReportMetric(
        "speculative_proposed_n", "int", "tokens", "Proposed tokens", "sum", COUNT, True, total="proposed"
    ),
    ReportMetric(
        "speculative_accepted_n", "int", "tokens", "Accepted tokens", "sum", COUNT, True, total="accepted"
    ),
    ReportMetric(
        "speculative_windows", "int", "windows", "Draft windows", "sum", COUNT, True, total="windows"
    ),
    ReportMetric(
        "draft_n", "int", "tokens", "Drafted tokens (llama-server)", "sum", COUNT, True, total="proposed"
    ),
    ReportMetric(
        "draft_n_accepted",
        "int",
        "tokens",
        "Accepted drafts (llama-server)",
        "sum",
        COUNT,
        True,
        total="accepted",
    ),
    ReportMetric("prompt_n", "int", "tokens", "Prompt tokens", bound=COUNT),
    ReportMetric("prompt_ms", "float", "ms", "Prompt time", bound=MS),
    ReportMetric("predicted_ms", "float", "ms", "Decode time", bound=MS),
    ReportMetric("speculative_rejected_n", "int", "tokens", "Rejected tokens", bound=COUNT),
    ReportMetric("speculative_accept_rate", "float", "ratio", "Acceptance rate (node)", bound=RATIO),
    ReportMetric("native_mtp_rejected", "int", "tokens", "MTP rejected", bound=COUNT),
    ReportMetric("native_mtp_verifications", "int", "count", "MTP verifications", bound=COUNT),
    ReportMetric(
        "native_mtp_verify_window_verifications", "int", "count", "MTP window verifications", bound=COUNT
    ),
    ReportMetric("native_mtp_proposal_compute_us", "float", "µs", "MTP proposal compute", bound=US),
    ReportMetric("native_mtp_verification_compute_us", "float", "µs", "MTP verification compute", bound=US),
    ReportMetric("verify_window_depth", "int", "tokens", "Verify window depth", bound=COUNT),
    ReportMetric("verify_window_target_depth", "int", "tokens", "Verify window target depth", bound=COUNT),
    ReportMetric("verify_window_opened", "int", "count", "Verify windows opened", bound=COUNT),
    ReportMetric("verify_window_max_in_flight", "int", "count", "Verify windows in flight", bound=COUNT),
    ReportMetric(
        "acceptance",
        "float",
        "ratio",
        "Acceptance rate",
        "sketch",
        RATIO,
        rollup="acceptance",
        derived=True,
        ratio=("accepted", "proposed"),
    ),
)

BY_NAME = {metric.name: metric for metric in METRICS}


def _table(metrics: Sequence[ReportMetric] | None) -> Sequence[ReportMetric]:
    # Read at call time, so a test can hand a table with one more row to every derived list.
    return METRICS if metrics is None else metrics


def plausible_bounds(metrics: Sequence[ReportMetric] | None = None) -> dict[str, tuple[float, float]]:
    """What a node may send, with its plausibility bounds (the schema's PLAUSIBLE)."""
    return {m.name: m.bound for m in _table(metrics) if not m.derived and m.bound is not None}


def stored_columns(metrics: Sequence[ReportMetric] | None = None) -> tuple[str, ...]:
    """The Report columns ingest fills from ``timings``."""
    return tuple(m.name for m in _table(metrics) if m.stored)


def shown_columns(metrics: Sequence[ReportMetric] | None = None) -> tuple[str, ...]:
    """The metric columns of the recent reports table and the reports CSV."""
    return tuple(m.name for m in _table(metrics) if m.shown)


def sketched(metrics: Sequence[ReportMetric] | None = None) -> tuple[ReportMetric, ...]:
    """The metrics the rollups keep count, sum, min, max and a sketch of, in their column order."""
    return tuple(m for m in _table(metrics) if m.aggregation == "sketch")


def summed(metrics: Sequence[ReportMetric] | None = None) -> dict[str, tuple[str, ...]]:
    """Each Rollup counter the ``sum`` metrics add up, with its source columns in order of preference."""
    out: dict[str, tuple[str, ...]] = {}
    for m in _table(metrics):
        if m.aggregation == "sum":
            out[m.total] = (*out.get(m.total, ()), m.name)
    return out


def agreeing_pairs(metrics: Sequence[ReportMetric] | None = None) -> tuple[tuple[str, str], ...]:
    """(numerator, denominator) source columns that a node derives one from the other, for each
    derived ratio: the n-th source of the numerator total with the n-th of the denominator's, e.g.
    (speculative_accepted_n, speculative_proposed_n). A numerator above its denominator is flagged."""
    sums = summed(metrics)
    return tuple(
        pair
        for m in _table(metrics)
        if m.derived
        for pair in zip(sums[m.ratio[0]], sums[m.ratio[1]], strict=True)
    )


def axis_title(name: str, aggregate: str = "median") -> str:
    """A chart axis title from the table: ``Decode tokens/s (median)``."""
    metric = BY_NAME[name]
    return f"{metric.label} ({aggregate})"
