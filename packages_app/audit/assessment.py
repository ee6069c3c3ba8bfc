"""Pure: the assessment, one answer per revision (or local folder, or manifest checked alone): will it serve
on each known mesh-llm release, will MTP run under each operator setting, and one headline (status,
sentence, action) that every surface leads with. No Django, no I/O.

Built (headline.py) from the audit's parts: the release matrix (releases.py), the resolver table
(runtime.py), the MTP verdict (judgement.py) and the suggested fix (fix.py). The headline is judged on the
newest known release (the last row of releases.toml); what each older release does is in ``servable`` and
``outcomes``, which the fleet pages read to judge a node against its own release. Stored as JSON
(``to_json``) and read back typed (``Assessment.from_json``), so pages and the API read attributes, never
keys of stored JSON.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from packages_app.audit.model import (
    Resolution,
    ResolverAssumptions,
)
from packages_app.audit.releases import Admission
from packages_app.verdicts import ActionKind, Status, Verdict, status_of, verdict_of

Scope = Literal["revision", "folder", "manifest"]
Tristate = bool | None


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
