"""'MTP really ran' means the same whichever way a node reports: a JSON report and an OTLP decode span
with the same counters get the same answer (issue 44: two tuples of counters once disagreed)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from packages_app import reports, telemetry
from packages_app.nodes import otlp
from packages_app.nodes.report_schema import ReportIn, Timings


def json_report(effective: str, source: str, timings: dict[str, Any]) -> ReportIn:
    return ReportIn.model_validate(
        {
            "report_id": "00000000-0000-0000-0000-000000000001",
            "observed_at": datetime.now(UTC).isoformat(),
            "package": {"repo": "meshllm/X-layers", "revision": "a" * 40},
            "speculative": {"effective_strategy": effective, "mtp_source": source},
            "timings": {"predicted_per_second": 9.0, "predicted_n": 256, **timings},
        }
    )


def span(effective: str) -> otlp.DecodeSpan:
    return otlp.DecodeSpan(
        trace_id="t",
        span_id="s",
        run_id="r",
        stage_id="0",
        requested_strategy="auto",
        effective_strategy=effective,
        ended_at=None,
        attributes={},
    )


@pytest.mark.parametrize("counter", reports.MTP_COUNTERS)
def test_each_counter_alone_says_mtp_ran_on_both_paths(counter: str) -> None:
    moved = {counter: 12}
    assert reports.mtp_used(json_report("native-mtp", "Integrated", moved))
    assert telemetry.span_used_mtp(span("native-mtp"), Timings.model_validate(moved))


@pytest.mark.parametrize("counter", reports.MTP_COUNTERS)
def test_a_counter_that_moved_is_not_enough_when_the_node_says_mtp_was_off(counter: str) -> None:
    moved = {counter: 12}
    assert not reports.mtp_used(json_report("native-mtp", "Disabled", moved))
    assert not telemetry.span_used_mtp(span("disabled"), Timings.model_validate(moved))


def test_mtp_said_on_with_every_counter_at_zero_did_not_run_on_both_paths() -> None:
    # The silent failure the dashboard exists for: on, and nothing verified.
    zeros = dict.fromkeys(reports.MTP_COUNTERS, 0)
    assert not reports.mtp_used(json_report("native-mtp", "Integrated", zeros))
    assert not telemetry.span_used_mtp(span("native-mtp"), Timings.model_validate(zeros))
