"""Pure: building the assessment from what the audit (or the manifest check) knows (Facts): per-release
admission and outcomes, the MTP answer, and the headline's rules (status, sentence, action) judged on the
newest release."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from packages_app.audit.assessment import Action, Assessment, Headline, Mtp, ReleaseOutcomes, Scope, Servable
from packages_app.audit.fix import generation_text
from packages_app.audit.model import (
    Declared,
    Detected,
    Resolution,
    Runtime,
    Suggestion,
)
from packages_app.audit.releases import Admission
from packages_app.manifest import MANIFEST_FILE, ManifestResult, Problem, describe_layers
from packages_app.verdicts import ActionKind, Status, Verdict

AUDIT_COMMAND = "python manage.py audit_package"
# The audit's file checks (judgement._file_problems) that put the Hub's files at odds with the manifest.
FILE_PROBLEMS = frozenset({"missing_artifact", "artifact_sha256_mismatch", "artifact_size_mismatch"})
CANNOT_SEE_WITHOUT_WEIGHTS = (
    "the GGUF weights: whether they hold MTP (NextN) blocks the manifest does not declare, or lack those "
    "it does",
    "the files on the Hub: their sizes and sha256 against the manifest's",
)


# --- building it ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Facts:
    """What the audit (or the manifest check) knows, as the assessment needs it."""

    parsed: ManifestResult | None
    runtime: Runtime
    compatibility: Sequence[Admission]
    declared: Declared
    verdict: Verdict | None = None  # None: the weights were not read (a manifest alone, or failed headers)
    detected: Detected | None = None
    suggestion: Suggestion | None = None
    problems: Sequence[Problem] = ()
    scope: Scope = "revision"
    source: str = ""  # what audit_package would read: "owner/name" or a folder; empty if unknown
    extra_unseen: tuple[str, ...] = field(default_factory=tuple)


def assess(facts: Facts) -> Assessment:
    """The one answer for these facts: per-release admission and outcomes, and the headline."""
    servable = tuple(Servable.of(a) for a in facts.compatibility)
    outcomes = tuple(release_outcomes(facts.runtime, s) for s in servable)
    unseen = (CANNOT_SEE_WITHOUT_WEIGHTS if facts.verdict is None else ()) + facts.extra_unseen
    return Assessment(
        headline=headline(facts, servable, outcomes),
        mtp=_mtp(facts),
        servable=servable,
        outcomes=outcomes,
        cannot_see=unseen,
        scope=facts.scope,
        assumptions=facts.runtime.assumptions,
    )


def release_outcomes(runtime: Runtime, s: Servable) -> ReleaseOutcomes:
    if s.admitted is False:
        refused = f"the release refuses the package: {s.why}"
        return ReleaseOutcomes(
            s.release, tuple(Resolution(r.setting, "refused", refused) for r in runtime.rows)
        )
    return ReleaseOutcomes(s.release, runtime.rows, pinned=s.admitted is True)


def _mtp(facts: Facts) -> Mtp:
    d = facts.detected if facts.verdict is not None else None
    return Mtp(
        verdict=facts.verdict,
        declared=facts.declared.uses_native_mtp,
        detected=d.has_mtp_weights if d is not None else None,
        blocks=d.mtp_blocks if d is not None else (),
        declared_layers=facts.declared.layer_indices,
    )


def headline(facts: Facts, servable: Sequence[Servable], outcomes: Sequence[ReleaseOutcomes]) -> Headline:
    """The status, sentence and action, judged on the newest known release (the last one)."""
    parsed = facts.parsed
    if parsed is None or parsed.manifest is None or not parsed.trusted:
        return _invalid(facts)
    newest, table = servable[-1], outcomes[-1]
    if newest.admitted is False:
        return _not_servable(facts, newest, servable)
    gated = _refused_split(servable)
    if gated is not None:
        return _not_servable_split(newest, gated)
    caveat = "" if newest.admitted else f" ({newest.why})"
    if facts.verdict is None:
        return _weights_unread(facts, newest.release, caveat, _gate_unjudged(servable))
    auto = table.row("auto")
    if auto is not None and auto.outcome == "load-fails":
        return _fails_at_load(facts, newest.release, auto, caveat)
    files = [p for p in facts.problems if p.code in FILE_PROBLEMS and p.severity == "error"]
    if files:
        return _files_mismatch(files, newest.release, caveat)
    if auto is not None and auto.outcome == "native-mtp":
        blocks = describe_layers(list(facts.declared.layer_indices))
        sentence = f"Admitted by {newest.release}; nodes on auto decode with native MTP ({blocks}){caveat}."
        return Headline(Status.SERVES_MTP, sentence, _nothing(), newest.release)
    sidecar = _sidecar_only(facts, table)
    if sidecar:
        return _sidecar_unused(sidecar, newest.release, caveat)
    if facts.detected is not None and facts.detected.has_mtp_weights:
        return _mtp_unused(facts, newest.release, caveat)
    sentence = (
        f"Admitted by {newest.release}; the weights hold no MTP block, so there is no MTP to enable{caveat}."
    )
    return Headline(Status.SERVES_NO_MTP, sentence, _nothing(), newest.release)


def _nothing() -> Action:
    return Action(ActionKind.NOTHING, "Nothing to do.")


def _first_error(problems: Sequence[Problem]) -> Problem | None:
    return next((p for p in problems if p.severity == "error"), None)


def _invalid(facts: Facts) -> Headline:
    if facts.parsed is None:
        sentence = f"There is no {MANIFEST_FILE}, so nothing tells mesh-llm how to serve it."
        return Headline(
            Status.INVALID_MANIFEST,
            sentence,
            Action(ActionKind.FIX_MANIFEST, f"Publish a {MANIFEST_FILE} with `mesh-llm models package`."),
        )
    first = _first_error(facts.parsed.problems) or _first_error(facts.problems)
    what = f"{first.code}: {first.message}" if first else "it does not parse"
    where = f" at {first.path}" if first and first.path else ""
    return Headline(
        Status.INVALID_MANIFEST,
        f"mesh-llm rejects the manifest ({what}).",
        Action(
            ActionKind.FIX_MANIFEST, f"Fix {first.code if first else 'the manifest'}{where}, then republish."
        ),
    )


def _not_servable(facts: Facts, newest: Servable, servable: Sequence[Servable]) -> Headline:
    older = [s.release for s in servable[:-1] if s.admitted]
    only = f" Of the known releases only {', '.join(older)} served it." if older else ""
    sentence = f"Not servable by {newest.release}: {newest.why}{only}"
    manifest = facts.parsed.manifest if facts.parsed else None
    if manifest is not None and manifest.schema_version == 1:
        text = _republish_v2_text(facts)
        return Headline(Status.NOT_SERVABLE, sentence, Action(ActionKind.REPUBLISH_V2, text), newest.release)
    text = f"Republish it in a form {newest.release} admits: {newest.why}"
    return Headline(Status.NOT_SERVABLE, sentence, Action(ActionKind.FIX_MANIFEST, text), newest.release)


def _republish_v2_text(facts: Facts) -> str:
    """A v1 package's action: republish as package-v2, with the writer where it emits the MTP block, and
    where it refuses the source, the block to write by hand (docs/rules.md section 6b)."""
    d = facts.detected
    mtp = d is not None and d.has_mtp_weights
    writer = facts.suggestion.writer if facts.suggestion else None
    offline = "schema v1 is offline-only since PR #1693."
    if mtp and d is not None and writer is not None and not writer.emits and facts.suggestion is not None:
        block = generation_text(facts.suggestion.generation)
        return (
            "Republish it as package-v2, but `mesh-llm models package` refuses this source: "
            f"{writer.reason}. Write the package-v2 manifest's block by hand, "
            f'"generation": {block}; {offline}'
        )
    declare = f", which declares the MTP block at {describe_layers(list(d.mtp_blocks))}" if mtp and d else ""
    writer_text = f"`mesh-llm models package` (the writer since PR #1937{declare})"
    return f"Republish it as package-v2 with {writer_text}; {offline}"


def _refused_split(servable: Sequence[Servable]) -> Servable | None:
    """The release whose split-certification gate decides: the newest if its gate is known, else the
    newest whose roster is known; that release, if its gate refuses the architecture."""
    decided = [s for s in servable if s.gate is not None]
    if not decided:
        return None
    judge = servable[-1] if servable[-1].gate is not None else decided[-1]
    return judge if judge.gate is False else None


def _not_servable_split(newest: Servable, gated: Servable) -> Headline:
    why = gated.split_why.rstrip(".")
    if gated is newest and newest.roster_inferred:
        abi = f" {_abi_of(why)}" if _abi_of(why) else ""
        sentence = (
            f"Not servable split by {newest.release} (roster inferred from its ABI{abi}): its "
            f"split-certification roster does not list {newest.architecture or 'the architecture'}, and "
            f"`--allow-uncertified-split` overrides. On one node {newest.release} admits it."
        )
    elif gated is newest:
        sentence = f"Not servable split by {newest.release}: {why}. On one node it is admitted."
    else:
        sentence = (
            f"Not servable split by the newest release whose roster is known, {gated.release}: {why}. "
            f"Which roster {newest.release} carries is not pinned down; on one node {newest.release} "
            f"{'admits it' if newest.admitted else 'may admit it'}."
        )
    text = (
        "Serve it on one node, or split it with `--split --allow-uncertified-split` (its stages then report "
        "uncertified_override); a certified split waits for a release whose roster lists the architecture."
    )
    return Headline(Status.NOT_SERVABLE, sentence, Action(ActionKind.SPLIT_OVERRIDE, text), newest.release)


def _abi_of(why: str) -> str:
    """The ABI an inferred roster's sentence names ("inferred from its ABI 0.1.66: ...")."""
    marker = "inferred from its ABI "
    return why.split(marker, 1)[1].split(":", 1)[0] if marker in why else ""


def _gate_unjudged(servable: Sequence[Servable]) -> str:
    """What the headline says when the newest release's split gate could not be judged: no carrier read."""
    newest = servable[-1] if servable else None
    if newest is None or not newest.gate_unjudged:
        return ""
    return (
        f"; whether {newest.release} split-serves it was not judged: its split-certification gate reads "
        "general.architecture from the metadata carrier, and no carrier was read (a manifest alone has none)"
    )


def _weights_unread(facts: Facts, release: str, caveat: str, unjudged: str = "") -> Headline:
    command = f"{AUDIT_COMMAND} {facts.source or '<package folder or owner/repo>'}"
    if facts.scope == "manifest":
        sentence = (
            f"Valid and admitted by {release}{caveat}, but the weights were not read, so MTP weights the "
            "manifest does not declare cannot be detected"
        )
    else:
        sentence = (
            f"Admitted by {release}{caveat}, but the GGUF headers that would show MTP could not be read, "
            "so undeclared MTP weights cannot be ruled out"
        )
    layers = facts.declared.layer_indices
    if facts.declared.uses_native_mtp and layers:
        sentence += (
            f"; it declares native MTP on {describe_layers(list(layers))}, which auto runs if those blocks "
            "hold NextN tensors"
        )
    sentence += unjudged
    text = "Run audit_package on the package folder or its Hub repo: it reads every GGUF header."
    action = Action(ActionKind.READ_WEIGHTS, text, command)
    return Headline(Status.WEIGHTS_UNREAD, sentence + ".", action, release)


def _fails_at_load(facts: Facts, release: str, auto: Resolution, caveat: str) -> Headline:
    sentence = f"Admitted by {release}{caveat}, but loading with auto fails: {auto.why}"
    if facts.suggestion is not None:
        action = Action(ActionKind.APPLY_PATCH, _patch_text(facts))
    else:
        action = Action(
            ActionKind.FIX_DECLARATION,
            "Drop the native-MTP strategy from generation.speculative_decoding, or republish from a GGUF "
            "that keeps the blk.N.nextn tensors.",
        )
    return Headline(Status.FAILS_AT_LOAD, sentence, action, release)


def _files_mismatch(problems: Sequence[Problem], release: str, caveat: str) -> Headline:
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    sentence = (
        f"Admitted by {release}{caveat}, but the Hub's files disagree with the manifest: "
        f"{problems[0].message.rstrip('.')}{more}. A node holding that file cannot download what the "
        "manifest promises (whether mesh-llm then refuses the bytes is not pinned down)."
    )
    paths = sorted({str(p.evidence.get("path")) for p in problems if p.evidence.get("path")})
    text = (
        f"Republish so {MANIFEST_FILE} lists the files as they are on the Hub "
        f"({', '.join(paths[:3]) or 'see the files table'})."
    )
    return Headline(Status.FILES_MISMATCH, sentence, Action(ActionKind.FIX_MANIFEST, text), release)


def _mtp_unused(facts: Facts, release: str, caveat: str) -> Headline:
    d = facts.detected
    assert d is not None
    blocks = describe_layers(list(d.mtp_blocks))
    sd = facts.parsed.manifest.speculative_decoding if facts.parsed and facts.parsed.manifest else None
    native = [s.name for s in sd.native_mtp_strategies()] if sd else []
    if facts.suggestion is not None or not native:
        why = f"the weights hold an MTP block at {blocks} that {MANIFEST_FILE} does not declare"
        action = Action(ActionKind.APPLY_PATCH, _patch_text(facts))
    else:
        name = "mtp" if "mtp" in native else native[0]
        why = f"the default strategy {sd.default if sd else ''} is not native MTP; {name} is"
        action = Action(
            ActionKind.SET_STRATEGY,
            f'Set speculative.strategy = "{name}" on the nodes (or make {name} the package\'s default).',
        )
    sentence = f"Admitted by {release}{caveat}, but nodes on auto decode without MTP: {why}."
    return Headline(Status.MTP_UNUSED, sentence, action, release)


def _sidecar_only(facts: Facts, table: ReleaseOutcomes) -> str:
    """The MTP draft sidecar, when it is the package's only MTP and only explicit mtp runs it."""
    d = facts.detected
    mtp = table.row("mtp")
    if d is None or d.has_mtp_weights or not d.sidecar or not d.sidecar_mtp_blocks:
        return ""
    return d.sidecar if mtp is not None and mtp.outcome == "native-mtp" else ""


def _sidecar_unused(sidecar: str, release: str, caveat: str) -> Headline:
    only = 'which mesh-llm runs only under an explicit speculative.strategy = "mtp"'
    sentence = (
        f"Admitted by {release}{caveat}, but nodes on auto decode without MTP: the package's MTP is "
        f"the draft sidecar {sidecar}, {only}."
    )
    text = (
        f'Set speculative.strategy = "mtp" on the nodes to run native MTP through {sidecar} (mesh-llm turns '
        "it off without an error if it finds the pair incompatible: pairing_fault warn_disable)."
    )
    return Headline(Status.MTP_UNUSED, sentence, Action(ActionKind.SET_STRATEGY, text), release)


def _patch_text(facts: Facts) -> str:
    d = facts.detected
    blocks = describe_layers(list(d.mtp_blocks)) if d is not None and d.mtp_blocks else "the MTP block"
    verb = "corrects the declaration to" if facts.verdict is Verdict.DECLARATION_MISMATCH else "declares"
    manifest = facts.parsed.manifest if facts.parsed else None
    identity = " and recomputes package_id" if manifest is not None and manifest.schema_version == 2 else ""
    text = (
        f"Apply the patched {MANIFEST_FILE}: it {verb} native MTP on {blocks}{identity}; publish it as a new "
        "revision"
    )
    return text + _writer_clause(facts.suggestion)


def _writer_clause(suggestion: Suggestion | None) -> str:
    """Whether republishing with mesh-llm's writer would do the same (docs/rules.md section 6b): it emits
    the block for one MTP shape only; for the others the block is written by hand, quoted here."""
    writer = suggestion.writer if suggestion else None
    if suggestion is None or writer is None:
        return "."
    if writer.emits:
        return (
            " (or republish with `mesh-llm models package`, whose writer emits this block for this source)."
        )
    return (
        f". `mesh-llm models package` refuses this source ({writer.reason}), so add the block by hand: "
        f'"generation": {generation_text(suggestion.generation)}.'
    )
