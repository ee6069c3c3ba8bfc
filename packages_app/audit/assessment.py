"""Pure: the assessment, one answer per revision (or local folder, or manifest checked alone): will it serve
on each known mesh-llm release, will MTP run under each operator setting, and one headline (status,
sentence, action) that every surface leads with. No Django, no I/O.

Built from the audit's parts: the release matrix (releases.py), the resolver table (runtime.py), the MTP
verdict (judgement.py) and the suggested fix (fix.py). The headline is judged on the newest known release
(the last row of releases.toml); what each older release does is in ``servable`` and ``outcomes``, which
the fleet pages read to judge a node against its own release. Stored as JSON (``to_json``) and read back
typed (``Assessment.from_json``), so pages and the API read attributes, never keys of stored JSON.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from packages_app.audit.fix import generation_text
from packages_app.audit.model import (
    Declared,
    Detected,
    Resolution,
    ResolverAssumptions,
    Runtime,
    Suggestion,
)
from packages_app.audit.releases import Admission
from packages_app.manifest import MANIFEST_FILE, ManifestResult, Problem, describe_layers
from packages_app.verdicts import ActionKind, Status, Verdict, status_of, verdict_of

Scope = Literal["revision", "folder", "manifest"]
Tristate = bool | None
AUDIT_COMMAND = "python manage.py audit_package"
# The audit's file checks (judgement._file_problems) that put the Hub's files at odds with the manifest.
FILE_PROBLEMS = frozenset({"missing_artifact", "artifact_sha256_mismatch", "artifact_size_mismatch"})
CANNOT_SEE_WITHOUT_WEIGHTS = (
    "the GGUF weights: whether they hold MTP (NextN) blocks the manifest does not declare, or lack those "
    "it does",
    "the files on the Hub: their sizes and sha256 against the manifest's",
)


# --- the parts ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    text: str  # one sentence with the specifics: which strategy, which block, which release
    command: str = ""  # a command to copy, when the action is one

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "label": self.kind.label, "text": self.text, "command": self.command}

    @classmethod
    def from_json(cls, doc: Any) -> Action | None:
        if not isinstance(doc, Mapping):
            return None
        try:
            kind = ActionKind(_text(doc.get("kind")))
        except ValueError:
            return None
        return cls(kind, _text(doc.get("text")), _text(doc.get("command")))


@dataclass(frozen=True)
class Headline:
    status: Status
    sentence: str
    action: Action
    release: str = ""  # the release it is judged on: the newest known

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "label": self.status.label,
            "tone": self.status.tone.value,
            "rank": self.status.rank,
            "sentence": self.sentence,
            "release": self.release,
            "action": self.action.to_json(),
        }

    def lines(self) -> list[str]:
        """The headline as the command-line tools print it first: status, sentence, action, command."""
        lines = [
            f"status: {self.status.label} ({self.status.value})",
            f"  {self.sentence}",
            f"action: {self.action.text}",
        ]
        return [*lines, f"  $ {self.action.command}"] if self.action.command else lines

    @classmethod
    def from_json(cls, doc: Any) -> Headline | None:
        if not isinstance(doc, Mapping):
            return None
        status = status_of(_text(doc.get("status")))
        action = Action.from_json(doc.get("action"))
        if action is None or status is Status.NOT_ASSESSED:
            return None
        return cls(status, _text(doc.get("sentence")), action, _text(doc.get("release")))


NOT_ASSESSED = Headline(
    Status.NOT_ASSESSED,
    "Not assessed yet: the ingest has not finished.",
    Action(ActionKind.WAIT, "Wait for the ingest to read the revision's files."),
)


@dataclass(frozen=True)
class Mtp:
    """Declared vs detected, the verdict's meaning unchanged; ``verdict`` is None without the weights."""

    verdict: Verdict | None
    declared: bool
    detected: bool | None
    blocks: tuple[int, ...] = ()  # the blocks holding NextN tensors
    declared_layers: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value if self.verdict else None,
            "declared": self.declared,
            "detected": self.detected,
            "blocks": list(self.blocks),
            "declared_layers": list(self.declared_layers),
        }

    @classmethod
    def from_json(cls, doc: Any) -> Mtp:
        doc = doc if isinstance(doc, Mapping) else {}
        detected = doc.get("detected")
        return cls(
            verdict_of(_text(doc.get("verdict"))),
            doc.get("declared") is True,
            detected if isinstance(detected, bool) else None,
            _ints(doc.get("blocks")),
            _ints(doc.get("declared_layers")),
        )


def split_certified(split: Tristate, split_why: str) -> bool:
    """Whether a split admission rests on a roster that certifies the architecture (certification.py's
    sentence), not on a release that has no split-certification gate."""
    return split is True and " is certified for split serving by " in split_why


@dataclass(frozen=True)
class Servable:
    """Whether one release loads it (on one node), and whether it split-serves it (the package verdict
    and the release's split-certification gate); None: not pinned down."""

    release: str
    admitted: Tristate
    why: str
    split: Tristate = None
    split_why: str = ""
    gate: Tristate = None  # the gate alone: the architecture on the release's roster (or no gate)
    architecture: str = ""  # the carrier's general.architecture the gate judged ("" when not read)
    roster_inferred: bool = False  # the release's roster is inferred from its ABI (docs/rules.md 6b)
    gate_unjudged: bool = False  # the release has a known roster, but no carrier was read to judge it

    @property
    def split_label(self) -> str:
        """The split answer in a few words, saying where the roster is inferred: "certified" only where a
        gate's roster lists the architecture; a release without the gate just admits the split."""
        word = "refused" if self.split is False else "not pinned down" if self.split is None else "admits"
        word = "certified" if split_certified(self.split, self.split_why) else word
        return f"{word} (roster inferred from its ABI)" if self.roster_inferred else word

    def to_json(self) -> dict[str, Any]:
        split = {
            "admitted": self.split,
            "why": self.split_why,
            "gate": self.gate,
            "architecture": self.architecture,
            "roster_inferred": self.roster_inferred,
            "gate_unjudged": self.gate_unjudged,
        }
        return {"release": self.release, "admitted": self.admitted, "why": self.why, "split": split}

    @classmethod
    def from_json(cls, doc: Any) -> Servable | None:
        if not isinstance(doc, Mapping) or not isinstance(doc.get("release"), str):
            return None
        found = doc.get("split")
        split: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        return cls(
            doc["release"],
            _tristate(doc.get("admitted")),
            _text(doc.get("why")),
            _tristate(split.get("admitted")),
            _text(split.get("why")),
            _tristate(split.get("gate")),
            _text(split.get("architecture")),
            split.get("roster_inferred") is True,
            split.get("gate_unjudged") is True,
        )

    @classmethod
    def of(cls, a: Admission) -> Servable:
        split = a.split.admitted if a.split else a.admitted
        split_why = a.split.why if a.split else a.why
        gate = a.gate
        return cls(
            a.release,
            a.admitted,
            a.why,
            split,
            split_why,
            gate.admitted if gate else None,
            (gate.architecture or "") if gate else "",
            bool(gate and gate.roster_inferred),
            bool(gate and gate.roster is not None and gate.architecture is None),
        )


@dataclass(frozen=True)
class ReleaseOutcomes:
    """What each operator setting does on one release: the resolver table where it admits the
    package, every setting refused (with the release's reason) where it does not."""

    release: str
    rows: tuple[Resolution, ...]
    pinned: bool = True  # False where the release's admission is not pinned down

    def row(self, setting: str) -> Resolution | None:
        return self._by_setting.get(setting)

    @functools.cached_property
    def _by_setting(self) -> dict[str, Resolution]:
        """``rows`` by setting, the first of each (asked for each row of the nodes page)."""
        return {r.setting: r for r in reversed(self.rows)}

    def to_json(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "pinned": self.pinned,
            "settings": {r.setting: r.to_json() for r in self.rows},
        }

    @classmethod
    def from_json(cls, doc: Any) -> ReleaseOutcomes | None:
        if not isinstance(doc, Mapping) or not isinstance(doc.get("release"), str):
            return None
        settings = doc.get("settings")
        items = settings.items() if isinstance(settings, Mapping) else ()
        rows = tuple(
            Resolution(str(name), _text(row.get("outcome")), _text(row.get("why")))
            for name, row in items
            if isinstance(row, Mapping)
        )
        return cls(doc["release"], rows, doc.get("pinned") is not False)


@dataclass(frozen=True)
class Assessment:
    headline: Headline
    mtp: Mtp
    servable: tuple[Servable, ...] = ()
    outcomes: tuple[ReleaseOutcomes, ...] = ()
    cannot_see: tuple[str, ...] = ()
    scope: Scope = "revision"
    # What the resolver table (``outcomes``) assumes of a node; advice from what a node reports reads it.
    assumptions: ResolverAssumptions = field(default_factory=ResolverAssumptions)

    @property
    def status(self) -> Status:
        return self.headline.status

    def servable_on(self, release: str) -> Servable | None:
        return self._servable_by_release.get(release)

    def outcome(self, release: str, setting: str) -> Resolution | None:
        """What ``setting`` does on ``release`` (None: a release or setting this assessment does not know)."""
        table = self._outcomes_by_release.get(release)
        return table.row(setting) if table else None

    # ``servable`` and ``outcomes`` by release, the first of each: a stored assessment is parsed once a
    # process, then asked for each of a thousand nodes' rows on the nodes page.
    @functools.cached_property
    def _servable_by_release(self) -> dict[str, Servable]:
        return {s.release: s for s in reversed(self.servable)}

    @functools.cached_property
    def _outcomes_by_release(self) -> dict[str, ReleaseOutcomes]:
        return {o.release: o for o in reversed(self.outcomes)}

    @property
    def admitting_releases(self) -> list[str]:
        return [s.release for s in self.servable if s.admitted]

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "headline": self.headline.to_json(),
            "mtp": self.mtp.to_json(),
            "servable": [s.to_json() for s in self.servable],
            "outcomes": [o.to_json() for o in self.outcomes],
            "cannot_see": list(self.cannot_see),
            "assumptions": self.assumptions.to_json(),
        }

    @classmethod
    def from_json(cls, doc: Any) -> Assessment | None:
        """The stored assessment, or None when there is none (not assessed yet, or stored by a version
        that did not write one): ``manage.py reaudit`` writes it for every stored revision."""
        if not isinstance(doc, Mapping):
            return None
        headline = Headline.from_json(doc.get("headline"))
        if headline is None:
            return None
        scope = doc.get("scope")
        return cls(
            headline,
            Mtp.from_json(doc.get("mtp")),
            _each(Servable.from_json, doc.get("servable")),
            _each(ReleaseOutcomes.from_json, doc.get("outcomes")),
            tuple(_text(t) for t in doc.get("cannot_see") or () if isinstance(t, str)),
            scope if scope in ("revision", "folder", "manifest") else "revision",
            ResolverAssumptions.from_json(doc.get("assumptions")),
        )


# Revisions whose parsed assessments stay in memory (about 13 kB each): more than /nodes/?action=1 reads
# at 1,000 nodes, so a full scan of the fleet never evicts what its next scan reads.
PARSED_ASSESSMENTS = 4096


@functools.lru_cache(maxsize=PARSED_ASSESSMENTS)
def parse_stored(text: str | None) -> Assessment | None:
    """The assessment stored as this JSON text, parsed once per process for each distinct text: the
    needing-action list reads a thousand revisions' assessments, and reading one from its JSON (4.5 kB)
    took about 0.2 ms. Keyed by the text itself, so a reassessed revision is parsed anew; an Assessment is
    immutable, so sharing one between requests is safe."""
    return Assessment.from_json(json.loads(text)) if text else None


@dataclass(frozen=True)
class OutcomeGroup:
    """Settings that do the same thing on a release (identical rows collapse into one)."""

    settings: tuple[str, ...]
    outcome: str
    why: str


@dataclass(frozen=True)
class ReleaseTable:
    """Releases that treat the package identically, with their admission and their settings' outcomes."""

    releases: tuple[str, ...]
    admitted: Tristate
    why: str
    groups: tuple[OutcomeGroup, ...]
    split: Tristate = None
    split_why: str = ""
    roster_inferred: bool = False  # the split answer rests on a roster inferred from the release's ABI

    @property
    def settings(self) -> int:
        return sum(len(g.settings) for g in self.groups)

    @property
    def split_certified(self) -> bool:
        """A gate's roster lists the architecture (not merely a release without the gate)."""
        return split_certified(self.split, self.split_why)

    @property
    def split_note(self) -> str:
        """What the split adds to the admission's reason (its gate, or that the release has none): the
        split's reason without the admission's, which it repeats."""
        return self.split_why.removeprefix(self.why).strip() if self.split_why != self.why else ""

    @property
    def by_outcome(self) -> tuple[OutcomeGroup, ...]:
        """The settings per outcome, for a one-line summary: a reason only where the settings share it."""
        merged: dict[str, list[OutcomeGroup]] = {}
        for group in self.groups:
            merged.setdefault(group.outcome, []).append(group)
        return tuple(
            OutcomeGroup(
                tuple(name for g in groups for name in g.settings),
                outcome,
                groups[0].why if len(groups) == 1 else "",
            )
            for outcome, groups in merged.items()
        )


def release_tables(assessment: Assessment) -> list[ReleaseTable]:
    """The outcomes per release, for pages: releases with the same admission and rows merged, and
    within a release the settings with the same outcome and reason merged, in their first order."""
    tables: list[ReleaseTable] = []
    for servable in assessment.servable:
        outcomes = next((o for o in assessment.outcomes if o.release == servable.release), None)
        groups = _grouped(outcomes.rows if outcomes else ())
        table = ReleaseTable(
            (servable.release,),
            servable.admitted,
            servable.why,
            groups,
            servable.split,
            servable.split_why,
            servable.roster_inferred and servable.admitted is not False,  # moot where it refuses to load
        )
        same = next((t for t in tables if replace(t, releases=()) == replace(table, releases=())), None)
        if same is not None:
            tables[tables.index(same)] = replace(same, releases=(*same.releases, servable.release))
        else:
            tables.append(table)
    return tables


def shared_outcomes(tables: Sequence[ReleaseTable]) -> tuple[OutcomeGroup, ...]:
    """The settings' outcomes when every release that may load the package agrees on them (shown once),
    else ``()``; releases that refuse the package have no outcomes and do not count."""
    loading = [t.by_outcome for t in tables if t.admitted is not False]
    if len(loading) < 2 or any(o != loading[0] for o in loading[1:]):
        return ()
    return loading[0]


def _grouped(rows: Sequence[Resolution]) -> tuple[OutcomeGroup, ...]:
    groups: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        groups.setdefault((row.outcome, row.why), []).append(row.setting)
    return tuple(OutcomeGroup(tuple(names), outcome, why) for (outcome, why), names in groups.items())


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
    outcomes = tuple(_outcomes(facts.runtime, s) for s in servable)
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


def _outcomes(runtime: Runtime, s: Servable) -> ReleaseOutcomes:
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


# --- reading JSON defensively ---------------------------------------------------------------------


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _tristate(value: Any) -> Tristate:
    return value if isinstance(value, bool) else None


def _ints(value: Any) -> tuple[int, ...]:
    items = value if isinstance(value, list) else []
    return tuple(i for i in items if isinstance(i, int) and not isinstance(i, bool))


def _each(read: Any, items: Any) -> tuple[Any, ...]:
    rows = (read(item) for item in (items if isinstance(items, list) else []))
    return tuple(row for row in rows if row is not None)


# --- synthetic assessments (seed_synthetic and the dashboard tests' factories) ---------------------

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
    outcomes = tuple(_outcomes(Runtime(rows), s) for s in servable)
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
