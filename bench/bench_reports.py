"""Report API and OTLP ingest throughput and latency under gunicorn + PostgreSQL, beside a trivial one.

    .venv/bin/python bench/bench_reports.py [--workers 4] [--worker-class sync] [--clients 20]

Recreates the database named by --database-url (default: meshdash_bench on the local
PostgreSQL), migrates it, starts gunicorn on a loopback port with the Redis cache, and drives it
with 20 concurrent keep-alive clients: GET /api/v1/ping (the trivial endpoint), single reports,
batches of 100, and OTLP/HTTP trace exports of 512 stage.openai_decode spans (POST /v1/traces,
protobuf, spans joined to the bench revision by a registered run id). Prints a markdown table and
whether each target is met (OTLP spans/s at least the batched reports/s). Then runs the
throughput selectors on the stored rows, so PostgreSQL's percentile_cont path is exercised too.

Batches are also stored with rollups off (a second server) and, with ``--baseline GIT_REF``, by the
code at that ref (a third server run from a worktree under /tmp, on its own database migrated by
its own migrations), alternated in rounds: the rollups' and this code's cost as ratios of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import load_reports as lr

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"
GUNICORN = ROOT / ".venv" / "bin" / "gunicorn"


@dataclass
class Row:
    name: str
    requests: int
    reports: int
    seconds: float
    p50: float
    p99: float
    errors: int
    app_cpu: float  # CPU seconds the gunicorn processes used during the run
    db_cpu: float  # CPU seconds PostgreSQL and Redis used during the run

    @property
    def units(self) -> int:
        return self.reports or self.requests

    def cells(self) -> list[str]:
        return [
            self.name,
            str(self.requests),
            str(self.reports),
            f"{self.seconds:.1f}",
            f"{self.requests / self.seconds:.0f}",
            f"{self.reports / self.seconds:.0f}" if self.reports else "-",
            f"{self.p50 * 1000:.1f}",
            f"{self.p99 * 1000:.1f}",
            str(self.errors),
            f"{self.app_cpu / self.units * 1000:.2f}",
            f"{self.db_cpu / self.units * 1000:.2f}",
            f"{2 * self.units / (self.app_cpu + self.db_cpu):.0f}",
        ]


def server_env(args: argparse.Namespace) -> dict[str, str]:
    return os.environ | {
        "DATABASE_URL": args.database_url,
        "REDIS_URL": args.redis_url,
        "DEBUG": "false",
        "SECRET_KEY": "bench-only",
        "ALLOWED_HOSTS": "127.0.0.1",
        "LOG_LEVEL": "ERROR",
        "MESHDASH_NODE_RATE_LIMIT": "0",
        "SECURE_SSL_REDIRECT": "false",  # plain HTTP on loopback: no TLS proxy in front of this bench
    }


def recreate_database(args: argparse.Namespace) -> None:
    parts = urllib.parse.urlsplit(args.database_url)
    name, host = (
        parts.path.lstrip("/"),
        ["-h", parts.hostname or "127.0.0.1", "-U", parts.username or "postgres"],
    )
    subprocess.run(["dropdb", *host, "--if-exists", name], check=True)
    subprocess.run(["createdb", *host, name], check=True)
    subprocess.run([PYTHON, "manage.py", "migrate", "-v0"], cwd=ROOT, env=server_env(args), check=True)


def start_server(
    args: argparse.Namespace, port: int, tree: Path = ROOT, **env: str
) -> subprocess.Popen[bytes]:
    command = [str(GUNICORN), "meshdash.wsgi", "-b", f"127.0.0.1:{port}", "-w", str(args.workers)]
    command += ["-k", args.worker_class, "--threads", str(args.threads), "--backlog", "256"]
    server = subprocess.Popen(command, cwd=tree, env=server_env(args) | env, stdout=subprocess.DEVNULL)
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/ping", timeout=1).read()
            return server
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("gunicorn did not answer /api/v1/ping")


def cpu_by_pid(pids: list[int]) -> dict[int, float]:
    """User+system CPU seconds of each process, from /proc."""
    found = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return found


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    # A process born during the run (a new PostgreSQL backend) counts from zero.
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def server_pids(server: subprocess.Popen[bytes]) -> list[int]:
    children = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()
    return [server.pid, *map(int, children)]


def database_pids() -> list[int]:
    # Every postgres/redis process: other users of the machine's PostgreSQL are counted too.
    return [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and _comm(p) in ("postgres", "redis-server")
    ]


def _comm(proc: Path) -> str:
    try:
        return (proc / "comm").read_text().strip()
    except OSError:
        return ""


SERVER: subprocess.Popen[bytes] | None = None


def measure(
    name: str,
    url: str,
    lanes: list[list[lr.Call]],
    per_call: int,
    ok: set[int],
    server: subprocess.Popen[bytes] | None = None,
) -> Row:
    server = server or SERVER
    assert server is not None
    app_before, db_before = cpu_by_pid(server_pids(server)), cpu_by_pid(database_pids())
    seconds = asyncio.run(lr.run_calls(url, lanes))
    app_cpu = cpu_used(app_before, cpu_by_pid(server_pids(server)))
    db_cpu = cpu_used(db_before, cpu_by_pid(database_pids()))
    calls = [call for lane in lanes for call in lane]
    latencies = [call.seconds for call in calls]
    return Row(
        name=name,
        requests=len(calls),
        reports=len(calls) * per_call,
        seconds=seconds,
        p50=lr.percentile(latencies, 50),
        p99=lr.percentile(latencies, 99),
        errors=sum(call.status not in ok for call in calls),
        app_cpu=app_cpu,
        db_cpu=db_cpu,
    )


def ping_lanes(clients: int, per_lane: int) -> list[list[lr.Call]]:
    return [[lr.Call("/api/v1/ping", b"", "", method="GET") for _ in range(per_lane)] for _ in range(clients)]


def report_lanes(
    tokens: list[str], clients: int, per_lane: int, batch: int, rng: random.Random, any_topology: bool = False
) -> list[list[lr.Call]]:
    """Each lane posts as one node. Its reports name that node's meshes (a single-node and a two-node
    topology, as a node in a real fleet reports the meshes it is in), or, with ``any_topology``, any
    simulated node's (8 topologies in every batch: the worst case for the rollups' topology key)."""
    lanes = []
    for lane in range(clients):
        token = tokens[lane % len(tokens)]
        node = None if any_topology else lane % len(tokens)
        calls = []
        for _ in range(per_lane):
            if batch == 1:
                calls.append(
                    lr.Call("/api/v1/reports", json.dumps(lr.report_body(rng, node)).encode(), token)
                )
            else:
                body = {"reports": [lr.report_body(rng, node) for _ in range(batch)]}
                calls.append(lr.Call("/api/v1/reports/batch", json.dumps(body).encode(), token))
        lanes.append(calls)
    return lanes


BENCH_RUN = "bench-run"


def bench_run_id(index: int) -> str:
    """The run id of the bench node of this index (its token's): a run id belongs to one node, and spans
    naming another node's run are refused (409)."""
    return BENCH_RUN if index == 0 else f"{BENCH_RUN}-{index}"


def register_bench_run() -> None:
    """A run of the bench revision for every bench node, registered as an agent would: its spans carry
    its run id and join the revision, and its reports count in the public figures (the store's dearer
    path: its daily share is read and taken, rollups.public_weight.public_room)."""
    from packages_app import telemetry
    from packages_app.models import Node
    from packages_app.nodes.run_schema import RunIn

    for index, node in enumerate(Node.objects.filter(name__startswith="bench-perf").order_by("name")):
        run = RunIn.model_validate(
            {
                "run_id": bench_run_id(index),
                "package": {"repo": lr.BENCH_REPO, "revision": lr.BENCH_SHA},
                "stages": [{"stage_id": "s0", "stage_index": 0, "layer_start": 0, "layer_end": 41}],
            }
        )
        telemetry.run_register(node, run)


def span_lanes(
    tokens: list[str], clients: int, per_lane: int, spans: int, rng: random.Random
) -> list[list[lr.Call]]:
    from packages_app.devnode import payloads

    lanes = []
    for lane in range(clients):
        run_id = bench_run_id(lane % len(tokens))  # the run of the lane's token's node
        plans = [
            payloads.RunPlan(repo=lr.BENCH_REPO, run_id=run_id, effective_strategy=effective)
            for effective in ("native-mtp", "disabled", "ngram-cache")
        ]
        calls = []
        for _ in range(per_lane):
            batch = []
            for _ in range(spans):
                plan = rng.choice(plans)
                measured = payloads.decode(plan, rng, 256)
                attrs = payloads.span_attributes(plan, measured, "s0")
                batch.append(payloads.decode_span(attrs, rng, measured.predicted_ms))
            body = payloads.export_request(batch).SerializeToString()
            calls.append(
                lr.Call("/v1/traces", body, tokens[lane % len(tokens)], content_type="application/x-protobuf")
            )
        lanes.append(calls)
    return lanes


def table(rows: list[Row]) -> str:
    head = ["scenario", "requests", "reports", "wall s", "req/s", "reports/s", "p50 ms", "p99 ms", "errors"]
    head += ["app CPU ms/unit", "db CPU ms/unit", "units/s on 2 free cores"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(row.cells()) + " |" for row in rows])


def targets(ping: Row, single: Row, batch: Row, otlp: Row) -> list[str]:
    checks = [
        (
            ">= the batched reports/s, in OTLP spans/s",
            otlp.reports / otlp.seconds >= batch.reports / batch.seconds,
        ),
        (">= 300 single reports/s", single.reports / single.seconds >= 300),
        ("single p99 <= 100 ms", single.p99 <= 0.100),
        (">= 3,000 batched reports/s", batch.reports / batch.seconds >= 3000),
        (
            ">= half the ping request rate, in batched reports/s",
            batch.reports / batch.seconds >= ping.requests / ping.seconds / 2,
        ),
        ("no errors", not (ping.errors or single.errors or batch.errors or otlp.errors)),
    ]
    return [f"- {'PASS' if ok else 'FAIL'}: {label}" for label, ok in checks]


def otlp_check(otlp: Row) -> str:
    from packages_app.models import Report, Revision

    revision = Revision.objects.get(commit_sha=lr.BENCH_SHA)
    stored = Report.objects.filter(source=Report.Source.OTLP)
    linked = stored.filter(revision=revision).count()
    return (
        f"OTLP: {stored.count()} span reports stored of {otlp.reports} sent, {linked} linked to the revision"
    )


def selector_check() -> str:
    from packages_app.catalog.throughput import catalog_throughput
    from packages_app.models import Revision
    from packages_app.rollups.rebuild import rebuild
    from packages_app.throughput import revision_throughput

    revision = Revision.objects.get(commit_sha=lr.BENCH_SHA)
    rebuild([revision.pk])  # the batches stored with rollups off are in them now
    started = time.perf_counter()
    detail = revision_throughput(revision.pk)
    catalog = catalog_throughput([revision.pk])
    ms = (time.perf_counter() - started) * 1000
    assert detail is not None
    return (
        f"selectors on PostgreSQL ({ms:.0f} ms): mtp_on {detail.mtp_on}, mtp_off {detail.mtp_off}, "
        f"alert {detail.alert and detail.alert.message!r}, catalog {catalog[revision.pk]}"
    )


def rollup_cost(args: argparse.Namespace, url: str, tokens: list[str], rng: random.Random) -> list[Row]:
    """Batched reports with rollups on (SERVER), off (a second server) and, with --baseline, as the
    code at that git ref stores them (a third server on its own database), alternated in rounds so
    that a change in the machine's load falls on all; the sums are compared."""
    plain = start_server(args, args.port + 1, MESHDASH_ROLLUP_ON_STORE="false")
    sides = [
        ("rollups on", url, SERVER, tokens),
        ("rollups off", f"http://127.0.0.1:{args.port + 1}", plain, tokens),
    ]
    if args.baseline:
        tree, baseline_tokens = prepare_baseline(args)
        env = {"DATABASE_URL": baseline_database(args)}
        old = start_server(args, args.port + 2, tree, **env)
        sides.append((f"code at {args.baseline}", f"http://127.0.0.1:{args.port + 2}", old, baseline_tokens))
    rows: dict[str, list[Row]] = {side[0]: [] for side in sides}
    try:
        for _ in range(ROUNDS):
            for side, target, server, side_tokens in sides:
                lanes = report_lanes(
                    side_tokens,
                    args.clients,
                    args.batches // args.clients // 2,
                    args.batch_size,
                    rng,
                    args.any_topology,
                )
                label = f"batch ({args.batch_size}/request), {side}"
                rows[side].append(measure(label, target, lanes, args.batch_size, {200}, server))
    finally:
        for _, _, server, _ in sides[1:]:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
    return [_summed(rows[side[0]]) for side in sides]


def baseline_database(args: argparse.Namespace) -> str:
    return args.database_url + "_baseline"


BASELINE_SETUP = """
import json, sys
import django
django.setup()
from packages_app.models import Node, Package, Revision
from packages_app.nodes import identity
package = Package.objects.create(repo_id=sys.argv[1], tracked=False)
Revision.objects.create(package=package, commit_sha=sys.argv[2], mtp_detected=True)
tokens = []
for index in range(int(sys.argv[3])):
    issued = identity.create_node(f"bench-perf-{index:02d}")
    Node.objects.filter(pk=issued.node.pk).update(rate_limit_per_minute=10**9)
    tokens.append(issued.token)
print(json.dumps(tokens))
"""


def prepare_baseline(args: argparse.Namespace) -> tuple[Path, list[str]]:
    """A worktree of the --baseline ref (sharing this checkout's .venv), its own database migrated
    by its own migrations, the bench revision and nodes made by its own code; returns the tokens."""
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{args.baseline}^{{commit}}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    tree = Path(f"/tmp/meshdash-baseline-{sha[:12]}")
    if not tree.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), sha], cwd=ROOT, check=True)
        (tree / ".venv").symlink_to(ROOT / ".venv")
    url = baseline_database(args)
    parts = urllib.parse.urlsplit(url)
    host = ["-h", parts.hostname or "127.0.0.1", "-U", parts.username or "postgres"]
    subprocess.run(["dropdb", *host, "--if-exists", parts.path.lstrip("/")], check=True)
    subprocess.run(["createdb", *host, parts.path.lstrip("/")], check=True)
    env = server_env(args) | {"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "meshdash.settings"}
    subprocess.run([PYTHON, "manage.py", "migrate", "-v0"], cwd=tree, env=env, check=True)
    made = subprocess.run(
        [PYTHON, "-c", BASELINE_SETUP, lr.BENCH_REPO, lr.BENCH_SHA, str(args.clients // 4 or 1)],
        cwd=tree,
        env=env | {"PYTHONPATH": str(tree)},
        check=True,
        capture_output=True,
        text=True,
    )
    return tree, json.loads(made.stdout.strip().splitlines()[-1])


ROUNDS = 2


def _summed(rows: list[Row]) -> Row:
    latencies = sorted(row.p50 for row in rows)
    return Row(
        name=rows[0].name + f" ({len(rows)} rounds)",
        requests=sum(row.requests for row in rows),
        reports=sum(row.reports for row in rows),
        seconds=sum(row.seconds for row in rows),
        p50=latencies[len(latencies) // 2],
        p99=max(row.p99 for row in rows),
        errors=sum(row.errors for row in rows),
        app_cpu=sum(row.app_cpu for row in rows),
        db_cpu=sum(row.db_cpu for row in rows),
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/meshdash_bench")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/5")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--worker-class", default="sync")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--singles", type=int, default=6000)
    parser.add_argument("--batches", type=int, default=300, help="batches of --batch-size")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--exports", type=int, default=60, help="OTLP exports of --spans spans")
    parser.add_argument("--spans", type=int, default=512)
    parser.add_argument(
        "--baseline",
        metavar="GIT_REF",
        help="also store the batches with the code at this ref (a worktree under /tmp, its own database)",
    )
    parser.add_argument(
        "--any-topology",
        action="store_true",
        help="every report names any simulated node's topology, not its sender's (8 topologies a batch)",
    )
    args = parser.parse_args()
    recreate_database(args)
    os.environ.update({k: v for k, v in server_env(args).items() if k in ("DATABASE_URL", "REDIS_URL")})
    lr.setup_django()
    rng = random.Random(7)
    tokens = lr.bench_nodes(args.clients // 4 or 1, prefix="bench-perf")
    singles = report_lanes(tokens, args.clients, args.singles // args.clients, 1, rng, args.any_topology)
    batches = report_lanes(
        tokens, args.clients, args.batches // args.clients, args.batch_size, rng, args.any_topology
    )
    register_bench_run()
    exports = span_lanes(tokens, args.clients, max(1, args.exports // args.clients), args.spans, rng)
    url = f"http://127.0.0.1:{args.port}"
    global SERVER
    server = SERVER = start_server(args, args.port)
    try:
        measure("warm-up", url, ping_lanes(args.clients, 20), 0, {200})
        ping = measure(
            "GET /api/v1/ping (trivial)",
            url,
            ping_lanes(args.clients, args.singles // args.clients),
            0,
            {200},
        )
        single = measure("POST /api/v1/reports", url, singles, 1, {201})
        batch = measure(
            f"POST /api/v1/reports/batch ({args.batch_size}/request)", url, batches, args.batch_size, {200}
        )
        otlp = measure(
            f"POST /v1/traces (OTLP/HTTP protobuf, {args.spans} spans/request)",
            url,
            exports,
            args.spans,
            {200},
        )
        with_rollups, without, *baseline = rollup_cost(args, url, tokens, rng)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    config = (
        f"gunicorn -w {args.workers} -k {args.worker_class} --threads {args.threads}; {args.clients} clients"
    )
    print(f"\n{config}; PostgreSQL; Redis cache; {os.cpu_count()} CPUs shared\n")
    print(table([ping, single, batch, otlp, with_rollups, without, *baseline]))
    ratio = (with_rollups.reports / with_rollups.seconds) / (without.reports / without.seconds)
    print(f"\nbatched reports/s with rollups / without: {ratio:.2f}x")
    for old in baseline:
        ratio = (with_rollups.reports / with_rollups.seconds) / (old.reports / old.seconds)
        print(f"batched reports/s with rollups / the code at {args.baseline}: {ratio:.2f}x (target >= 0.8x)")
    print("\n(unit = a report, or a request for ping; the last column = 2 CPUs / CPU per unit, what")
    print(" the server would do with both cores to itself and the load generator elsewhere)")
    print("\n" + "\n".join(targets(ping, single, batch, otlp)))
    print("\n" + otlp_check(otlp))
    print("\n" + selector_check())
    return 0


if __name__ == "__main__":
    sys.exit(main())
