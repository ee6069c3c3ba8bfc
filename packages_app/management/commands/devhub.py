"""`manage.py devhub [--port N] [--user TOKEN=NAME] [--webhook-url URL]`: serve the demo catalog (Hub API)."""

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from packages_app.devhub import DEFAULT_ROOT, DEVHUB_TOKEN, DevHub, ensure_catalog, webhook_poster


class Command(BaseCommand):
    help = "Run devhub, a local Hugging Face Hub-compatible server with the generated demo packages."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8765)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="catalog folder")
        parser.add_argument("--token", default=DEVHUB_TOKEN, help="token that unlocks private/gated repos")
        parser.add_argument(
            "--user",
            action="append",
            default=[],
            metavar="TOKEN=NAME",
            help="a write token and the user it acts as (PRs are authored by NAME); repeatable",
        )
        parser.add_argument(
            "--webhook-url",
            default="",
            help="POST the Hub's webhook payloads (PR and repo events) here, e.g. "
            "http://127.0.0.1:8000/api/v1/hooks/hub; the secret is MESHDASH_WEBHOOK_SECRET",
        )
        parser.add_argument("--bench", action="store_true", help="also generate the 94-layer bench package")

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"devhub: preparing the demo catalog in {options['root']} ...")
        root = ensure_catalog(options["root"], include_bench=options["bench"])
        users = dict(u.split("=", 1) for u in options["user"] if "=" in u)
        if len(users) != len(options["user"]):
            raise CommandError("--user takes TOKEN=NAME")
        on_event = None
        if options["webhook_url"]:
            on_event = webhook_poster(options["webhook_url"], settings.MESHDASH_WEBHOOK_SECRET)
        hub = DevHub(
            root,
            host=options["host"],
            port=options["port"],
            token=options["token"],
            users=users,
            on_event=on_event,
        )
        try:
            hub.start()
        except OSError as exc:
            where = f"{options['host']}:{options['port']}"
            raise CommandError(f"cannot listen on {where}: {exc.strerror}") from exc
        self.stdout.write(f"devhub: serving on {hub.url} (HF_ENDPOINT={hub.url}); Ctrl-C stops it")
        hub.serve_forever()
