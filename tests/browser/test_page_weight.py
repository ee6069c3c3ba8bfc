"""Page weight in Chromium: the package page from gunicorn + whitenoise, cold cache, as production serves it.

Reports the bytes transferred and the time until the layer chart is drawn (printed, and in BENCHMARKS.md
from bench/bench_page_weight.py); asserts only the byte budget, since times are the benchmark's to judge.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from bench_page_weight import CHROMIUM, CHROMIUM_ARGS, PACKAGE_PATH, TARGET_BYTES, load_once, prepare, serve  # noqa: E402

pytestmark = pytest.mark.browser

BASIC = ROOT / "node_modules" / "plotly.js-basic-dist-min" / "plotly-basic.min.js"


def test_the_package_page_transfers_at_most_1_5_mb_cold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not Path(CHROMIUM).exists() or not BASIC.exists():
        pytest.skip("needs Chromium and plotly.js's basic bundle: make system-deps node-deps")
    from playwright.sync_api import sync_playwright

    prepare(tmp_path, variants=("after",))
    with serve(tmp_path, "after") as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        load = load_once(browser, base + PACKAGE_PATH)
        browser.close()
    with capsys.disabled():
        size, ms = load.transferred / 1e6, load.chart_ms
        print(f"\npackage page, cold: {size:.2f} MB transferred, chart drawn at {ms:.0f} ms")
    assert load.transferred <= TARGET_BYTES
