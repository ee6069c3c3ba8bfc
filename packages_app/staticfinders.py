"""A staticfiles finder that serves plotly.js from the installed plotly package, never from a CDN.

The 4 MB bundle is not committed: it is found in site-packages at request time (runserver, tests) and
copied into STATIC_ROOT by ``collectstatic`` for whitenoise in production. plotly.js normally injects
its own stylesheet as an inline <style>, which the Content-Security-Policy forbids; the same rules are
extracted from the bundle into ``plotly.css``, which the page links with the id and class plotly.js
looks for, so it skips the injection.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import plotly
from django.conf import settings
from django.contrib.staticfiles.finders import BaseFinder
from django.core.checks import CheckMessage
from django.core.checks import Error as CheckError
from django.core.files.storage import FileSystemStorage

PLOTLY_PREFIX = "packages_app/vendor"
PLOTLY_NAME = "plotly.min.js"
PLOTLY_CSS_NAME = "plotly.css"
PLOTLY_STATIC_PATH = f"{PLOTLY_PREFIX}/{PLOTLY_NAME}"
PLOTLY_CSS_STATIC_PATH = f"{PLOTLY_PREFIX}/{PLOTLY_CSS_NAME}"

_JS_STRING = r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'"
# plotly.js's build inlines its CSS as {"X .modebar": "...", ...} followed by the loop that adds
# each rule, with X and Y standing for its two root selectors.
_RULES = re.compile(
    r"(\w+)=(\{\"X[^{}]*\});for\((\w+) in \1\)\w+=\3\.replace\(/\^,/,\" ,\"\)"
    r"\.replace\(/X/g,\"([^\"]+)\"\)\.replace\(/Y/g,\"([^\"]+)\"\)"
)
_PAIR = re.compile(rf"({_JS_STRING})\s*:\s*({_JS_STRING})")
# Bundled libraries (maplibre) inject their CSS once, unless an element with their id exists.
_GUARDED_STYLE = re.compile(
    r'getElementById\("([\w-]+)"\)\)\{var (\w+)=document\.createElement\("style"\);\2\.id="\1"'
)


class PlotlyStylesMissing(Exception):
    """The installed plotly.js no longer inlines its stylesheet the way plotly_css expects."""


# plotly.js's "basic" partial bundle (scatter, bar, pie: every chart the pages draw), from npm
# (package.json, `make node-deps`): 1.2 MB instead of the full bundle's 4.8 MB, 0.4 MB gzipped.
BASIC_BUNDLE = Path("node_modules") / "plotly.js-basic-dist-min" / "plotly-basic.min.js"


def full_plotly_bundle() -> Path:
    """Where the installed plotly package keeps its minified (full) plotly.js."""
    return Path(plotly.__file__).resolve().parent / "package_data" / PLOTLY_NAME


def plotly_bundle() -> Path:
    """The plotly.js the pages load: the basic bundle when npm installed it, else the full one."""
    basic = Path(settings.BASE_DIR) / BASIC_BUNDLE
    # MESHDASH_PLOTLY_BUNDLE = "full" forces the full bundle (the page-weight benchmark's baseline).
    wanted = getattr(settings, "MESHDASH_PLOTLY_BUNDLE", "basic")
    return basic if wanted == "basic" and basic.is_file() else full_plotly_bundle()


@cache
def served_plotly_bundle() -> Path:
    """``plotly_bundle()`` under the name the pages ask for (plotly.min.js): copied once under var/."""
    bundle = plotly_bundle()
    if bundle.name == PLOTLY_NAME:
        return bundle
    target: Path = Path(settings.BASE_DIR) / "var" / "plotly" / f"basic-{bundle.stat().st_size}" / PLOTLY_NAME
    if not target.is_file():
        _write_atomically(target, bundle.read_text(encoding="utf-8"))
    return target


def plotly_css(bundle: str) -> str:
    """The stylesheet plotly.js would inject, as CSS text (pure: bundle text in, CSS out)."""
    match = _RULES.search(bundle)
    if match is None:
        raise PlotlyStylesMissing("plotly.js's inline stylesheet was not found in the bundle")
    x_root, y_root = match.group(4), match.group(5)
    rules = [(_js_string(k), _js_string(v)) for k, v in _PAIR.findall(match.group(2))]
    # plotly.js inserts every rule at index 0, so its sheet holds them in reverse order.
    lines = [f"{_selector(key, x_root, y_root)}{{{value}}}" for key, value in reversed(rules)]
    return "/* Generated from the installed plotly.js bundle by packages_app.staticfinders. */\n" + "\n".join(
        lines
    )


def plotly_guard_ids(bundle: str) -> list[str]:
    """Ids whose presence in the page stops plotly.js's bundled libraries from injecting inline CSS."""
    return [match.group(1) for match in _GUARDED_STYLE.finditer(bundle)]


@cache
def installed_plotly_guard_ids() -> tuple[str, ...]:
    # Only map traces (maplibre) use those styles, and the dashboard draws no maps.
    return tuple(plotly_guard_ids(plotly_bundle().read_text(encoding="utf-8")))


def _selector(key: str, x_root: str, y_root: str) -> str:
    return re.sub(r"^,", " ,", key).replace("X", x_root).replace("Y", y_root)


def _js_string(literal: str) -> str:
    body = literal[1:-1]
    return re.sub(r"\\(.)", r"\1", body)


@cache
def plotly_css_file() -> Path:
    """plotly.css for the installed plotly, written once per plotly version under var/."""
    target: Path = Path(settings.BASE_DIR) / "var" / "plotly" / plotly.__version__ / PLOTLY_CSS_NAME
    if not target.is_file():
        _write_atomically(target, plotly_css(plotly_bundle().read_text(encoding="utf-8")))
    return target


def _write_atomically(target: Path, text: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    # Written aside then renamed, so a concurrent process never serves half a file.
    fd, temp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(temp, target)


class PlotlyFinder(BaseFinder):
    """Answers ``packages_app/vendor/plotly.min.js`` and ``plotly.css`` from the installed plotly package."""

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        if not plotly_bundle().is_file():
            message = f"plotly.js is missing from the installed plotly package: {plotly_bundle()}"
            return [CheckError(message, id="meshdash.E001")]
        try:
            plotly_css_file()
        except (OSError, PlotlyStylesMissing) as exc:
            return [CheckError(f"plotly.css cannot be generated: {exc}", id="meshdash.E002")]
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> Any:
        found = self._files().get(path)
        if find_all:
            return [str(found)] if found else []
        return str(found) if found else []

    def list(self, ignore_patterns: Any) -> Iterator[tuple[str, FileSystemStorage]]:
        for path in self._files().values():
            storage = FileSystemStorage(location=str(path.parent))
            # collectstatic copies to <prefix>/<name>, as for FileSystemFinder's prefixed directories.
            storage.prefix = PLOTLY_PREFIX  # type: ignore[attr-defined]
            yield path.name, storage

    @staticmethod
    def _files() -> dict[str, Path]:
        if not plotly_bundle().is_file():
            return {}
        files = {PLOTLY_STATIC_PATH: served_plotly_bundle()}
        # A failure is reported by check(); the charts still draw, only plotly's own styling is missing.
        with contextlib.suppress(OSError, PlotlyStylesMissing):
            files[PLOTLY_CSS_STATIC_PATH] = plotly_css_file()
        return files
