"""`manage.py audit_package SOURCE [--revision REV] [--json]`: MTP capability audit of a folder or Hub repo.

It leads with the assessment's headline (status, sentence, action), as every page does. Exit 0: the
headline needs no action (it serves with MTP, or serves and its weights hold none) and no problem is an
error; 1: otherwise (an inconsistent verdict, a release that refuses it, a load that fails, MTP left
unused, a manifest that does not parse); 2: could not audit.
A local folder needs no database and no network: a builder's check before publishing. Its artifacts
are checked for existence, size and sha256 (mesh-llm's preflight codes), hashing streamed with a
progress bar on stderr; `--no-verify` skips the hashing.
"""

import json
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from packages_app import audit as auditing
from packages_app import hub, inspection, repo_ids
from packages_app.management.cli_text import grouped_lines, plain
from packages_app.verdicts import Verdict


class Command(BaseCommand):
    help = "Audit a package's MTP declaration against its weights (a local folder or a Hub repo id)."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "source", help="a local package folder, a Hub repo id (owner/name) or its Hub URL (.../tree/REV)"
        )
        parser.add_argument("--revision", help="branch, tag or commit sha (Hub only; default: main)")
        parser.add_argument("--json", action="store_true", help="print the audit as JSON")
        parser.add_argument(
            "--no-verify",
            action="store_true",
            help="local folder: skip hashing the artifacts (existence and size are still checked)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        target, revision = options["source"], options["revision"]
        try:
            if "://" in target:  # a Hub URL: https://<HF_ENDPOINT>/owner/name[/tree/REV]
                reference = repo_ids.parse_repo_reference(target, [settings.HF_ENDPOINT])
                target, revision = reference.repo_id, revision or reference.revision
            source = inspection.open_package_source(target)
            result = inspection.audit_source(
                source, revision, verify=not options["no_verify"], progress=sys.stderr
            )
        except (hub.HubError, repo_ids.InvalidRepoId) as exc:
            self.stderr.write(f"error: could not audit {options['source']}: {exc}")
            sys.exit(2)
        if reason := unauditable_reason(result.audit):
            self.stderr.write(f"error: could not audit {options['source']}: {reason}")
            sys.exit(2)
        doc = result.audit.to_json()
        doc["assessment"] = result.audit.assessment.to_json() if result.audit.assessment else None
        if options["json"]:
            self.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False))
        else:
            self.stdout.write(render_report(result, doc))
        sys.exit(exit_code(result.audit))


def unauditable_reason(audit: auditing.Audit) -> str | None:
    """Why there is nothing to judge (exit 2), or None. A manifest that is there but does not parse is
    judged `invalid-manifest` (exit 1) whatever the weights; no manifest at all is not a package."""
    if "missing_manifest" in audit.codes():
        return "no model-package.json, so this is not a layer package"
    if not audit.auditable and audit.verdict != Verdict.INVALID_MANIFEST:
        return "the GGUF headers that would show MTP could not be read"
    return None


def exit_code(audit: auditing.Audit) -> int:
    assessment = audit.assessment
    failing = assessment is None or assessment.status.needs_action or not audit.consistent
    failing = failing or any(p.severity == "error" for p in audit.problems)
    return 1 if failing else 0


def render_report(result: inspection.PackageAudit, doc: dict[str, Any]) -> str:
    detected, declared, runtime = doc["detected"], doc["declared"], doc["runtime"]
    assessment = result.audit.assessment
    lines = [
        result.source if result.revision == hub.LOCAL_REVISION else f"{result.source} @ {result.revision}",
        *(assessment.headline.lines() if assessment else []),
        f"MTP verdict: {doc['verdict']}",
        f"detected: {plain(detected['architecture'], 'unknown architecture')}, "
        f"{plain(detected['block_count'], 'an unknown number of')} blocks, "
        f"nextn_predict_layers {plain(detected['nextn_predict_layers'])}, "
        f"MTP blocks {detected['mtp_blocks'] or 'none'}",
        f"declared: default strategy {declared['default_strategy'] or 'none'}, "
        f"native MTP {'yes' if declared['uses_native_mtp'] else 'no'}"
        + (f", layer_indices {declared['layer_indices']}" if declared["layer_indices"] else ""),
        "runtime (speculative.strategy -> outcome):",
        *grouped_lines([(s, row["outcome"], row["why"]) for s, row in runtime.items()], doc["problems"]),
        *(f"  (assumes) {s}" for s in (assessment.assumptions.sentences() if assessment else ())),
    ]
    if doc["problems"]:
        lines.append("problems:")
        lines += [f"  [{p['severity']}] {p['code']}: {p['message']}" for p in doc["problems"]]
    if doc["suggested_generation"]:
        lines.append("suggested fix (add to model-package.json):")
        lines.append(doc["suggested_generation"]["diff"])
        if doc["suggested_generation"].get("advice"):
            lines.append(doc["suggested_generation"]["advice"])
    lines.append(f"fetched {result.bytes} bytes in {result.requests} requests")
    return "\n".join(lines)
