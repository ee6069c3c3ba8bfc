"""Pure: reading a stored JSON document back into typed values, defensively.

What the database holds was written by this code's ``to_json`` methods, possibly an older version of them,
or capped by ingest (``ingest.cap_audit``): every reader here takes whatever it is given and returns the
type it promises, with an empty or ``None`` value for what is missing or of the wrong type, never an
exception. The ``from_json`` methods beside each ``to_json`` (audit/model.py, audit/request_defaults.py,
audit/revision.py, manifest/model.py) are built from these, so a page reads attributes, never keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")
_EMPTY: Mapping[str, Any] = {}


def mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else _EMPTY


def text(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def optional_text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def flag(value: Any, default: bool = False) -> bool:
    return value if isinstance(value, bool) else default


def tristate(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def ints(value: Any) -> tuple[int, ...]:
    return tuple(i for v in _items(value) if (i := integer(v)) is not None)


def texts(value: Any) -> tuple[str, ...]:
    return tuple(v for v in _items(value) if isinstance(v, str))


def each(value: Any, read: Callable[[Any], T | None]) -> tuple[T, ...]:
    """Each item of a list read by ``read``; items it cannot read (None) are left out."""
    return tuple(item for v in _items(value) if (item := read(v)) is not None)


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
