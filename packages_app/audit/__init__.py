"""Pure: one revision's MTP audit: detection (weights), judgement (verdict, problems), runtime (resolver
table, release compatibility), fix (suggested generation, patched manifest), and the assessment that
puts them together (per-release admission and outcomes, one headline), with the advice for a node.

Owns: the verdict vocabulary, what the weights hold, how mesh-llm would resolve and admit the package.
Never imports: Django, packages_app.models or any service, hub/ (no network, no file I/O); it reads the
manifest only through packages_app.manifest.
"""

from packages_app.audit.assessment import Assessment, Headline, Scope
from packages_app.audit.detection import block_kind, detect, expected_nextn_tensors
from packages_app.audit.fix import writer_mtp_strategy
from packages_app.audit.judgement import declare
from packages_app.audit.model import (
    KINDS,
    Block,
    Declared,
    Detected,
    FileCheck,
    FileInfo,
    Provenance,
    Resolution,
    Runtime,
    Suggestion,
    verdict_is_consistent,
)
from packages_app.audit.revision import Audit, audit
from packages_app.layout import METADATA_ONLY_KEY
from packages_app.manifest import Problem
from packages_app.verdicts import CONSISTENT_VERDICTS, INCONSISTENT_VERDICTS, VERDICTS

__all__ = [
    "CONSISTENT_VERDICTS",
    "INCONSISTENT_VERDICTS",
    "KINDS",
    "METADATA_ONLY_KEY",
    "VERDICTS",
    "Assessment",
    "Audit",
    "Block",
    "Declared",
    "Detected",
    "FileCheck",
    "FileInfo",
    "Headline",
    "Problem",
    "Provenance",
    "Resolution",
    "Runtime",
    "Scope",
    "Suggestion",
    "audit",
    "block_kind",
    "declare",
    "detect",
    "expected_nextn_tensors",
    "verdict_is_consistent",
    "writer_mtp_strategy",
]
