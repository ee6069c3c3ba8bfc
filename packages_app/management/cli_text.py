"""How the command-line tools word a judgement: plain words for values, each reason said once.

audit_package and check_manifest print the same kinds of rows (a setting or a release, its outcome, why);
these helpers keep them readable: no ``None`` / ``True`` where a person reads, no outcome repeated at the
start of its own reason ("not pinned down: not pinned down: ..."), rows with the same outcome and reason on
one line, and a problem already listed cited by its code instead of printed again (an invalid manifest's
parse error once, not on every setting and every release).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Row = tuple[str, str, str]  # (setting or release, outcome, why)


def plain(value: Any, missing: str = "not set") -> str:
    """A value as a person reads it: ``yes`` / ``no`` for booleans, ``missing`` for None."""
    if value is None:
        return missing
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def without_repeated_outcome(outcome: str, why: str) -> str:
    """``why`` without a leading copy of its outcome ("admitted: admitted: schema v2" -> "schema v2")."""
    text = why.strip()
    while text.lower().startswith(outcome.lower() + ":"):
        text = text[len(outcome) + 1 :].strip()
    return text


def cite_problems(why: str, problems: Iterable[Mapping[str, Any]]) -> str:
    """``why`` with the text of each problem listed above replaced by a reference to its code."""
    for problem in problems:
        code, message = str(problem.get("code", "")), str(problem.get("message", ""))
        if code and message and message in why:
            why = why.replace(f"{code}: {message}", f"{code}, above").replace(message, f"{code}, above")
    return why


def grouped_lines(rows: Sequence[Row], problems: Iterable[Mapping[str, Any]] = ()) -> list[str]:
    """One indented line per (outcome, reason): the names that share both joined, in their first order."""
    listed = list(problems)
    groups: dict[tuple[str, str], list[str]] = {}
    for name, outcome, why in rows:
        reason = cite_problems(without_repeated_outcome(outcome, why), listed)
        groups.setdefault((outcome, reason), []).append(name)
    return [
        f"  {', '.join(names)}: {outcome}" + (f": {reason}" if reason else "")
        for (outcome, reason), names in groups.items()
    ]
