"""Pure: what package-v2 validation reports (mesh-llm's ValidationIssue) and the field checks every part of
it shares (identifiers, paths, digests). No Django, no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass

U32_MAX = 2**32 - 1
HEX40 = re.compile(r"[0-9a-fA-F]{40}")
_LOWER_HEX64 = re.compile(r"[0-9a-f]{64}")
_IDENTIFIER = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Issue:
    """One ValidationIssue: mesh-llm's code string, its path and its message."""

    code: str
    path: str
    message: str


class Issues(list[Issue]):
    def push(self, code: str, path: str, message: str) -> None:
        self.append(Issue(code, path, message))

    def nonempty(self, path: str, value: str) -> None:
        if not value.strip():
            self.push("missing_value", path, "value must not be empty")

    def identifier(self, path: str, value: str) -> None:
        if not _IDENTIFIER.fullmatch(value) or not value.isascii():
            self.push("invalid_identifier", path, f"identifier {value!r} contains unsupported characters")

    def relative_path(self, path: str, value: str) -> None:
        if not is_normalized_relative_path(value):
            self.push("invalid_path", path, f"path {value!r} must be a normalized relative package path")

    def sha256(self, path: str, value: str) -> None:
        if not _LOWER_HEX64.fullmatch(value):
            self.push("invalid_digest", path, "digest must contain 64 lowercase hexadecimal characters")


def is_normalized_relative_path(value: str) -> bool:
    """Rust's Path rules on Unix: no root, no ``..``, no leading ``.``; an inner ``.`` is normalized away."""
    if not value or "\\" in value or "//" in value or value.endswith("/") or value.startswith("/"):
        return False
    segments = value.split("/")
    return segments[0] != "." and ".." not in segments
