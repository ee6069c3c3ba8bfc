"""Template filters over the verdict vocabulary (templates never list verdict names) and decimal sizes."""

from __future__ import annotations

from django import template

from packages_app.glossary import PROBLEMS, anchor, format_decimal_size
from packages_app.verdicts import is_consistent

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
def decimal_size(value: int | None) -> str:
    """Bytes in decimal units as the Hub shows them (1 GB = 10^9 bytes); a dash for unknown."""
    return format_decimal_size(value)


@register.filter
def problem_anchor(code: str | None) -> str:
    """The glossary entry of a problem code; a manifest validation code mesh-llm defines links to the
    section that explains those codes."""
    return anchor("problem", code) if code in PROBLEMS else "problems"
