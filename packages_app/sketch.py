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

No Django, no I/O: rollups.py stores what this module computes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

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
    if not 0 <= q <= 1:
        raise ValueError(f"q must be between 0 and 1, not {q}")
    total = sum(sketch.values())
    if total <= 0:
        return None
    rank = (total - 1) * q
    low, high = math.floor(rank), math.ceil(rank)
    low_value, high_value = _order_statistics(sketch, low, high)
    return low_value + (high_value - low_value) * (rank - low)


def median(sketch: Mapping[int, int]) -> float | None:
    return quantile(sketch, 0.5)


def _order_statistics(sketch: Mapping[int, int], low: int, high: int) -> tuple[float, float]:
    """The values at 0-based ranks low <= high, in one walk over the sorted bins."""
    seen, low_value = 0, None
    for index in sorted(sketch):
        seen += sketch[index]
        if low_value is None and seen > low:
            low_value = value_of(index)
        if seen > high:
            return low_value if low_value is not None else value_of(index), value_of(index)
    raise ValueError("rank beyond the sketch's count")  # unreachable: high < total


def to_json(sketch: Mapping[int, int]) -> dict[str, int]:
    return {str(index): count for index, count in sketch.items() if count}


def from_json(stored: Mapping[str, int] | None) -> Sketch:
    return {int(index): int(count) for index, count in (stored or {}).items()}
