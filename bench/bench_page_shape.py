"""The package pages' shape on a running demo (issue 21): HTML bytes, phone height in screens, and the
tallest section on a phone; the 2.4T package against its targets (HTML < 150 kB, phone < 8 screens).

Usage: start the demo (`make run`, or `bin/run-demo DEVHUB_PORT WEB_PORT`), wait for its catalog, then
    .venv/bin/python bench/bench_page_shape.py [--base http://127.0.0.1:8000]
Reads the catalog's package links, so every package page of the demo is measured. Exits 1 when a target
is missed. Needs Debian's Chromium (make system-deps).
"""

from __future__ import annotations

import argparse
import re
import sys
import urllib.request

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
PHONE = {"width": 390, "height": 844}
GIANT = "/packages/meshllm/Qwen3.8-2.4T-UD-Q4_K_XL-layers/"
TARGET_HTML_BYTES = 150_000
TARGET_PHONE_SCREENS = 8.0


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        return bytes(response.read())


def package_paths(base: str) -> list[str]:
    catalog = fetch(base + "/").decode()
    return sorted(set(re.findall(r'href="(/packages/[^"#?]+/)"', catalog)))


def measure(browser: object, base: str, path: str) -> tuple[int, float, str, float]:
    html = len(fetch(base + path))
    page = browser.new_page(viewport=PHONE)  # type: ignore[attr-defined]
    page.goto(base + path)
    page.wait_for_load_state("networkidle")
    height, tallest, tallest_px = page.evaluate(
        """() => { const s = [...document.querySelectorAll('main section[id]')]
              .map(e => [e.id, e.offsetHeight]).sort((a, b) => b[1] - a[1])[0] || ['-', 0];
            return [document.documentElement.scrollHeight, s[0], s[1]]; }"""
    )
    page.close()
    return html, height / PHONE["height"], tallest, tallest_px / PHONE["height"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="http://127.0.0.1:8000")
    base = parser.parse_args().base.rstrip("/")
    from playwright.sync_api import sync_playwright

    failed = False
    print("| package page | HTML kB | phone height (screens of 844 px) | tallest section (screens) |")
    print("|---|---|---|---|")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for path in package_paths(base):
            html, screens, tallest, tallest_screens = measure(browser, base, path)
            verdict = ""
            if path == GIANT:
                ok = html < TARGET_HTML_BYTES and screens < TARGET_PHONE_SCREENS
                failed |= not ok
                verdict = " (target < 150 kB, < 8 screens: " + ("met" if ok else "MISSED") + ")"
            name = path.rstrip("/").rsplit("/", 1)[-1]
            tallest_cell = f"{tallest} {tallest_screens:.1f}"
            cells = (f"{name}{verdict}", f"{html / 1000:.1f}", f"{screens:.1f}", tallest_cell)
            print("| " + " | ".join(cells) + " |")
        browser.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
