"""The package page's two long tables built in Python: the nodes' plans (up to node_plans.PLAN_ROWS, 50; one
tag for them all) and the most recent reports (throughput.RECENT, 20; one tag a row).

Their row templates cost the busiest package page about a third of its render in Django's variable
lookups, ``{% with %}``, ``{% if %}`` and a ``{% url %}`` and ``date`` filter per row (issue 43), as the
catalog's rows did (catalog_rows.py, which this follows). Each row here is the markup the template held,
byte for byte, every value escaped; tests/test_package_rows.py renders both against the
template text they replace.

Each row is filled by ``escaped_format``, not ``format_html``: the same escaping (``conditional_escape``'s:
markup kept, everything else through ``html.escape``), without Django's per-argument check for lazy
strings, which these values never are. format_html took 22 µs for a plan row's 15 values and this takes
6 (70 rows a page, about a millisecond of the busiest package page).
"""

from __future__ import annotations

import functools
import html
from collections.abc import Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any, NamedTuple

from django import template
from django.template.defaultfilters import floatformat, timesince_filter
from django.urls import get_script_prefix, get_urlconf, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.timezone import get_current_timezone, localtime

from packages_app.fleet.plans import PlanAdvice
from packages_app.report_metrics import ReportMetric
from packages_app.templatetags.catalog_rows import ymd
from packages_app.templatetags.verdicts import cause_badge_under

register = template.Library()

DASH = "\u2013"
PLAN = (
    '\n      <tr{}>\n        <td data-label="Node"><a href="{}">{}</a><span class="sub muted nowrap">last {}'
    "</span></td>\n"
    '        <td data-label="mesh-llm">{}{}</td>\n'
    '        <td data-label="Stages"><code>{}</code></td>\n'
    '        <td data-label="Requested"><code>{}</code></td>\n'
    '        <td data-label="Effective"><code>{}</code>{}</td>\n'
    '        <td data-label="Reports" class="num">{} ({})</td>\n'
    '        <td data-label="Decode tok/s" class="num">{}</td>\n'
    '        <td data-label="Judged">{}{}</td></tr>\n    '
)
ALERT_ROW = mark_safe(' class="alert-row"')  # constant markup
NOT_REQUESTED = mark_safe(' <span class="badge warn">not what was requested</span>')
RECENT = (
    '\n      <tr{}>\n        <td data-label="Received" class="nowrap">{}{}</td>\n'
    '        <td data-label="Node"><a href="{}">{}</a></td>\n'
    '        <td data-label="Strategy">{} \u2192 {}</td>\n'
    '        <td data-label="MTP source">{}</td>\n'
    '        <td data-label="Stages"><code>{}</code></td>\n        {}</tr>\n    '
)
REFUSED = (
    ' <span class="badge warn" title="The node\'s clock disagrees with ours; observed {}: '
    'plotted when it arrived">clock skew</span>'
)
MOVED = ' <span class="badge tone-info" title="Plotted when observed: {}">observed {} earlier</span>'
METRIC = '<td data-label="{}" class="num">{}{}</td>'
FLAGGED = (
    ' <span class="badge warn" title="Kept as the node sent them, left out of medians">implausible: {}</span>'
)


@register.simple_tag
def plan_rows(plans: Sequence[PlanAdvice]) -> SafeString:
    """``{% plan_rows plans %}``: each node's plan on the revision, its release and how it was judged, a
    row each; the script prefix, the URL conf and the time zone looked up once for all of them, not four
    times a row (asgiref's context locals, about 5 µs a lookup: a millisecond of the busiest package
    page's 50 rows)."""
    where = _Where(get_script_prefix(), get_urlconf(), get_current_timezone())
    return mark_safe("".join(_plan_row(advised, where) for advised in plans))  # noqa: S308 (escaped rows)


class _Where(NamedTuple):
    """What a row's links and times depend on beyond the row: the request's script prefix and URL conf, the
    active time zone."""

    prefix: str
    urlconf: str | None
    zone: tzinfo


def _plan_row(advised: PlanAdvice, where: _Where) -> SafeString:
    plan, advice = advised.plan, advised.advice
    release = escaped_format('<span class="sub muted">{}</span>', advice.release) if advice.release else ""
    predicted = (
        escaped_format(' <span class="muted">predicted <code>{}</code></span>', advice.predicted)
        if advice.predicted
        else ""
    )
    return escaped_format(
        PLAN,
        ALERT_ROW if advice.needs_action else "",
        _node_url_under(where.prefix, where.urlconf, plan.node),
        plan.node,
        minutes(plan.last_seen, where.zone),
        advised.version or DASH,
        release,
        plan.stage_splits or DASH,
        plan.requested_strategy or DASH,
        plan.effective_strategy or DASH,
        NOT_REQUESTED if plan.differs else "",
        plan.reports,
        plan.from_spans,
        hundredths(plan.tps),
        cause_badge_under(where.prefix, advice.cause),
        predicted,
    )


@register.simple_tag
def recent_row(report: Mapping[str, Any], mtp_detected: bool) -> SafeString:
    """``{% recent_row r revision.mtp_detected %}``: one recent report (throughput._recent's row)."""
    placement = report["placement"]
    badge: SafeString | str = ""
    if placement == "refused":
        badge = format_html(REFUSED, seconds(report["observed_at"]))
    elif placement == "moved":
        observed = report["observed_at"]
        badge = format_html(MOVED, seconds(observed), timesince_filter(observed, report["received_at"]))
    name = report["node_name"]
    return escaped_format(
        RECENT,
        ALERT_ROW if report["mtp_source"] == "Disabled" and mtp_detected else "",
        seconds(report["received_at"]),
        badge,
        node_url(name),
        name,
        report["requested_strategy"] or DASH,
        report["effective_strategy"] or DASH,
        report["mtp_source"] or DASH,
        report["stage_splits"] or DASH,
        _metric_cells(report["metrics"], report["timings_flagged"]),
    )


def _metric_cells(metrics: Sequence[tuple[ReportMetric, Any]], flagged: Sequence[str] | None) -> SafeString:
    cells = []
    last = len(metrics) - 1
    for index, (metric, value) in enumerate(metrics):
        shown = hundredths(value) if metric.type == "float" else (DASH if value is None else value)
        note = (
            format_html(FLAGGED, format_html_join(", ", "{}", ((f,) for f in flagged)))
            if index == last and flagged
            else ""
        )
        cells.append(escaped_format(METRIC, metric.label, shown, note))
    return mark_safe("".join(cells))  # noqa: S308 (each cell built by format_html)


# As catalog_rows.tenths: the plans' rates are a sketch's bin values (the reports' own rates repeat less).
@functools.lru_cache(maxsize=4096)
def hundredths(value: float | None) -> str:
    """``{{ value|floatformat:2|default:DASH }}``: two decimals, a dash for none."""
    return floatformat(value, 2) or DASH


def escaped_format(format_string: str, *args: Any) -> SafeString:
    """``format_html(format_string, *args)``, byte for byte: markup (``__html__``) kept, every other value
    through ``html.escape`` as Django's ``escape`` does (the module's docstring says why)."""
    return mark_safe(format_string.format(*map(_escaped, args)))  # noqa: S308 (every value escaped)


def _escaped(value: Any) -> str:
    markup = getattr(value, "__html__", None)
    return markup() if markup is not None else html.escape(str(value))


def minutes(at: datetime | None, zone: tzinfo | None = None) -> str:
    """``{{ at|date:"Y-m-d H:i" }}`` without the date filter's format parsing (in ``zone``, else the active
    time zone)."""
    if at is None:
        return ""
    t = localtime(at, zone)
    return f"{ymd(t)} {t.hour:02d}:{t.minute:02d}"


def seconds(at: datetime | None) -> str:
    """``{{ at|date:"Y-m-d H:i:s" }}``."""
    if at is None:
        return ""
    return f"{minutes(at)}:{localtime(at).second:02d}"


def node_url(name: str) -> str:
    return _node_url_under(get_script_prefix(), get_urlconf(), name)


# A node's URL never changes: reversed once (about 45 µs each, up to 70 a page) per script prefix and
# URL conf.
@functools.lru_cache(maxsize=4096)
def _node_url_under(prefix: str, urlconf: str | None, name: str) -> str:
    return reverse("packages_app:node", args=(name,))
