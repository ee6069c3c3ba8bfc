"""Template filters over the verdict vocabulary (templates never list verdict names) and decimal sizes,
and the badges every table row repeats (verdict, yes/no, ingest status) as tags: an ``{% include %}``
per cell cost the catalog's 50 rows about a third of their rendering time."""

from __future__ import annotations

import functools
from typing import Any

from django import template
from django.conf import settings
from django.urls import get_script_prefix, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from packages_app.glossary import PROBLEMS, UNKNOWN, anchor, format_decimal_size
from packages_app.verdicts import (
    Cause,
    NotAssessed,
    Status,
    is_consistent,
    not_assessed,
    status_of,
    verdict_of,
)

register = template.Library()


@register.filter
def consistent_verdict(verdict: str | None) -> bool:
    """``{% if verdict|consistent_verdict %}``: declaration and weights agree."""
    return is_consistent(verdict or "")


@register.filter
def glossary_anchor(name: str | None, kind: str = "verdict") -> str:
    """``{{ verdict|glossary_anchor }}``: the fragment of the glossary entry explaining ``name``."""
    return anchor(kind, name or "unaudited")


@register.filter
def bytes_size(value: int | None) -> SafeString:
    """The one way a size is shown: decimal units (kB, MB, GB: 10^3 steps), the exact bytes on hover."""
    if value is None or isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return format_html('<span class="muted">{}</span>', UNKNOWN)
    exact = f"{value:,} bytes"
    return format_html('<span class="size" title="{}">{}</span>', exact, format_decimal_size(value))


@register.filter
def problem_anchor(code: str | None) -> str:
    """The glossary entry of a problem code; a manifest validation code mesh-llm defines links to the
    section that explains those codes."""
    return anchor("problem", code) if code in PROBLEMS else "problems"


def _glossary_url() -> str:
    return _glossary_under(get_script_prefix())


@functools.lru_cache(maxsize=8)
def _glossary_under(prefix: str) -> str:
    # Badges link to the glossary hundreds of times a page: resolve it once per script prefix.
    return reverse("packages_app:glossary")


@register.simple_tag
def verdict_badge(verdict: str | None) -> SafeString:
    """``{% verdict_badge verdict %}``: the MTP verdict as a badge in its tone, linking to its entry."""
    return _verdict_badge_under(get_script_prefix(), verdict)


# A badge is the same markup for every row with that value: the catalog's 50 rows built each twice or
# more (about 40 µs a badge on the bench machine), now once per value and script prefix.
@functools.lru_cache(maxsize=256)
def _verdict_badge_under(prefix: str, verdict: str | None) -> SafeString:
    glossary = _glossary_under(prefix)
    known = verdict_of(verdict)
    if known is None:
        text = verdict or "not audited"
        return format_html(
            '<a class="badge verdict verdict-none tone-none" href="{}#{}">{}</a>',
            glossary,
            Status.NOT_ASSESSED.anchor,
            text,
        )
    return format_html(
        '<a class="badge verdict verdict-{} tone-{}" href="{}#{}" title="MTP: {}">{}</a>',
        known.value,
        known.tone.value,
        glossary,
        known.anchor,
        known.sentence,
        known.value,
    )


@register.simple_tag
def headline_badge(status: Status | str | None) -> SafeString:
    """``{% headline_badge status %}``: a headline status as a badge in its tone, linking to its entry."""
    known = status if isinstance(status, Status) else status_of(status)
    return _headline_badge_under(get_script_prefix(), known)


@functools.lru_cache(maxsize=64)
def _headline_badge_under(prefix: str, known: Status) -> SafeString:
    return format_html(
        '<a class="badge headline headline-{} tone-{}" href="{}#{}" title="{}">{}</a>',
        known.value,
        known.tone.value,
        _glossary_under(prefix),
        known.anchor,
        known.sentence,
        known.label,
    )


@register.filter
def why_not_assessed(revision: Any) -> NotAssessed:
    """``{% with why=revision|why_not_assessed %}``: why a revision has no headline, worded once for
    every surface (verdicts.not_assessed)."""
    return not_assessed(revision.status, revision.error or "", settings.MESHDASH_HUB_DEV)


@register.simple_tag
def not_assessed_badge(revision: Any) -> SafeString:
    """``{% not_assessed_badge revision %}``: the headline badge of a revision without one, saying why."""
    why = why_not_assessed(revision)
    known = Status.NOT_ASSESSED
    return format_html(
        '<a class="badge headline headline-{} tone-{}" href="{}#{}" title="{}">{}</a>',
        known.value,
        known.tone.value,
        _glossary_url(),
        known.anchor,
        why.sentence,
        why.label,
    )


@register.simple_tag
def cause_badge(cause: Cause) -> SafeString:
    """``{% cause_badge advice.cause %}``: why a node needs action, in its tone, linking to its entry."""
    return cause_badge_under(get_script_prefix(), cause)


# As the verdict badge: the same markup for every plan of its cause (up to 50 on a package page).
@functools.lru_cache(maxsize=64)
def cause_badge_under(prefix: str, cause: Cause) -> SafeString:
    return format_html(
        '<a class="badge cause cause-{} tone-{}" href="{}#{}" title="{}">{}</a>',
        cause.value,
        cause.tone.value,
        _glossary_under(prefix),
        cause.anchor,
        cause.sentence,
        cause.label,
    )


@register.filter
def tone_of(status: Status | str | None) -> str:
    """``{{ status|tone_of }}``: the tone (CSS ``tone-*`` class suffix) of a headline status."""
    known = status if isinstance(status, Status) else status_of(status)
    return known.tone.value


@register.simple_tag
def yes_no(value: Any) -> SafeString:
    """``{% yes_no value %}``: yes, no, or a dash when unknown (None)."""
    if value is True:
        return mark_safe('<span class="yes">yes</span>')  # constants only
    if value is False:
        return mark_safe('<span class="no">no</span>')
    return mark_safe('<span class="muted">\u2013</span>')


@register.simple_tag
def status_badge(revision: Any) -> SafeString:
    """``{% status_badge revision %}``: the ingest status, with files read while it runs."""
    status, error = revision.status, revision.error
    title = format_html(' title="{}"', error) if error else ""
    badge = format_html(
        '<a class="badge status status-{}" href="{}#runtime-{}"{}>{}</a>',
        status,
        _glossary_url(),
        status,
        title,
        status,
    )
    if status not in ("running", "queued") or not revision.files_total:
        return badge
    done, total = revision.files_done, revision.files_total
    progress = '<progress max="{}" value="{}" aria-label="files read">{}/{}</progress>'
    return format_html(
        "{} " + progress + ' <span class="muted">{}/{}</span>',
        badge,
        total,
        done,
        done,
        total,
        done,
        total,
    )


@register.filter
def get_item(mapping: Any, key: str) -> Any:
    """``{{ counts|get_item:name }}``: a mapping's value for a key that is not an identifier (0 if absent)."""
    return mapping.get(key, 0) if isinstance(mapping, dict) else 0
