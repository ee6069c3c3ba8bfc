"""Pure: when a node report happened. Its time is when the node observed it, within the accepted skew.

A report says ``observed_at`` (the node's clock) and meshdash notes ``received_at``. An agent that replays
its spool after an outage sends reports observed hours or days before they arrive; their observed time is
right and the rollups place them there ("moved": plotted more than the skew limit before arrival). A time
meshdash cannot believe is refused and the report is plotted when it arrived: one more than
CLOCK_SKEW_LIMIT after arrival (a node's clock ahead), or one older than REPLAY_WINDOW (longer than an agent
keeps a report: packages_app/nodes/agent_config.py SPOOL_MAX_AGE, so no honest replay is that old). Those are
the reports flagged ``clock_skew_flagged``. No Django, no I/O.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum

CLOCK_SKEW_LIMIT = timedelta(minutes=5)
REPLAY_WINDOW = timedelta(days=7)


class Placement(StrEnum):
    ON_TIME = "on-time"  # observed within the skew limit of its arrival
    MOVED = "moved"  # observed earlier, within the replay window: plotted when observed
    REFUSED = "refused"  # an observed time not believed: plotted when it arrived


def placement(observed_at: datetime, received_at: datetime) -> Placement:
    ahead = observed_at - received_at
    if ahead > CLOCK_SKEW_LIMIT or -ahead > REPLAY_WINDOW:
        return Placement.REFUSED
    return Placement.MOVED if -ahead > CLOCK_SKEW_LIMIT else Placement.ON_TIME


def plotted_at(observed_at: datetime, received_at: datetime) -> datetime:
    """The time the rollups and the timeline place the report at."""
    return received_at if placement(observed_at, received_at) is Placement.REFUSED else observed_at
