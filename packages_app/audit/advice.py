"""Pure: what a node should do about a revision it runs (or registered), judged against its own mesh-llm
release: the revision's assessment predicts, per release and operator setting, what serving it does; the
node's reports say what it did. No Django, no I/O.

One cause per (node, revision), the most urgent (the Cause vocabulary's rank): a contradiction between
prediction and reports, a release that refuses the revision, a load that fails, MTP weights left unused,
a newer revision with a better headline, a split served under --allow-uncertified-split, or a release
the matrix does not know (which predicts nothing, so it never raises a contradiction).
"""

from __future__ import annotations

from dataclasses import dataclass

from packages_app.audit.assessment import Assessment
from packages_app.audit.model import Resolution
from packages_app.audit.releases import release_for
from packages_app.verdicts import Cause, Status, improves

UNCERTIFIED_OVERRIDE = "uncertified_override"
_FAILS = ("load-fails", "refused")
NGRAM_SETTINGS = ("ngram-cache", "ngram-suffix")


@dataclass(frozen=True)
class NodeFacts:
    """What one node did with one revision (the most-reported strategy pair in the window)."""

    node: str
    version: str = ""  # mesh-llm version from the node's run registration; "" when none was registered
    requested: str = ""  # llama_stage.spec.requested_strategy; "" means auto
    effective: str = ""  # llama_stage.spec.effective_strategy
    mtp_used: bool = False
    unused: bool = False  # its reports in the window show MTP weights unused
    ran: bool = True  # False: the agent registered the run, but no decode report came
    certification: str = ""  # the stage's split certification: certified | uncertified_override | ""

    @property
    def setting(self) -> str:
        return self.requested or "auto"

    @property
    def did(self) -> str:
        if self.mtp_used or self.effective.startswith("native-mtp"):
            return f"native MTP ({self.effective or 'native-mtp'})"
        return self.effective or "without MTP"


@dataclass(frozen=True)
class Newer:
    """The package's latest revision, when the node runs another one."""

    commit_sha: str
    status: Status

    @property
    def short_sha(self) -> str:
        return self.commit_sha[:8]


@dataclass(frozen=True)
class Advice:
    cause: Cause
    text: str  # "MTP weights unused: requested auto, ran disabled — apply the patched ..."
    release: str | None = None  # the node's release, as the matrix names it
    predicted: str = ""  # what its setting does there: native-mtp | no-mtp | load-fails | refused

    @property
    def needs_action(self) -> bool:
        return self.cause.needs_action


def advise(assessment: Assessment | None, facts: NodeFacts, newer: Newer | None = None) -> Advice:
    """The most urgent thing to do about ``facts.node`` running this revision (Cause.OK when nothing)."""
    release = release_for(facts.version)
    if assessment is None:
        return Advice(Cause.OK, "The revision is not assessed yet.", release)
    row = assessment.outcome(release, facts.setting) if release else None
    candidates = [
        _release_advice(assessment, facts, release, row),
        _unused_advice(assessment, facts, newer, release),
        _outdated_advice(assessment, newer, release),
        _uncertified_advice(facts, release),
    ]
    found = [a for a in candidates if a is not None]
    if found:
        return min(found, key=lambda a: a.cause.rank)
    if release is None:
        version = f"mesh-llm {facts.version}" if facts.version else "An unknown mesh-llm version"
        text = f"{version} is not in the release matrix, so what it does with this revision is not predicted."
        return Advice(Cause.UNKNOWN_RELEASE, text)
    return Advice(Cause.OK, f"Runs it as {release} with {facts.setting} allows.", release, _code(row))


def strategy_can_change_cause(version: str) -> bool:
    """Whether the strategy a node ran (``NodeFacts.requested``, ``effective``, ``mtp_used``) can change
    the cause of its advice: only against a release the matrix knows, where what it ran can contradict
    the prediction. Without one, every candidate but MTP unused ignores the strategy, and that one names
    it in its text alone; so a page judging which nodes need action can leave the strategies out there."""
    return release_for(version) is not None


def _code(row: Resolution | None) -> str:
    return row.outcome if row else ""


def _release_advice(
    assessment: Assessment, facts: NodeFacts, release: str | None, row: Resolution | None
) -> Advice | None:
    if release is None or row is None:
        return None
    servable = assessment.servable_on(release)
    if facts.ran:
        finding = _contradiction(row, facts)
        if finding:
            text = (
                f"Contradicts the audit: {facts.node} on mesh-llm {facts.version} ({release}) with "
                f"speculative.strategy {facts.setting}: predicted {finding}. The node fell back, its "
                "version is not the release it claims, or the audit misses something."
            )
            return Advice(Cause.CONTRADICTION, text, release, row.outcome)
        return None
    if servable is not None and servable.admitted is False:
        text = f"Refused by your release {release}: {servable.why} {_upgrade(assessment, release)}"
        return Advice(Cause.REFUSED, text.strip(), release, row.outcome)
    if row.outcome in _FAILS:
        text = f"Fails at load on {release} with {facts.setting}: {row.why} {assessment.headline.action.text}"
        return Advice(Cause.FAILS_AT_LOAD, text.strip(), release, row.outcome)
    return None


def _contradiction(row: Resolution, facts: NodeFacts) -> str:
    """What was predicted and what the node did, when the two disagree; '' when they agree."""
    mtp = facts.mtp_used or facts.effective.startswith("native-mtp")
    if row.outcome == "refused" and facts.setting in NGRAM_SETTINGS and facts.effective == facts.setting:
        return ""  # refused only without the operator's ngram_min and ngram_max; it ran, so they were set
    if row.outcome in _FAILS:
        verdict = "refused" if row.outcome == "refused" else "the load fails"
        return f"{verdict} ({row.why.rstrip('.')}), yet it ran {facts.did}"
    if row.outcome == "native-mtp" and not mtp and facts.effective:
        return f"native MTP, but it ran {facts.did}"
    if row.outcome == "no-mtp" and mtp:
        return f"no MTP, but it ran {facts.did}"
    return ""


def _upgrade(assessment: Assessment, release: str) -> str:
    """The newest later release that admits the revision; the revision's own fix when none does (an older
    release that still admits it, like v0.72.1 for schema v1, is no upgrade)."""
    names = [s.release for s in assessment.servable]
    later = assessment.servable[names.index(release) + 1 :] if release in names else ()
    admitting = [s.release for s in later if s.admitted]
    if admitting:
        return f"Upgrade mesh-llm to {admitting[-1]}."
    return assessment.headline.action.text


def _unused_advice(
    assessment: Assessment, facts: NodeFacts, newer: Newer | None, release: str | None
) -> Advice | None:
    if not facts.unused:
        return None
    if facts.requested or facts.effective:
        lead = f"MTP weights unused: requested {facts.setting}, ran {facts.effective or 'without MTP'}"
    else:
        lead = "MTP weights unused (its reports do not name the strategy)"
    newest = assessment.headline.release
    auto = assessment.outcome(release or newest, "auto")
    if newer is not None and improves(newer.status, assessment.status):
        fix = f"run {newer.short_sha} ({newer.status.label})"
    elif assessment.status.needs_action:
        fix = assessment.headline.action.text
    elif auto is not None and auto.outcome == "native-mtp" and facts.setting != "auto":
        fix = 'set speculative.strategy = "auto" (the package\'s default strategy runs native MTP)'
    elif auto is not None and auto.outcome == "native-mtp":
        where = release or newest
        fix = f"check the node's speculative.strategy: on {where}, auto runs this revision with native MTP"
    else:
        fix = assessment.headline.action.text
    return Advice(Cause.MTP_UNUSED, f"{lead} — {fix}", release)


def _outdated_advice(assessment: Assessment, newer: Newer | None, release: str | None) -> Advice | None:
    if newer is None or not improves(newer.status, assessment.status):
        return None
    return Advice(Cause.OUTDATED, f"Outdated: upgrade to {newer.short_sha} ({newer.status.label}).", release)


def moved_on(advice: Advice, later: Newer) -> Advice:
    """The advice for a revision the node stopped running for ``later`` (same package) within the window."""
    text = f"Moved on to {later.short_sha} ({later.status.label}) after its last report of this revision."
    return Advice(Cause.MOVED_ON, text, advice.release, advice.predicted)


def _uncertified_advice(facts: NodeFacts, release: str | None) -> Advice | None:
    if facts.certification != UNCERTIFIED_OVERRIDE:
        return None
    text = (
        "Serves an uncertified split (--allow-uncertified-split): its release's roster does not certify the "
        "architecture, so the split's output is not verified."
    )
    return Advice(Cause.UNCERTIFIED, text, release)
