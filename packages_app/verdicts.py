"""The audit's verdict names: one enum for the audit, the selectors, the forms and the templates.

Pure (no Django). A revision's verdict says whether its manifest's MTP declaration and its weights agree.
"""

from __future__ import annotations

from enum import StrEnum


class Verdict(StrEnum):
    CONSISTENT_MTP = "consistent-mtp"
    CONSISTENT_NO_MTP = "consistent-no-mtp"
    UNDECLARED_MTP = "undeclared-mtp"
    DECLARED_WITHOUT_WEIGHTS = "declared-without-weights"
    DECLARATION_MISMATCH = "declaration-mismatch"
    INVALID_MANIFEST = "invalid-manifest"

    @property
    def consistent(self) -> bool:
        return self in CONSISTENT


CONSISTENT = frozenset({Verdict.CONSISTENT_MTP, Verdict.CONSISTENT_NO_MTP})
CONSISTENT_VERDICTS = tuple(v.value for v in Verdict if v in CONSISTENT)
INCONSISTENT_VERDICTS = tuple(v.value for v in Verdict if v not in CONSISTENT)
VERDICTS = tuple(v.value for v in Verdict)


def is_consistent(verdict: str) -> bool:
    """True for the two verdicts where declaration and weights agree; False for any other string."""
    return verdict in CONSISTENT_VERDICTS
