"""The package page's plan and recent-report rows, built by one tag a row (templatetags/package_rows.py):
byte for byte the markup of the template loops they replace (kept below as the reference), on every
branch, with hostile text from nodes escaped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.template import Context, Template

from packages_app import report_metrics
from packages_app.audit.advice import Advice
from packages_app.fleet.plans import PlanAdvice
from packages_app.node_plans import NodePlan
from packages_app.templatetags import package_rows
from packages_app.verdicts import Cause

# The template text of the two loops before the tags (package_detail.html at 24a9b88), one file each.
REFERENCE = Path(__file__).parent / "reference"
PLAN_LOOP = "\n" + (REFERENCE / "plan_rows.html").read_text().removesuffix("\n")
RECENT_LOOP = "\n" + (REFERENCE / "recent_rows.html").read_text().removesuffix("\n")

HOSTILE = '<script>alert("x")</script> & co'
AT = datetime(2026, 12, 5, 9, 7, 3, tzinfo=UTC)


def plan(**changes: Any) -> NodePlan:
    fields: dict[str, Any] = {
        "node": "node-a",
        "stage_splits": "0..12|12..24",
        "requested_strategy": "auto",
        "effective_strategy": "native-mtp",
        "differs": False,
        "reports": 1234,
        "from_spans": 1200,
        "tps": 31.4159,
        "last_seen": AT,
    }
    return NodePlan(**{**fields, **changes})


PLANS = [
    PlanAdvice(plan(), "0.65.0", Advice(Cause.OK, "fine", "0.65")),
    PlanAdvice(
        plan(
            node=HOSTILE,
            stage_splits="",
            requested_strategy="",
            effective_strategy="",
            tps=None,
            last_seen=None,
        ),
        "",
        Advice(Cause.CONTRADICTION, "contradicts", None, predicted="native-mtp"),
    ),
    PlanAdvice(
        plan(
            node="ns/with space",
            requested_strategy=HOSTILE,
            effective_strategy=HOSTILE,
            differs=True,
            tps=0.0,
        ),
        HOSTILE,
        Advice(Cause.MTP_UNUSED, "unused", HOSTILE, predicted=HOSTILE),
    ),
    PlanAdvice(plan(reports=0, from_spans=0), "0.64.1", Advice(Cause.UNKNOWN_RELEASE, "unknown", "")),
]


def report(**changes: Any) -> dict[str, Any]:
    shown = [report_metrics.BY_NAME[name] for name in report_metrics.shown_columns()]
    row: dict[str, Any] = {
        "received_at": AT,
        "observed_at": AT,
        "node_name": "node-a",
        "requested_strategy": "auto",
        "effective_strategy": "native-mtp",
        "mtp_source": "Native",
        "stage_splits": "0..12|12..24",
        "timings_flagged": [],
        "placement": "arrival",
        "metrics": [(m, 12.3456 if m.type == "float" else 7) for m in shown],
    }
    row.update(changes)
    return row


def no_values() -> list[tuple[report_metrics.ReportMetric, Any]]:
    return [(m, None) for m, _ in report()["metrics"]]


REPORTS = [
    report(),
    report(mtp_source="Disabled", placement="refused", observed_at=AT + timedelta(hours=2)),
    report(
        node_name=HOSTILE,
        placement="moved",
        observed_at=AT - timedelta(days=2, hours=3),
        timings_flagged=[HOSTILE, "prompt_ms"],
        requested_strategy="",
        effective_strategy=HOSTILE,
        mtp_source="",
        stage_splits="",
        metrics=no_values(),
    ),
    report(
        timings_flagged=None, metrics=[(m, 0.0 if m.type == "float" else 0) for m, _ in report()["metrics"]]
    ),
]


def rendered(text: str, **context: Any) -> str:
    return Template(text).render(Context(context, autoescape=True))


@pytest.mark.parametrize("detected", [True, False])
def test_the_recent_rows_are_the_markup_the_template_loop_wrote(detected: bool) -> None:
    context = {"throughput": {"recent": REPORTS}, "revision": {"mtp_detected": detected}}
    before = rendered("{% load verdicts %}" + RECENT_LOOP, **context)
    now = rendered(
        "{% load package_rows %}\n    {% for r in throughput.recent %}"
        "{% recent_row r revision.mtp_detected %}{% endfor %}",
        **context,
    )
    assert now == before
    assert ("clock skew" in now) and ("earlier</span>" in now) and ("implausible: " in now)
    assert now.count('class="alert-row"') == (1 if detected else 0)


def test_the_plan_rows_are_the_markup_the_template_loop_wrote() -> None:
    before = rendered("{% load verdicts %}" + PLAN_LOOP, plans=PLANS)
    now = rendered("{% load package_rows %}\n    {% plan_rows plans %}", plans=PLANS)
    assert now == before
    assert (
        now.count('class="alert-row"') == 2 and "not what was requested" in now and "predicted <code>" in now
    )


@pytest.mark.parametrize("row", ["plan", "recent"])
def test_text_from_nodes_is_shown_escaped_never_as_markup(row: str) -> None:
    html = (
        package_rows.plan_rows([PLANS[2]])
        if row == "plan"
        else package_rows.recent_row(REPORTS[2], mtp_detected=True)
    )
    assert "<script>" not in html and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co" in html


def test_the_control_a_row_built_without_escaping_would_carry_the_script() -> None:
    # What escaped_format stops: the same row written with str.format.
    assert "<script>" in package_rows.PLAN.format(*([HOSTILE] * package_rows.PLAN.count("{}")))


def test_the_rows_escape_as_format_html_does() -> None:
    # escaped_format leaves out format_html's lazy-string check only: the same bytes for every kind of value
    # a row holds (markup kept, text, quotes, numbers, None, a lazy string).
    from django.utils.html import format_html
    from django.utils.safestring import mark_safe
    from django.utils.translation import gettext_lazy

    values = (mark_safe("<b>kept</b>"), HOSTILE, 'it\'s "q"', 12, 3.5, None, gettext_lazy("<i>lazy</i>"))
    template = " ".join(["{}"] * len(values))
    assert package_rows.escaped_format(template, *values) == format_html(template, *values)
    assert "<b>kept</b>" in package_rows.escaped_format("{}", values[0])


def test_the_plan_rows_show_times_in_the_active_time_zone() -> None:
    # The time zone is looked up once for all the rows: still the active one, as the date filter reads it.
    from django.utils import timezone

    with timezone.override("Asia/Kolkata"):  # +05:30: a shift of minutes shows
        before = rendered("{% load verdicts %}" + PLAN_LOOP, plans=PLANS)
        now = rendered("{% load package_rows %}\n    {% plan_rows plans %}", plans=PLANS)
    assert now == before and "14:37" in now  # 09:07 UTC
