"""meshdash-agent's shared parts: its error, its one HTTP call (a deadline, a capped body, errors as answers)
and the patterns of what a node sends (package refs, text meshdash cannot store). Standard library only."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

TIMEOUT = 10.0
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
MAX_RETRY_AFTER = 300.0
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REF = re.compile(r"^(?:hf://)?(?P<repo>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)(?:@(?P<rev>[^\s@]+))?$")


class AgentError(Exception):
    """A configuration or node problem the operator must fix; printed as one sentence."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    retry_after: float | None = None

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except RecursionError:  # a hostile node nesting thousands deep: not JSON the agent reads
            raise ValueError("nested too deep") from None


def http(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> Answer:
    """One request with a timeout and a capped body; HTTP errors are answers, not exceptions."""
    request = urllib.request.Request(url, data=body, headers=headers or {}, method=method)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310
            return Answer(response.status, response.read(MAX_RESPONSE_BYTES))
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, exc.read(64 * 1024), _retry_after(exc.headers.get("Retry-After")))


def _retry_after(value: str | None) -> float | None:
    try:
        return min(MAX_RETRY_AFTER, max(0.0, float(value))) if value else None
    except ValueError:
        return None
