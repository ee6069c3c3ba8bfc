"""``manage.py collect_plotly``: put plotly.js and its stylesheet where whitenoise serves them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from packages_app.staticfinders import PLOTLY_PREFIX, PlotlyFinder, plotly_bundle


class Command(BaseCommand):
    help = (
        "Copy plotly.min.js from the installed plotly package, and the plotly.css extracted from it, into "
        "STATIC_ROOT (collectstatic does the same along with every other static file; runserver and the "
        "tests serve both straight from the package)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if not plotly_bundle().is_file():
            raise CommandError(f"plotly.js is missing from the installed plotly package: {plotly_bundle()}")
        errors = PlotlyFinder().check()
        if errors:
            raise CommandError("; ".join(str(e.msg) for e in errors))
        for name, storage in PlotlyFinder().list(None):
            target = Path(settings.STATIC_ROOT) / PLOTLY_PREFIX / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(storage.path(name), target)
            self.stdout.write(f"{name}: {target.stat().st_size} bytes -> {target}")
