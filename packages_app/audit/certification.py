"""Pure: mesh-llm's split-certification gate (PRs #1845, #1893; docs/rules.md section 6a) and its rosters.

Split serving fails closed: a node split-serves a package only when the GGUF ``general.architecture`` of its
metadata carrier is on the roster compiled into the binary; ``--split --allow-uncertified-split`` overrides,
and the stage then reports ``uncertified_override``. A roster binds to one native recipe (llama.cpp pin,
Skippy ABI, patch queue) and is void for any other build. Single-node serving is not gated.

The rosters are data: one file each under ``rosters/``, byte for byte in mesh-llm's own format
(``split-certified.json``, schema 2), so a file stays importable by mesh-llm as it is; the commit it comes
from sits beside it in ``<name>.source.json``. The only I/O is reading that bundled folder (and, for
``manage.py import_roster``, writing one new pair into it). No Django, no network.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

ROSTER_SCHEMA = 2
MAX_ROSTER_BYTES = 1024 * 1024
MAX_ARCHITECTURES = 4096
ROSTER_DIR = "rosters"
SOURCE_SUFFIX = ".source.json"
OVERRIDE_FLAG = "--allow-uncertified-split"

_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_ABI = re.compile(r"\d{1,6}\.\d{1,6}\.\d{1,6}")
# GGUF architecture names as llama.cpp spells them: "qwen35moe", "ernie4_5-moe", "glm-dsa", "gpt-oss".
_ARCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
_REPO = re.compile(r"[A-Za-z0-9_.-]{1,96}/[A-Za-z0-9_.-]{1,96}")
_ROSTER_KEYS = ("schema_version", "native_recipe", "architectures")
_RECIPE_KEYS = ("llama_upstream_sha", "skippy_abi", "patch_queue_sha256")

Outcome = Literal["admitted", "refused", "not-pinned-down"]


class RosterError(ValueError):
    """A roster file mesh-llm could not use; the message names what is wrong."""


@dataclass(frozen=True)
class NativeRecipe:
    """The one build a roster is valid for (the roster is void for any other)."""

    llama_upstream_sha: str
    skippy_abi: str
    patch_queue_sha256: str

    def describe(self) -> str:
        return (
            f"Skippy ABI {self.skippy_abi}, llama.cpp {self.llama_upstream_sha[:8]}, "
            f"patch queue {self.patch_queue_sha256[:8]}"
        )


@dataclass(frozen=True)
class RosterSource:
    """Where a roster file comes from: a repository, a 40-hex commit and the file's path there."""

    repo: str
    commit: str
    path: str

    def describe(self) -> str:
        return f"{self.repo}@{self.commit[:8]}:{self.path}"


@dataclass(frozen=True)
class Roster:
    name: str
    recipe: NativeRecipe
    architectures: frozenset[str]
    source: RosterSource
    # The bundled rosters it was inferred from by the release's Skippy ABI (``roster = "inferred-from-abi"``);
    # empty for a roster read from one file.
    inferred_from: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """How a sentence names the roster, e.g. ``mesh-llm-00caec16: Skippy ABI 0.1.63, ...``, or for an
        inferred one ``inferred from its ABI 0.1.66: mesh-llm-5d067fec, mesh-llm-97372534 list ...``."""
        if self.inferred_from:
            return (
                f"inferred from its ABI {self.recipe.skippy_abi}: {', '.join(self.inferred_from)} list the "
                f"same {len(self.architectures)} architectures"
            )
        return f"{self.name}: {self.recipe.describe()}"

    def certifies(self, architecture: str) -> bool:
        return architecture in self.architectures


# --- reading a roster file ------------------------------------------------------------------------


def parse_roster(data: bytes | str, name: str, source: RosterSource) -> Roster:
    """A roster from mesh-llm's ``split-certified.json`` bytes; raises RosterError naming the defect."""
    if not _NAME.fullmatch(name) or name.endswith(".source"):  # "<name>.source.json" is a sidecar
        raise RosterError(f"roster name {name!r} must be 1-80 characters of [A-Za-z0-9._-]")
    doc = _json_object(data, "the roster")
    unknown = sorted(set(doc) - set(_ROSTER_KEYS))
    if unknown:
        raise RosterError(f"the roster has keys mesh-llm's format does not: {', '.join(unknown)}")
    missing = [k for k in _ROSTER_KEYS if k not in doc]
    if missing:
        raise RosterError(f"the roster lacks {', '.join(missing)}")
    version = doc["schema_version"]
    if type(version) is not int or version != ROSTER_SCHEMA:
        raise RosterError(f"schema_version is {version!r}; only schema {ROSTER_SCHEMA} is known")
    return Roster(name, _recipe(doc["native_recipe"]), _architectures(doc["architectures"]), source)


def parse_source(data: bytes | str) -> RosterSource:
    """A ``<name>.source.json`` sidecar: ``{"repo", "commit", "path"}``."""
    doc = _json_object(data, "the source record")
    unknown = sorted(set(doc) - {"repo", "commit", "path"})
    if unknown:
        raise RosterError(f"the source record has unknown keys: {', '.join(unknown)}")
    return source_of(doc.get("repo"), doc.get("commit"), doc.get("path"))


def source_of(repo: Any, commit: Any, path: Any) -> RosterSource:
    if not isinstance(repo, str) or not _REPO.fullmatch(repo):
        raise RosterError(f"source repo {repo!r} is not owner/name")
    if not isinstance(commit, str) or not _HEX40.fullmatch(commit):
        raise RosterError(f"source commit {commit!r} is not a 40-hex lowercase commit sha")
    if not isinstance(path, str) or not path or len(path) > 300 or path.startswith("/") or ".." in path:
        raise RosterError(f"source path {path!r} is not a relative path in the repository")
    return RosterSource(repo, commit, path)


def _json_object(data: bytes | str, what: str) -> dict[str, Any]:
    raw = data.encode() if isinstance(data, str) else data
    if len(raw) > MAX_ROSTER_BYTES:
        raise RosterError(f"{what} is {len(raw)} bytes, over the {MAX_ROSTER_BYTES}-byte limit")
    try:
        doc = json.loads(raw, object_pairs_hook=_no_duplicates)
    except UnicodeDecodeError:
        raise RosterError(f"{what} is not UTF-8") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: arrays nested thousands deep
        raise RosterError(f"{what} is not JSON: {str(exc)[:200]}") from None
    if not isinstance(doc, dict):
        raise RosterError(f"{what} must be a JSON object, not {type(doc).__name__}")
    return doc


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # serde refuses a repeated field, and a repeated key would silently keep only the last value.
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise RosterError(f"the key {key!r} appears twice in one object")
        seen[key] = value
    return seen


def _recipe(value: Any) -> NativeRecipe:
    if not isinstance(value, dict):
        raise RosterError("native_recipe must be an object")
    unknown = sorted(set(value) - set(_RECIPE_KEYS))
    missing = [k for k in _RECIPE_KEYS if k not in value]
    if missing:
        raise RosterError(f"native_recipe lacks {', '.join(missing)}")
    if unknown:
        raise RosterError(f"native_recipe has keys mesh-llm's format does not: {', '.join(unknown)}")
    llama, abi, queue = (value[k] for k in _RECIPE_KEYS)
    if not isinstance(llama, str) or not _HEX40.fullmatch(llama):
        raise RosterError(f"native_recipe.llama_upstream_sha {llama!r} is not a 40-hex commit sha")
    if not isinstance(abi, str) or not _ABI.fullmatch(abi):
        raise RosterError(f"native_recipe.skippy_abi {abi!r} is not MAJOR.MINOR.PATCH")
    if not isinstance(queue, str) or not _HEX64.fullmatch(queue):
        raise RosterError(f"native_recipe.patch_queue_sha256 {queue!r} is not 64 lowercase hex")
    return NativeRecipe(llama, abi, queue)


def _architectures(value: Any) -> frozenset[str]:
    if not isinstance(value, list) or not value:
        raise RosterError("architectures must be a non-empty list of GGUF architecture names")
    if len(value) > MAX_ARCHITECTURES:
        raise RosterError(f"architectures lists {len(value)} names, over the limit of {MAX_ARCHITECTURES}")
    seen: set[str] = set()
    for index, arch in enumerate(value):
        if not isinstance(arch, str) or not _ARCH.fullmatch(arch):
            raise RosterError(f"architectures[{index}] {arch!r} is not a GGUF architecture name")
        if arch in seen:
            raise RosterError(f"architectures[{index}] {arch!r} is listed twice")
        seen.add(arch)
    return frozenset(seen)


# --- the bundled rosters --------------------------------------------------------------------------


def load_rosters(folder: Traversable | Path) -> dict[str, Roster]:
    """Every ``<name>.json`` roster in ``folder`` with its ``<name>.source.json``; RosterError if any is bad.

    A sidecar without its roster is ignored: import_roster writes the sidecar first, so an interrupted
    import leaves only an orphan sidecar behind, never a roster without a source.
    """
    found: dict[str, Roster] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".json") or entry.name.endswith(SOURCE_SUFFIX):
            continue
        name = entry.name.removesuffix(".json")
        sidecar = folder.joinpath(name + SOURCE_SUFFIX)
        if not sidecar.is_file():
            raise RosterError(f"roster {entry.name} has no {name + SOURCE_SUFFIX} naming its commit")
        try:
            found[name] = parse_roster(entry.read_bytes(), name, parse_source(sidecar.read_bytes()))
        except RosterError as exc:
            raise RosterError(f"{entry.name}: {exc}") from None
    return found


def roster_folder() -> Traversable:
    return resources.files(__package__).joinpath(ROSTER_DIR)


@functools.cache
def known_rosters() -> Mapping[str, Roster]:
    return load_rosters(roster_folder())


# --- the gate -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SplitGate:
    """What one release's split-certification gate does with one architecture."""

    outcome: Outcome
    why: str
    architecture: str | None = None
    roster: str | None = None  # the roster's name, when the release's roster is known
    roster_inferred: bool = False  # the roster is inferred from the release's ABI, not read for its tag

    @property
    def admitted(self) -> bool | None:
        return {"admitted": True, "refused": False}.get(self.outcome)

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "admitted": self.admitted,
            "why": self.why,
            "architecture": self.architecture,
            "roster": self.roster,
            "roster_inferred": self.roster_inferred,
        }


CARRIER_NOT_READ = "not pinned down: the architecture is read from the metadata carrier, which was not read"
# A release row's ``roster`` when no file ties the release's tag to a commit, only its Skippy ABI to rosters
# (docs/rules.md section 6b: v0.78.0's roster is inferred from ABI 0.1.66).
INFERRED_FROM_ABI = "inferred-from-abi"


def inferred_roster(skippy_abi: str, rosters: Mapping[str, Roster]) -> Roster | None:
    """The roster a release at ``skippy_abi`` carries, inferred from the bundled rosters for that ABI: they
    must exist and all list the same architectures (they may differ in patch queue, which only the
    release's own build pins); None when none is for that ABI or they disagree."""
    same = sorted((r for r in rosters.values() if r.recipe.skippy_abi == skippy_abi), key=lambda r: r.name)
    if not skippy_abi or not same or any(r.architectures != same[0].architectures for r in same[1:]):
        return None
    llama = {r.recipe.llama_upstream_sha for r in same}
    recipe = NativeRecipe(llama.pop() if len(llama) == 1 else "", skippy_abi, "")
    names = tuple(r.name for r in same)
    return Roster(f"inferred from ABI {skippy_abi}", recipe, same[0].architectures, same[0].source, names)


def split_gate(
    architecture: str | None,
    release: str,
    has_gate: bool | None,
    roster_name: str | None,
    skippy_abi: str = "",
    rosters: Mapping[str, Roster] | None = None,
) -> SplitGate:
    """Whether ``release`` split-serves a package whose carrier says ``general.architecture`` = architecture.

    ``has_gate`` None and ``roster_name`` None mean "not pinned down"; the sentences say so rather than
    guess (docs/rules.md section 6a).
    """
    rosters = known_rosters() if rosters is None else rosters
    if has_gate is False:
        return SplitGate("admitted", f"{release} has no split-certification gate.", architecture)
    if has_gate is None:
        why = f"not pinned down: whether {release} already has the split-certification gate is not known."
        return SplitGate("not-pinned-down", why, architecture)
    inferring = roster_name == INFERRED_FROM_ABI
    if inferring:
        roster = inferred_roster(skippy_abi, rosters)
    else:
        roster = rosters.get(roster_name) if roster_name else None
    if roster is None:
        why = _unknown_roster(release, skippy_abi, rosters, inferring)
        return SplitGate("not-pinned-down", why, architecture)
    name, inferred = (roster.name, bool(roster.inferred_from))
    if architecture is None:
        return SplitGate("not-pinned-down", CARRIER_NOT_READ + ".", None, name, inferred)
    if roster.certifies(architecture):
        why = f"architecture {architecture} is certified for split serving by {release} "
        why += f"(roster {roster.label})."
        return SplitGate("admitted", why, architecture, name, inferred)
    why = (
        f"architecture {architecture} is not certified for split serving by {release} "
        f"(roster {roster.label}); `{OVERRIDE_FLAG}` overrides"
    )
    return SplitGate("refused", why, architecture, name, inferred)


def _unknown_roster(
    release: str, skippy_abi: str, rosters: Mapping[str, Roster], inferring: bool = False
) -> str:
    known = sorted({r.recipe.skippy_abi for r in rosters.values()})
    at_abi = sorted(r.name for r in rosters.values() if r.recipe.skippy_abi == skippy_abi)
    if inferring and len(at_abi) > 1:
        return (
            f"not pinned down: {release}'s roster is inferred from its Skippy ABI {skippy_abi}, and the "
            f"rosters bundled for that ABI ({', '.join(at_abi)}) list different architectures."
        )
    if skippy_abi and skippy_abi not in known:
        return (
            f"not pinned down: which roster {release} carries is not known; its Skippy ABI {skippy_abi} "
            f"matches no known roster ({', '.join(known) or 'none'}), so its roster is unknown."
        )
    return f"not pinned down: which roster {release} carries is not known."


def check_roster_binding(
    release: str, roster_name: str, skippy_abi: str, rosters: Mapping[str, Roster]
) -> None:
    """A release row may name only a known roster whose recipe is for the release's own Skippy ABI (or infer
    its roster from that ABI, which it must then state)."""
    if roster_name == INFERRED_FROM_ABI:
        if not skippy_abi:
            raise ValueError(f"releases.toml: {release!r} infers its roster from its ABI but states none")
        return
    roster = rosters.get(roster_name)
    if roster is None:
        raise ValueError(f"releases.toml: {release!r} names roster {roster_name!r}, which is not in rosters/")
    if skippy_abi and roster.recipe.skippy_abi != skippy_abi:
        raise ValueError(
            f"releases.toml: {release!r} is at Skippy ABI {skippy_abi} but roster {roster_name!r} is for "
            f"{roster.recipe.skippy_abi}; a roster is void for any other build"
        )


# --- adding a roster ------------------------------------------------------------------------------


def check_import(
    data: bytes, name: str, source: RosterSource, existing: Mapping[str, Roster]
) -> Roster | None:
    """The roster ``data`` would add to ``existing``, or None when that exact roster is already there.

    Raises RosterError when the file is malformed or would contradict a bundled roster: another roster
    under the same name, or another list for the same native recipe (a roster binds to one recipe).
    """
    roster = parse_roster(data, name, source)
    same_name = existing.get(name)
    if same_name is not None:
        if same_name == roster:
            return None
        raise RosterError(f"a different roster is already bundled as {name}; choose another --name")
    for other in existing.values():
        if other.recipe == roster.recipe:
            raise RosterError(
                f"roster {other.name} is already bundled for the same native recipe "
                f"({roster.recipe.describe()}), with a different architecture list"
            )
    return roster


def default_name(source: RosterSource) -> str:
    """``mesh-llm-00caec16`` for Mesh-LLM/mesh-llm@00caec16...: the repository's name and the short commit."""
    return f"{source.repo.split('/')[1].lower()}-{source.commit[:8]}"


def source_json(source: RosterSource) -> str:
    body = {"repo": source.repo, "commit": source.commit, "path": source.path}
    return json.dumps(body, indent=2) + "\n"
