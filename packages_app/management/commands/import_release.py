"""`manage.py import_release FILE`: add one mesh-llm release to the release matrix from its published
``native-runtimes.json`` (docs/rules.md section 6b).

The file names the release (``release_version`` in schema 2, ``mesh_version`` in the legacy shape; a file
naming both is refused) and the Skippy ABI of its native runtimes. The row is added to
``packages_app/audit/releases.toml`` in ABI order with that ABI; what the file does not say (ABI rule,
parsers, the split gate) follows the newest known release at a lower ABI and is marked inferred, and its
roster is inferred from its ABI. A new release is then a data import, not code.

Exit 0: added, or that exact release was already there; 2: the file cannot be read, is malformed, or
contradicts the table (the release already there at another ABI). On exit 2 nothing is written.
Then ``manage.py reaudit`` re-judges the stored revisions against the new newest release.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from packages_app import judgements
from packages_app.audit import releases
from packages_app.audit.releases import MAX_RUNTIMES_BYTES, RuntimesError
from packages_app.management.commands.import_roster import write_whole


class Command(BaseCommand):
    help = "Add a mesh-llm release to packages_app/audit/releases.toml from its native-runtimes.json."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the release's native-runtimes.json")
        parser.add_argument("--into", help="the releases.toml to add it to (default: the bundled one)")

    def handle(self, *args: Any, **options: Any) -> None:
        target = Path(options["into"]) if options["into"] else bundled_releases_file()
        try:
            published = releases.parse_native_runtimes(_read(options["file"]))
            text = _read(str(target)).decode("utf-8")
            updated = releases.with_release(text, published)
        except (RuntimesError, UnicodeDecodeError) as exc:
            self.stderr.write(f"error: {options['file']}: {exc}; nothing was imported")
            sys.exit(2)
        if updated is None:
            self.stdout.write(
                f"{published.release} (Skippy ABI {published.skippy_abi}) is already there, unchanged"
            )
            return
        write_whole(target, updated.encode("utf-8"))
        releases.known_releases.cache_clear()
        releases.clear_release_lookups()
        if not options["into"]:  # the matrix this process judges with changed: every node's judgement too
            judgements.judge(None)
        self.stdout.write(
            f"imported {published.release}: Skippy ABI {published.skippy_abi}, {published.artifacts} native "
            f"runtimes, its roster inferred from its ABI, into {target}; run manage.py reaudit to re-judge"
        )


def bundled_releases_file() -> Path:
    return Path(__file__).resolve().parents[2] / "audit" / releases.RELEASES_FILE


def _read(path: str) -> bytes:
    try:
        with Path(path).open("rb") as f:
            return f.read(MAX_RUNTIMES_BYTES + 1)
    except OSError as exc:
        raise RuntimesError(f"cannot read it: {exc.strerror or exc}") from None
