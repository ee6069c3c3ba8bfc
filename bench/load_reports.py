"""Loopback load test of the report API against a running server: exactly-once under concurrency.

    DATABASE_URL=... .venv/bin/python bench/load_reports.py --url http://127.0.0.1:8000

Posts 10,000 distinct reports from 20 concurrent clients, plus verbatim replays of 10% and
changed-body replays of 1% of them. Clients share node tokens (4 clients per node) and a replay is
sent by a *different* client than its original, so originals and replays really race. Checks, for
every report: exactly one request got 201; every other request with the same body got 200
duplicate and every one with a changed body got 409; the database holds exactly 10,000 rows; no
other status. Uses the same database as the server (DATABASE_URL) to set up nodes and to count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_REPO = "meshllm/Bench-35B-A3B-UD-Q4_K_XL-layers"
BENCH_SHA = "b" * 40


# --- A small keep-alive HTTP/1.1 client (asyncio): cheap enough to leave the CPU to the server --


@dataclass
class Call:
    path: str
    body: bytes
    token: str
    method: str = "POST"
    content_type: str = "application/json"
    tag: object = None
    status: int = 0
    answer: bytes = b""
    seconds: float = 0.0


class Connection:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def send(self, call: Call) -> None:
        for attempt in range(3):
            try:
                await self._send_once(call)
                return
            except (ConnectionError, asyncio.IncompleteReadError):
                self.close()  # the server closed a kept-alive connection; reconnect and resend
                if attempt == 2:
                    raise

    async def _send_once(self, call: Call) -> None:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = (
            f"{call.method} {call.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: {call.content_type}\r\nContent-Length: {len(call.body)}\r\n"
            + (f"Authorization: Bearer {call.token}\r\n" if call.token else "")
            + "\r\n"
        )
        started = time.perf_counter()
        self.writer.write(head.encode() + call.body)
        await self.writer.drain()
        status_line = await self.reader.readuntil(b"\r\n")
        headers = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
        length = int(headers.split("content-length:", 1)[1].split("\r\n", 1)[0])
        call.answer = await self.reader.readexactly(length)
        call.seconds = time.perf_counter() - started
        call.status = int(status_line.split()[1])
        if "connection: close" in headers:
            self.close()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def run_calls(url: str, lanes: list[list[Call]]) -> float:
    """Run each lane's calls in order on its own connection, all lanes at once; wall seconds."""
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80

    async def lane(calls: list[Call]) -> None:
        connection = Connection(host, port)
        for call in calls:
            await connection.send(call)
        connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(lane(calls) for calls in lanes))
    return time.perf_counter() - started


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))] if ordered else 0.0


# --- Django-side setup and checks -------------------------------------------------------------


def setup_django() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "meshdash.settings")
    import django

    django.setup()


def bench_nodes(count: int, prefix: str = "bench-load") -> list[str]:
    """Fresh nodes (their old reports deleted) with no rate limit; returns their tokens."""
    from packages_app.models import Node, Package, Revision
    from packages_app.nodes import identity as nodes

    Node.objects.filter(name__startswith=prefix).delete()
    package, _ = Package.objects.get_or_create(repo_id=BENCH_REPO, defaults={"tracked": False})
    Revision.objects.get_or_create(package=package, commit_sha=BENCH_SHA, defaults={"mtp_detected": True})
    tokens = []
    for index in range(count):
        issued = nodes.create_node(f"{prefix}-{index:02d}")
        Node.objects.filter(pk=issued.node.pk).update(rate_limit_per_minute=10**9)
        tokens.append(issued.token)
    return tokens


def report_body(rng: random.Random, node: int | None = None) -> dict[str, object]:
    """A simulated node's report; its topology is that of simulated node ``node`` (an index), or of
    any of them when None."""
    from packages_app.management.commands import simulate_nodes as sim

    target = sim.Target(BENCH_REPO, BENCH_SHA, "", 41, rng.choice(["on", "silent-off"]), 3.17)
    name = rng.choice(sim.NODE_NAMES) if node is None else sim.NODE_NAMES[node % len(sim.NODE_NAMES)]
    return sim.make_report(rng, name, target)


# --- The load test ----------------------------------------------------------------------------


@dataclass
class Group:
    """One report_id: the original and its replays; bodies[i] is what call i sent."""

    node: int
    calls: list[Call] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)


def plan(
    tokens: list[str], total: int, clients: int, rng: random.Random
) -> tuple[list[Group], list[list[Call]]]:
    lanes: list[list[Call]] = [[] for _ in range(clients)]
    groups = []
    for index in range(total):
        lane = index % clients
        node = lane % len(tokens)
        body = report_body(rng)
        group = Group(node=node)
        bodies = [json.dumps(body).encode()]
        roll = rng.random()
        if roll < 0.10:
            bodies.append(json.dumps(body, indent=1).encode())  # verbatim: same canonical body
        elif roll < 0.11:
            body["timings"]["predicted_per_second"] += 1.0  # type: ignore[index, operator]
            bodies.append(json.dumps(body).encode())
        for copy_index, raw in enumerate(bodies):
            call = Call("/api/v1/reports", raw, tokens[node], tag=index)
            # replays go to another client of the same node, a few positions on: a real race
            target = lane if copy_index == 0 else (lane + len(tokens)) % clients
            position = (
                len(lanes[target]) if copy_index == 0 else max(0, len(lanes[target]) - rng.randint(0, 3))
            )
            lanes[target].insert(position, call)
            group.calls.append(call)
            group.bodies.append(raw)
        groups.append(group)
    return groups, lanes


def canonical(raw: bytes) -> str:
    return json.dumps(json.loads(raw), sort_keys=True)


def check(groups: list[Group]) -> list[str]:
    problems = []
    for index, group in enumerate(groups):
        winners = [c for c in group.calls if c.status == 201]
        if len(winners) != 1:
            problems.append(
                f"report {index}: {len(winners)} requests got 201 ({[c.status for c in group.calls]})"
            )
            continue
        winning_body = canonical(group.bodies[group.calls.index(winners[0])])
        for call, raw in zip(group.calls, group.bodies, strict=True):
            if call is winners[0]:
                continue
            expected = 200 if canonical(raw) == winning_body else 409
            if call.status != expected or (expected == 200 and not json.loads(call.answer)["duplicate"]):
                problems.append(f"report {index}: a replay got {call.status}, expected {expected}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--reports", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    setup_django()
    from packages_app.models import Report

    tokens = bench_nodes(args.nodes)
    groups, lanes = plan(tokens, args.reports, args.clients, random.Random(args.seed))
    seconds = asyncio.run(run_calls(args.url, lanes))
    calls = [call for lane in lanes for call in lane]
    statuses = Counter(call.status for call in calls)
    rows = Report.objects.filter(node__name__startswith="bench-load").count()
    problems = check(groups)
    latencies = [call.seconds for call in calls]
    print(
        f"{len(calls)} requests in {seconds:.1f} s = {len(calls) / seconds:.0f} req/s; "
        f"statuses {dict(statuses)}"
    )
    print(f"p50 {percentile(latencies, 50) * 1000:.1f} ms, p99 {percentile(latencies, 99) * 1000:.1f} ms")
    print(f"rows stored: {rows} (expected {args.reports}); replay problems: {len(problems)}")
    for problem in problems[:10]:
        print("  ", problem)
    ok = rows == args.reports and not problems and set(statuses) <= {200, 201, 409}
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
