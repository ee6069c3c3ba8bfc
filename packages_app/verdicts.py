"""The vocabulary every surface shows: a revision's headline status, the action it calls for, and the MTP
verdict behind it. One owner: each member carries its label, rank, tone (colour), sentence and glossary
anchor here; the audit returns members, and templates, CSS classes, the glossary, severity sorting, the
catalog's facets, the CLI and the demo read them from here.

Pure (no Django). A revision's *verdict* says whether its manifest's MTP declaration and its weights agree;
its *headline status* says what happens when a node serves it on the newest known mesh-llm release (the
assessment, packages_app.audit.assessment), which also weighs the release's admission rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property


class Tone(StrEnum):
    """The colour a term is drawn in: CSS classes ``tone-<name>`` (meshdash.css) and chart colours."""

    BAD = "bad"  # something fails or is refused
    WARN = "warn"  # it works, but not as it could (MTP left unused) or cannot be judged
    INFO = "info"  # fine, nothing to gain
    GOOD = "good"  # fine, with MTP
    NONE = "none"  # not judged yet


@dataclass(frozen=True)
class Term:
    label: str
    rank: int  # 0 is the worst; sorting by rank puts what needs action first
    tone: Tone
    sentence: str  # what it means, for the glossary and the tooltips


class _Vocabulary(StrEnum):
    """A StrEnum whose members carry a Term (from the class's ``_terms``)."""

    @classmethod
    def _kind(cls) -> str:
        raise NotImplementedError

    @classmethod
    def _terms(cls) -> dict[str, Term]:
        raise NotImplementedError

    # Looked up once a member (its term never changes): ranking a thousand nodes' rows reads thousands.
    @cached_property
    def term(self) -> Term:
        return type(self)._terms()[self.value]

    @property
    def label(self) -> str:
        return self.term.label

    @cached_property
    def rank(self) -> int:
        return self.term.rank

    @property
    def tone(self) -> Tone:
        return self.term.tone

    @property
    def sentence(self) -> str:
        return self.term.sentence

    @property
    def anchor(self) -> str:
        return f"{type(self)._kind()}-{self.value}".replace("_", "-").replace("+", "-")


class Verdict(_Vocabulary):
    """Declared vs detected MTP: does the manifest's declaration match what the weights hold?"""

    CONSISTENT_MTP = "consistent-mtp"
    CONSISTENT_NO_MTP = "consistent-no-mtp"
    UNDECLARED_MTP = "undeclared-mtp"
    DECLARED_WITHOUT_WEIGHTS = "declared-without-weights"
    DECLARATION_MISMATCH = "declaration-mismatch"
    INVALID_MANIFEST = "invalid-manifest"

    @classmethod
    def _kind(cls) -> str:
        return "verdict"

    @classmethod
    def _terms(cls) -> dict[str, Term]:
        return _VERDICT_TERMS

    @property
    def consistent(self) -> bool:
        return self in CONSISTENT


_VERDICT_TERMS: dict[str, Term] = {
    Verdict.INVALID_MANIFEST: Term(
        "invalid manifest",
        0,
        Tone.BAD,
        "The manifest does not validate as mesh-llm validates it, so the declaration cannot be judged.",
    ),
    Verdict.DECLARED_WITHOUT_WEIGHTS: Term(
        "declared, no weights",
        1,
        Tone.BAD,
        "The manifest declares native MTP but the weights hold no NextN tensors: loading with MTP fails.",
    ),
    Verdict.DECLARATION_MISMATCH: Term(
        "declaration mismatch",
        2,
        Tone.BAD,
        "The manifest declares native MTP on blocks other than those holding the NextN tensors, or in a "
        "form the runtime refuses.",
    ),
    Verdict.UNDECLARED_MTP: Term(
        "MTP undeclared",
        3,
        Tone.BAD,
        "The weights hold an MTP block but the manifest declares no native-MTP strategy: nodes never load "
        "it and decode without MTP, silently slower.",
    ),
    Verdict.CONSISTENT_MTP: Term(
        "MTP declared and present",
        4,
        Tone.GOOD,
        "The weights hold native MTP (NextN) tensors and the manifest declares them.",
    ),
    Verdict.CONSISTENT_NO_MTP: Term(
        "no MTP, none declared",
        5,
        Tone.INFO,
        "No MTP weights and no MTP declaration: nothing to enable.",
    ),
}


class Status(_Vocabulary):
    """A revision's headline: what serving it does on the newest known mesh-llm release."""

    INVALID_MANIFEST = "invalid-manifest"
    NOT_SERVABLE = "not-servable"
    FAILS_AT_LOAD = "fails-at-load"
    FILES_MISMATCH = "files-mismatch"
    MTP_UNUSED = "mtp-unused"
    WEIGHTS_UNREAD = "weights-unread"
    SERVES_NO_MTP = "serves-no-mtp"
    SERVES_MTP = "serves-mtp"
    NOT_ASSESSED = "not-assessed"

    @classmethod
    def _kind(cls) -> str:
        return "status"

    @classmethod
    def _terms(cls) -> dict[str, Term]:
        return _STATUS_TERMS

    @property
    def needs_action(self) -> bool:
        """Something to do about the revision itself (every status but the two that serve as well as
        the weights allow, and one not judged yet)."""
        return self not in (Status.SERVES_MTP, Status.SERVES_NO_MTP, Status.NOT_ASSESSED)


_STATUS_TERMS: dict[str, Term] = {
    Status.INVALID_MANIFEST: Term(
        "invalid manifest",
        0,
        Tone.BAD,
        "mesh-llm rejects the manifest (a parse error or a validation code), so no release loads it.",
    ),
    Status.NOT_SERVABLE: Term(
        "not servable",
        1,
        Tone.BAD,
        "The newest known mesh-llm release refuses to serve it (layer-package schema v1, a field its parser "
        "does not know, or an architecture its split-certification roster does not list).",
    ),
    Status.FAILS_AT_LOAD: Term(
        "fails at load",
        2,
        Tone.BAD,
        "The release admits it, but loading with the default setting (auto) fails: the declared MTP "
        "strategy names weights that are not there, or a form the runtime refuses.",
    ),
    Status.FILES_MISMATCH: Term(
        "files disagree with the manifest",
        3,
        Tone.BAD,
        "The files on the Hub are not what the manifest lists (missing, another size or another sha256): a "
        "node holding such a file cannot download what the manifest promises.",
    ),
    Status.MTP_UNUSED: Term(
        "MTP weights unused",
        4,
        Tone.WARN,
        "It serves, but without MTP although the weights hold an MTP block: the manifest does not make "
        "auto run it. Decoding is slower than it could be, and nothing says why.",
    ),
    Status.WEIGHTS_UNREAD: Term(
        "weights not read",
        5,
        Tone.WARN,
        "The manifest is admitted, but the GGUF weights were not read (a manifest checked alone, or headers "
        "that failed), so MTP weights it does not declare cannot be detected.",
    ),
    Status.SERVES_NO_MTP: Term(
        "serves, no MTP in the weights",
        6,
        Tone.INFO,
        "It serves; the weights hold no MTP block, so there is no MTP to enable.",
    ),
    Status.SERVES_MTP: Term(
        "serves with MTP",
        7,
        Tone.GOOD,
        "It serves, and nodes on the default setting (auto) decode with native MTP.",
    ),
    Status.NOT_ASSESSED: Term(
        "not assessed yet",
        8,
        Tone.NONE,
        "The ingest has not finished (or failed before the audit), so there is nothing to judge yet.",
    ),
}


class ActionKind(_Vocabulary):
    """What to do about a revision; the headline names one, with its specifics."""

    FIX_MANIFEST = "fix-manifest"
    REPUBLISH_V2 = "republish-v2"
    SPLIT_OVERRIDE = "split-override"
    APPLY_PATCH = "apply-patch"
    FIX_DECLARATION = "fix-declaration"
    SET_STRATEGY = "set-strategy"
    UPGRADE_RELEASE = "upgrade-release"
    READ_WEIGHTS = "read-weights"
    WAIT = "wait"
    NOTHING = "nothing"

    @classmethod
    def _kind(cls) -> str:
        return "action"

    @classmethod
    def _terms(cls) -> dict[str, Term]:
        return _ACTION_TERMS


_ACTION_TERMS: dict[str, Term] = {
    ActionKind.FIX_MANIFEST: Term(
        "fix the manifest", 0, Tone.BAD, "Correct what mesh-llm's validator names, then republish."
    ),
    ActionKind.REPUBLISH_V2: Term(
        "republish as package-v2",
        1,
        Tone.BAD,
        "Layer-package schema v1 is offline-only: republish with `mesh-llm models package`, whose writer "
        "(since PR #1937) declares the MTP block for the one layout it accepts (nextn_predict_layers = 1, "
        "NextN tensors at the last block); for any other it refuses the source, and the action gives the "
        "block to write by hand.",
    ),
    ActionKind.SPLIT_OVERRIDE: Term(
        "serve on one node, or override",
        2,
        Tone.BAD,
        "The release's split-certification roster does not list the architecture: serve it on one node, "
        "or split with `--split --allow-uncertified-split` at your own risk.",
    ),
    ActionKind.APPLY_PATCH: Term(
        "apply the patched manifest",
        3,
        Tone.WARN,
        "meshdash wrote the exact model-package.json with the missing or corrected generation block and "
        "the recomputed package_id: publish it as a new revision.",
    ),
    ActionKind.FIX_DECLARATION: Term(
        "fix the declaration",
        4,
        Tone.BAD,
        "The declared native-MTP strategy names weights the package does not hold: drop it, or republish "
        "from a source whose GGUF keeps the NextN tensors.",
    ),
    ActionKind.SET_STRATEGY: Term(
        "set speculative.strategy",
        5,
        Tone.WARN,
        "The package declares native MTP under a strategy auto does not pick: name it in the node's "
        "`speculative.strategy` (or make it the package's default).",
    ),
    ActionKind.UPGRADE_RELEASE: Term(
        "upgrade mesh-llm",
        6,
        Tone.WARN,
        "The node's mesh-llm release refuses this revision; a newer release admits it.",
    ),
    ActionKind.READ_WEIGHTS: Term(
        "audit the weights",
        7,
        Tone.WARN,
        "Run `audit_package` on the package folder or its Hub repo: it reads every GGUF header, so MTP "
        "weights the manifest does not declare are found.",
    ),
    ActionKind.WAIT: Term("wait for the ingest", 8, Tone.NONE, "The revision is still being read."),
    ActionKind.NOTHING: Term("nothing to do", 9, Tone.INFO, "It serves as well as its weights allow."),
}


class Cause(_Vocabulary):
    """Why a node needs action (or does not), judged against the node's own mesh-llm release."""

    CONTRADICTION = "contradiction"
    SERVED_BYTES = "served-bytes"
    REFUSED = "refused-by-release"
    FAILS_AT_LOAD = "fails-at-load"
    MTP_UNUSED = "mtp-unused"
    OUTDATED = "outdated"
    UNCERTIFIED = "uncertified-override"
    UNKNOWN_RELEASE = "unknown-release"
    MOVED_ON = "moved-on"
    OK = "ok"

    @classmethod
    def _kind(cls) -> str:
        return "cause"

    @classmethod
    def _terms(cls) -> dict[str, Term]:
        return _CAUSE_TERMS

    @property
    def needs_action(self) -> bool:
        return self not in (Cause.OK, Cause.UNKNOWN_RELEASE, Cause.MOVED_ON)


_CAUSE_TERMS: dict[str, Term] = {
    Cause.CONTRADICTION: Term(
        "contradicts the audit",
        0,
        Tone.BAD,
        "What the node did differs from what meshdash predicts for its release and setting: the node "
        "fell back, its version string is not the release it claims, or the audit misses something.",
    ),
    Cause.SERVED_BYTES: Term(
        "serves other bytes",
        1,
        Tone.BAD,
        "What the node says it loaded (its stages' admission.package_id, its exchanges' model_revision and "
        "weights_digest) is not the revision its package ref and reports name: bytes meshdash has not "
        "audited, or another revision, so the audit and the figures are not about what it serves.",
    ),
    Cause.REFUSED: Term(
        "refused by its release",
        2,
        Tone.BAD,
        "The node's mesh-llm release refuses this revision (the reason is mesh-llm's own); a newer release "
        "or a republished package serves it.",
    ),
    Cause.FAILS_AT_LOAD: Term(
        "fails at load",
        3,
        Tone.BAD,
        "With the node's setting, loading this revision fails on the node's release.",
    ),
    Cause.MTP_UNUSED: Term(
        "MTP weights unused",
        4,
        Tone.WARN,
        "The weights hold MTP, yet the node's reports show it unused: the manifest does not make its "
        "setting run MTP, or the setting chose something else.",
    ),
    Cause.OUTDATED: Term(
        "outdated",
        5,
        Tone.WARN,
        "A newer revision of the package has a better headline: run that one.",
    ),
    Cause.UNCERTIFIED: Term(
        "uncertified split",
        6,
        Tone.WARN,
        "The node serves a split its release does not certify, with --allow-uncertified-split.",
    ),
    Cause.UNKNOWN_RELEASE: Term(
        "release not in the matrix",
        7,
        Tone.NONE,
        "The node reports a mesh-llm version the release matrix does not know, so its behaviour is not "
        "predicted (and cannot contradict the audit).",
    ),
    Cause.MOVED_ON: Term(
        "moved on",
        8,
        Tone.NONE,
        "The node ran this revision in the window, then another revision of the same package: history, "
        "nothing to do about it.",
    ),
    Cause.OK: Term("no action", 9, Tone.GOOD, "The node runs the revision as its release and setting allow."),
}


CONSISTENT = frozenset({Verdict.CONSISTENT_MTP, Verdict.CONSISTENT_NO_MTP})
CONSISTENT_VERDICTS = tuple(v.value for v in Verdict if v in CONSISTENT)
INCONSISTENT_VERDICTS = tuple(v.value for v in Verdict if v not in CONSISTENT)
VERDICTS = tuple(v.value for v in Verdict)
STATUSES = tuple(s.value for s in Status)
# Worst first: what the catalog's "worst first" sort and the facets follow.
STATUSES_BY_RANK = tuple(sorted(Status, key=lambda s: s.rank))
VERDICTS_BY_RANK = tuple(sorted(Verdict, key=lambda v: v.rank))
NEEDS_ACTION = tuple(s.value for s in Status if s.needs_action)


def is_consistent(verdict: str) -> bool:
    """True for the two verdicts where declaration and weights agree; False for any other string."""
    return verdict in CONSISTENT_VERDICTS


def improves(after: Status, before: Status) -> bool:
    """Whether ``after`` is a better headline than ``before``. An unassessed one never is: what it does is
    not known yet, so it is no fix to recommend (a revision just published, before its ingest)."""
    return after is not Status.NOT_ASSESSED and after.rank > before.rank


def status_of(value: str | None) -> Status:
    """The status a stored value names; an empty, unknown or older value is "not assessed"."""
    return _STATUS_OF.get(value or "", Status.NOT_ASSESSED)


# A dict lookup: Status(value) and its ValueError took 3 µs, and a needing-action list asks thousands.
_STATUS_OF: dict[str, Status] = {status.value: status for status in Status}


def verdict_of(value: str | None) -> Verdict | None:
    """The verdict a stored value names, or None (not audited, or a name this version does not know)."""
    try:
        return Verdict(value) if value else None
    except ValueError:
        return None


# --- why a revision is not assessed ---------------------------------------------------------------

# The Hub's answer to a token without access to a gated repo, as hub/errors.py words it.
GATED_MARK = "the repo is gated"


@dataclass(frozen=True)
class NotAssessed:
    """Why a revision has no headline, said the same way on every surface (page, history, catalog, API)."""

    label: str
    sentence: str
    expected_in_demo: bool = False  # devhub gates one repo on purpose and the demo sets no HF_TOKEN

    def to_json(self) -> dict[str, object]:
        return {"status": Status.NOT_ASSESSED.value, "label": self.label, "sentence": self.sentence}


def not_assessed(ingest_status: str, error: str, development_hub: bool = False) -> NotAssessed:
    """The reason a revision is not assessed, from its ingest status and error."""
    if ingest_status != "failed":
        return NotAssessed(Status.NOT_ASSESSED.label, NOT_FINISHED)
    if GATED_MARK in error:
        return NotAssessed("not assessed: gated", GATED, development_hub)
    return NotAssessed("not assessed: ingest failed", FAILED)


NOT_FINISHED = "The ingest has not finished, so there is nothing to judge yet."
GATED = (
    "The ingest failed: the repo is gated, and the Hub gives its files only to a token granted access, so "
    "there is nothing to judge. Set HF_TOKEN to such an account, then reingest it."
)
FAILED = (
    "The ingest failed before the audit (the reason is below and on the ingest page), so there is "
    "nothing to judge."
)
