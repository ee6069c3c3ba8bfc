"""A report's time (packages_app.report_time): when its node observed it, within the accepted skew."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from packages_app import report_time
from packages_app.nodes import agent_config
from packages_app.report_time import Placement, placement, plotted_at

ARRIVED = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        (timedelta(0), Placement.ON_TIME),
        (timedelta(minutes=-5), Placement.ON_TIME),  # the skew limit itself is on time
        (timedelta(minutes=5), Placement.ON_TIME),
        (timedelta(minutes=-6), Placement.MOVED),  # observed before it arrived: a replay
        (timedelta(days=-4), Placement.MOVED),
        (timedelta(days=-7), Placement.MOVED),
        (timedelta(days=-7, seconds=-1), Placement.REFUSED),  # older than any agent keeps a report
        (timedelta(minutes=6), Placement.REFUSED),  # ahead of arrival: the node's clock is off
    ],
)
def test_a_report_is_placed_when_observed_within_the_accepted_skew(
    offset: timedelta, expected: Placement
) -> None:
    assert placement(ARRIVED + offset, ARRIVED) is expected
    plotted = plotted_at(ARRIVED + offset, ARRIVED)
    assert plotted == (ARRIVED if expected is Placement.REFUSED else ARRIVED + offset)


def test_the_replay_window_is_as_long_as_the_agent_keeps_a_spooled_report() -> None:
    assert report_time.REPLAY_WINDOW.total_seconds() == agent_config.SPOOL_MAX_AGE
