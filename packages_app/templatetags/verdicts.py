"""Template filters over the verdict vocabulary, so templates never list verdict names themselves."""

from __future__ import annotations

from django import template

from packages_app.verdicts import is_consistent

register = template.Library()


@register.filter
def consistent_verdict(verdict: str | None) -> bool:
    """``{% if verdict|consistent_verdict %}``: declaration and weights agree."""
    return is_consistent(verdict or "")
