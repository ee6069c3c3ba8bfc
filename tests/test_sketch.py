"""The quantile sketch behind the rollups' medians: mergeable, and within 1 % of the exact median."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from packages_app import sketch


def test_the_median_of_skewed_data_is_within_one_percent_of_the_exact_median() -> None:
    rng = random.Random(7)
    for _ in range(50):
        values = [rng.lognormvariate(1.5, 0.8) for _ in range(rng.randint(1, 400))]
        estimate = sketch.median(sketch.of_values(values))
        assert estimate == pytest.approx(statistics.median(values), rel=sketch.ALPHA)


def test_merging_sketches_gives_the_sketch_of_all_the_values() -> None:
    rng = random.Random(3)
    parts = [[rng.gauss(9.5, 0.6) for _ in range(rng.randint(0, 50))] for _ in range(20)]
    merged = sketch.merged(sketch.of_values(part) for part in parts)
    assert merged == sketch.of_values(value for part in parts for value in part)


def test_zero_is_a_value_of_its_own_and_the_median_of_nothing_is_none() -> None:
    assert sketch.median(sketch.of_values([0.0, 0.0, 0.5])) == 0.0
    assert sketch.median({}) is None


def test_a_sketch_survives_its_json_form() -> None:
    bins = sketch.of_values([0.0, 0.25, 3.17, 3.2, 1e6])
    assert sketch.from_json(sketch.to_json(bins)) == bins


def test_a_quantile_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="q must be between 0 and 1"):
        sketch.quantile({1: 1}, 1.5)


# --- spread and the ratio of medians ---------------------------------------------------------------


def test_the_summary_is_the_five_quantiles_of_the_values() -> None:
    values = [float(v) for v in range(1, 102)]  # 1..101: p5 = 6, p25 = 26, p50 = 51, p75 = 76, p95 = 96
    summary = sketch.summary(sketch.of_values(values))
    assert summary is not None
    assert list(summary) == ["p5", "p25", "p50", "p75", "p95"]
    for name, exact in zip(summary, (6, 26, 51, 76, 96), strict=True):
        assert summary[name] == pytest.approx(exact, rel=sketch.ALPHA)
    assert sketch.summary({}) is None


def test_an_order_statistic_is_the_value_at_that_rank_and_a_rank_outside_is_refused() -> None:
    bins = sketch.of_values([5.0, 1.0, 3.0])
    assert [sketch.order_statistic(bins, r) for r in range(3)] == pytest.approx([1, 3, 5], rel=sketch.ALPHA)
    with pytest.raises(ValueError, match="rank 3 is outside a sketch of 3 values"):
        sketch.order_statistic(bins, 3)


def test_the_median_ranks_are_the_textbook_order_statistics() -> None:
    # n = 10 at 95 %: x(2)..x(9), 1-based (P(B <= 1) = 11/1024 <= 2.5 % < P(B <= 2) = 56/1024).
    assert sketch.median_ranks(10, 0.95) == (1, 8)
    # n = 6: even the extremes cover the median only with 1 - 2/64 = 96.9 %, so 97.5 % has no interval.
    assert sketch.median_ranks(6, 0.95) == (0, 5)
    assert sketch.median_ranks(6, 0.975) is None
    assert sketch.median_ranks(0, 0.95) is None
    with pytest.raises(ValueError, match="confidence must be between 0 and 1"):
        sketch.median_ranks(10, 1.0)


def textbook_ranks(n: int, confidence: float) -> tuple[int, int] | None:
    """The median's order-statistic interval straight from the binomial definition, each C(n, k) anew."""
    tail, below, j = (1 - confidence) / 2, 0, 0
    while (below + math.comb(n, j)) / 2**n <= tail:
        below += math.comb(n, j)
        j += 1
    return (j - 1, n - j) if j >= 1 else None


@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.975, 0.99])
def test_the_exact_median_ranks_match_the_binomial_definition_up_to_the_approximation(
    confidence: float,
) -> None:
    for n in [*range(0, 120), 257, 999, 1500, sketch.EXACT_BINOMIAL_UP_TO]:
        assert sketch.median_ranks(n, confidence) == textbook_ranks(n, confidence), n


def test_the_normal_approximation_takes_over_from_the_exact_tail_without_a_jump() -> None:
    n = sketch.EXACT_BINOMIAL_UP_TO
    exact_low, _ = sketch.median_ranks(n, 0.95) or (0, 0)
    approximate_low, approximate_high = sketch.median_ranks(n + 1, 0.95) or (0, 0)
    assert abs(exact_low - approximate_low) <= 1
    assert approximate_high == n + 1 - approximate_low - 1


def test_the_ratio_of_medians_and_its_interval_on_known_data() -> None:
    before = sketch.of_values([float(v) for v in range(1, 11)])  # median 5.5
    after = sketch.of_values([2.0 * v for v in range(1, 11)])  # twice every value: median 11
    ratio = sketch.ratio_of_medians(before, after, confidence=0.95)
    assert ratio is not None
    assert ratio.ratio == pytest.approx(2.0, rel=2 * sketch.ALPHA)
    # Each side at 97.5 %: n = 10 gives x(2)..x(9) as well (P(B <= 1) = 1.07 % <= 1.25 %).
    assert sketch.median_ranks(10, 0.975) == (1, 8)
    slack = (1 + sketch.ALPHA) / (1 - sketch.ALPHA)
    assert ratio.low == pytest.approx(4 / 9 / slack, rel=2 * sketch.ALPHA)  # after x(2) / before x(9)
    assert ratio.high == pytest.approx(18 / 2 * slack, rel=2 * sketch.ALPHA)  # after x(9) / before x(2)
    assert ratio.confidence == 0.95


def test_the_interval_holds_the_true_ratio_at_least_as_often_as_it_claims() -> None:
    rng = random.Random(11)
    true_ratio = 1.5  # lognormal medians: exp(mu); after = 1.5 x before
    missed = 0
    for _ in range(400):
        before = sketch.of_values(rng.lognormvariate(1.0, 0.5) for _ in range(rng.randint(10, 60)))
        n = rng.randint(10, 60)
        after = sketch.of_values(true_ratio * rng.lognormvariate(1.0, 0.5) for _ in range(n))
        ratio = sketch.ratio_of_medians(before, after)
        assert ratio is not None and ratio.low is not None and ratio.high is not None
        missed += not ratio.low <= true_ratio <= ratio.high
    assert missed <= 0.05 * 400


def test_too_few_values_give_a_ratio_without_an_interval_and_nothing_gives_none() -> None:
    few = sketch.ratio_of_medians(sketch.of_values([1.0, 2.0, 3.0]), sketch.of_values([2.0, 4.0, 6.0]))
    assert few is not None and few.ratio == pytest.approx(2.0, rel=2 * sketch.ALPHA)
    assert few.low is None and few.high is None
    assert sketch.ratio_of_medians({}, sketch.of_values([1.0])) is None
    assert sketch.ratio_of_medians(sketch.of_values([0.0]), sketch.of_values([1.0])) is None
    # A zero at the low end of the before interval: no upper bound can be given, so no interval.
    zeros = sketch.of_values([0.0] * 3 + [1.0] * 8)
    assert sketch.ratio_of_medians(zeros, sketch.of_values([1.0] * 11)).low is None  # type: ignore[union-attr]


def test_ranked_quantiles_read_sorted_bins_as_quantiles_reads_the_sketch() -> None:
    rng = random.Random(5)
    qs = (0.5, 0.25, 0.75)
    for n in (1, 2, 7, 300):
        built = sketch.of_values(rng.choice((0.0, rng.lognormvariate(1.0, 1.0))) for _ in range(n))
        indexes = sorted(built)
        seen = list(itertools.accumulate(built[index] for index in indexes))
        assert sketch.ranked_quantiles(indexes, seen, qs) == sketch.quantiles(built, qs)
    assert sketch.ranked_quantiles([], [], qs) == [None, None, None]
    with pytest.raises(ValueError, match="between 0 and 1"):
        sketch.ranked_quantiles([], [], (1.5,))


def test_quantiles_read_together_are_each_percentile_cont_within_one_percent() -> None:
    rng = random.Random(11)
    qs = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)
    for n in (1, 2, 3, 10, 101, 1000):
        values = [rng.choice((0.0, rng.lognormvariate(1.5, 0.8))) for _ in range(n)]
        ordered = sorted(values)
        found = sketch.quantiles(sketch.of_values(values), qs)
        for q, value in zip(qs, found, strict=True):
            rank = (n - 1) * q
            low, high = ordered[math.floor(rank)], ordered[math.ceil(rank)]
            exact = low + (high - low) * (rank - math.floor(rank))
            assert value == pytest.approx(exact, rel=sketch.ALPHA, abs=1e-12), (n, q)
    assert sketch.quantiles({}, qs) == [None] * len(qs)


def test_quartiles_of_a_stored_sketch_are_its_quantiles() -> None:
    """As stored (text keys, the JSON's) or built (int keys), the same p25, median and p75 as
    ``quantiles``; none for an empty sketch."""
    rng = random.Random(9)
    for n in (1, 2, 7, 300):
        built = sketch.of_values(rng.choice((0.0, rng.lognormvariate(1.0, 1.0))) for _ in range(n))
        expected = tuple(sketch.quantiles(built, (0.25, 0.5, 0.75)))
        assert sketch.quartiles(built) == sketch.quartiles(sketch.to_json(built)) == expected
    assert sketch.quartiles({}) == (None, None, None)
