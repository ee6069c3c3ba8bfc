"""A mergeable quantile sketch: a fixed log-bucket histogram (the DDSketch mapping), pure Python.

A value x > 0 falls in bin ``ceil(log_gamma(x))`` with ``gamma = (1 + ALPHA) / (1 - ALPHA)``; a bin
stands for ``2 * gamma**i / (gamma + 1)``, which is within ALPHA (1 %) relative of every value the
bin holds. Zero (and anything below MIN_POSITIVE) has a bin of its own that stands for 0. So:

- merging is adding counts bin by bin: exact, order-free, and the same whether a rollup was built
  report by report, batch by batch or rebuilt from raw reports;
- a quantile is read as ``percentile_cont`` reads it (interpolating between the two order
  statistics around the rank), each order statistic within ALPHA relative, hence the quantile too
  (values are never negative);
- a stored sketch costs one JSON object ``{"bin": count}``; decode rates of one rollup cell span a
  few tens of bins, and a report adds 1 to one bin.

No Django, no I/O: rollups/ stores what this module computes.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

ALPHA = 0.01
GAMMA = (1 + ALPHA) / (1 - ALPHA)
LOG_GAMMA = math.log(GAMMA)
MIN_POSITIVE = 1e-9
ZERO_BIN = -(10**6)  # below the bin of MIN_POSITIVE (about -1036): stands for 0

Sketch = dict[int, int]


def bin_of(value: float) -> int:
    """The bin a non-negative value falls in."""
    if value < MIN_POSITIVE:
        return ZERO_BIN
    return math.ceil(math.log(value) / LOG_GAMMA)


def value_of(index: int) -> float:
    """The value a bin stands for: within ALPHA relative of every value in it."""
    if index == ZERO_BIN:
        return 0.0
    return 2 * GAMMA**index / (GAMMA + 1)


def of_values(values: Iterable[float]) -> Sketch:
    sketch: Sketch = {}
    for value in values:
        index = bin_of(value)
        sketch[index] = sketch.get(index, 0) + 1
    return sketch


def merge_into(into: Sketch, other: Mapping[int, int]) -> Sketch:
    for index, count in other.items():
        into[index] = into.get(index, 0) + count
    return into


def merged(sketches: Iterable[Mapping[int, int]]) -> Sketch:
    result: Sketch = {}
    for sketch in sketches:
        merge_into(result, sketch)
    return result


def quantile(sketch: Mapping[int, int], q: float) -> float | None:
    """The q-quantile as percentile_cont computes it (None for an empty sketch), within ALPHA."""
    return quantiles(sketch, (q,))[0]


def quantiles(sketch: Mapping[int, int], qs: Sequence[float]) -> list[float | None]:
    """Each q-quantile as ``quantile`` computes it, from one sort of the bins (a chart's median and
    quartiles of hundreds of points each)."""
    indexes = sorted(sketch)
    return ranked_quantiles(indexes, list(itertools.accumulate(sketch[index] for index in indexes)), qs)


def ranked_quantiles(indexes: Sequence[int], seen: Sequence[int], qs: Sequence[float]) -> list[float | None]:
    """``quantiles`` of a sketch given as its bins in index order and their running counts: a caller
    that sorts stored bins itself (``quartiles``, which rollups.quartiles calls for every timeline point
    it keeps) builds no dict."""
    for q in qs:
        if not 0 <= q <= 1:
            raise ValueError(f"q must be between 0 and 1, not {q}")
    total = seen[-1] if seen else 0
    if total <= 0:
        return [None] * len(qs)
    found: list[float | None] = []
    for q in qs:
        rank = (total - 1) * q
        low, high = math.floor(rank), math.ceil(rank)
        low_value = value_of(indexes[bisect.bisect_right(seen, low)])
        high_value = low_value if high == low else value_of(indexes[bisect.bisect_right(seen, high)])
        found.append(low_value + (high_value - low_value) * (rank - low))
    return found


QUARTILES = (0.25, 0.5, 0.75)


def quartiles(bins: Mapping[str, int] | Mapping[int, int]) -> tuple[float | None, float | None, float | None]:
    """The p25, median and p75 of a sketch, its bins under their text keys as stored (JSON) or under their
    indexes; none when it is empty. What models.RevisionRollup keeps for its timeline point
    (rollups.quartiles)."""
    if not bins:
        return None, None, None
    indexes, counts = zip(*sorted(zip(map(int, bins), bins.values(), strict=True)), strict=True)
    p25, median, p75 = ranked_quantiles(indexes, list(itertools.accumulate(counts)), QUARTILES)
    return p25, median, p75


@dataclass(frozen=True)
class _Ranked:
    """A sketch's bins in order with their running counts: the value at any rank by one bisection."""

    indexes: list[int]
    seen: list[int]

    @classmethod
    def of(cls, sketch: Mapping[int, int]) -> _Ranked:
        indexes = sorted(sketch)
        return cls(indexes, list(itertools.accumulate(sketch[index] for index in indexes)))

    def value_at(self, rank: int) -> float:
        """The value at a 0-based rank: the first bin whose running count passes it."""
        return value_of(self.indexes[bisect.bisect_right(self.seen, rank)])


def median(sketch: Mapping[int, int]) -> float | None:
    return quantile(sketch, 0.5)


def to_json(sketch: Mapping[int, int]) -> dict[str, int]:
    return {str(index): count for index, count in sketch.items() if count}


def from_json(stored: Mapping[str, int] | None) -> Sketch:
    return {int(index): int(count) for index, count in (stored or {}).items()}


# --- spread and the uncertainty of a median -------------------------------------------------------

SUMMARY_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def summary(sketch: Mapping[int, int]) -> dict[str, float] | None:
    """p5, p25, p50, p75 and p95 (``{"p5": ..., ...}``), each within ALPHA; None for an empty sketch."""
    if sum(sketch.values()) <= 0:
        return None
    values = quantiles(sketch, SUMMARY_QUANTILES)
    return {f"p{round(q * 100)}": value or 0.0 for q, value in zip(SUMMARY_QUANTILES, values, strict=True)}


def count(sketch: Mapping[int, int]) -> int:
    return sum(sketch.values())


def order_statistic(sketch: Mapping[int, int], rank: int) -> float:
    """The value at 0-based ``rank`` in sorted order, within ALPHA."""
    if not 0 <= rank < count(sketch):
        raise ValueError(f"rank {rank} is outside a sketch of {count(sketch)} values")
    return _Ranked.of(sketch).value_at(rank)


# Above this many values the binomial tail is read from the normal approximation (error well under one
# rank at these sizes) instead of summing exact binomial coefficients.
EXACT_BINOMIAL_UP_TO = 2000


def median_ranks(n: int, confidence: float) -> tuple[int, int] | None:
    """0-based ranks (low, high) whose values bracket the median of the population with at least
    ``confidence``, whatever its distribution (order statistics: the count of values below the median
    is Binomial(n, 1/2)); None when n values are too few for that confidence."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, not {confidence}")
    tail = (1 - confidence) / 2
    if n > EXACT_BINOMIAL_UP_TO:
        z = NormalDist().inv_cdf(1 - tail)
        j = math.floor(n / 2 - z * math.sqrt(n) / 2)
    else:
        # The largest j with P(B <= j - 1) <= tail: then [x_(j), x_(n+1-j)] (1-based) covers the median.
        # ``term`` is C(n, j), each from the one before (exact: C(n, j) (n - j) is divisible by j + 1):
        # a fresh math.comb per step made n = 2,000 take about 60 ms, and the compare page reads four.
        j, below, term, total = 0, 0, 1, 2**n
        while (below + term) / total <= tail:
            below += term
            term = term * (n - j) // (j + 1)
            j += 1
    if j < 1:
        return None
    return j - 1, n - j


@dataclass(frozen=True)
class Ratio:
    """``after`` median / ``before`` median, and an interval that holds the population ratio with at
    least ``confidence`` (None when either side has too few values for one)."""

    ratio: float
    low: float | None
    high: float | None
    confidence: float


def ratio_of_medians(
    before: Mapping[int, int], after: Mapping[int, int], confidence: float = 0.95
) -> Ratio | None:
    """The ratio of two sketches' medians with a conservative, distribution-free interval.

    Each median gets an order-statistic interval at ``(1 + confidence) / 2`` (so both hold together
    with at least ``confidence``, Bonferroni, whether or not the samples are independent); the ratio's
    interval is low_after / high_before .. high_after / low_before, widened by the sketch's own
    ALPHA on each side. None when either sketch is empty or the before median is 0.
    """
    old, new = median(before), median(after)
    if old is None or new is None or old <= 0:
        return None
    each = (1 + confidence) / 2
    old_ranks, new_ranks = median_ranks(count(before), each), median_ranks(count(after), each)
    low = high = None
    if old_ranks is not None and new_ranks is not None:
        old_low, old_high = (order_statistic(before, r) for r in old_ranks)
        new_low, new_high = (order_statistic(after, r) for r in new_ranks)
        if old_low > 0:
            slack = (1 + ALPHA) / (1 - ALPHA)
            low, high = new_low / old_high / slack, new_high / old_low * slack
    return Ratio(new / old, low, high, confidence)
