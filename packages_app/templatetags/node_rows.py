"""The fleet's node tables built in Python: the nodes pages' groups (one tag a node: its ``<tbody>``, a row
for each revision it ran in the window, or one saying it ran none) and a node page's rows (one tag a row).

Their template loops cost /nodes/ and a node's page most of their render in Django's variable lookups,
``{% if %}``, ``{% url %}``, the ``date`` filter and an ``{% include %}`` a row (issue 43), as the catalog's
and the package page's rows did (catalog_rows.py, package_rows.py, which this follows). Each is the markup
the template held, byte for byte, every value escaped (``package_rows.escaped_format``);
tests/test_node_rows.py renders both against the template text they replace.
"""

from __future__ import annotations

import functools

from django import template
from django.urls import get_script_prefix, get_urlconf, reverse
from django.utils.safestring import SafeString, mark_safe

from packages_app.fleet.nodes import NodeRow
from packages_app.fleet.serving import NodeServing
from packages_app.templatetags.catalog_rows import package_url
from packages_app.templatetags.package_rows import DASH, escaped_format, hundredths, minutes, node_url
from packages_app.templatetags.verdicts import cause_badge, headline_badge

register = template.Library()

GROUP = '\n  <tbody class="node-group{}">\n    {}\n  </tbody>'  # the template adds the line's end
NEEDS_ACTION = mark_safe(" needs-action")  # constant markup
ALERT_ROW = mark_safe(' class="alert-row"')
FIRST = (
    '\n      <td data-label="Node" rowspan="{}">{}</td>\n'
    '      <td data-label="mesh-llm" rowspan="{}">{}</td>\n      '
)
SERVING = (
    "\n    <tr{}>\n      {}\n"
    '      <td data-label="Revision"><a href="{}?revision={}">{}</a> <code>{}</code>{}{}<span class="sub">{}'
    "\n</span></td>\n"
    '      <td data-label="Advice">{}{}{}</td>\n'
    '      <td data-label="Layers">{}{}</td>\n'
    '      <td data-label="tok/s" class="num">{}</td>\n'
    '      <td data-label="Reports" class="num">{}</td>\n    </tr>\n    '
)
NONE_SERVED = (
    '\n    <tr>\n      <td data-label="Node">{}</td>\n      <td data-label="mesh-llm">{}</td>\n'
    '      <td data-label="Revision" colspan="5" class="muted">no report in this window</td>\n    </tr>\n    '
)
NODE = '<a href="{}">{}</a>{}<span class="sub muted nowrap">last seen {}</span>'
REVOKED = mark_safe(' <span class="badge status-failed">revoked</span>')
HIDDEN = '<span class="sub muted">and {}{} more on <a href="{}?days={}">its page</a></span>'
UNCERTIFIED = mark_safe(
    '<span class="sub"><span class="badge tone-warn" title="Its stages serve with --allow-uncertified-split">'
    "uncertified split</span></span>"
)
NOT_LATEST = mark_safe(' <span class="muted">(not the latest)</span>')
LAYERS = "layers {} of <code>{}</code>"
NODE_SERVING = (
    '\n      <tr{}>\n        <td data-label="Package"><a href="{}?revision={}">{}</a></td>\n'
    '        <td data-label="Revision"><code>{}</code><span class="sub {}">{}</span></td>\n'
    '        <td data-label="Status">{}\n</td>\n'
    '        <td data-label="Advice">{}{}{}</td>\n'
    '        <td data-label="Layers">{}</td>\n'
    '        <td data-label="Split"><code>{}</code></td>\n'
    '        <td data-label="Topology">{}</td>\n'
    '        <td data-label="tok/s" class="num">{}</td>\n'
    '        <td data-label="Reports" class="num">{}</td>\n      </tr>'
)


@register.simple_tag
def node_group(row: NodeRow, days: int) -> SafeString:
    """``{% node_group row days %}``: a node's ``<tbody>``: a row per revision it ran, its name and release
    on the first (spanning them all), or a row saying it ran none in the window."""
    name = row.node.name
    url = node_url(name)
    node = escaped_format(
        NODE, url, name, REVOKED if row.node.revoked_at else "", minutes(row.node.last_seen_at) or "never"
    )
    devices = (
        escaped_format('<span class="sub muted">{}</span>', ", ".join(map(str, row.devices)))
        if row.devices
        else ""
    )
    version = row.version or DASH
    if not row.serving:
        rows = escaped_format(NONE_SERVED, node, escaped_format("{}{}", version, devices))
    else:
        hidden = ""
        if row.hidden:
            hidden = escaped_format(HIDDEN, "at least " if row.at_least else "", row.hidden, url, days)
        spans = len(row.serving)
        first = escaped_format(
            FIRST, spans, escaped_format("{}{}", node, hidden), spans, _release(row, version, devices)
        )
        served = (_serving(row, s, first if i == 0 else "") for i, s in enumerate(row.serving))
        rows = mark_safe("".join(served))  # noqa: S308 (each row built by escaped_format)
    return escaped_format(GROUP, NEEDS_ACTION if row.needs_action else "", rows)


def _release(row: NodeRow, version: str, devices: str) -> SafeString:
    """The mesh-llm cell: the node's release, the strategy it said it serves, its devices and its split's
    certification."""
    strategy = row.said.serving_strategy
    said = escaped_format(" <code>--strategy {}</code>", strategy.get("strategy", "")) if strategy else ""
    certification = ""
    if row.certification == "uncertified_override":
        certification = UNCERTIFIED
    elif row.certification:
        certification = escaped_format(
            '<span class="sub"><span class="muted">split {}</span></span>', row.certification
        )
    return escaped_format("{}{}{}{}", version, said, devices, certification)


def _serving(row: NodeRow, s: NodeServing, first: SafeString | str) -> SafeString:
    """One revision the node ran: which, its status, the advice, where it sat and what it decoded."""
    identity = ""
    if s.identity:
        tone = "muted" if s.identity == "confirmed" else "bad"
        identity = escaped_format(' <span class="{}">{}</span>', tone, s.identity_label)
    advice = s.advice
    return escaped_format(
        SERVING,
        ALERT_ROW if advice.needs_action else "",
        first,
        package_url(s.owner, s.name),
        s.commit_sha,
        s.name,
        s.short_sha,
        "" if s.is_latest else NOT_LATEST,
        identity,
        _badges(s),
        cause_badge(advice.cause),
        _on_version(s.version) if s.version != row.version else "",
        _advice_text(s),
        _layers(s),
        _topology(s),
        hundredths(s.tps),
        s.reports,
    )


@register.simple_tag
def node_serving_row(s: NodeServing) -> SafeString:
    """``{% node_serving_row s %}``: a row of a node's page: a revision it ran, its status and advice, where
    it sat and what it decoded (the template adds the line's end)."""
    advice = s.advice
    topology: SafeString | str = DASH
    if s.topology_id and s.reports:
        topology = escaped_format('<a href="{}">{}</a>', topology_url(s.topology_id), s.topology_id)
    elif s.topology_id:
        topology = escaped_format('{} <span class="muted">(no report ran on it)</span>', s.topology_id)
    return escaped_format(
        NODE_SERVING,
        ALERT_ROW if s.broken else "",
        package_url(s.owner, s.name),
        s.commit_sha,
        s.repo_id,
        s.short_sha,
        "bad" if s.identity in ("unaudited", "other") else "muted",
        s.identity_label or "named in reports",
        _badges(s),
        cause_badge(advice.cause),
        _on_version(s.version),
        _advice_text(s),
        s.layer_range or DASH,
        s.stage_splits or DASH,
        topology,
        hundredths(s.tps),
        s.reports,
    )


def _badges(s: NodeServing) -> SafeString:
    """The revision's headline badge, and the unused-MTP alert's."""
    if not s.alert:
        return headline_badge(s.headline)
    alert = escaped_format(' <a class="badge alert" href="{}#runtime-alert">MTP unused</a>', _glossary_url())
    return escaped_format("{}{}", headline_badge(s.headline), alert)


def _on_version(version: str) -> SafeString | str:
    """The release the node ran this revision on, when it names one."""
    return escaped_format(' <span class="muted">on {}</span>', version) if version else ""


def _advice_text(s: NodeServing) -> SafeString | str:
    """The advice in words, unless all is well and the node said nothing it rests on."""
    advice = s.advice
    return (
        escaped_format('<p class="advice">{}</p>', advice.text)
        if advice.cause != "ok" or advice.observed
        else ""
    )


def _layers(s: NodeServing) -> SafeString:
    splits = s.stage_splits or DASH
    if s.reports:
        return escaped_format(LAYERS, s.layer_range or "?", splits)
    registered = mark_safe('<span class="muted">registered, no report</span>')
    if not s.layer_range:
        return registered
    return escaped_format('{}<span class="sub">' + LAYERS + "</span>", registered, s.layer_range, splits)


def _topology(s: NodeServing) -> SafeString | str:
    if not s.topology_id:
        return ""
    if s.reports:
        return escaped_format(
            '<span class="sub"><a href="{}">{}</a></span>', topology_url(s.topology_id), s.topology_id
        )
    return escaped_format('<span class="sub">{}</span>', s.topology_id)


def topology_url(topology_id: str) -> str:
    return _topology_url_under(get_script_prefix(), get_urlconf(), topology_id)


# A topology's URL never changes: reversed once per script prefix and URL conf (as package_rows.node_url).
@functools.lru_cache(maxsize=4096)
def _topology_url_under(prefix: str, urlconf: str | None, topology_id: str) -> str:
    return reverse("packages_app:topology", args=(topology_id,))


def _glossary_url() -> str:
    return _glossary_url_under(get_script_prefix(), get_urlconf())


@functools.lru_cache(maxsize=16)
def _glossary_url_under(prefix: str, urlconf: str | None) -> str:
    return reverse("packages_app:glossary")
