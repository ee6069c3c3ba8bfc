"""Debian's Chromium, driven by Playwright, against pytest-django's live_server; records console errors."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip("Chromium is not installed: apt-get install -y chromium (make system-deps does it)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running on this thread; the ORM calls made by the
    # test itself (fixtures) are still synchronous, so Django's async guard must stand aside.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            yield chromium
            chromium.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@dataclass
class Tab:
    """A page plus everything it said that a user would not want: console errors, dialogs, crashes."""

    page: Any
    base_url: str
    console_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def open(self, path: str) -> Any:
        response = self.page.goto(self.base_url + path)
        self.page.wait_for_load_state("load")
        return response

    def screenshot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        target = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(target), full_page=True)
        return target

    def assert_quiet(self) -> None:
        assert self.dialogs == [], f"a dialog opened: {self.dialogs}"
        assert self.console_errors == [], f"console errors: {self.console_errors}"


def _open_tab(browser: Any, live_server: Any, viewport: dict[str, int]) -> Iterator[Tab]:
    context = browser.new_context(viewport=viewport)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    page = context.new_page()
    tab = Tab(page, live_server.url)
    page.on("console", lambda msg: tab.console_errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: tab.console_errors.append(str(exc)))

    def on_dialog(dialog: Any) -> None:
        tab.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    yield tab
    context.close()


@pytest.fixture
def tab(browser: Any, live_server: Any) -> Iterator[Tab]:
    yield from _open_tab(browser, live_server, DESKTOP)


@pytest.fixture
def phone_tab(browser: Any, live_server: Any) -> Iterator[Tab]:
    yield from _open_tab(browser, live_server, PHONE)
