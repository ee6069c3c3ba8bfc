"""The charts' JSON script elements: the bytes Django's json_script writes, so text from nodes and repos
(a topology, a strategy, a file name) cannot end the element or open a comment."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.utils.html import json_script

from packages_app.templatetags.chart_data import chart_json, escaped_json

HOSTILE: list[Any] = [
    {"data": [{"name": "</script><script>alert(1)</script>", "x": [1, 2.5, None]}]},
    {"layout": {"title": "<!-- a & b -->", "annotations": [{"text": "<b>x</b> &amp; \u2028\u2029"}]}},
    ["tab\there", 'quote"d', "back\\slash", "\u00e9t\u00e9", "\U0001f600", ">", "<", "&"],
    {"nested": {"deep": [[["</SCRIPT >"]]]}, "n": 1e-9, "big": 10**20, "t": True, "f": False},
    "",
    None,
]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_figure_is_written_as_json_script_writes_it(value: Any) -> None:
    assert chart_json(value, "chart-timeline") == json_script(value, "chart-timeline")


@pytest.mark.parametrize("value", HOSTILE)
def test_the_element_holds_the_figure_and_nothing_of_its_text_ends_it(value: Any) -> None:
    element = str(chart_json(value, "chart-x"))
    body = re.fullmatch(r'<script id="chart-x" type="application/json">(.*)</script>', element, re.S)
    assert body is not None
    assert "<" not in body[1] and ">" not in body[1] and "&" not in body[1]
    assert json.loads(body[1]) == value


def test_the_control_plain_json_of_the_same_figure_would_end_the_element() -> None:
    figure = HOSTILE[0]
    assert "</script>" in json.dumps(figure)  # the attack, written as plain JSON
    assert "</script>" not in escaped_json(figure)
