"""Pure: which mesh-llm release admits a manifest, and if not, why (docs/rules.md sections 6 and 6a).

The releases are data, in releases.toml beside this module (one table per release, sourced); the only
I/O is reading that bundled file once. No Django, no network.

Each Admission keeps its package verdict (``admitted``, ``why``: schema, ABI, identity) and adds two serving
results: ``single_node`` (the package verdict; the split-certification gate does not apply) and ``split``
(the package verdict and the release's split-certification gate, certification.py).
"""

from __future__ import annotations

import functools
import json
import re
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
class ServingAdmission:
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
    single_node: ServingAdmission | None = None  # the gate does not apply to single-node serving
    split: ServingAdmission | None = None  # the package verdict and the release's split-certification gate
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
    single = ServingAdmission(admitted, why)
    return Admission(r.release, admitted, why, single, _split(admitted, why, gate), gate)


def _split(admitted: Tristate, why: str, gate: SplitGate) -> ServingAdmission:
    """A refusal by either the package verdict or the gate refuses; both must admit to admit."""
    if admitted is False:
        return ServingAdmission(False, why)
    if gate.admitted is False:
        return ServingAdmission(False, gate.why)
    if admitted is True and gate.admitted is True:
        return ServingAdmission(True, f"{why} {gate.why[0].upper()}{gate.why[1:]}")
    reasons = [w for a, w in ((admitted, why), (gate.admitted, gate.why)) if a is None]
    return ServingAdmission(None, " ".join(reasons))


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


# --- adding a release from its published native-runtimes.json ---------------------------------------

MAX_RUNTIMES_BYTES = 4 * 1024 * 1024
RELEASES_FILE = "releases.toml"
_VERSION = re.compile(r"v?(\d{1,6})\.(\d{1,6})\.(\d{1,6})")
_RUNTIMES_SCHEMA = 2


class RuntimesError(ValueError):
    """A native-runtimes.json meshdash cannot take; the message names what is wrong."""


@dataclass(frozen=True)
class PublishedRelease:
    """What a release's native-runtimes.json pins: its version and the Skippy ABI of its native runtimes."""

    release: str  # "v0.78.0"
    skippy_abi: str
    artifacts: int
    key: str  # "release_version" (schema 2) or "mesh_version" (legacy)


def parse_native_runtimes(data: bytes) -> PublishedRelease:
    """A release from its ``native-runtimes.json`` (docs/rules.md section 6b): schema 2 names the version
    ``release_version``, the legacy file ``mesh_version``; a file naming both, at the top or in an artifact,
    is refused, as is an artifact whose ``skippy_abi`` is not the file's (mesh-llm's own check)."""
    doc = _runtimes_doc(data)
    key = _version_key(doc, "the file")
    version, abi = doc.get(key), doc.get("skippy_abi")
    if not isinstance(version, str) or not _VERSION.fullmatch(version.strip()):
        raise RuntimesError(f"{key} is {str(version)[:40]!r}; a release version is MAJOR.MINOR.PATCH")
    if not isinstance(abi, str) or not _VERSION.fullmatch(abi) or abi.startswith("v"):
        raise RuntimesError(f"skippy_abi is {str(abi)[:40]!r}; a Skippy ABI is MAJOR.MINOR.PATCH")
    artifacts = doc.get("artifacts", [])
    if not isinstance(artifacts, list):
        raise RuntimesError("artifacts must be a list")
    for index, artifact in enumerate(artifacts):
        _check_artifact(index, artifact, key, abi)
    release = version.strip() if version.strip().startswith("v") else f"v{version.strip()}"
    return PublishedRelease(release, abi, len(artifacts), key)


def _runtimes_doc(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_RUNTIMES_BYTES:
        raise RuntimesError(f"it is over the {MAX_RUNTIMES_BYTES}-byte limit")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RuntimesError(f"it is not JSON ({str(exc)[:120]})") from None
    if not isinstance(doc, dict):
        raise RuntimesError(f"it must be a JSON object, not {type(doc).__name__}")
    schema = doc.get("schema_version")
    if schema is not None and (type(schema) is not int or schema != _RUNTIMES_SCHEMA):
        raise RuntimesError(
            f"schema_version is {str(schema)[:20]!r}; only schema {_RUNTIMES_SCHEMA} is known"
        )
    if schema == _RUNTIMES_SCHEMA and "mesh_version" in doc:
        raise RuntimesError("schema 2 names the version release_version, not mesh_version")
    return doc


def _version_key(doc: dict[str, Any], where: str) -> str:
    both = "release_version" in doc and "mesh_version" in doc
    if both:
        raise RuntimesError(f"{where} names both release_version (schema 2) and mesh_version (legacy)")
    if "release_version" in doc:
        return "release_version"
    if "mesh_version" in doc:
        return "mesh_version"
    raise RuntimesError(f"{where} names neither release_version (schema 2) nor mesh_version (legacy)")


def _check_artifact(index: int, artifact: Any, key: str, abi: str) -> None:
    where = f"artifacts[{index}]"
    if not isinstance(artifact, dict):
        raise RuntimesError(f"{where} must be an object")
    named = "release_version" in artifact or "mesh_version" in artifact
    if named and (own := _version_key(artifact, where)) != key:
        raise RuntimesError(f"{where} names {own}, the file {key}: mixed shapes")
    if artifact.get("skippy_abi") != abi:
        found = str(artifact.get("skippy_abi"))[:40]
        raise RuntimesError(f"{where} has skippy_abi {found!r}, expected {abi} (the file's)")


def _abi_order(abi: str) -> tuple[int, ...]:
    match = _VERSION.fullmatch(abi)
    return tuple(int(g) for g in match.groups()) if match else ()


def release_table_text(published: PublishedRelease, releases: tuple[Release, ...]) -> str:
    """The ``[[release]]`` table for a published release: its version and ABI as its native-runtimes.json
    states them; what that file does not say (ABI rule, parsers, the gate) taken from the newest known tag
    at a lower ABI and marked inferred; its roster inferred from its ABI (certification.INFERRED_FROM_ABI)."""
    order = _abi_order(published.skippy_abi)
    earlier = [r for r in releases if r.kind == "tag" and r.runtime_abi and _abi_order(r.runtime_abi) < order]
    base = earlier[-1] if earlier else None
    rows = [
        "[[release]]",
        f"# Imported from its native-runtimes.json ({published.key} {published.release.lstrip('v')}, "
        f"skippy_abi {published.skippy_abi}, {published.artifacts} artifacts) by manage.py import_release.",
        f"release = {json.dumps(published.release)}",
        f'abi_rule = "{base.abi_rule if base else "unknown"}"',
        f"runtime_abi = {json.dumps(published.skippy_abi)}",
        "serves_v1 = false",
        f"request_defaults = {_toml_tristate(base.request_defaults if base else None)}",
        f"publisher_metadata = {_toml_tristate(base.publisher_metadata if base else None)}",
        f"split_gate = {_toml_tristate(base.split_gate if base else None)}",
        'roster = "inferred-from-abi"',
    ]
    like = (
        f"as {base.release} (the newest release at a lower ABI)" if base else "no earlier release to follow"
    )
    rows.append(f"note = {json.dumps(f'inferred: what its native-runtimes.json does not say, {like}')}")
    source = f"native-runtimes.json ({published.release}, skippy_abi {published.skippy_abi})"
    rows.append(f"source = {json.dumps(source)}")
    return "\n".join(rows) + "\n"


def _toml_tristate(value: Tristate) -> str:
    return '"unknown"' if value is None else str(value).lower()


def with_release(text: str, published: PublishedRelease) -> str | None:
    """releases.toml text with the published release added in ABI order (None: that exact release and ABI
    are already there). Raises RuntimesError when the table already has the release at another ABI, or the
    result would not parse."""
    releases = parse_releases(text)
    same = next((r for r in releases if r.release == published.release), None)
    if same is not None:
        if same.runtime_abi == published.skippy_abi:
            return None
        raise RuntimesError(
            f"{published.release} is already in {RELEASES_FILE} at Skippy ABI {same.runtime_abi}, "
            f"not {published.skippy_abi}"
        )
    blocks = re.split(r"(?m)^(?=\[\[release\]\]\s*$)", text)
    head, tables = blocks[0], blocks[1:]
    order = _abi_order(published.skippy_abi)
    later = [i for i, r in enumerate(releases) if r.runtime_abi and _abi_order(r.runtime_abi) > order]
    at = later[0] if later else len(tables)
    table = release_table_text(published, releases)
    before = "".join(tables[:at]).rstrip("\n") + "\n\n" if at else ""
    after = "".join(tables[at:])
    result = head + before + table + ("\n" + after if after else "")
    try:
        parse_releases(result)
    except ValueError as exc:
        raise RuntimesError(f"the new table would not parse: {exc}") from None
    return result


def clear_release_lookups() -> None:
    """Forget the cached version lookups (after the bundled table changed in this process)."""
    _known_release_for.cache_clear()
