"""Pure: what one body of untrusted input may cost a parser. One budget, used by every parser of input a
node, a webhook or the Hub sends: JSON reports, runs and certify reports (web/api.py), OTLP/JSON and
OTLP/protobuf (nodes/otlp.py), Hub webhooks (web/webhooks.py), model-package.json (manifest/jsonload.py).

Three limits, each checked before the parser builds anything it would charge for:

- **bytes**: the body as read (inflated, when it was gzipped);
- **values**: every object, array, key and scalar, the items of an array included. For JSON the bound is
  counted at C speed with ``bytes.count`` (an array of n values has n - 1 commas, an object of n members
  n colons and n - 1 commas), so ``["","",...]`` costs its commas, not a pass of ``json.loads`` and then
  one of protobuf's JSON parser per item (issue 48: a 1,120-byte gzip of empty strings in
  ``resource.entityRefs[].idKeys`` cost 0.3-0.5 CPU s). The count is an upper bound (a comma inside a
  string counts too). The values allowed grow with the body's own size, one for every
  ``bytes_per_value`` bytes of it (at least VALUES_FLOOR), so a body costs at most a few times what a
  well-formed body of its size costs: real report batches spend 12.6 bytes a value, manifests 18, the
  cheapest hostile shapes (``[0,0,...]``, ``[[],[],...]``, ``{"":0,...}``) 2-4 (bench/bench_input_budget.py);
- **depth**: nesting; ``json.loads`` stops at Python's recursion limit (RecursionError, caught), and the
  parsed value is then measured level by level, which costs one step per container.

A refusal is an ``OverBudget`` naming the limit and the figure, for a 413 (or the parser's own refusal).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

BYTES_PER_VALUE = 8  # the default: real bodies spend 11-18 bytes a value, the hostile shapes 2-4
VALUES_FLOOR = 1024  # a small body may always hold this many values
_CONTAINERS = frozenset({dict, list})


class OverBudget(ValueError):
    """A body over one limit of its budget: ``limit`` is "bytes", "values" or "depth"."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        self.limit = limit
        self.message = message


@dataclass(frozen=True)
class InputBudget:
    """What one body may cost: its bytes, its values (array items included) and its nesting."""

    what: str  # how a refusal names the body: "The body", "The export", "model-package.json"
    max_bytes: int
    max_values: int
    max_depth: int
    bytes_per_value: int = 0  # 0: max_values whatever the size; else one value per this many body bytes

    @classmethod
    def for_bytes(
        cls, what: str, max_bytes: int, max_depth: int, bytes_per_value: int = BYTES_PER_VALUE
    ) -> InputBudget:
        """Values allowed by the body's size: one per ``bytes_per_value`` bytes, VALUES_FLOOR at least."""
        values = max(VALUES_FLOOR, max_bytes // bytes_per_value)
        return cls(what, max_bytes, values, max_depth, bytes_per_value)

    def values_for(self, size: int) -> int:
        """The values a body of ``size`` bytes may hold."""
        if not self.bytes_per_value:
            return self.max_values
        return min(self.max_values, max(VALUES_FLOOR, size // self.bytes_per_value))

    def check_bytes(self, size: int) -> None:
        if size > self.max_bytes:
            raise OverBudget("bytes", f"{self.what} is {size} bytes, over the {self.max_bytes}-byte limit.")

    def check_values(self, count: int, size: int) -> None:
        allowed = self.values_for(size)
        if count > allowed:
            per = f", one per {self.bytes_per_value} bytes of a {size}-byte body" * bool(self.bytes_per_value)
            raise OverBudget(
                "values",
                f"{self.what} holds more than {allowed} values (objects, arrays, keys and every item of an "
                f"array count{per}).",
            )

    def depth_refusal(self) -> OverBudget:
        return OverBudget(
            "depth", f"{self.what} nests objects or arrays more than {self.max_depth} levels deep."
        )


def json_value_bound(raw: bytes) -> int:
    """At least the number of values ``json.loads(raw)`` would build (objects, arrays, keys, scalars)."""
    return raw.count(b",") + raw.count(b":") + raw.count(b"[") + raw.count(b"{") + 1


def check_json_bytes(raw: bytes, budget: InputBudget) -> None:
    """Refuse JSON bytes over the budget's bytes or values before anything parses them."""
    budget.check_bytes(len(raw))
    budget.check_values(json_value_bound(raw), len(raw))


def load_json(
    raw: bytes | str,
    budget: InputBudget,
    *,
    loads: Callable[[str], Any] | None = None,
) -> Any:
    """``json.loads`` within the budget: bytes and values counted first, depth measured after.

    ``loads`` replaces ``json.loads`` for a caller with its own hooks (duplicate keys, 64-bit numbers);
    its errors pass through, except RecursionError, which is the depth refusal.
    """
    data = raw.encode() if isinstance(raw, str) else raw
    check_json_bytes(data, budget)
    try:
        value = (loads or json.loads)(raw if isinstance(raw, str) else raw.decode("utf-8"))
    except RecursionError:
        raise budget.depth_refusal() from None
    check_depth(value, budget)
    return value


def check_depth(value: Any, budget: InputBudget) -> None:
    """Refuse a parsed value nested past the budget's depth (the top level is depth 1)."""
    if nesting_exceeds(value, budget.max_depth):
        raise budget.depth_refusal()


def nesting_exceeds(value: Any, limit: int) -> bool:
    """Level by level; empty containers and scalars are dropped at C speed (16 MiB of [] is 5M lists)."""
    level, depth = ([value] if type(value) in _CONTAINERS else []), 1
    while level:
        if depth > limit:
            return True
        below: list[Any] = []
        for node in level:
            children = node.values() if isinstance(node, dict) else node
            if not _CONTAINERS.isdisjoint(map(type, children)):
                if depth == limit:  # a child container, even an empty one, is one level deeper
                    return True
                below.extend(c for c in filter(None, children) if type(c) in _CONTAINERS)
        level, depth = below, depth + 1
    return False
