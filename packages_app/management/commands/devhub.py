"""`manage.py devhub [--port N]`: serve the demo catalog over the Hub's HTTP API (generated on first use)."""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from packages_app.devhub import DEFAULT_ROOT, DEVHUB_TOKEN, DevHub, ensure_catalog


class Command(BaseCommand):
    help = "Run devhub, a local Hugging Face Hub-compatible server with the generated demo packages."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8765)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="catalog folder")
        parser.add_argument("--token", default=DEVHUB_TOKEN, help="token that unlocks private/gated repos")
        parser.add_argument("--bench", action="store_true", help="also generate the 94-layer bench package")

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"devhub: preparing the demo catalog in {options['root']} ...")
        root = ensure_catalog(options["root"], include_bench=options["bench"])
        hub = DevHub(root, host=options["host"], port=options["port"], token=options["token"])
        try:
            hub.start()
        except OSError as exc:
            where = f"{options['host']}:{options['port']}"
            raise CommandError(f"cannot listen on {where}: {exc.strerror}") from exc
        self.stdout.write(f"devhub: serving on {hub.url} (HF_ENDPOINT={hub.url}); Ctrl-C stops it")
        hub.serve_forever()
