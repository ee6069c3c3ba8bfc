"""Pure: synthetic assessments, in the real shape and size, for rows with no manifest bytes to audit
(seed_synthetic and the dashboard tests' factories)."""

from __future__ import annotations

from collections.abc import Sequence

from packages_app.audit.assessment import Action, Assessment, Headline, Mtp, Servable
from packages_app.audit.headline import release_outcomes
from packages_app.audit.model import (
    Resolution,
    Runtime,
)
from packages_app.verdicts import ActionKind, Status, Verdict

# The headline a revision of each verdict gets from a package-v2 manifest the newest release admits.
_SYNTHETIC = {
    Verdict.CONSISTENT_MTP: (Status.SERVES_MTP, ActionKind.NOTHING, "native-mtp"),
    Verdict.CONSISTENT_NO_MTP: (Status.SERVES_NO_MTP, ActionKind.NOTHING, "no-mtp"),
    Verdict.UNDECLARED_MTP: (Status.MTP_UNUSED, ActionKind.APPLY_PATCH, "no-mtp"),
    Verdict.DECLARED_WITHOUT_WEIGHTS: (Status.FAILS_AT_LOAD, ActionKind.FIX_DECLARATION, "load-fails"),
    Verdict.DECLARATION_MISMATCH: (Status.FAILS_AT_LOAD, ActionKind.APPLY_PATCH, "load-fails"),
    Verdict.INVALID_MANIFEST: (Status.INVALID_MANIFEST, ActionKind.FIX_MANIFEST, "load-fails"),
}
_SYNTHETIC_SETTINGS = ("auto", "mtp", "disabled", "ngram-cache", "ngram-suffix", "native-mtp-n1")


def synthetic(
    verdict: Verdict, schema: int, releases: Sequence[str], mtp_blocks: tuple[int, ...] = ()
) -> Assessment:
    """A made-up revision's assessment in the real shape and size (every release, every setting), for
    synthetic rows that have no manifest bytes to audit: what a package-v2 revision of ``verdict``
    gets, and for schema v1 what every release but the first (the one before PR #1693) does."""
    status, kind, auto = _SYNTHETIC[verdict]
    newest = releases[-1]
    v1 = schema == 1 and status is not Status.INVALID_MANIFEST
    if v1:
        status, kind = Status.NOT_SERVABLE, ActionKind.REPUBLISH_V2
    admitted = [(i == 0) if v1 else (status is not Status.INVALID_MANIFEST) for i in range(len(releases))]
    servable = tuple(
        Servable(r, ok, "Synthetic.", ok, "Synthetic.", None)
        for r, ok in zip(releases, admitted, strict=True)
    )
    rows = tuple(
        Resolution(s, auto if s == "auto" else "no-mtp", f"Synthetic {s} row.") for s in _SYNTHETIC_SETTINGS
    )
    outcomes = tuple(release_outcomes(Runtime(rows), s) for s in servable)
    declared = verdict in (
        Verdict.CONSISTENT_MTP,
        Verdict.DECLARED_WITHOUT_WEIGHTS,
        Verdict.DECLARATION_MISMATCH,
    )
    headline = Headline(
        status,
        f"Synthetic: {status.label} ({verdict.value}).",
        Action(kind, f"Synthetic: {kind.label}."),
        newest,
    )
    mtp = Mtp(verdict, declared, bool(mtp_blocks), mtp_blocks)
    return Assessment(headline, mtp, servable, outcomes)
