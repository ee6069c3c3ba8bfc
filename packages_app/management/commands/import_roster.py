"""`manage.py import_roster FILE --commit SHA`: add one split-certification roster to the bundled ones.

FILE is a ``split-certified.json`` in mesh-llm's own format (schema 2: ``native_recipe`` +
``architectures``). It is validated whole before anything is written; it is then copied byte for byte to
``packages_app/audit/rosters/<name>.json`` (so mesh-llm can still read it) with ``<name>.source.json``
naming the commit it comes from. A release row in releases.toml can then name it (``roster = "<name>"``).

Exit 0: added, or that exact roster was already there; 2: the file cannot be read, is malformed, or
contradicts a bundled roster. On exit 2 nothing is written.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from packages_app import judgements
from packages_app.audit import certification
from packages_app.audit.certification import MAX_ROSTER_BYTES, RosterError

# Where the roster lives since the tree moved to mesh/crates/ and skippy/crates/ (#1897; docs/rules.md
# section 6b); rosters of older commits sit at crates/mesh-llm-host-runtime/src/inference/skippy/ (--path).
ROSTER_PATH = "skippy/crates/skippy-api/src/split-certified.json"


class Command(BaseCommand):
    help = "Validate a mesh-llm split-certified.json roster and add it to packages_app/audit/rosters/."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="a split-certified.json (schema 2)")
        parser.add_argument("--commit", required=True, help="the 40-hex commit the file comes from")
        parser.add_argument("--repo", default="Mesh-LLM/mesh-llm", help="the repository (owner/name)")
        parser.add_argument("--path", default=ROSTER_PATH, help="the file's path in that repository")
        parser.add_argument("--name", help="the roster's name (default: <repo name>-<short commit>)")
        parser.add_argument("--into", help="the roster folder (default: the bundled one)")

    def handle(self, *args: Any, **options: Any) -> None:
        folder = Path(options["into"]) if options["into"] else Path(str(certification.roster_folder()))
        try:
            source = certification.source_of(options["repo"], options["commit"], options["path"])
            name = options["name"] or certification.default_name(source)
            data = _read(options["file"])
            roster = certification.check_import(data, name, source, certification.load_rosters(folder))
        except RosterError as exc:
            self.stderr.write(f"error: {options['file']}: {exc}; nothing was imported")
            sys.exit(2)
        if roster is None:
            self.stdout.write(f"roster {name} is already bundled, unchanged")
            return
        write_whole(folder / (name + certification.SOURCE_SUFFIX), certification.source_json(source).encode())
        write_whole(folder / (name + ".json"), data)
        certification.known_rosters.cache_clear()
        if not options["into"]:  # the matrix this process judges with changed: every node's judgement too
            judgements.judge(None)
        self.stdout.write(
            f"imported roster {name}: {roster.recipe.describe()}, {len(roster.architectures)} architectures, "
            f'from {source.describe()}; a release row can name it with roster = "{name}"'
        )


def _read(path: str) -> bytes:
    try:
        with Path(path).open("rb") as f:
            return f.read(MAX_ROSTER_BYTES + 1)  # one byte over is enough to refuse it
    except OSError as exc:
        raise RosterError(f"cannot read it: {exc.strerror or exc}") from None


def write_whole(target: Path, data: bytes) -> None:
    """Whole file or nothing: a temporary file in the same folder, renamed over the target."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
