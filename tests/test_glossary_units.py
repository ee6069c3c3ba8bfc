"""glossary (pure): decimal sizes as the Hub labels them, and the fragment ids every badge links to."""

from __future__ import annotations

import pytest

from packages_app.glossary import anchor, format_decimal_size


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "\u2013"),
        (0, "\u2013"),
        (-5, "\u2013"),
        (1, "1 byte"),
        (999, "999 bytes"),
        (1_000, "1.0 kB"),
        (18_600_000_000, "18.6 GB"),
        (123_456_789_012, "123 GB"),
        (10**18, "1000 PB"),
    ],
)
def test_sizes_are_in_decimal_units_with_a_dash_for_none(value: int | None, text: str) -> None:
    assert format_decimal_size(value) == text


def test_an_entry_anchor_is_a_fragment_id() -> None:
    assert anchor("verdict", "undeclared-mtp") == "verdict-undeclared-mtp"
    assert anchor("strategy", "native-mtp+ngram_cache") == "strategy-native-mtp-ngram-cache"
