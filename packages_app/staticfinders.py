"""A staticfiles finder that serves plotly.js from the installed plotly package, never from a CDN.

The 4 MB bundle is not committed: it is found in site-packages at request time (runserver, tests) and
copied into STATIC_ROOT by ``collectstatic`` for whitenoise in production.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.checks import CheckMessage
from django.core.checks import Error as CheckError
from django.core.files.storage import FileSystemStorage

PLOTLY_PREFIX = "packages_app/vendor"
PLOTLY_NAME = "plotly.min.js"
PLOTLY_STATIC_PATH = f"{PLOTLY_PREFIX}/{PLOTLY_NAME}"


def plotly_bundle() -> Path:
    """Where the installed plotly package keeps its minified plotly.js."""
    return Path(plotly.__file__).resolve().parent / "package_data" / PLOTLY_NAME


class PlotlyFinder(BaseFinder):
    """Answers ``packages_app/vendor/plotly.min.js`` with the bundle of the installed plotly package."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=str(plotly_bundle().parent))
        # collectstatic copies to <prefix>/<name>, as for FileSystemFinder's prefixed directories.
        self.storage.prefix = PLOTLY_PREFIX  # type: ignore[attr-defined]

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        if plotly_bundle().is_file():
            return []
        return [
            CheckError(f"plotly.js is missing from the plotly package: {plotly_bundle()}", id="meshdash.E001")
        ]

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> Any:
        found = str(plotly_bundle()) if path == PLOTLY_STATIC_PATH and plotly_bundle().is_file() else None
        if find_all:
            return [found] if found else []
        return found or []

    def list(self, ignore_patterns: Any) -> Iterator[tuple[str, FileSystemStorage]]:
        if plotly_bundle().is_file():
            yield PLOTLY_NAME, self.storage
