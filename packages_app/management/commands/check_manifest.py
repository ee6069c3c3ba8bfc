"""`manage.py check_manifest PATH [--json]`: one model-package.json judged as mesh-llm judges it.

No weights, no network. The split-certification gate needs the metadata carrier's ``general.architecture``:
it is read from the carrier's header when that file sits beside the manifest, else taken from the revision
meshdash tracks with the same bytes (as the check page and ``POST /api/v1/check-manifest`` do, so the three
give the same headline and the same ``passes`` for the same bytes); with neither, the headline says the gate
was not judged. It leads with the assessment's headline, which says what a manifest alone cannot see (the
weights: run `audit_package` on the folder). Exit 0: valid, admitted by the newest known mesh-llm release,
not refused split by a known roster, and no error finding (``passes`` in the JSON); 1: otherwise (a file that
is not JSON, or does not parse, is invalid); 2: the file cannot be read. `--json` prints the same JSON as the
check page's API, with the assessment under "assessment".
"""

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from packages_app import queries
from packages_app.audit.check import ManifestCheck, check_manifest
from packages_app.gguf_errors import GGUFHeaderError
from packages_app.gguf_header import parse_file
from packages_app.layout import MAX_MANIFEST_BYTES
from packages_app.management.cli_text import grouped_lines, plain
from packages_app.manifest import parse_manifest, unsafe_path_reason
from packages_app.models import Revision


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
        folder = Path(options["path"]).resolve().parent
        architecture = carrier_architecture(data, folder)
        tracked = queries.tracked_manifest(data, show_private=True) if architecture is None else None
        if tracked is not None:
            architecture = tracked.architecture or None
        result = check_manifest(data, source=str(folder), architecture=architecture)
        if options["json"]:
            self.stdout.write(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
        else:
            self.stdout.write(render(options["path"], result, tracked))
        sys.exit(0 if result.passes else 1)


def render(path: str, result: ManifestCheck, tracked: Revision | None = None) -> str:
    doc = result.to_json()
    ids = doc["package_id"]
    lines = [*result.assessment.headline.lines(), ""]
    if tracked is not None:
        lines += [
            f"meshdash tracks this exact manifest: {tracked.package.repo_id} at {tracked.commit_sha[:12]}; "
            f"the split gate used its carrier's architecture ({tracked.architecture or 'unknown'})",
            "",
        ]
    problems = doc["problems"]
    lines += [
        f"{path}: schema {plain(doc['schema'], 'unknown')}, "
        f"{'valid' if doc['valid'] else 'INVALID'} as mesh-llm judges it",
        package_id_line(ids),
    ]
    lines += [f"  [{p['severity']}] {p['code']} at {p['path']}: {p['message']}" for p in problems]
    lines.append("runtime (speculative.strategy -> outcome):")
    rows = [(setting, row["outcome"], row["why"]) for setting, row in doc["runtime"].items()]
    lines += grouped_lines(rows, problems)
    lines += [f"  (assumes) {sentence}" for sentence in result.runtime.assumptions.sentences()]
    lines += [f"  (not pinned down) {note}" for note in result.runtime.uncertain]
    lines.append("releases:")
    releases = [(a["release"], _admitted(a["admitted"]), a["why"]) for a in doc["compatibility"]]
    lines += grouped_lines(releases, problems)
    if result.assessment.cannot_see:
        lines.append("what this check cannot see:")
        lines += [f"  {item}" for item in result.assessment.cannot_see]
    return "\n".join(lines)


def package_id_line(ids: dict[str, Any]) -> str:
    """The declared and computed package_id, in words where one is missing."""
    declared = f"package_id: declared {plain(ids['declared'], 'none')}"
    if ids["computed"] is None:
        return f"{declared}, not computed (the manifest does not parse)"
    return f"{declared}, computed {ids['computed']}: {'they match' if ids['matches'] else 'they differ'}"


def carrier_architecture(data: bytes, folder: Path) -> str | None:
    """``general.architecture`` of the metadata carrier the manifest names, when it sits beside it in the
    folder (a package folder before publishing): one local header, which the split-certification gate
    needs. None when there is no such file or it does not parse (the gate then says it is not pinned down)."""
    parsed = parse_manifest(data)
    relative = parsed.manifest.metadata_path if parsed.manifest else None
    if not relative or unsafe_path_reason(relative):
        return None
    try:
        architecture = parse_file(folder / relative).kv.get("general.architecture")
    except (OSError, GGUFHeaderError):
        return None
    return architecture if isinstance(architecture, str) else None


def _admitted(value: bool | None) -> str:
    return "not pinned down" if value is None else "admitted" if value else "refused"
