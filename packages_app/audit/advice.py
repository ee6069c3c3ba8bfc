"""Pure: what a node should do about a revision it runs (or registered), judged against its own mesh-llm
release: the revision's assessment predicts, per release and operator setting, what serving it does; the
node's reports say what it did. No Django, no I/O.

One cause per (node, revision), the most urgent (the Cause vocabulary's rank): a contradiction between
prediction and reports, bytes other than the revision its reports name, a release that refuses the
revision, a load that fails, MTP weights left unused, a newer revision with a better headline, a split
served under --allow-uncertified-split, or a release the matrix does not know (which predicts nothing,
so it never raises a contradiction).

Where the node says why (docs/node-report.md section 5: its serving strategy, its draft model, the
identity of what it loaded), the advice names that observed cause (``Advice.observed``) instead of the
prediction; where it says nothing the prediction stays, labelled as one. Causes mesh-llm reports no
signal for (docs/rules.md 6b: ``spec_default``, the break-even gate) are named as possible causes only,
labelled so.
"""

from __future__ import annotations

from dataclasses import dataclass

from packages_app.audit.assessment import Assessment
from packages_app.audit.model import Resolution
from packages_app.audit.releases import known_releases, release_for
from packages_app.verdicts import Cause, Status, improves

UNCERTIFIED_OVERRIDE = "uncertified_override"
_FAILS = ("load-fails", "refused")
NGRAM_SETTINGS = ("ngram-cache", "ngram-suffix")
# What a serving strategy sets speculative.strategy to where the operator left it unset (#2112): no MTP.
NON_MTP_SETTINGS = ("disabled", *NGRAM_SETTINGS)
SERVING_STRATEGY = "serving_strategy"  # the name NodeFacts.not_reported uses for /api/status' field


class Observed:
    """``Advice.observed``: which of the node's own facts the advice rests on ("" when none)."""

    SERVING_STRATEGY = "serving-strategy"
    SIDECAR = "sidecar-draft"
    MANIFEST = "manifest-declares-none"
    OPERATOR = "operator-setting"
    GATE = "break-even-gate (possible)"
    PREDICTED = "predicted"
    BYTES = "served-bytes"


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
    # What the node says about itself (NodeRun's observations; docs/node-report.md section 5):
    serving_strategy: str = ""  # runtime.serving_strategy.strategy; "" when it names none
    strategy_speculative: str = ""  # the speculative.strategy that strategy set where the operator had not
    draft_name: str = ""  # /api/status draft_name: a draft model beside the package (a sidecar may be MTP)
    identity: str = ""  # NodeRun.identity: confirmed | other | unaudited | "" (the node names no bytes)
    served_sha: str = ""  # the other tracked revision its identity names
    not_reported: tuple[str, ...] = ()  # what its version does not report (e.g. serving_strategy)

    @property
    def setting(self) -> str:
        """The speculative.strategy it ran under: what its reports name, else what its serving strategy
        set, else auto."""
        return self.requested or self.strategy_speculative or "auto"

    @property
    def did(self) -> str:
        if self.mtp_used or self.effective.startswith("native-mtp"):
            return f"native MTP ({self.effective or 'native-mtp'})"
        return self.effective or "without MTP"


@dataclass(frozen=True)
class Newer:
    """The package's latest revision, when the node runs another one, and the releases that admit and
    refuse it (its assessment's servable rows; None: not read)."""

    commit_sha: str
    status: Status
    admitted: tuple[str, ...] | None = None
    refused: tuple[str, ...] = ()

    @property
    def short_sha(self) -> str:
        return self.commit_sha[:8]

    def needs(self, release: str | None) -> str:
        """What running it asks of a node on ``release``: '' when that release admits it (or it is not
        known), else the release to run, e.g. `` on mesh-llm v0.78.0 (v0.72.1 is not known to load it)``."""
        if self.admitted is None or release is None or release in self.admitted or not self.admitted:
            return ""
        names = [r.release for r in known_releases()]
        later = [
            r
            for r in self.admitted
            if r in names and release in names and names.index(r) > names.index(release)
        ]
        target = later[0] if later else self.admitted[-1]
        why = "refuses it" if release in self.refused else "is not known to load it"
        return f" on mesh-llm {target} ({release} {why})"


@dataclass(frozen=True)
class Advice:
    cause: Cause
    text: str  # "MTP weights unused: requested auto, ran disabled — apply the patched ..."
    release: str | None = None  # the node's release, as the matrix names it
    predicted: str = ""  # what its setting does there: native-mtp | no-mtp | load-fails | refused
    observed: str = ""  # the node's own fact the advice rests on (Observed), "" for a prediction alone
    prediction: str = ""  # a contradiction's two sides: what the audit predicts ...
    observation: str = ""  # ... and what the node reported

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
        _bytes_advice(facts, release),
        _unused_advice(assessment, facts, newer, release),
        _outdated_advice(assessment, newer, release),
        _uncertified_advice(facts, release),
    ]
    found = [a for a in candidates if a is not None]
    if found:
        return min(found, key=lambda a: a.cause.rank)
    if release is None:
        version = _named(facts.version) if facts.version else "An unknown mesh-llm version"
        text = f"{version} is not in the release matrix, so what it does with this revision is not predicted."
        return Advice(Cause.UNKNOWN_RELEASE, text)
    if _sidecar_explains(row, facts):
        return Advice(Cause.OK, _sidecar_text(facts), release, _code(row), Observed.SIDECAR)
    return Advice(Cause.OK, f"Runs it as {release} with {facts.setting} allows.", release, _code(row))


def _named(version: str) -> str:
    """A reported version as the advice names it: ``mesh-llm 0.64.0``, and a build's own label
    (``mesh-llm@00caec16``) as it is."""
    return version if version.startswith("mesh-llm") else f"mesh-llm {version}"


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
                f"speculative.strategy {facts.setting}: predicted {finding}. {_possible_causes(row, facts)}"
            )
            return Advice(
                Cause.CONTRADICTION,
                text,
                release,
                row.outcome,
                prediction=f"{row.why} (mesh-llm {release}, speculative.strategy {facts.setting})",
                observation=_observation(facts),
            )
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
    if (
        row.outcome == "refused"
        and facts.setting in NGRAM_SETTINGS
        and facts.effective in (facts.setting, "")
    ):
        return ""  # refused only without the operator's ngram_min and ngram_max; it ran, so they were set
    if row.outcome in _FAILS:
        verdict = "refused" if row.outcome == "refused" else "the load fails"
        return f"{verdict} ({row.why.rstrip('.')}), yet it ran {facts.did}"
    if row.outcome == "native-mtp" and not mtp and facts.effective:
        return f"native MTP, but it ran {facts.did}"
    if row.outcome == "no-mtp" and mtp and not facts.draft_name:
        return f"no MTP, but it ran {facts.did}"
    return ""


def _possible_causes(row: Resolution, facts: NodeFacts) -> str:
    """What could explain a contradiction that the node reports no signal for (docs/rules.md 6b)."""
    causes = []
    if row.outcome == "native-mtp" and facts.setting == "auto":
        causes.append(
            "spec_default = false in its config (auto then enables MTP only under an explicit strategy)"
        )
    if facts.effective.startswith("native-mtp") and facts.unused:
        causes.append(GATE_CAUSE)
    said = f"Possible causes the node reports no signal for: {'; '.join(causes)}. Or " if causes else ""
    rest = "the node fell back, its version is not the release it claims, or the audit misses something."
    return said + (rest if said else rest.capitalize())


def _observation(facts: NodeFacts) -> str:
    """What the node reported, in one line: the strategy it ran and what it says about itself."""
    requested = facts.requested or (
        f"{facts.setting} (by its serving strategy)" if facts.strategy_speculative else ""
    )
    said = [f"requested {requested or 'auto (not named)'}, ran {facts.did}"]
    if facts.serving_strategy:
        said.append(f"--strategy {facts.serving_strategy}")
    elif SERVING_STRATEGY in facts.not_reported:
        said.append("it names no serving strategy")
    if facts.draft_name:
        said.append(f"draft model {facts.draft_name}")
    return "; ".join(said)


def _sidecar_explains(row: Resolution | None, facts: NodeFacts) -> bool:
    """Native MTP the manifest does not give, from the draft model the node names (docs/rules.md 6b: a
    ``*draft*``/``*eagle*`` GGUF beside the model, picked by the auto draft selection, supplies native MTP
    when it holds NextN tensors): an MTP sidecar."""
    mtp = facts.mtp_used or facts.effective.startswith("native-mtp")
    return row is not None and row.outcome == "no-mtp" and mtp and bool(facts.draft_name)


def _sidecar_text(facts: NodeFacts) -> str:
    return (
        f"An MTP sidecar draft supplies MTP: the node names draft model {facts.draft_name} and ran "
        f"{facts.did}, though the manifest itself gives none; nodes without that draft run it without MTP."
    )


def _upgrade(assessment: Assessment, release: str) -> str:
    """The newest later release that admits the revision; the revision's own fix when none does (an older
    release that still admits it, like v0.72.1 for schema v1, is no upgrade)."""
    names = [s.release for s in assessment.servable]
    later = assessment.servable[names.index(release) + 1 :] if release in names else ()
    admitting = [s.release for s in later if s.admitted]
    if admitting:
        return f"Upgrade mesh-llm to {admitting[-1]}."
    return assessment.headline.action.text


GATE_CAUSE = (
    "the break-even gate stood speculation down at run time (only where [speculative.gate] enabled = true "
    "or SKIPPY_SPECULATION_GATE=1; off by default)"
)


def _unused_advice(
    assessment: Assessment, facts: NodeFacts, newer: Newer | None, release: str | None
) -> Advice | None:
    """MTP left unused, by the cause the node reports: the serving strategy that set a strategy without
    MTP, the break-even gate (possible only), the operator's own setting, or the manifest (confirmed by
    the node, or else predicted)."""
    where = release or assessment.headline.release
    auto = assessment.outcome(where, "auto")
    auto_mtp = auto is not None and auto.outcome == "native-mtp"
    if (
        facts.strategy_speculative in NON_MTP_SETTINGS
        and auto_mtp
        and facts.requested in ("", facts.strategy_speculative)
    ):
        return Advice(
            Cause.MTP_UNUSED, _serving_strategy_text(facts, where), release, "", Observed.SERVING_STRATEGY
        )
    if not facts.unused:
        return None
    if facts.effective.startswith("native-mtp") and not facts.mtp_used:
        text = (
            f"MTP weights unused although it ran {facts.effective}: its reports show no drafts. Possible "
            f"cause, which mesh-llm reports no signal for: {GATE_CAUSE} — check the node's log for the "
            "gate's verdicts, or run it with SKIPPY_SPECULATION_GATE=0."
        )
        return Advice(Cause.MTP_UNUSED, text, release, "", Observed.GATE)
    lead, observed = _unused_lead(assessment, facts, auto)
    fix = _unused_fix(assessment, facts, newer, release, where, auto_mtp)
    return Advice(Cause.MTP_UNUSED, f"{lead} — {fix}", release, "", observed)


def _serving_strategy_text(facts: NodeFacts, where: str) -> str:
    lead = (
        f"MTP off by --strategy {facts.serving_strategy or '(named by the node)'}: it set "
        f'speculative.strategy = "{facts.strategy_speculative}" where the operator left it unset, so this '
        f'revision runs without MTP — set speculative.strategy explicitly (on {where}, "auto" runs it with '
        "native MTP): a serving strategy never overrides an explicit value"
    )
    if facts.serving_strategy == "throughput":
        lead += (
            ", and set throughput.last_stage_decode_batch = false too: the batched last stage this strategy "
            "turns on produces no native MTP drafts"
        )
    return lead + "."


def _unused_lead(assessment: Assessment, facts: NodeFacts, auto: Resolution | None) -> tuple[str, str]:
    if facts.requested or facts.effective:
        lead = f"MTP weights unused: requested {facts.setting}, ran {facts.effective or 'without MTP'}"
        if (
            facts.setting == "auto"
            and auto is not None
            and auto.outcome == "no-mtp"
            and not _declares(assessment)
        ):
            return (
                f"{lead}, as the manifest predicts: it declares no MTP and the node confirms it",
                Observed.MANIFEST,
            )
        return lead, Observed.OPERATOR if facts.requested and facts.setting != "auto" else ""
    if SERVING_STRATEGY in facts.not_reported:
        said = "its reports do not name the strategy, and its version reports no serving strategy"
    elif facts.serving_strategy:
        said = f"its reports do not name the strategy; its --strategy {facts.serving_strategy} set none"
    else:
        said = "its reports do not name the strategy"
    return f"MTP weights unused ({said}; predicted, not observed)", Observed.PREDICTED


def _declares(assessment: Assessment) -> bool:
    """Whether the manifest declares MTP (the assessment's declared side)."""
    return assessment.mtp.declared


def _unused_fix(
    assessment: Assessment,
    facts: NodeFacts,
    newer: Newer | None,
    release: str | None,
    where: str,
    auto_mtp: bool,
) -> str:
    if newer is not None and improves(newer.status, assessment.status):
        return f"run {newer.short_sha} ({newer.status.label}){newer.needs(release)}"
    if assessment.status.needs_action:
        return assessment.headline.action.text
    if auto_mtp and facts.setting != "auto":
        return 'set speculative.strategy = "auto" (the package\'s default strategy runs native MTP)'
    if auto_mtp:
        return f"check the node's speculative.strategy: on {where}, auto runs this revision with native MTP"
    return assessment.headline.action.text


def _outdated_advice(assessment: Assessment, newer: Newer | None, release: str | None) -> Advice | None:
    if newer is None or not improves(newer.status, assessment.status):
        return None
    text = f"Outdated: upgrade to {newer.short_sha} ({newer.status.label}){newer.needs(release)}."
    return Advice(Cause.OUTDATED, text, release)


def _bytes_advice(facts: NodeFacts, release: str | None) -> Advice | None:
    """What the node says it loaded (admission.package_id, the exchanges' model_revision and
    weights_digest) against the revision its reports name (NodeRun.identity)."""
    if facts.identity == "unaudited":
        text = (
            "Serves bytes meshdash has not audited: what the node says it loaded (admission.package_id, "
            "model_revision or weights_digest) matches no tracked revision of this package, though its "
            "package ref names this one — compare the node's local package with the Hub's, or point its "
            "package ref at a published revision."
        )
        return Advice(Cause.SERVED_BYTES, text, release, "", Observed.BYTES)
    if facts.identity == "other" and facts.served_sha:
        short = facts.served_sha[:8]
        text = (
            f"Serves {short} by its own account, while its package ref and reports name this revision: "
            f"its figures are filed under the wrong revision — point its package ref at {short}."
        )
        return Advice(Cause.SERVED_BYTES, text, release, "", Observed.BYTES)
    return None


def moved_on(advice: Advice, later: Newer) -> Advice:
    """The advice for a revision the node stopped running for ``later`` (same package) within the window."""
    text = f"Moved on to {later.short_sha} ({later.status.label}) after its last report of this revision."
    return Advice(Cause.MOVED_ON, text, advice.release, advice.predicted)


def _uncertified_advice(facts: NodeFacts, release: str | None) -> Advice | None:
    if facts.certification != UNCERTIFIED_OVERRIDE:
        return None
    text = (
        "Serves an uncertified split (--allow-uncertified-split): its release's roster does not certify the "
        "architecture, so the split's output is not verified — for verified output serve it on one node "
        "(without --split); a certified split waits for a release whose roster lists the architecture."
    )
    return Advice(Cause.UNCERTIFIED, text, release)
