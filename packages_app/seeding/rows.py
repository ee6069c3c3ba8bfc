"""What the seeded rows share: the clock the reports span, a revision reports are made on, a report row's
values, a made-up digest, and how the reports are shared out."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta

from packages_app.audit.assessment import Assessment

# Reports span the 30 days before today's midnight (UTC), so the pages' recent windows, the hourly
# rollups and this month's partition see them as they would see a live fleet's.
NOW = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class Latest:
    id: int
    block_count: int
    mtp_detected: bool
    repo_id: str
    commit_sha: str
    mtp_declared: bool = False
    # The fleet shape's: its stored assessment (what each release and setting does with it).
    assessment: Assessment | None = field(default=None, compare=False)


REPORT_SPAN = timedelta(days=30)


def digest(text: str, size: int = 64) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


@dataclass(slots=True)
class SyntheticReport:
    """A Report row as plain values (its fields are Report's column names), cheap to make by millions."""

    id: int
    node_id: int
    report_id: uuid.UUID
    received_at: datetime
    observed_at: datetime
    repo_id: str
    commit_sha: str
    revision_id: int
    stage_splits: str
    effective_strategy: str
    mtp_source: str
    predicted_per_second: float
    prompt_per_second: float
    predicted_n: int
    speculative_proposed_n: int
    speculative_accepted_n: int
    speculative_windows: int
    mtp_used: bool
    body: str
    body_sha256: str = "0" * 64
    clock_skew_seconds: float = 0.0
    clock_skew_flagged: bool = False
    manifest_sha256: str = ""
    topology_id: str = "two-node"
    requested_strategy: str = "auto"
    draft_n: int | None = None
    draft_n_accepted: int | None = None
    timings_flagged: str = "[]"
    source: str = "report"
    run_id: str = ""
    stage_id: str = ""


REPORT_COLUMNS = tuple(f.name for f in fields(SyntheticReport))


def zipf_counts(total: int, ranks: int) -> list[int]:
    """``total`` split over ``ranks`` in proportion to 1 / rank**1.1, adding up exactly."""
    weights = [1 / (rank + 1) ** 1.1 for rank in range(ranks)]
    scale = total / sum(weights)
    counts = [int(weight * scale) for weight in weights]
    for rank in range(total - sum(counts)):
        counts[rank % ranks] += 1
    return counts
