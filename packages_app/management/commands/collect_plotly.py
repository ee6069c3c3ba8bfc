"""``manage.py collect_plotly``: put the installed plotly package's plotly.js where whitenoise serves it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from packages_app.staticfinders import PLOTLY_STATIC_PATH, plotly_bundle


class Command(BaseCommand):
    help = (
        "Copy plotly.min.js from the installed plotly package into STATIC_ROOT (collectstatic does the same "
        "for every static file; runserver and the tests serve it straight from the package)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        source = plotly_bundle()
        if not source.is_file():
            raise CommandError(f"plotly.js is missing from the installed plotly package: {source}")
        target = Path(settings.STATIC_ROOT) / PLOTLY_STATIC_PATH
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        self.stdout.write(f"plotly.js {source.stat().st_size} bytes -> {target}")
