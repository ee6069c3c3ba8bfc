"""What the OTLP attacks of issue 22 cost a production-shaped meshdash, and how a page answers meanwhile.

Starts, on loopback and a database of your choosing (PostgreSQL, migrated):
  - gunicorn with 3 sync workers and production settings (DEBUG off), serving /v1/traces and the pages;
  - the OTLP/gRPC receiver (``manage.py otlp_receiver``).
Then, for --seconds each, it runs:
  http: 6 clients posting, back to back, an 8 KB gzip body that inflates to 8 MiB of empty spans (node token);
  grpc: 6 clients sending, back to back, an unauthenticated 8 MiB message of empty spans, while a real
        node's 512-span export is timed every second;
and all the while fetches the catalog page (``/``) every 0.5 s. It prints, per attack: the peak RSS and
the CPU seconds of the server processes (from /proc), the page's median / max latency and how many
page loads failed or took over 5 s, and the attack's answers. ``--unguarded`` starts the servers with
the budget switched off (the caps raised, the generated gRPC servicer that parses before the token
check), which is the "before" column.

    createdb -h 127.0.0.1 -U postgres meshdash_bench_otlp
    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/meshdash_bench_otlp
    .venv/bin/python manage.py migrate
    .venv/bin/python bench/bench_otlp_attack.py --seconds 20
    .venv/bin/python bench/bench_otlp_attack.py --seconds 20 --unguarded

Every loop is bounded by --seconds and traffic only goes to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CLIENTS = 6
PAGE_EVERY = 0.5
SLOW_PAGE = 5.0
TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

# The servers run this; --unguarded raises the caps and serves gRPC through the generated servicer.
SERVER = r"""
import os, sys
unguarded = os.environ.get("BENCH_UNGUARDED") == "1"
import django
django.setup()
from packages_app.nodes import otlp
if unguarded:
    otlp.MAX_SPANS = otlp.MAX_FIELDS = otlp.INFLATE_RATIO = otlp.FIELDS_PER_BYTE = 10**9
    otlp._WireCount.spans = lambda self: 0  # no walk on the wire: protobuf parses the body whole
    from django.conf import settings
    settings.MESHDASH_NODE_SPAN_RATE_LIMIT = 0
if sys.argv[1] == "web":
    from gunicorn.app.wsgiapp import run
    sys.argv = ["gunicorn", "meshdash.wsgi", "--bind", f"127.0.0.1:{sys.argv[2]}", "--workers", "3",
                "--timeout", "60", "--graceful-timeout", "2"]
    run()
else:
    from concurrent.futures import ThreadPoolExecutor
    import grpc
    from packages_app.web import otlp_grpc
    if unguarded:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
        class Generated(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):
                receiver = otlp_grpc.TraceReceiver(close_connections=False)
                return receiver.Export(iter([request.SerializeToString()]), context)
        server = grpc.server(ThreadPoolExecutor(max_workers=4),
                             options=[("grpc.max_receive_message_length", otlp.MAX_BODY_BYTES)])
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Generated(), server)
        server.add_insecure_port(f"127.0.0.1:{sys.argv[2]}")
    else:
        server, _ = otlp_grpc.build_server("127.0.0.1", int(sys.argv[2]))
    server.start()
    server.wait_for_termination()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def empty_spans(count: int) -> bytes:
    def delimited(field: int, payload: bytes) -> bytes:
        n, size = len(payload), bytearray()
        while True:
            size.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                return bytes([field << 3 | 2]) + bytes(size) + payload

    return delimited(1, delimited(2, b"\x12\x00" * count))


def process_group(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pid or int(entry.name) == pid:  # its process group
                out.append(int(entry.name))
    return out


def usage(pid: int) -> tuple[float, int]:
    """CPU seconds and RSS bytes of a process group, now."""
    cpu, rss = 0.0, 0
    for member in process_group(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu += (int(fields[11]) + int(fields[12])) / TICKS
        rss += int(fields[21]) * PAGE_SIZE
    return cpu, rss


class Server:
    def __init__(self, kind: str, unguarded: bool) -> None:
        self.port = free_port()
        env = os.environ | {
            "DJANGO_SETTINGS_MODULE": "meshdash.settings",
            "DEBUG": "false",
            "SECRET_KEY": "bench-otlp-" + "x" * 50,
            "ALLOWED_HOSTS": "127.0.0.1",
            "SECURE_SSL_REDIRECT": "false",
            "MESHDASH_NODE_RATE_LIMIT": "0",
            "BENCH_UNGUARDED": "1" if unguarded else "0",
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, kind, str(self.port)],
            cwd=ROOT,
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


def http(url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, float]:
    started = time.monotonic()
    request = urllib.request.Request(url, data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError:
        status = 0
    return status, time.monotonic() - started


def wait_ready(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if http(url)[0] == 200:
            return
        time.sleep(0.5)
    raise SystemExit(f"{url} did not answer")


class Sampler(threading.Thread):
    """Peak RSS of the servers, and the dashboard page's latency, until stopped."""

    def __init__(self, pids: list[int], page: str) -> None:
        super().__init__(daemon=True)
        self.pids, self.page = pids, page
        self.stop_event = threading.Event()
        self.peak_rss = [0 for _ in pids]
        self.pages: list[tuple[int, float]] = []
        threading.Thread(target=self._watch_memory, daemon=True).start()

    def _watch_memory(self) -> None:
        while not self.stop_event.is_set():
            self.peak_rss = [
                max(peak, usage(pid)[1]) for peak, pid in zip(self.peak_rss, self.pids, strict=True)
            ]
            self.stop_event.wait(0.1)

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.pages.append(http(self.page))
            self.stop_event.wait(PAGE_EVERY)


def attack(seconds: float, send: Any) -> dict[str, int]:
    deadline = time.monotonic() + seconds
    answers: dict[str, int] = {}
    lock = threading.Lock()

    def client() -> None:
        while time.monotonic() < deadline:
            answer = str(send())
            with lock:
                answers[answer] = answers.get(answer, 0) + 1

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def scenario(
    name: str, web: Server, target: Server, seconds: float, send: Any, side: Any = None
) -> dict[str, Any]:
    page = f"http://127.0.0.1:{web.port}/"
    cpu_before = [usage(s.proc.pid)[0] for s in (web, target)]
    sampler = Sampler([web.proc.pid, target.proc.pid], page)
    sampler.start()
    side_results: list[float] = []
    stop_side = threading.Event()
    if side is not None:
        threading.Thread(target=lambda: side(stop_side, side_results), daemon=True).start()
    answers = attack(seconds, send)
    stop_side.set()
    sampler.stop_event.set()
    sampler.join()
    cpu = [usage(s.proc.pid)[0] - before for s, before in zip((web, target), cpu_before, strict=True)]
    latencies = [t for status, t in sampler.pages if status == 200]
    failed = sum(1 for status, t in sampler.pages if status != 200 or t > SLOW_PAGE)
    out = {
        "attack": name,
        "answers": answers,
        "web_cpu_s": round(cpu[0], 1),
        "web_peak_rss_mb": round(sampler.peak_rss[0] / 2**20),
        "receiver_cpu_s": round(cpu[1], 1),
        "receiver_peak_rss_mb": round(sampler.peak_rss[1] / 2**20),
        "page_loads": len(sampler.pages),
        "page_median_s": round(statistics.median(latencies), 3) if latencies else None,
        "page_max_s": round(max(latencies), 3) if latencies else None,
        "page_failed_or_over_5s": failed,
    }
    if side_results:
        out["node_export_median_ms"] = round(statistics.median(side_results) * 1000, 1)
        out["node_export_max_ms"] = round(max(side_results) * 1000, 1)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--unguarded", action="store_true", help="the caps off: the 'before' figures")
    args = parser.parse_args()
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "meshdash.settings")
    os.environ.setdefault("SECRET_KEY", "bench-otlp-" + "x" * 50)
    os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1")
    django.setup()
    import grpc
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    from packages_app.devnode import payloads
    from packages_app.nodes import identity
    from tests.test_otlp import PLAN, spans

    token = identity.create_node(f"bench-otlp-{os.getpid()}").token
    web, receiver = Server("web", args.unguarded), Server("grpc", args.unguarded)
    try:
        wait_ready(f"http://127.0.0.1:{web.port}/api/v1/ping")
        time.sleep(2)  # the receiver binds its port
        bomb = empty_spans(4_000_000)
        gz = gzip.compress(bomb, 9)
        traces = f"http://127.0.0.1:{web.port}/v1/traces"
        headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/x-protobuf",
            "Content-Encoding": "gzip",
        }
        http(f"http://127.0.0.1:{web.port}/")  # warm: the first page load imports the templates
        channel = grpc.insecure_channel(f"127.0.0.1:{receiver.port}")
        method = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
        call = channel.unary_unary(
            method, request_serializer=None, response_deserializer=ExportTraceServiceResponse.FromString
        )

        def flood() -> str:
            try:
                call(bomb, metadata=[("authorization", "Bearer mdn_not-a-token")], timeout=30)
                return "OK"
            except grpc.RpcError as exc:
                return str(exc.code().name)

        real = payloads.export_request(spans(512, PLAN)).SerializeToString()

        def real_node(stop: threading.Event, out: list[float]) -> None:
            while not stop.is_set():
                started = time.monotonic()
                with contextlib.suppress(grpc.RpcError):  # a refusal is timed too
                    call(real, metadata=[("authorization", f"Bearer {token}")], timeout=30)
                out.append(time.monotonic() - started)
                stop.wait(1.0)

        idle = scenario(
            "none (baseline)", web, receiver, args.seconds, lambda: time.sleep(1) or "idle", real_node
        )
        results = [idle]
        results.append(
            scenario("http-gzip-bomb", web, receiver, args.seconds, lambda: http(traces, gz, headers)[0])
        )

        results.append(scenario("grpc-unauthenticated-flood", web, receiver, args.seconds, flood, real_node))
        channel.close()
    finally:
        web.stop()
        receiver.stop()
    load = Path("/proc/loadavg").read_text().split()[:3]
    report = {"unguarded": args.unguarded, "seconds": args.seconds, "load_average": load, "results": results}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
