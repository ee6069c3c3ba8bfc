"""Pure: bounded JSON loading of manifest bytes (size, values, depth, 64-bit numbers, duplicate keys), within
the input budget every parser of untrusted input shares (packages_app.input_budget)."""

from __future__ import annotations

import json
import math
import re
from typing import Any, NoReturn

from packages_app import input_budget
from packages_app.input_budget import InputBudget, OverBudget
from packages_app.layout import MANIFEST_FILE, MAX_MANIFEST_BYTES
from packages_app.manifest.model import (
    MAX_DEPTH,
    MAX_INT,
    MAX_PROBLEMS,
    Json,
)

_LONG_NUMBER = re.compile(rb"[0-9]{19}|[eE][+-]?[0-9]{3}")
BUDGET = InputBudget.for_bytes(MANIFEST_FILE, MAX_MANIFEST_BYTES, MAX_DEPTH)

# --- JSON loading -----------------------------------------------------------------------------


class Rejected(Exception):
    """Bytes the loader refuses: ``code`` is the Problem code, ``message`` the sentence naming why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def load_json_strict(data: bytes) -> tuple[Any, list[str]]:
    """The JSON value and the keys repeated inside one object; raises Rejected past the parser's limits."""
    duplicates: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> Json:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen and len(duplicates) < MAX_PROBLEMS:
                duplicates.append(key)
            seen.add(key)
        return dict(items)

    try:
        input_budget.check_json_bytes(data, BUDGET)  # counted before anything else reads the bytes
    except OverBudget as exc:
        raise Rejected("manifest_too_large", exc.message) from None
    # The number hooks run in Python per number, 4x slower than json's C code on a 16 MiB body of
    # numbers; only a 19-digit run or a 3-digit exponent can leave 64 bits or overflow a float.
    slow = _LONG_NUMBER.search(data) is not None

    def loads(text: str) -> Any:
        return json.loads(
            text,
            object_pairs_hook=pairs,
            parse_int=_parse_int if slow else None,
            parse_float=_parse_float if slow else None,
            parse_constant=_reject_constant,
        )

    try:
        value = input_budget.load_json(data, BUDGET, loads=loads)
    except OverBudget as exc:
        code = "too_deeply_nested" if exc.limit == "depth" else "manifest_too_large"
        raise Rejected(code, _nesting_message() if exc.limit == "depth" else exc.message) from None
    except UnicodeDecodeError as exc:
        raise Rejected(
            "invalid_json", f"{MANIFEST_FILE} is not UTF-8 (bad byte at offset {exc.start})."
        ) from None
    except json.JSONDecodeError as exc:
        raise Rejected(
            "invalid_json",
            f"{MANIFEST_FILE} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}.",
        ) from None
    return value, duplicates


def load_json(data: bytes) -> tuple[Any, str | None]:
    """The JSON value if it is within the parser's limits (size, depth, 64-bit integers, finite numbers,
    no NaN); else None and why, in one sentence.

    What a database stores and a page shows must pass here: a manifest nested 950 deep stored as parsed
    JSON failed every later read of that row (page, API, admin) with RecursionError, and 1e999999 stored
    as Infinity fits no JSON column.
    """
    if len(data) > MAX_MANIFEST_BYTES:
        return None, f"{MANIFEST_FILE} is {len(data)} bytes, over the {MAX_MANIFEST_BYTES}-byte limit"
    try:
        return load_json_strict(data)[0], None
    except Rejected as exc:
        return None, exc.message


def _nesting_message() -> str:
    return f"{MANIFEST_FILE} nests objects or arrays more than {MAX_DEPTH} levels deep."


def _parse_int(text: str) -> int:
    # Checked on the digits first: int() of a 100,000-digit string is slow and may raise.
    if len(text.lstrip("-")) > 19 or abs(int(text)) > MAX_INT:
        raise Rejected("invalid_number", f"{MANIFEST_FILE} holds the integer {text[:24]}..., beyond 64 bits.")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise Rejected("invalid_number", f"{MANIFEST_FILE} holds the number {text[:24]}, which overflows.")
    return value


def _reject_constant(name: str) -> NoReturn:
    raise Rejected("invalid_json", f"{MANIFEST_FILE} holds {name}, which is not JSON.")
