"""The quantile sketch behind the rollups' medians: mergeable, and within 1 % of the exact median."""

from __future__ import annotations

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
