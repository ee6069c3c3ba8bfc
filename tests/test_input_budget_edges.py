"""input_budget (pure): the depth refusals a caller with a generous value budget still gets, whichever of
the decoder or the level walk finds the depth first."""

from __future__ import annotations

import pytest

from packages_app.input_budget import InputBudget, OverBudget, load_json, nesting_exceeds

ROOMY = InputBudget("The body", max_bytes=10**7, max_values=10**7, max_depth=64)


def test_nesting_too_deep_for_the_decoder_is_the_depth_refusal() -> None:
    deep = "[" * 200_000 + "]" * 200_000  # json's decoder gives up (RecursionError) before the walk
    with pytest.raises(OverBudget) as refused:
        load_json(deep, ROOMY)
    assert refused.value.limit == "depth" and "more than 64 levels deep" in refused.value.message


def test_the_level_walk_counts_a_container_under_scalars_and_stops_at_the_limit() -> None:
    assert not nesting_exceeds({"a": 1, "b": [2, 3]}, 2)
    assert nesting_exceeds({"a": 1, "b": [2, [3]]}, 2)
    assert nesting_exceeds([[[]]], 2) and not nesting_exceeds([[[]]], 3)
    assert not nesting_exceeds("scalar", 0) and nesting_exceeds([], 0)  # a limit of 0 holds no container
    with pytest.raises(OverBudget, match="more than 64 levels"):
        load_json("[" * 65 + "]" * 65, ROOMY)
