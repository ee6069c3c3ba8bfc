"""The catalog's table rows as one tag: 50 rows of the row template cost the catalog page about half its
time in Django's variable lookups, ``{% with %}``, ``{% if %}`` and tag calls (issue 43); built here from
the row's values, each cell the markup the template held, escaped by ``format_html``."""

from __future__ import annotations

import functools
from datetime import datetime

from django import template
from django.template.defaultfilters import capfirst, floatformat, pluralize
from django.urls import get_script_prefix, get_urlconf, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.timezone import localtime

from packages_app.catalog.listing import CatalogRow
from packages_app.catalog.throughput import CatalogThroughput
from packages_app.fleet.served import ServedRevision
from packages_app.models import Revision
from packages_app.templatetags.verdicts import (
    bytes_size,
    headline_badge,
    not_assessed_badge,
    status_badge,
    verdict_badge,
    yes_no,
)

register = template.Library()

DASH = mark_safe('<span class="muted">\u2013</span>')  # constant markup
NO_REVISION = mark_safe('\n      <td colspan="6" class="muted">No revision ingested yet.</td>\n      ')
ROW = (
    '\n    \n    <tr class="{}">\n      <td data-label="Package"><a class="repo" href="{}">'
    '<span class="owner">{}/</span><span class="name">{}</span></a>{}</td>\n      {}\n    </tr>\n    {}\n    '
)
CELLS = (
    '\n      <td data-label="Status">{}</td>\n'
    '      <td data-label="MTP">{}<span class="sub muted nowrap">detected {} · declared {}</span></td>\n'
    '      <td data-label="Revision"><code>{}</code><span class="sub muted nowrap">{}</span>{}</td>\n'
    '      <td data-label="Model">{}<span class="sub muted">{} · {} blocks{}</span></td>\n'
    '      <td data-label="Size" class="num">{}</td>\n'
    '      <td data-label="tok/s on / off" class="num">{} / {}{}</td>\n      '
)
NOTES = (
    '\n    <tr class="row-notes{}"><td colspan="7">'
    "\n      {}\n      {}\n      {}\n      {}\n    </td></tr>\n    "
)
SYNC_ERROR = ' <span class="badge status-failed" title="{}">sync error</span>'
ACTION = '<p class="row-note">{} <span class="action-lead">What to do:</span> <a href="{}#action">{}</a></p>'
UNUSED = (
    '<p class="row-note">{}, but nodes report its MTP weights unused: <a href="{}#strategy-plans">'
    "which nodes, on which release, and what each should do</a>.</p>"
)
FIX = '<p class="row-note fix-note"><a href="{}#fix">{}</a></p>'
SERVED = (
    '<p class="row-note served"><span class="served-lead">{}{} node{} ran</span> <a href="{}?revision={}">'
    "<code>{}</code></a> {} {}{} in the last {} days{}</p>"
)


@register.simple_tag
def catalog_row(row: CatalogRow, glossary_url: str, window_days: int) -> SafeString:
    """``{% catalog_row row glossary_url filters.window_days %}``: a package's row, and its notes row when
    it has notes (what needs action, an unused-MTP alert, the fix pull request, broken revisions served)."""
    owner, name = row.package.owner, row.package.name
    url = package_url(owner, name)
    served_broken = row.served_broken
    classes = ("alert-row" if row.alert or served_broken else "") + (
        " has-notes" if row.status.needs_action or served_broken else ""
    )
    error = row.package.sync_error
    badge = format_html(SYNC_ERROR, error) if error else ""
    rev = row.revision
    cells = _cells(row, rev, glossary_url) if rev else NO_REVISION
    notes = _notes(row, url, glossary_url, window_days, served_broken)
    return format_html(ROW, classes, url, owner, name, badge, cells, notes)


def _cells(row: CatalogRow, rev: Revision, glossary_url: str) -> SafeString:
    if not rev.headline and rev.status == "failed":
        status = not_assessed_badge(rev)
    else:
        status = headline_badge(row.status)
    committed = ymd(rev.committed_at)
    ingest = format_html('<span class="sub">{}</span>', status_badge(rev)) if rev.status != "done" else ""
    schema = f"schema v{rev.schema_version}" if rev.schema_version else "schema \u2013"
    blocks = "?" if rev.block_count is None else rev.block_count
    mtp_layers = format_html(" ({} MTP)", rev.nextn_predict_layers) if rev.nextn_predict_layers else ""
    return format_html(
        CELLS,
        status,
        verdict_badge(rev.verdict),
        yes_no(rev.mtp_detected),
        yes_no(rev.mtp_declared),
        rev.short_sha,
        committed,
        ingest,
        rev.architecture or "\u2013",
        schema,
        blocks,
        mtp_layers,
        size(rev.total_bytes),
        *_throughput(row.throughput, glossary_url),
    )


def ymd(at: datetime | None) -> str:
    """``{{ at|date:"Y-m-d" }}`` without the date filter's format parsing (60 µs a row)."""
    if at is None:
        return ""
    day = localtime(at)
    return f"{day.year:04d}-{day.month:02d}-{day.day:02d}"


def package_url(owner: str, name: str) -> str:
    return _package_url_under(get_script_prefix(), get_urlconf(), owner, name)


# A package's URL never changes: reversed once (45 µs each, 50 a page) per script prefix and URL conf.
@functools.lru_cache(maxsize=4096)
def _package_url_under(prefix: str, urlconf: str | None, owner: str, name: str) -> str:
    return reverse("packages_app:package", args=(owner, name))


def _throughput(tp: CatalogThroughput | None, glossary_url: str) -> tuple[str, str, str]:
    """The tok/s cell's figures with and without MTP (a dash when unknown), and its alert badge."""
    on = None if tp is None else tp.tps_mtp
    off = None if tp is None else tp.tps_no_mtp
    alert = ""
    if tp is not None and tp.alert:
        alert = format_html(
            ' <a class="badge alert" href="{}#runtime-alert" title="Nodes report MTP disabled on a package '
            'whose weights hold MTP">MTP unused</a>',
            glossary_url,
        )
    return (DASH if on is None else tenths(on), DASH if off is None else tenths(off), alert)


# A row's size and tok/s figures as the bytes_size and floatformat:1 filters write them (20 µs a call, three
# a row), kept per value: a package's size never changes, and the medians are a sketch's bin values.
size = functools.lru_cache(maxsize=4096)(bytes_size)


@functools.lru_cache(maxsize=4096)
def tenths(value: float) -> str:
    return floatformat(value, 1)


def _notes(
    row: CatalogRow,
    package_url: str,
    glossary_url: str,
    window_days: int,
    served_broken: list[ServedRevision],
) -> SafeString | str:
    needs_action = row.status.needs_action
    alert = row.throughput is not None and row.throughput.alert
    if not ((row.headline and needs_action) or served_broken or alert or row.fix):
        return ""
    action = ""
    if row.headline and needs_action:
        action = format_html(ACTION, row.headline.sentence, package_url, row.headline.action.text)
    unused = ""
    if alert and not needs_action:
        unused = format_html(UNUSED, capfirst(row.status.label), package_url)
    fix = ""
    if row.fix:
        fix = format_html(FIX, package_url, row.fix.summary)
    served = format_html_join(
        "", "{}", ((_served_note(row, s, package_url, glossary_url, window_days),) for s in served_broken)
    )
    alert_class = " alert-row" if row.alert or served_broken else ""
    return format_html(NOTES, alert_class, action, unused, fix, served)


def _served_note(
    row: CatalogRow, s: ServedRevision, package_url: str, glossary_url: str, window_days: int
) -> SafeString:
    """A broken revision nodes ran in the window: which, by how many nodes, and why it is broken."""
    lead = "" if row.status.needs_action else format_html("Latest {}, but ", row.status.label)
    alert = (
        format_html(' <a class="badge alert" href="{}#runtime-alert">MTP unused</a>', glossary_url)
        if s.alert
        else ""
    )
    reason = format_html(": {}", s.reason) if s.reason else ""
    return format_html(
        SERVED,
        lead,
        s.nodes,
        pluralize(s.nodes),
        package_url,
        s.commit_sha,
        s.short_sha,
        headline_badge(s.headline),
        verdict_badge(s.verdict),
        alert,
        window_days,
        reason,
    )
