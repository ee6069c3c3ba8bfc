"""`manage.py check_manifest PATH [--json]`: one model-package.json judged as mesh-llm judges it.

No weights, no network, no database. It leads with the assessment's headline, which says what a manifest
alone cannot see (the weights: run `audit_package` on the folder). Exit 0: valid, admitted by the newest
known mesh-llm release, and no error finding; 1: otherwise (a file that is not JSON, or does not parse, is
invalid); 2: the file cannot be read. `--json` prints the same JSON as the check page's API, with the
assessment under "assessment".
"""

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from packages_app.audit.check import ManifestCheck, check_manifest
from packages_app.layout import MAX_MANIFEST_BYTES


class Command(BaseCommand):
    help = "Judge one model-package.json as mesh-llm does: validity, package_id, resolver table, releases."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="a model-package.json file")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            with Path(options["path"]).open("rb") as f:
                data = f.read(MAX_MANIFEST_BYTES + 1)  # one byte over is enough to refuse it
        except OSError as exc:
            self.stderr.write(f"error: cannot read {options['path']}: {exc.strerror or exc}")
            sys.exit(2)
        result = check_manifest(data, source=str(Path(options["path"]).resolve().parent))
        if options["json"]:
            self.stdout.write(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
        else:
            self.stdout.write(render(options["path"], result))
        sys.exit(0 if result.passes else 1)


def render(path: str, result: ManifestCheck) -> str:
    doc = result.to_json()
    ids = doc["package_id"]
    lines = [*result.assessment.headline.lines(), ""]
    lines += [
        f"{path}: schema {doc['schema']}, {'valid' if doc['valid'] else 'INVALID'} as mesh-llm judges it",
        f"package_id: declared {ids['declared']}, computed {ids['computed']}, matches {ids['matches']}",
    ]
    lines += [f"  [{p['severity']}] {p['code']} at {p['path']}: {p['message']}" for p in doc["problems"]]
    lines.append("runtime (speculative.strategy -> outcome):")
    lines += [f"  {setting}: {row['outcome']}: {row['why']}" for setting, row in doc["runtime"].items()]
    lines += [f"  (not pinned down) {note}" for note in result.runtime.uncertain]
    lines.append("releases:")
    lines += [f"  {a['release']}: {_admitted(a['admitted'])}: {a['why']}" for a in doc["compatibility"]]
    if result.assessment.cannot_see:
        lines.append("what this check cannot see:")
        lines += [f"  {item}" for item in result.assessment.cannot_see]
    return "\n".join(lines)


def _admitted(value: bool | None) -> str:
    return "not pinned down" if value is None else "admitted" if value else "refused"
