"""``{{ figure|chart_json:"chart-id" }}``: a chart's figure as a JSON script element, the bytes Django's
``json_script`` filter writes.

Why not ``json_script`` itself: it escapes ``<``, ``>`` and ``&`` with ``str.translate`` and a mapping,
which looks every character up in Python's mapping. A package page's timeline is tens of kilobytes of JSON
(57 kB on the seeded busiest revision at 10,000 nodes): ``json_script`` took 5.6 ms to write it, this 1.2 ms
(most of it ``json.dumps``; the three ``str.replace`` calls give the same text in tens of microseconds).
tests/test_chart_data.py checks the output against ``json_script``'s for hostile text.
"""

from __future__ import annotations

import json
from typing import Any

from django import template
from django.core.serializers.json import DjangoJSONEncoder
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

register = template.Library()


def escaped_json(value: Any) -> str:
    """``value`` as JSON with ``<``, ``>`` and ``&`` as unicode escapes (as ``json_script`` writes them): no
    ``</script>`` or ``<!--`` can end or bend the element it is written into."""
    text = json.dumps(value, cls=DjangoJSONEncoder)
    return text.replace("&", "\\u0026").replace("<", "\\u003C").replace(">", "\\u003E")


@register.filter(is_safe=True)
def chart_json(value: Any, element_id: str) -> SafeString:
    # Safe: escaped_json leaves no <, > or & in the text (tests/test_chart_data.py, with its control).
    body = mark_safe(escaped_json(value))  # noqa: S308
    return format_html('<script id="{}" type="application/json">{}</script>', element_id, body)
