"""Pure: small text helpers for findings: JSON type names, safe renderings of hostile values, layer lists."""

from __future__ import annotations

import json
import re
from typing import Any

_DRIVE = re.compile(r"[A-Za-z]:")

# --- reporting and typed reads ----------------------------------------------------------------


def json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    names = {str: "a string", float: "a number", dict: "an object", list: "an array", type(None): "null"}
    return names.get(type(value), "a value")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def show(value: Any) -> str:
    """A short, ASCII-safe rendering of a hostile value for a message."""
    if isinstance(value, dict | list):
        return json_type(value)
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def describe_layers(indices: list[int]) -> str:
    """'layer 40' or 'layers 3-5, 9' (at most ten ranges)."""
    runs: list[list[int]] = []
    for index in sorted(set(indices)):
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in runs[:10]]
    more = ", ..." if len(runs) > 10 else ""
    noun = "layer" if len(indices) == 1 else "layers"
    return f"{noun} {', '.join(parts)}{more}"


def unsafe_path_reason(path: str) -> str | None:
    """Why an artifact path could escape the package folder, or None when it is a plain relative path."""
    if not path:
        return "is empty"
    if path.startswith("/") or _DRIVE.match(path):
        return "is absolute"
    if "\\" in path:
        return "contains a backslash"
    if any(ord(ch) < 32 for ch in path):
        return "contains a control character"
    segments = path.split("/")
    if ".." in segments:
        return "climbs out of the package with '..'"
    if "" in segments or "." in segments:
        return "has an empty or '.' segment"
    return None


def safe_text(text: str, limit: int = 280) -> str:
    """A hostile name inside a message: ASCII with backslash escapes (no lone surrogates), capped."""
    shown = text.encode("ascii", "backslashreplace").decode("ascii")
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."
