"""meshdash-agent's spool and sender: every body written to disk first and deleted only once meshdash has
answered (at-least-once), capped by size and age; 429 and 503 honoured with Retry-After.
Standard library only."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    from packages_app.nodes.agent_common import http
except ModuleNotFoundError:  # run as a file (python3 packages_app/nodes/agent.py): its neighbour
    from agent_common import http  # type: ignore[no-redef]
try:
    from packages_app.nodes.agent_config import SPOOL_MAX_AGE, SPOOL_MAX_BYTES, Config
except ModuleNotFoundError:  # run as a file (python3 packages_app/nodes/agent.py): its neighbour
    from agent_config import SPOOL_MAX_AGE, SPOOL_MAX_BYTES, Config  # type: ignore[no-redef]

log = logging.getLogger("meshdash.agent")

MAX_BACKOFF = 60.0
REPORT_BATCH = 200
# meshdash's answers that say the body itself is wrong: sending it again would be refused again.
DROP_STATUSES = frozenset({400, 413, 422})


class Spool:
    """Outgoing bodies as files, oldest first; a file is deleted once meshdash has answered it.

    Capped: past ``max_bytes`` in all, or ``max_age`` seconds old, the oldest files are dropped (and
    counted in ``dropped``). The sizes are kept in memory, so a put costs no directory listing.
    """

    def __init__(
        self, directory: Path, max_bytes: int = SPOOL_MAX_BYTES, max_age: float = SPOOL_MAX_AGE
    ) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_bytes, self.max_age = max_bytes, max_age
        self.dropped = 0
        self._lock = threading.Lock()
        self._sizes: dict[Path, int] = {}
        for path in sorted(self.directory.glob("*.json")):
            with contextlib.suppress(OSError):
                self._sizes[path] = path.stat().st_size
        self._bytes = sum(self._sizes.values())

    def put(self, kind: str, body: dict[str, Any]) -> Path:
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.{kind}.json"
        data = json.dumps(body).encode()
        tmp = self.directory / (name + ".tmp")
        tmp.write_bytes(data)
        path = self.directory / name
        tmp.replace(path)  # atomic: a crash leaves a whole file or none
        with self._lock:
            self._sizes[path] = len(data)
            self._bytes += len(data)
            self._trim()
        return path

    def pending(self) -> Iterator[tuple[Path, str, dict[str, Any]]]:
        with self._lock:
            self._trim()
            paths = sorted(self._sizes)
        for path in paths:
            try:
                body = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # being written, or already sent by another thread
            yield path, path.name.split(".")[-2], body

    def remove(self, path: Path) -> None:
        """A body meshdash has answered."""
        path.unlink(missing_ok=True)
        with self._lock:
            self._bytes -= self._sizes.pop(path, 0)

    def count(self) -> int:
        with self._lock:
            return len(self._sizes)

    @property
    def size(self) -> int:
        with self._lock:
            return self._bytes

    def _trim(self) -> None:
        """Drop the oldest files past the size cap, and every file past the age cap (lock held)."""
        oldest_kept = time.time_ns() - int(self.max_age * 1e9)
        too_old = [p for p in self._sizes if _spooled_at(p) < oldest_kept]
        dropped_bytes = sum(self._sizes[p] for p in too_old)
        for path in too_old:
            self._drop(path)
        over = sorted(self._sizes) if self._bytes > self.max_bytes else []
        for path in over:
            if self._bytes <= self.max_bytes:
                break
            dropped_bytes += self._sizes[path]
            self._drop(path)
        if dropped_bytes:
            log.warning(
                "spool over its caps (%d bytes, %.0f s): dropped the oldest %d bytes; %d bodies since start",
                self.max_bytes,
                self.max_age,
                dropped_bytes,
                self.dropped,
            )

    def _drop(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        self._bytes -= self._sizes.pop(path)
        self.dropped += 1


def _spooled_at(path: Path) -> int:
    """The time_ns a spool file was written, from its name (a foreign name counts as new)."""
    stamp = path.name.split("-", 1)[0]
    return int(stamp) if stamp.isdigit() else time.time_ns()


@dataclass
class Sender:
    """Sends spooled bodies in order; stops at the first that meshdash cannot take now."""

    config: Config
    spool: Spool
    dry_run: bool = False
    wait_until: float = 0.0
    failures: int = 0
    sent: int = 0
    refused: int = 0
    endpoints: dict[str, str] = field(
        default_factory=lambda: {
            "runs": "/api/v1/runs",
            "reports": "/api/v1/reports/batch",
            "baselines": "/api/v1/baselines",
        }
    )

    def flush(self) -> bool:
        """True when the spool is empty afterwards."""
        if time.monotonic() < self.wait_until:
            return False
        for path, kind, body in self.spool.pending():
            if not self._send(kind, body):
                return False
            self.spool.remove(path)
        return True

    def _send(self, kind: str, body: dict[str, Any]) -> bool:
        if self.dry_run:
            print(json.dumps({"would_send": kind, "body": body}, indent=2))
            return True
        url = self.config.meshdash_url.rstrip("/") + self.endpoints[kind]
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.config.token}"}
        try:
            answer = http("POST", url, json.dumps(body).encode(), headers)
        except OSError as exc:
            return self._back_off(None, f"meshdash unreachable ({exc})")
        if answer.status in DROP_STATUSES:
            # The body itself is wrong: sending it again would be refused again, and block the rest.
            log.error("meshdash refused a %s body with %s: %s", kind, answer.status, answer.body[:500])
            self.refused += 1
        elif not 200 <= answer.status < 300:
            # 401/403 (a token being rotated), 404 (a proxy or an old meshdash), 429, 5xx: not about
            # the body, so it is kept and sent again later; the spool's caps bound what waits.
            return self._back_off(answer.retry_after, f"meshdash answered {answer.status}")
        else:
            self.sent += 1
        self.failures = 0
        return True

    def _back_off(self, retry_after: float | None, reason: str) -> bool:
        self.failures += 1
        delay = retry_after if retry_after is not None else min(MAX_BACKOFF, 2.0 ** min(self.failures, 6))
        self.wait_until = time.monotonic() + delay
        log.warning("%s; %d waiting in the spool, retrying in %.0f s", reason, self.spool.count(), delay)
        return False
