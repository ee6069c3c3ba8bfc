"""Page weight of the Qwen3.5 package page, cold cache: bytes on the wire, time until the layer chart shows.

Two servers side by side, each gunicorn + whitenoise on loopback with DEBUG off, over one seeded SQLite file:
  before: the full plotly.js bundle of the plotly package, static files served uncompressed;
  after:  plotly.js's basic bundle (npm, ``make node-deps``), static files gzipped by collectstatic.
Every load is a fresh Chromium context (empty cache); the loads of the two alternate, so the machine's
noise falls on both. Targets for "after": chart drawn within 1 s, at most 1.5 MB transferred.

    .venv/bin/python bench/bench_page_weight.py --loads 5

Exit status 1 when "after" misses a target.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
PACKAGE_PATH = "/packages/meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers/"
TARGET_BYTES = 1_500_000
TARGET_MS = 1000.0
SEED = (
    "from django.utils import timezone; from tests import dashboard_factories as f; "
    "f.qwen35_fleet(timezone.now())"
)
_LISTENING = re.compile(r"Listening at: http://127\.0\.0\.1:(\d+)")


@dataclass(frozen=True)
class Load:
    transferred: int
    chart_ms: float


def variant_env(workdir: Path, variant: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL")}
    env.update(
        DJANGO_SETTINGS_MODULE="page_weight_settings",
        PYTHONPATH=os.pathsep.join([str(ROOT / "bench"), str(ROOT)]),
        DATABASE_URL=f"sqlite:///{workdir / 'db.sqlite3'}",
        DEBUG="false",
        SECRET_KEY="bench-page-weight-only",  # noqa: S106 (a throwaway server on loopback)
        ALLOWED_HOSTS="127.0.0.1",
        # Loopback, plain HTTP: no redirect to HTTPS and no HSTS (the TLS proxy of production is absent).
        SECURE_SSL_REDIRECT="false",
        SECURE_HSTS_SECONDS="0",
        PAGE_WEIGHT_STATIC_ROOT=str(workdir / f"static-{variant}"),
        PAGE_WEIGHT_VARIANT=variant,
    )
    return env


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], env=env, check=True, capture_output=True)


def prepare(workdir: Path, variants: tuple[str, ...] = ("before", "after")) -> None:
    """One database with the issue's fleet, and each variant's collected static files."""
    env = variant_env(workdir, variants[0])
    manage(env, "migrate", "--noinput")
    manage(env, "shell", "-c", SEED)
    for variant in variants:
        manage(variant_env(workdir, variant), "collectstatic", "--noinput")


@contextmanager
def serve(workdir: Path, variant: str) -> Iterator[str]:
    """gunicorn on a free loopback port (its log in a file, read for the port); yields its base URL."""
    log = workdir / f"gunicorn-{variant}.log"
    command = [str(Path(sys.executable).parent / "gunicorn"), "meshdash.wsgi", "--bind", "127.0.0.1:0"]
    with log.open("w") as out:
        process = subprocess.Popen(
            [*command, "--workers", "1", "--chdir", str(ROOT)],
            env=variant_env(workdir, variant),
            stderr=out,
        )
    try:
        yield f"http://127.0.0.1:{_port(process, log)}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def _port(process: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = _LISTENING.search(log.read_text())
        if match:
            return int(match.group(1))
        if process.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f"gunicorn did not start listening: {log.read_text()[-2000:]}")


def load_once(browser: Any, url: str) -> Load:
    """One cold load: bytes on the wire (headers and bodies as received), ms until the chart's svg exists."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        cdp = context.new_cdp_session(page)
        cdp.send("Network.enable")
        received: list[int] = []
        cdp.on("Network.loadingFinished", lambda event: received.append(int(event["encodedDataLength"])))
        page.goto(url, wait_until="commit")
        drawn = page.wait_for_function(
            "() => document.querySelector('#layout-chart .main-svg') ? performance.now() : false",
            polling="raf",
            timeout=30_000,
        )
        chart_ms = float(drawn.json_value())
        page.wait_for_load_state("networkidle")
        return Load(sum(received), chart_ms)
    finally:
        context.close()


def measure(loads: int, workdir: Path) -> dict[str, list[Load]]:
    from playwright.sync_api import sync_playwright

    results: dict[str, list[Load]] = {"before": [], "after": []}
    with (
        serve(workdir, "before") as before,
        serve(workdir, "after") as after,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        urls = {"before": before + PACKAGE_PATH, "after": after + PACKAGE_PATH}
        for _ in range(loads):
            for variant, url in urls.items():
                results[variant].append(load_once(browser, url))
        browser.close()
    return results


def report(results: dict[str, list[Load]]) -> bool:
    medians = {
        v: (statistics.median(x.transferred for x in r), statistics.median(x.chart_ms for x in r))
        for v, r in results.items()
    }
    print(f"{'variant':<8} {'loads':>5} {'transferred (median)':>22} {'chart drawn (median)':>21}")
    for variant, (size, ms) in medians.items():
        print(f"{variant:<8} {len(results[variant]):>5} {size / 1e6:>19.2f} MB {ms:>18.0f} ms")
    (b_size, b_ms), (a_size, a_ms) = medians["before"], medians["after"]
    print(f"after / before: bytes x{a_size / b_size:.2f}, chart time x{a_ms / b_ms:.2f}")
    ok_bytes, ok_ms = a_size <= TARGET_BYTES, a_ms <= TARGET_MS
    print(f"target after <= {TARGET_BYTES / 1e6:.1f} MB: {'pass' if ok_bytes else 'FAIL'}")
    print(f"target after chart <= {TARGET_MS:.0f} ms: {'pass' if ok_ms else 'FAIL'}")
    return ok_bytes and ok_ms


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--loads", type=int, default=5, help="cold loads per variant")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="meshdash-page-weight-") as temp:
        workdir = Path(temp)
        prepare(workdir)
        return 0 if report(measure(args.loads, workdir)) else 1


if __name__ == "__main__":
    sys.exit(main())
