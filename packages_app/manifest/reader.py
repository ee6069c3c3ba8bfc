"""Pure: problem collection (capped) and typed reads of JSON objects, each failure reported with its path."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from packages_app.layout import MANIFEST_FILE
from packages_app.manifest.model import (
    _DRIVE,
    _HEX64,
    _IDENTIFIER,
    _LOWER_HEX64,
    MAX_PROBLEMS,
    Json,
    Problem,
    Severity,
)

# --- reporting and typed reads ----------------------------------------------------------------


class _Report:
    """Collects problems, capped; a dropped error still leaves an error behind."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.dropped = 0
        self.dropped_errors = 0

    def add(self, code: str, message: str, severity: Severity = "error", **evidence: Any) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(Problem(code, severity, message, evidence))
            return
        self.dropped += 1
        self.dropped_errors += severity == "error"

    def finish(self) -> list[Problem]:
        if self.dropped:
            severity: Severity = "error" if self.dropped_errors else "warning"
            message = f"{MANIFEST_FILE} has {self.dropped} more problems that are not listed."
            self.problems.append(
                Problem("too_many_problems", severity, message, {"not_listed": self.dropped})
            )
        return self.problems


@dataclass(frozen=True)
class _Codes:
    missing: str
    type: str
    value: str


_SHAPE = _Codes("missing_key", "invalid_type", "invalid_value")
_GEN = _Codes("invalid_generation_value", "invalid_generation_value", "invalid_generation_value")


class _Reader:
    """Typed reads from one JSON object; each missing or wrong key is reported once, with its path."""

    def __init__(self, report: _Report, obj: Json, where: str, codes: _Codes = _SHAPE) -> None:
        self.report = report
        self.obj = obj
        self.where = where
        self.codes = codes

    def path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(self, code: str, key: str, text: str, **evidence: Any) -> None:
        self.report.add(code, f"{MANIFEST_FILE} {self.path(key)} {text}.", path=self.path(key), **evidence)

    def _get(self, key: str, kind: str, required: bool, missing_code: str | None) -> Any:
        if key not in self.obj:
            if required:
                self.fail(missing_code or self.codes.missing, key, "is missing")
            return None
        value = self.obj[key]
        if _json_type(value) != kind:
            self.fail(self.codes.type, key, f"must be {kind}, not {_json_type(value)}")
            return None
        return value

    def text(self, key: str, required: bool = True, missing_code: str | None = None) -> str | None:
        value: str | None = self._get(key, "a string", required, missing_code)
        return value

    def integer(
        self, key: str, required: bool = True, minimum: int = 0, missing_code: str | None = None
    ) -> int | None:
        value: int | None = self._get(key, "an integer", required, missing_code)
        if value is not None and value < minimum:
            self.fail(self.codes.value, key, f"must be at least {minimum}, not {value}")
            return None
        return value

    def mapping(self, key: str, required: bool = True) -> Json | None:
        value: Json | None = self._get(key, "an object", required, None)
        return value

    def array(self, key: str, required: bool = True) -> list[Any] | None:
        value: list[Any] | None = self._get(key, "an array", required, None)
        return value

    def reject_unknown(self, allowed: frozenset[str]) -> None:
        for key in self.obj:
            if key not in allowed:
                self.fail("unknown_key", key, "is not a schema v2 key, and schema v2 rejects unknown keys")


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    names = {str: "a string", float: "a number", dict: "an object", list: "an array", type(None): "null"}
    return names.get(type(value), "a value")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _show(value: Any) -> str:
    """A short, ASCII-safe rendering of a hostile value for a message."""
    if isinstance(value, dict | list):
        return _json_type(value)
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _name(name: str) -> str:
    return name if _IDENTIFIER.fullmatch(name) and len(name) <= 64 else _show(name)


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


def _digest(r: _Reader, key: str, lowercase: bool, required: bool = True) -> str | None:
    value = r.text(key, required=required)
    if value is None:
        return None
    pattern = _LOWER_HEX64 if lowercase else _HEX64
    if not pattern.fullmatch(value):
        rule = "64 lowercase hex digits" if lowercase else "64 hex digits"
        r.fail("invalid_digest", key, f"must be {rule}, not {_show(value)}")
        return None
    return value.lower()


def _safe_path(r: _Reader, key: str) -> str | None:
    value = r.text(key)
    if value is None:
        return None
    reason = unsafe_path_reason(value)
    if reason:
        r.fail("unsafe_artifact_path", key, f"{_show(value)} {reason}; paths must stay inside the package")
        return None
    return value


def _as_object(report: _Report, value: Any, where: str, codes: _Codes = _SHAPE) -> Json | None:
    if isinstance(value, dict):
        return value
    report.add(codes.type, f"{MANIFEST_FILE} {where} must be an object, not {_json_type(value)}.", path=where)
    return None


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
