"""Pure: which mesh-llm release admits a manifest, and if not, why (rules.md section 6).

The releases are data, in releases.toml beside this module (one table per release, sourced); the only
I/O is reading that bundled file once. No Django, no network.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any

from packages_app.manifest import MANIFEST_FILE, Manifest, ManifestResult

Tristate = bool | None  # None: not pinned down


@dataclass(frozen=True)
class Release:
    release: str
    abi_rule: str  # "equal" | "any"
    runtime_abi: str
    serves_v1: bool
    serves_v2: Tristate
    request_defaults: Tristate
    publisher_metadata: Tristate
    source: str


@dataclass(frozen=True)
class Admission:
    release: str
    admitted: Tristate  # None when mesh-llm's behaviour for this release is not pinned down
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"release": self.release, "admitted": self.admitted, "why": self.why}


def parse_releases(text: str) -> tuple[Release, ...]:
    """The release table from releases.toml text; raises ValueError on a malformed row."""
    rows = tomllib.loads(text).get("release", [])
    return tuple(_release(row) for row in rows)


def _release(row: dict[str, Any]) -> Release:
    if row.get("abi_rule") not in ("equal", "any"):
        raise ValueError(f"releases.toml: {row.get('release')!r} has abi_rule {row.get('abi_rule')!r}")
    return Release(
        release=str(row["release"]),
        abi_rule=row["abi_rule"],
        runtime_abi=str(row.get("runtime_abi", "")),
        serves_v1=bool(row.get("serves_v1", False)),
        serves_v2=_tristate(row.get("serves_v2", True)),
        request_defaults=_tristate(row.get("request_defaults")),
        publisher_metadata=_tristate(row.get("publisher_metadata")),
        source=str(row.get("source", "")),
    )


def _tristate(value: Any) -> Tristate:
    return value if isinstance(value, bool) else None


@functools.cache
def known_releases() -> tuple[Release, ...]:
    return parse_releases(resources.files(__package__).joinpath("releases.toml").read_text("utf-8"))


def compatibility(
    parsed: ManifestResult | None, releases: tuple[Release, ...] | None = None
) -> list[Admission]:
    """Release -> admitted, or the reason it refuses this manifest."""
    return [admit(parsed, r) for r in (releases if releases is not None else known_releases())]


def admit(parsed: ManifestResult | None, r: Release) -> Admission:
    manifest = parsed.manifest if parsed else None
    if parsed is None or manifest is None:
        return Admission(r.release, False, _rejected(parsed))
    if manifest.schema_version == 1:
        return _admit_v1(parsed, r)
    if r.serves_v2 is not True:
        known = r.serves_v2 is False
        why = "it does not load package-v2." if known else "whether it loads package-v2 is not pinned down."
        return Admission(r.release, False if known else None, why)
    if not parsed.trusted:
        return Admission(r.release, False, _rejected(parsed))
    if r.abi_rule == "equal" and manifest.abi_version != r.runtime_abi:
        return Admission(
            r.release,
            False,
            f"package-v2 native ABI {manifest.abi_version} differs from runtime ABI {r.runtime_abi}.",
        )
    if sum(f.size or 0 for f in manifest.source_model.files) <= 0:
        return Admission(r.release, False, "the source byte total is not greater than 0.")
    # A block the release's parser may not know comes last: a known refusal above wins over "not pinned down".
    unsupported = _unsupported_block(manifest, r)
    if unsupported is not None:
        return unsupported
    rule = "any ABI" if r.abi_rule == "any" else f"ABI {r.runtime_abi}"
    return Admission(r.release, True, f"admitted: schema v2, a matching package_id, {rule}.")


def _admit_v1(parsed: ManifestResult, r: Release) -> Admission:
    if not r.serves_v1:
        return Admission(r.release, False, "schema v1 is offline-only; split serving requires package-v2.")
    if not parsed.trusted:
        return Admission(r.release, False, _rejected(parsed))
    return Admission(r.release, True, "admitted: layer-package schema v1, served before PR #1693.")


def refused_key(compatibility: list[dict[str, Any]]) -> str:
    """The releases that refuse a revision, from its stored matrix, as "|v0.76.1|v0.76.2|" (or "")."""
    names = [
        str(a.get("release")) for a in compatibility if isinstance(a, dict) and a.get("admitted") is False
    ]
    return f"|{'|'.join(names)}|"[:500] if names else ""


def _unsupported_block(m: Manifest, r: Release) -> Admission | None:
    for present, supported, key in (
        (m.request_defaults, r.request_defaults, "generation.request_defaults"),
        (m.publisher_metadata, r.publisher_metadata, "publisher_metadata"),
    ):
        if not present or supported is True:
            continue
        if supported is False:
            return Admission(r.release, False, f"its parser does not know {key} (unknown field).")
        return Admission(r.release, None, f"whether it parses {key} is not pinned down.")
    return None


def _rejected(parsed: ManifestResult | None) -> str:
    if parsed is None:
        return f"there is no {MANIFEST_FILE}."
    first = next((p for p in parsed.problems if p.severity == "error"), None)
    return f"mesh-llm rejects the manifest ({first.code}: {first.message})" if first else "it is rejected."


def release_for(version: str, releases: tuple[Release, ...] | None = None) -> str | None:
    """The release row a node's reported mesh-llm version (``/api/status`` ``version``, e.g. ``0.78.0``
    or ``v0.78.0``) names, or None when the matrix does not know it. Matched exactly: a build such as
    ``0.76.0-rc9`` is not ``v0.76.0``."""
    text = version.strip().removeprefix("mesh-llm").strip()
    if not text:
        return None
    wanted = text if text.startswith("v") else f"v{text}"
    rows = releases if releases is not None else known_releases()
    return next((r.release for r in rows if r.release == wanted), None)
