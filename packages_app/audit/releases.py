"""Pure: which mesh-llm release admits a manifest, and if not, why (docs/rules.md sections 6 and 6a).

The releases are data, in releases.toml beside this module (one table per release, sourced); the only
I/O is reading that bundled file once. No Django, no network.

Each Admission keeps its package verdict (``admitted``, ``why``: schema, ABI, identity) and adds two serving
results: ``single_node`` (the package verdict; the split-certification gate does not apply) and ``split``
(the package verdict and the release's split-certification gate, certification.py).
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from packages_app.audit.certification import (
    Roster,
    SplitGate,
    check_roster_binding,
    known_rosters,
    split_gate,
)
from packages_app.manifest import MANIFEST_FILE, Manifest, ManifestResult

Tristate = bool | None  # None: not pinned down
ABI_RULES = ("equal", "any", "unknown")
KINDS = ("tag", "build")


@dataclass(frozen=True)
class Release:
    release: str
    abi_rule: str  # "equal" | "any" | "unknown" (whether it still compares ABIs is not pinned down)
    runtime_abi: str  # the Skippy (skippy_ffi) ABI its binary carries; "" when not pinned down
    serves_v1: bool
    request_defaults: Tristate
    publisher_metadata: Tristate
    source: str
    split_gate: Tristate = None  # has the split-certification gate (PRs #1845/#1893); None: not pinned down
    roster: str | None = None  # the roster (certification.py) it carries; None: not pinned down
    kind: str = "tag"  # "tag": a published release; "build": a binary built from one pinned commit
    note: str = ""  # said after "admitted" where a fact of the row is inferred rather than read
    serves_v2: Tristate = True  # whether it loads package-v2 at all (v0.72.1: not pinned down)

    @property
    def skippy_abi(self) -> str:
        return self.runtime_abi


@dataclass(frozen=True)
class Serving:
    """One way of serving (split or single-node) for one release: admitted, refused, or not pinned down."""

    admitted: Tristate
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"admitted": self.admitted, "why": self.why}


@dataclass(frozen=True)
class Admission:
    release: str
    admitted: Tristate  # the package verdict; None when mesh-llm's behaviour is not pinned down
    why: str
    single_node: Serving | None = None  # the gate does not apply to single-node serving
    split: Serving | None = None  # the package verdict and the release's split-certification gate
    gate: SplitGate | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"release": self.release, "admitted": self.admitted, "why": self.why}
        if self.single_node is not None:
            doc["single_node"] = self.single_node.to_json()
        if self.split is not None:
            doc["split"] = self.split.to_json() | {"gate": self.gate.to_json() if self.gate else None}
        return doc


def parse_releases(text: str, rosters: Mapping[str, Roster] | None = None) -> tuple[Release, ...]:
    """The release table from releases.toml text; raises ValueError on a malformed row.

    A row naming a roster is checked against ``rosters`` (default: the bundled ones): the roster must exist
    and be for the row's own Skippy ABI.
    """
    rows = tomllib.loads(text).get("release", [])
    releases = tuple(_release(row) for row in rows)
    bound = [r for r in releases if r.roster is not None]
    if bound:
        rosters = known_rosters() if rosters is None else rosters
    for r in bound:
        check_roster_binding(r.release, str(r.roster), r.runtime_abi, rosters or {})
    return releases


def _release(row: dict[str, Any]) -> Release:
    name = row.get("release")
    if row.get("abi_rule") not in ABI_RULES:
        raise ValueError(f"releases.toml: {name!r} has abi_rule {row.get('abi_rule')!r}")
    if row.get("kind", "tag") not in KINDS:
        raise ValueError(f"releases.toml: {name!r} has kind {row.get('kind')!r}; it must be tag or build")
    roster = row.get("roster", "unknown")
    if not isinstance(roster, str) or not roster:
        raise ValueError(f'releases.toml: {name!r} has roster {roster!r}; name a roster or say "unknown"')
    return Release(
        release=str(name),
        abi_rule=row["abi_rule"],
        runtime_abi=str(row.get("runtime_abi", "")),
        serves_v1=bool(row.get("serves_v1", False)),
        request_defaults=_tristate(row.get("request_defaults")),
        publisher_metadata=_tristate(row.get("publisher_metadata")),
        source=str(row.get("source", "")),
        serves_v2=_tristate(row.get("serves_v2", True)),
        split_gate=_tristate(row.get("split_gate")),
        roster=None if roster == "unknown" else roster,
        kind=str(row.get("kind", "tag")),
        note=str(row.get("note", "")),
    )


def _tristate(value: Any) -> Tristate:
    return value if isinstance(value, bool) else None


@functools.cache
def known_releases() -> tuple[Release, ...]:
    return parse_releases(resources.files(__package__).joinpath("releases.toml").read_text("utf-8"))


def compatibility(
    parsed: ManifestResult | None,
    releases: tuple[Release, ...] | None = None,
    *,
    architecture: str | None = None,
    rosters: Mapping[str, Roster] | None = None,
) -> list[Admission]:
    """Release -> admitted, or the reason it refuses this manifest; split and single-node serving too.

    ``architecture`` is the carrier's ``general.architecture`` when the headers were read (None when a
    manifest is judged alone: the split gate is then not pinned down).
    """
    return [
        admit(parsed, r, architecture, rosters)
        for r in (releases if releases is not None else known_releases())
    ]


def admit(
    parsed: ManifestResult | None,
    r: Release,
    architecture: str | None = None,
    rosters: Mapping[str, Roster] | None = None,
) -> Admission:
    admitted, why = _package_verdict(parsed, r)
    gate = split_gate(architecture, r.release, r.split_gate, r.roster, r.runtime_abi, rosters)
    single = Serving(admitted, why)
    return Admission(r.release, admitted, why, single, _split(admitted, why, gate), gate)


def _split(admitted: Tristate, why: str, gate: SplitGate) -> Serving:
    """A refusal by either the package verdict or the gate refuses; both must admit to admit."""
    if admitted is False:
        return Serving(False, why)
    if gate.admitted is False:
        return Serving(False, gate.why)
    if admitted is True and gate.admitted is True:
        return Serving(True, f"{why} {gate.why[0].upper()}{gate.why[1:]}")
    reasons = [w for a, w in ((admitted, why), (gate.admitted, gate.why)) if a is None]
    return Serving(None, " ".join(reasons))


def _package_verdict(parsed: ManifestResult | None, r: Release) -> tuple[Tristate, str]:
    manifest = parsed.manifest if parsed else None
    if parsed is None or manifest is None:
        return False, _rejected(parsed)
    if manifest.schema_version == 1:
        return _v1_verdict(parsed, r)
    if r.serves_v2 is not True:
        known = r.serves_v2 is False
        why = "it does not load package-v2." if known else "whether it loads package-v2 is not pinned down."
        return (False if known else None), why
    if not parsed.trusted:
        return False, _rejected(parsed)
    if r.abi_rule == "equal" and manifest.abi_version != r.runtime_abi:
        abi = manifest.abi_version
        return False, f"package-v2 native ABI {abi} differs from runtime ABI {r.runtime_abi}."
    if sum(f.size or 0 for f in manifest.source_model.files) <= 0:
        return False, "the source byte total is not greater than 0."
    # What is not pinned down comes last: a known refusal above wins over "not pinned down".
    unsupported = _unsupported_block(manifest, r)
    if unsupported is not None:
        return unsupported
    if r.abi_rule == "unknown" and manifest.abi_version != r.runtime_abi:
        own = r.runtime_abi or "unknown"
        return None, (
            f"not pinned down: whether {r.release} still requires the package's native ABI "
            f"({manifest.abi_version}) to equal its own ({own}) is not known (PR #1959)."
        )
    rule = "any ABI" if r.abi_rule == "any" else f"ABI {r.runtime_abi}"
    note = f" ({r.note})" if r.note else ""
    return True, f"admitted: schema v2, a matching package_id, {rule}{note}."


def _v1_verdict(parsed: ManifestResult, r: Release) -> tuple[Tristate, str]:
    if not r.serves_v1:
        return False, "schema v1 is offline-only; split serving requires package-v2."
    if not parsed.trusted:
        return False, _rejected(parsed)
    return True, "admitted: layer-package schema v1, served before PR #1693."


def refused_key(compatibility: list[dict[str, Any]]) -> str:
    """The releases that refuse a revision (to load it, or to split-serve it: the split-certification
    gate), from its stored matrix, as "|v0.76.1|v0.76.2|" (or "")."""
    names = [str(a.get("release")) for a in compatibility if isinstance(a, dict) and _refuses(a)]
    return f"|{'|'.join(names)}|"[:500] if names else ""


def _refuses(admission: dict[str, Any]) -> bool:
    split = admission.get("split")
    return admission.get("admitted") is False or (isinstance(split, dict) and split.get("admitted") is False)


def _unsupported_block(m: Manifest, r: Release) -> tuple[Tristate, str] | None:
    for present, supported, key in (
        (m.request_defaults, r.request_defaults, "generation.request_defaults"),
        (m.publisher_metadata, r.publisher_metadata, "publisher_metadata"),
    ):
        if not present or supported is True:
            continue
        if supported is False:
            return False, f"its parser does not know {key} (unknown field)."
        return None, f"whether it parses {key} is not pinned down."
    return None


def _rejected(parsed: ManifestResult | None) -> str:
    if parsed is None:
        return f"there is no {MANIFEST_FILE}."
    first = next((p for p in parsed.problems if p.severity == "error"), None)
    return f"mesh-llm rejects the manifest ({first.code}: {first.message})" if first else "it is rejected."


def release_for(version: str, releases: tuple[Release, ...] | None = None) -> str | None:
    """The release row a node's reported mesh-llm version (``/api/status`` ``version``, e.g. ``0.78.0``
    or ``v0.78.0``) names, or None when the matrix does not know it. Matched exactly: a build such as
    ``0.76.0-rc9`` is not ``v0.76.0``; a row built from a commit (``kind = "build"``) has no version."""
    if releases is None:
        return _known_release_for(version)
    text = version.strip().removeprefix("mesh-llm").strip()
    if not text:
        return None
    wanted = text if text.startswith("v") else f"v{text}"
    return next((r.release for r in releases if r.release == wanted and r.kind == "tag"), None)


@functools.lru_cache(maxsize=1024)
def _known_release_for(version: str) -> str | None:
    """release_for against the matrix shipped with meshdash, once a process for each version string: the
    nodes page asks it twice for each of a thousand nodes' rows, a scan of the matrix each time."""
    return release_for(version, known_releases())
