"""How a dashboard page answers while 12 clients run large anonymous manifest checks (issue 22, item 3).

Starts, on loopback, the production shape docs/configuration.md documents: nginx (buffering request bodies, as
gunicorn's sync workers need) in front of gunicorn with 3 sync workers and production settings (DEBUG
off), on the database of DATABASE_URL (PostgreSQL, migrated) and the shared cache of REDIS_URL (the
check budget is counted there, so all three workers share it); ``--no-proxy`` talks to gunicorn
directly. The per-address check rate limit is switched off, as if the 12
clients came from 12 addresses. Then, for --seconds each, 12 clients post back to back:

  baseline:     nothing (the page alone);
  16mib:        a manifest just under 16 MiB (anonymous: over MESHDASH_CHECK_ANON_MAX_BYTES);
  4mib:         a manifest just under 4 MiB (the largest an anonymous visitor may check);

while the catalog page (``/``) is fetched every 0.5 s. It prints, per scenario: the check answers, the
web server's CPU seconds and peak RSS (from /proc), and the page's median / max latency and how many
page loads failed or took over 5 s. ``--unguarded`` starts gunicorn with the budget off and the
anonymous cap at 16 MiB: the "before" column.

    createdb -h 127.0.0.1 -U postgres meshdash_bench_check
    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/meshdash_bench_check REDIS_URL=redis://127.0.0.1:6379/11
    .venv/bin/python manage.py migrate
    .venv/bin/python bench/bench_check_attack.py --seconds 20
    .venv/bin/python bench/bench_check_attack.py --seconds 20 --unguarded

Every loop is bounded by --seconds and traffic only goes to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_otlp_attack import Sampler, free_port, http, usage, wait_ready  # noqa: E402

CLIENTS = 12
MiB = 2**20


NGINX_CONF = """
daemon off;
user {user};
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy; fastcgi_temp_path {tmp}/fcgi;
  uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
  server {{
    listen 127.0.0.1:{port};
    client_max_body_size 17m;
    client_body_timeout 30s;
    location / {{
      proxy_pass http://127.0.0.1:{upstream};
      proxy_set_header Host 127.0.0.1;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_request_buffering on;
      proxy_read_timeout 60s;
    }}
  }}
}}
"""


class Proxy:
    """nginx in front of ``upstream``, in its own process group."""

    def __init__(self, upstream: int) -> None:
        import getpass
        import shutil
        import tempfile

        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-check-nginx-"))
        self.port = free_port()
        (self.tmp / "nginx.conf").write_text(
            NGINX_CONF.format(tmp=self.tmp, port=self.port, upstream=upstream, user=getpass.getuser())
        )
        self.proc = subprocess.Popen(
            [nginx, "-c", str(self.tmp / "nginx.conf"), "-p", str(self.tmp)],
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(10)


class Web:
    """gunicorn, 3 sync workers, production settings, in its own process group."""

    def __init__(self, unguarded: bool) -> None:
        self.port = free_port()
        env = os.environ | {
            "DJANGO_SETTINGS_MODULE": "meshdash.settings",
            "DEBUG": "false",
            "SECRET_KEY": "bench-check-" + "x" * 50,
            "ALLOWED_HOSTS": "127.0.0.1",
            "SECURE_SSL_REDIRECT": "false",
            "MESHDASH_CHECK_RATE_LIMIT": "0",
        }
        if unguarded:
            env |= {"MESHDASH_CHECK_BUDGET_BYTES": "0", "MESHDASH_CHECK_ANON_MAX_BYTES": str(16 * MiB)}
        gunicorn = str(Path(sys.executable).parent / "gunicorn")
        self.proc = subprocess.Popen(
            [gunicorn, "meshdash.wsgi", "--bind", f"127.0.0.1:{self.port}", "--workers", "3",
             "--timeout", "60", "--graceful-timeout", "2"],
            cwd=ROOT, env=env, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


def manifest(size: int) -> bytes:
    """A v1 manifest padded to just under ``size`` with small objects (what costs the parser most)."""
    from tests import dashboard_factories as f

    doc = f.manifest_v1(block_count=41)
    base = len(json.dumps(doc | {"padding": []}))
    one = len(json.dumps({"k": 100000, "v": "x"})) + 2
    doc["padding"] = [{"k": i, "v": "x"} for i in range((size - base - 4096) // one)]
    body = json.dumps(doc).encode()
    assert len(body) < size, len(body)
    return body


def scenario(name: str, web: Web, port: int, seconds: float, body: bytes | None) -> dict[str, Any]:
    page = f"http://127.0.0.1:{port}/"
    check = f"http://127.0.0.1:{port}/api/v1/check-manifest"
    cpu_before = usage(web.proc.pid)[0]
    sampler = Sampler([web.proc.pid], page)
    sampler.start()
    answers: dict[str, int] = {}
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client() -> None:
        while time.monotonic() < deadline:
            if body is None:
                time.sleep(0.5)
                continue
            status, _ = http(check, body, {"Content-Type": "application/json"})
            with lock:
                answers[str(status)] = answers.get(str(status), 0) + 1

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sampler.stop_event.set()
    sampler.join()
    latencies = sorted(t for status, t in sampler.pages if status == 200)
    failed = sum(1 for status, t in sampler.pages if status != 200 or t > 5.0)
    return {
        "attack": name,
        "check_bytes": len(body) if body else 0,
        "answers": answers,
        "web_cpu_s": round(usage(web.proc.pid)[0] - cpu_before, 1),
        "web_peak_rss_mb": round(sampler.peak_rss[0] / MiB),
        "page_loads": len(sampler.pages),
        "page_median_s": round(latencies[len(latencies) // 2], 3) if latencies else None,
        "page_max_s": round(latencies[-1], 3) if latencies else None,
        "page_failed_or_over_5s": failed,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--unguarded", action="store_true", help="the budget off, anonymous cap 16 MiB")
    parser.add_argument("--only", choices=["baseline", "16mib", "4mib"], action="append")
    parser.add_argument("--no-proxy", action="store_true", help="no nginx: clients talk to gunicorn")
    args = parser.parse_args()
    if not os.environ.get("REDIS_URL", "").startswith("redis://"):
        raise SystemExit("set REDIS_URL: the check budget is shared by the web workers through Redis")
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "meshdash.settings")
    os.environ.setdefault("SECRET_KEY", "bench-check-" + "x" * 50)
    os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1")
    django.setup()
    from django.core.cache import cache

    cache.delete_many([f"meshdash:check-bytes:{int(time.time() // 60) - i}" for i in range(4)])
    bodies = {"baseline": None, "16mib": manifest(16 * MiB), "4mib": manifest(4 * MiB)}
    web = Web(args.unguarded)
    proxy = None if args.no_proxy else Proxy(web.port)
    port = proxy.port if proxy else web.port
    results = []
    try:
        wait_ready(f"http://127.0.0.1:{web.port}/api/v1/ping")
        wait_ready(f"http://127.0.0.1:{port}/api/v1/ping")
        http(f"http://127.0.0.1:{port}/")  # warm: the first page load imports the templates
        for name, body in bodies.items():
            if args.only and name not in args.only:
                continue
            results.append(scenario(name, web, port, args.seconds, body))
            time.sleep(2)  # let the last checks finish before the next scenario
    finally:
        if proxy:
            proxy.stop()
        web.stop()
    load = Path("/proc/loadavg").read_text().split()[:3]
    report = {
        "unguarded": args.unguarded,
        "proxy": not args.no_proxy,
        "seconds": args.seconds,
        "load_average": load,
        "results": results,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
