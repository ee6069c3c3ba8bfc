"""`manage.py import_certify FILE [--by NAME]`: take one `mesh-llm models certify` JSON report (schema_version
1; docs/rules.md section 6b) into meshdash.

The report names the package bytes it tested by ``manifest_sha256``; it is stored whether or not meshdash
tracks a revision with those bytes (an untracked one is listed by ``GET /api/v1/certify-reports`` and shows on
the package page once the revision is ingested), and the same report twice is stored once.

Exit 0: stored, or that exact report was already there; 2: the file cannot be read or is no such report
(the message names the field). On exit 2 nothing is written.
"""

from __future__ import annotations

import getpass
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from packages_app import certify_reports
from packages_app.audit.certify_report import MAX_REPORT_BYTES, CertifyReportError
from packages_app.models import CertifyReport


class Command(BaseCommand):
    help = "Store a `mesh-llm models certify` JSON report with the revision whose manifest it tested."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the report `mesh-llm models certify` wrote (JSON)")
        parser.add_argument("--by", help="who certified it (default: the user running this command)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            with Path(options["file"]).open("rb") as f:
                data = f.read(MAX_REPORT_BYTES + 1)
        except OSError as exc:
            self.stderr.write(
                f"error: cannot read {options['file']}: {exc.strerror or exc}; nothing was imported"
            )
            sys.exit(2)
        by = options["by"] or getpass.getuser()
        try:
            stored = certify_reports.store_certify_report(
                data, certified_by=by, via=CertifyReport.Via.IMPORT, now=timezone.now()
            )
        except CertifyReportError as exc:
            where = f" ({exc.field})" if exc.field else ""
            self.stderr.write(f"error: {options['file']}: {exc.message}{where}; nothing was imported")
            sys.exit(2)
        report, revision = stored.report, stored.revision
        target = (
            f"{revision.package.repo_id} at {revision.commit_sha[:12]}"
            if revision
            else f"manifest {report.manifest_sha256[:12]}, which no tracked revision holds (kept, listed)"
        )
        verb = "imported" if stored.created else "already there, unchanged:"
        self.stdout.write(f"{verb} certify report {report.summary} for {target}")
