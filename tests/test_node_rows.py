"""The nodes pages' groups and a node page's rows, built by one tag each (templatetags/node_rows.py): byte for
byte the markup of the template loops they replace (kept in tests/reference/), on every branch, with hostile
text from nodes escaped."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.template import Context, Template
from django.utils import timezone

from packages_app.audit.advice import Advice
from packages_app.fleet.nodes import NodeRow
from packages_app.fleet.serving import NodeServing
from packages_app.models import Node
from packages_app.templatetags import node_rows
from packages_app.verdicts import Cause

# The template text of the loops' bodies before the tags (nodes.html and node_detail.html at 875a51f, the
# include of _serving_badges.html written out).
REFERENCE = Path(__file__).parent / "reference"
GROUP_LOOP = "\n" + (REFERENCE / "node_rows.html").read_text()
ROW_LOOP = "\n" + (REFERENCE / "node_serving_rows.html").read_text()

HOSTILE = '<script>alert("x")</script> & co'
HOSTILE_NAME = '<b onmouseover="x">&co'  # a name in a URL path: no slash
AT = datetime(2026, 12, 5, 9, 7, 3, tzinfo=UTC)


def serving(**changes: Any) -> NodeServing:
    fields: dict[str, Any] = {
        "revision_id": 1,
        "repo_id": "meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers",
        "commit_sha": "69cbd9fc" + "0" * 32,
        "verdict": "undeclared-mtp",
        "headline": "mtp-unused",
        "is_latest": True,
        "layer_range": "0..20",
        "stage_splits": "0..20|20..41",
        "topology_id": "topo-1",
        "reports": 34,
        "tps": 31.4159,
        "alert": True,
        "advice": Advice(Cause.MTP_UNUSED, "MTP weights unused: apply the patched manifest.", "v0.72"),
        "version": "v0.72.1",
    }
    return NodeServing(**{**fields, **changes})


def node(name: str = "node-a", revoked: bool = False, seen: datetime | None = AT) -> Node:
    return Node(name=name, revoked_at=AT if revoked else None, last_seen_at=seen)


ROWS = [
    NodeRow(
        node(),
        "v0.72.1",
        ["ROCm0 (ROCm, 64 GiB)", "CPU"],
        [
            serving(),
            serving(
                is_latest=False,
                identity="confirmed",
                alert=False,
                headline="serves-mtp",
                advice=Advice(Cause.MOVED_ON, "Moved on.", "v0.72"),
                version="v0.71.0",
                tps=None,
            ),
        ],
        hidden=3,
        certification="certified",
        observations={"serving_strategy": {"strategy": "auto"}},
    ),
    NodeRow(
        node(HOSTILE_NAME, revoked=True, seen=None),
        HOSTILE,
        [HOSTILE],
        [
            serving(
                repo_id=f"{HOSTILE_NAME}/{HOSTILE_NAME}",
                identity="other",
                layer_range=HOSTILE,
                stage_splits=HOSTILE,
                topology_id=HOSTILE_NAME,
                advice=Advice(Cause.OK, HOSTILE, None, observed=HOSTILE),
                version=HOSTILE,
                tps=0.0,
            ),
            serving(reports=0, layer_range="", stage_splits="", topology_id="", headline="", identity=""),
            serving(reports=0, stage_splits="", topology_id="t 2", advice=Advice(Cause.OK, "fine", None)),
        ],
        hidden=500,
        at_least=True,
        certification="uncertified_override",
        observations={"serving_strategy": {"strategy": HOSTILE}},
    ),
    NodeRow(node("quiet"), "", [], []),  # registered, nothing in the window
    NodeRow(node("gone", revoked=True), HOSTILE, [HOSTILE], [], observations={"serving_strategy": {}}),
    NodeRow(node("odd"), "v0.70.0", [], [serving()], certification=HOSTILE, observations={"x": 1}),
]


def rendered(text: str, **context: Any) -> str:
    return Template(text).render(Context(context, autoescape=True))


def both(rows: list[NodeRow], days: int = 7) -> tuple[str, str]:
    before = rendered(
        "{% load verdicts %}{% for row in rows %}" + GROUP_LOOP + "  {% endfor %}", rows=rows, days=days
    )
    now = rendered(
        "{% load node_rows %}{% for row in rows %}{% node_group row days %}\n  {% endfor %}",
        rows=rows,
        days=days,
    )
    return before, now


@pytest.mark.parametrize("days", [1, 7, 30])
def test_the_node_groups_are_the_markup_the_template_loop_wrote(days: int) -> None:
    before, now = both(ROWS, days)
    assert now == before
    assert now.count("<tbody") == len(ROWS) and "no report in this window" in now
    assert "uncertified split" in now and "at least 500 more" in now and "(not the latest)" in now


def test_the_times_are_in_the_active_time_zone() -> None:
    with timezone.override("Asia/Kolkata"):  # +05:30: a shift of minutes shows
        before, now = both(ROWS)
    assert now == before and "2026-12-05 14:37" in now  # 09:07 UTC


def test_text_from_nodes_is_shown_escaped_never_as_markup() -> None:
    html = node_rows.node_group(ROWS[1], 7) + node_rows.node_group(ROWS[3], 7)
    assert "<script>" not in html
    assert html.count("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co") >= 8
    assert "<b " not in html and html.count("&lt;b onmouseover=&quot;x&quot;&gt;&amp;co") == 3


def test_the_control_a_group_built_without_escaping_would_carry_the_script() -> None:
    # What escaped_format stops: the same row written with str.format.
    assert "<script>" in node_rows.SERVING.format(*([HOSTILE] * node_rows.SERVING.count("{}")))


SERVED = [s for row in ROWS for s in row.serving] + [
    serving(identity="unaudited", topology_id="", layer_range="", version=""),
    serving(reports=0, topology_id=HOSTILE_NAME, advice=Advice(Cause.OK, "fine", None, observed="said")),
]


def test_a_node_pages_rows_are_the_markup_the_template_loop_wrote() -> None:
    before = rendered(
        "{% load verdicts %}{% for s in served %}" + ROW_LOOP + "    {% endfor %}", served=SERVED
    )
    now = rendered(
        "{% load node_rows %}{% for s in served %}{% node_serving_row s %}\n    {% endfor %}", served=SERVED
    )
    assert now == before
    assert now.count("<tr") == len(SERVED) and "(no report ran on it)" in now and "named in reports" in now
    assert "<script>" not in now and "<b " not in now
