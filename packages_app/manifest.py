"""Pure: model-package.json bytes (schema v1/v2) -> typed manifest + every problem; no Django, no I/O."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn

MANIFEST_FILE = "model-package.json"
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 64  # a real manifest nests 6 levels deep (generation...window_policy.default)
MAX_LAYER_COUNT = 65_536  # bounds the per-layer coverage check; real packages hold under 200 blocks
MAX_PROBLEMS = 200  # a hostile manifest must not turn into millions of stored problems
MAX_INT = 2**63 - 1

Severity = Literal["error", "warning", "info"]
Json = dict[str, Any]

NATIVE_MTP = "native-mtp"
COMPOSITE = "composite"
NGRAM_TYPES = frozenset({"ngram-cache", "ngram-suffix"})
PROPOSER_TYPES = frozenset({NATIVE_MTP, *NGRAM_TYPES})
STRATEGY_TYPES = frozenset({NATIVE_MTP, COMPOSITE, *NGRAM_TYPES})
# v1 writers named the strategy (and sometimes its type) native-mtp-n1; the runtime treats it as mtp.
MTP_NAME = "mtp"
LEGACY_MTP_NAME = "native-mtp-n1"
MTP_NAMES = frozenset({MTP_NAME, LEGACY_MTP_NAME})

# Problems the schema accepts but the runtime refuses at load: they make a declaration wrong,
# not the manifest untrustworthy.
RUNTIME_CODES = frozenset({"unsupported_generation_value"})

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_LOWER_HEX64 = re.compile(r"[0-9a-f]{64}")
_PACKAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")
_IDENTIFIER = re.compile(r"[A-Za-z0-9._-]+")
_KEBAB = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_DRIVE = re.compile(r"[A-Za-z]:")
_LONG_NUMBER = re.compile(rb"[0-9]{19}|[eE][+-]?[0-9]{3}")
_CONTAINER_TYPES = frozenset({dict, list})
LAYER_PATH = re.compile(r"layers/layer-(\d{1,6})(?:-part(\d{1,4}))?\.gguf")
BUILD_HOST_PATH = re.compile(r"(?:/|[A-Za-z]:[\\/]|\\\\)")


@dataclass(frozen=True)
class Problem:
    """One finding: a domain code, a severity and one plain sentence naming the file, key or layer."""

    code: str
    severity: Severity
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "evidence": self.evidence,
        }


@dataclass(frozen=True)
class SourceFile:
    path: str
    size: int | None
    sha256: str | None


@dataclass(frozen=True)
class SourceModel:
    path: str | None = None
    repo: str | None = None
    revision: str | None = None
    primary_file: str | None = None
    sha256: str | None = None
    canonical_ref: str | None = None
    distribution_id: str | None = None
    metadata_artifact_id: str | None = None
    files: tuple[SourceFile, ...] = ()

    @property
    def is_build_host_path(self) -> bool:
        """An absolute path only exists on the machine that built the package, never on serving nodes."""
        return self.path is not None and BUILD_HOST_PATH.match(self.path) is not None


@dataclass(frozen=True)
class Artifact:
    """A file the manifest names. Roles: metadata, common, embeddings, output, layer, projector, other."""

    path: str
    role: str
    layer_index: int | None = None
    part_index: int | None = None
    size: int | None = None
    sha256: str | None = None
    artifact_id: str | None = None
    tensor_count: int | None = None
    tensor_bytes: int | None = None


@dataclass(frozen=True)
class WindowPolicy:
    default: str
    initial_window: int
    min_window: int
    max_window: int
    pipeline_depth: int | None = None


@dataclass(frozen=True)
class ExtensionPolicy:
    max_tokens: int
    initial_tokens: int | None = None
    tail_backoff_proposals: int | None = None


@dataclass(frozen=True)
class NativeMtp:
    prediction_depth: int
    layer_indices: tuple[int, ...]


@dataclass(frozen=True)
class Ngram:
    ngram_min: int
    ngram_max: int
    max_proposal_tokens: int
    history_scope: str


@dataclass(frozen=True)
class Proposer:
    name: str
    type: str  # "" when the declared type is missing or unknown
    native_mtp: NativeMtp | None = None
    ngram: Ngram | None = None
    runtime_refusals: tuple[str, ...] = ()


@dataclass(frozen=True)
class Strategy:
    name: str
    type: str  # "" when the declared type is missing or unknown; native-mtp-n1 reads as native-mtp
    proposer: str | None = None
    primary: str | None = None
    extender: str | None = None
    window_policy: WindowPolicy | None = None
    extension_policy: ExtensionPolicy | None = None
    native_mtp: NativeMtp | None = None  # resolved through proposer/primary when referenced
    runtime_refusals: tuple[str, ...] = ()  # why the runtime refuses it, in plain words

    @property
    def uses_native_mtp(self) -> bool:
        return self.type == NATIVE_MTP or (self.type == COMPOSITE and self.native_mtp is not None)


@dataclass(frozen=True)
class SpeculativeDecoding:
    default: str
    proposers: Mapping[str, Proposer]
    strategies: Mapping[str, Strategy]
    raw: Json

    def strategy(self, name: str) -> Strategy | None:
        """The strategy a name selects; mtp and the legacy native-mtp-n1 select each other."""
        found = self.strategies.get(name)
        if found is None and name in MTP_NAMES:
            found = next((self.strategies[n] for n in sorted(MTP_NAMES) if n in self.strategies), None)
        return found

    @property
    def default_strategy(self) -> Strategy | None:
        return self.strategy(self.default) if self.default else None

    def native_mtp_strategies(self) -> list[Strategy]:
        return [s for s in self.strategies.values() if s.uses_native_mtp]


@dataclass(frozen=True)
class Manifest:
    schema_version: int
    model_id: str | None
    package_id: str | None
    format: str | None
    layer_count: int | None
    activation_width: int | None
    abi_version: str | None  # v1 skippy_abi_version, v2 native_abi_version
    source_model: SourceModel
    artifacts: tuple[Artifact, ...]
    generation: Json | None
    speculative_decoding: SpeculativeDecoding | None
    raw: Json

    def layer_files(self) -> dict[int, str]:
        """Layer index -> the path of its (first part's) file."""
        found: dict[int, tuple[int, str]] = {}
        for a in self.artifacts:
            if a.role == "layer" and a.layer_index is not None:
                rank = (a.part_index or 0, a.path)
                if a.layer_index not in found or rank < found[a.layer_index]:
                    found[a.layer_index] = rank
        return {index: rank[1] for index, rank in sorted(found.items())}

    @property
    def metadata_path(self) -> str | None:
        return next((a.path for a in self.artifacts if a.role == "metadata"), None)


@dataclass(frozen=True)
class ManifestResult:
    manifest: Manifest | None
    problems: list[Problem]

    @property
    def trusted(self) -> bool:
        """Parsed, and no error the schema itself rejects (runtime-only refusals do not count)."""
        return self.manifest is not None and not any(
            p.severity == "error" and p.code not in RUNTIME_CODES for p in self.problems
        )


# --- public entry points ----------------------------------------------------------------------


def parse_manifest(data: bytes) -> ManifestResult:
    """Parse model-package.json bytes; never raises on bad input, every defect becomes a Problem."""
    if len(data) > MAX_MANIFEST_BYTES:
        return _rejected(
            "manifest_too_large",
            f"{MANIFEST_FILE} is {len(data)} bytes, over the {MAX_MANIFEST_BYTES}-byte limit; not parsed.",
            size=len(data),
        )
    try:
        raw, duplicates = _load_json(data)
    except _Rejected as exc:
        return _rejected(exc.code, exc.message)
    if not isinstance(raw, dict):
        return _rejected("invalid_type", f"{MANIFEST_FILE} must hold a JSON object, not {_json_type(raw)}.")
    report = _Report()
    for key in duplicates:
        report.add(
            "duplicate_key", f"{MANIFEST_FILE} repeats the key {_show(key)} inside one object.", key=key
        )
    version = raw.get("schema_version")
    if version is None or not _is_int(version) or version not in (1, 2):
        code = "missing_key" if version is None else "unsupported_schema_version"
        report.add(code, f"{MANIFEST_FILE} schema_version is {_show(version)}; only 1 and 2 are understood.")
        return ManifestResult(None, report.finish())
    manifest = _parse_v1(report, raw) if version == 1 else _parse_v2(report, raw)
    return ManifestResult(manifest, report.finish())


def load_json(data: bytes) -> tuple[Any, str | None]:
    """The JSON value, if it is within the parser's limits (depth, number range); else None and why.

    What a database stores and a page shows must pass here: the parser's limits are what keep a
    manifest nested 950 deep or a number like 1e999999 from failing every later read of it.
    """
    try:
        return _load_json(data)[0], None
    except _Rejected as exc:
        return None, exc.message


def render_manifest(raw: Mapping[str, Any]) -> str:
    """Stable pretty JSON (2-space indent, key order kept, trailing newline), as a writer emits it."""
    text = json.dumps(raw, indent=2, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from \\ud800 escapes survive only as escapes
        text = json.dumps(raw, indent=2)
    return text + "\n"


def unsafe_path_reason(path: str) -> str | None:
    """Why an artifact path could escape the package folder, or None when it is a plain relative path."""
    if not path:
        return "is empty"
    if path.startswith("/") or _DRIVE.match(path):
        return "is absolute"
    if "\\" in path:
        return "contains a backslash"
    if any(ord(ch) < 32 for ch in path):
        return "contains a control character"
    segments = path.split("/")
    if ".." in segments:
        return "climbs out of the package with '..'"
    if "" in segments or "." in segments:
        return "has an empty or '.' segment"
    return None


# --- JSON loading -----------------------------------------------------------------------------


class _Rejected(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _load_json(data: bytes) -> tuple[Any, list[str]]:
    duplicates: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> Json:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen and len(duplicates) < MAX_PROBLEMS:
                duplicates.append(key)
            seen.add(key)
        return dict(items)

    # The number hooks run in Python per number, 4x slower than json's C code on a 16 MiB body of
    # numbers; only a 19-digit run or a 3-digit exponent can leave 64 bits or overflow a float.
    slow = _LONG_NUMBER.search(data) is not None
    try:
        text = data.decode("utf-8")
        value = json.loads(
            text,
            object_pairs_hook=pairs,
            parse_int=_parse_int if slow else None,
            parse_float=_parse_float if slow else None,
            parse_constant=_reject_constant,
        )
    except UnicodeDecodeError as exc:
        raise _Rejected(
            "invalid_json", f"{MANIFEST_FILE} is not UTF-8 (bad byte at offset {exc.start})."
        ) from None
    except RecursionError:
        raise _Rejected("too_deeply_nested", _nesting_message()) from None
    except json.JSONDecodeError as exc:
        raise _Rejected(
            "invalid_json",
            f"{MANIFEST_FILE} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}.",
        ) from None
    if _nesting_exceeds(value, MAX_DEPTH):
        raise _Rejected("too_deeply_nested", _nesting_message())
    return value, duplicates


def _nesting_message() -> str:
    return f"{MANIFEST_FILE} nests objects or arrays more than {MAX_DEPTH} levels deep."


def _parse_int(text: str) -> int:
    # Checked on the digits first: int() of a 100,000-digit string is slow and may raise.
    if len(text.lstrip("-")) > 19 or abs(int(text)) > MAX_INT:
        raise _Rejected(
            "invalid_number", f"{MANIFEST_FILE} holds the integer {text[:24]}..., beyond 64 bits."
        )
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Rejected("invalid_number", f"{MANIFEST_FILE} holds the number {text[:24]}, which overflows.")
    return value


def _reject_constant(name: str) -> NoReturn:
    raise _Rejected("invalid_json", f"{MANIFEST_FILE} holds {name}, which is not JSON.")


def _nesting_exceeds(value: Any, limit: int) -> bool:
    """Level by level; empty containers and scalars are dropped at C speed (16 MiB of [] is 5M lists)."""
    level, depth = ([value] if type(value) in _CONTAINER_TYPES else []), 1
    while level:
        if depth > limit:
            return True
        below: list[Any] = []
        for node in level:
            children = node.values() if isinstance(node, dict) else node
            if not _CONTAINER_TYPES.isdisjoint(map(type, children)):
                if depth == limit:  # a child container, even an empty one, is one level deeper
                    return True
                below.extend(c for c in filter(None, children) if type(c) in _CONTAINER_TYPES)
        level, depth = below, depth + 1
    return False


def _rejected(code: str, message: str, **evidence: Any) -> ManifestResult:
    return ManifestResult(None, [Problem(code, "error", message, evidence)])


# --- reporting and typed reads ----------------------------------------------------------------


class _Report:
    """Collects problems, capped; a dropped error still leaves an error behind."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.dropped = 0
        self.dropped_errors = 0

    def add(self, code: str, message: str, severity: Severity = "error", **evidence: Any) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(Problem(code, severity, message, evidence))
            return
        self.dropped += 1
        self.dropped_errors += severity == "error"

    def finish(self) -> list[Problem]:
        if self.dropped:
            severity: Severity = "error" if self.dropped_errors else "warning"
            message = f"{MANIFEST_FILE} has {self.dropped} more problems that are not listed."
            self.problems.append(
                Problem("too_many_problems", severity, message, {"not_listed": self.dropped})
            )
        return self.problems


@dataclass(frozen=True)
class _Codes:
    missing: str
    type: str
    value: str


_SHAPE = _Codes("missing_key", "invalid_type", "invalid_value")
_GEN = _Codes("invalid_generation_value", "invalid_generation_value", "invalid_generation_value")


class _Reader:
    """Typed reads from one JSON object; each missing or wrong key is reported once, with its path."""

    def __init__(self, report: _Report, obj: Json, where: str, codes: _Codes = _SHAPE) -> None:
        self.report = report
        self.obj = obj
        self.where = where
        self.codes = codes

    def path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(self, code: str, key: str, text: str, **evidence: Any) -> None:
        self.report.add(code, f"{MANIFEST_FILE} {self.path(key)} {text}.", path=self.path(key), **evidence)

    def _get(self, key: str, kind: str, required: bool, missing_code: str | None) -> Any:
        if key not in self.obj:
            if required:
                self.fail(missing_code or self.codes.missing, key, "is missing")
            return None
        value = self.obj[key]
        if _json_type(value) != kind:
            self.fail(self.codes.type, key, f"must be {kind}, not {_json_type(value)}")
            return None
        return value

    def text(self, key: str, required: bool = True, missing_code: str | None = None) -> str | None:
        value: str | None = self._get(key, "a string", required, missing_code)
        return value

    def integer(
        self, key: str, required: bool = True, minimum: int = 0, missing_code: str | None = None
    ) -> int | None:
        value: int | None = self._get(key, "an integer", required, missing_code)
        if value is not None and value < minimum:
            self.fail(self.codes.value, key, f"must be at least {minimum}, not {value}")
            return None
        return value

    def mapping(self, key: str, required: bool = True) -> Json | None:
        value: Json | None = self._get(key, "an object", required, None)
        return value

    def array(self, key: str, required: bool = True) -> list[Any] | None:
        value: list[Any] | None = self._get(key, "an array", required, None)
        return value

    def reject_unknown(self, allowed: frozenset[str]) -> None:
        for key in self.obj:
            if key not in allowed:
                self.fail("unknown_key", key, "is not a schema v2 key, and schema v2 rejects unknown keys")


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    names = {str: "a string", float: "a number", dict: "an object", list: "an array", type(None): "null"}
    return names.get(type(value), "a value")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _show(value: Any) -> str:
    """A short, ASCII-safe rendering of a hostile value for a message."""
    if isinstance(value, dict | list):
        return _json_type(value)
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _name(name: str) -> str:
    return name if _IDENTIFIER.fullmatch(name) and len(name) <= 64 else _show(name)


def describe_layers(indices: list[int]) -> str:
    """'layer 40' or 'layers 3-5, 9' (at most ten ranges)."""
    runs: list[list[int]] = []
    for index in sorted(set(indices)):
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in runs[:10]]
    more = ", ..." if len(runs) > 10 else ""
    noun = "layer" if len(indices) == 1 else "layers"
    return f"{noun} {', '.join(parts)}{more}"


def _digest(r: _Reader, key: str, lowercase: bool, required: bool = True) -> str | None:
    value = r.text(key, required=required)
    if value is None:
        return None
    pattern = _LOWER_HEX64 if lowercase else _HEX64
    if not pattern.fullmatch(value):
        rule = "64 lowercase hex digits" if lowercase else "64 hex digits"
        r.fail("invalid_digest", key, f"must be {rule}, not {_show(value)}")
        return None
    return value.lower()


def _safe_path(r: _Reader, key: str) -> str | None:
    value = r.text(key)
    if value is None:
        return None
    reason = unsafe_path_reason(value)
    if reason:
        r.fail("unsafe_artifact_path", key, f"{_show(value)} {reason}; paths must stay inside the package")
        return None
    return value


def _as_object(report: _Report, value: Any, where: str, codes: _Codes = _SHAPE) -> Json | None:
    if isinstance(value, dict):
        return value
    report.add(codes.type, f"{MANIFEST_FILE} {where} must be an object, not {_json_type(value)}.", path=where)
    return None


# --- shared by both schemas -------------------------------------------------------------------


def _layer_count(top: _Reader) -> int | None:
    value = top.integer("layer_count", minimum=1)
    if value is not None and value > MAX_LAYER_COUNT:
        top.fail(
            "invalid_value", "layer_count", f"is {value}, more than the {MAX_LAYER_COUNT} this audit accepts"
        )
        return None
    return value


_SOURCE_V2_KEYS = frozenset(
    {
        "sha256",
        "metadata_artifact_id",
        "repo",
        "revision",
        "primary_file",
        "canonical_ref",
        "distribution_id",
        "files",
    }
)


def _parse_source(report: _Report, top: _Reader, v2: bool) -> SourceModel:
    body = top.mapping("source_model")
    if body is None:
        return SourceModel()
    r = _Reader(report, body, "source_model")
    if v2:
        r.reject_unknown(_SOURCE_V2_KEYS)
    files = _source_files(report, r, v2)
    primary = r.text("primary_file", required=False)
    if primary is not None and files and primary not in {f.path for f in files}:
        r.fail("unknown_source_file", "primary_file", f"{_show(primary)} is not one of source_model.files")
    return SourceModel(
        path=r.text("path", required=not v2),
        repo=r.text("repo", required=False),
        revision=r.text("revision", required=False),
        primary_file=primary,
        sha256=_digest(r, "sha256", lowercase=v2),
        canonical_ref=r.text("canonical_ref", required=False),
        distribution_id=r.text("distribution_id", required=False),
        metadata_artifact_id=r.text("metadata_artifact_id") if v2 else None,
        files=files,
    )


def _source_files(report: _Report, r: _Reader, v2: bool) -> tuple[SourceFile, ...]:
    entries = r.array("files", required=False)
    if entries is None:
        return ()
    if not entries and v2:
        r.fail("invalid_value", "files", "is empty; leave it out or list the source files")
    size_key = "byte_size" if v2 else "size_bytes"
    found: list[SourceFile] = []
    for i, entry in enumerate(entries):
        body = _as_object(report, entry, f"source_model.files[{i}]")
        if body is None:
            continue
        fr = _Reader(report, body, f"source_model.files[{i}]")
        if v2:
            fr.reject_unknown(frozenset({"path", size_key, "sha256"}))
        path = _safe_path(fr, "path")
        size, sha = fr.integer(size_key, required=v2), _digest(fr, "sha256", lowercase=v2, required=v2)
        if path is not None:
            found.append(SourceFile(path, size, sha))
    return tuple(found)


def _check_layers(report: _Report, artifacts: list[Artifact], layer_count: int | None, where: str) -> None:
    seen: dict[tuple[int, int | None], str] = {}
    for a in artifacts:
        if a.role != "layer" or a.layer_index is None:
            continue
        index = a.layer_index
        if layer_count is not None and index >= layer_count:
            report.add(
                "layer_out_of_bounds",
                f"{MANIFEST_FILE} names {a.path} as layer {index}, but layer_count is {layer_count}.",
                path=a.path,
                layer_index=index,
            )
        key = (index, a.part_index)
        if key in seen:
            report.add(
                "duplicate_layer",
                f"{MANIFEST_FILE} names layer {index} twice: {seen[key]} and {a.path}.",
                layer_index=index,
                paths=[seen[key], a.path],
            )
        seen[key] = a.path
    if layer_count is not None:
        present = {index for index, _ in seen}
        missing = [i for i in range(layer_count) if i not in present]
        if missing:
            report.add(
                "missing_layer",
                f"{MANIFEST_FILE} {where} has no file for {describe_layers(missing)} (of {layer_count}).",
                layer_indices=missing[:100],
            )


# --- schema v1 --------------------------------------------------------------------------------


def _parse_v1(report: _Report, raw: Json) -> Manifest:
    top = _Reader(report, raw, "")
    layer_count = _layer_count(top)
    fmt = top.text("format")
    if fmt is not None and fmt != "layer-package":
        top.fail("invalid_value", "format", f'must be "layer-package" in schema 1, not {_show(fmt)}')
    artifacts = _v1_artifacts(report, top, layer_count)
    generation, speculative = _parse_generation(report, raw, layer_count, strict=False)
    top.integer("created_at_unix_secs", required=False)
    return Manifest(
        schema_version=1,
        model_id=top.text("model_id"),
        package_id=None,
        format=fmt,
        layer_count=layer_count,
        activation_width=top.integer("activation_width", minimum=1, missing_code="missing_activation_width"),
        abi_version=top.text("skippy_abi_version", missing_code="missing_skippy_abi_version"),
        source_model=_parse_source(report, top, v2=False),
        artifacts=tuple(artifacts),
        generation=generation,
        speculative_decoding=speculative,
        raw=raw,
    )


def _v1_artifacts(report: _Report, top: _Reader, layer_count: int | None) -> list[Artifact]:
    found: list[Artifact] = []
    shared = top.mapping("shared") or {}
    for role in ("metadata", "embeddings", "output") if "shared" in top.obj else ():
        if role not in shared:
            report.add(
                "missing_artifact", f"{MANIFEST_FILE} has no shared.{role} artifact.", path=f"shared.{role}"
            )
            continue
        found += _v1_artifact(report, shared[role], f"shared.{role}", role)
    for i, entry in enumerate(top.array("layers") or []):
        found += _v1_artifact(report, entry, f"layers[{i}]", "layer")
    for i, entry in enumerate(top.array("projectors", required=False) or []):
        found += _v1_artifact(report, entry, f"projectors[{i}]", "projector")
    _check_layers(report, found, layer_count, "layers[]")
    return found


def _v1_artifact(report: _Report, entry: Any, where: str, role: str) -> list[Artifact]:
    body = _as_object(report, entry, where)
    if body is None:
        return []
    r = _Reader(report, body, where)
    is_layer = role == "layer"
    index = r.integer("layer_index") if is_layer else None
    path = _safe_path(r, "path")
    size = r.integer("artifact_bytes", minimum=1)
    count = r.integer("tensor_count", required=is_layer)
    nbytes = r.integer("tensor_bytes", required=is_layer)
    if count is not None and nbytes is not None and (count == 0) != (nbytes == 0):
        r.fail(
            "invalid_value",
            "tensor_bytes",
            f"is {nbytes} with tensor_count {count}; both are 0 or neither is",
        )
    sha = _digest(r, "sha256", lowercase=False)
    if path is None or (is_layer and index is None):
        return []
    return [Artifact(path, role, index, None, size, sha, None, count, nbytes)]


# --- schema v2 --------------------------------------------------------------------------------

_V2_KEYS = frozenset(
    {
        "schema_version",
        "package_id",
        "model_id",
        "source_model",
        "format",
        "layer_count",
        "artifact_catalog",
        "sidecars",
        "generation",
        "native_abi_version",
        "generator_version",
        "created_at_unix_secs",
        "publisher_metadata",
        "publisher_defaults",
    }
)
_ENTRY_KEYS = frozenset({"id", "path", "byte_size", "sha256"})


def _parse_v2(report: _Report, raw: Json) -> Manifest:
    top = _Reader(report, raw, "")
    top.reject_unknown(_V2_KEYS)
    package_id = top.text("package_id")
    if package_id is not None and not _PACKAGE_ID.fullmatch(package_id):
        top.fail(
            "invalid_digest",
            "package_id",
            f'must be "sha256:" and 64 lowercase hex digits, not {_show(package_id)}',
        )
        package_id = None
    fmt = top.text("format")
    if fmt is not None and fmt != "gguf":
        top.fail("invalid_value", "format", f'must be "gguf" in schema 2, not {_show(fmt)}')
    layer_count = _layer_count(top)
    source = _parse_source(report, top, v2=True)
    artifacts = _v2_artifacts(report, top, source.metadata_artifact_id, layer_count)
    generation, speculative = _parse_generation(report, raw, layer_count, strict=True)
    top.text("generator_version", required=False)
    top.integer("created_at_unix_secs", required=False)
    return Manifest(
        schema_version=2,
        model_id=top.text("model_id"),
        package_id=package_id,
        format=fmt,
        layer_count=layer_count,
        activation_width=None,
        abi_version=top.text("native_abi_version"),
        source_model=source,
        artifacts=tuple(artifacts),
        generation=generation,
        speculative_decoding=speculative,
        raw=raw,
    )


def _v2_artifacts(
    report: _Report, top: _Reader, metadata_id: str | None, layer_count: int | None
) -> list[Artifact]:
    sidecar_ids = _sidecar_ids(report, top)
    found: list[Artifact] = []
    for i, entry in enumerate(_catalog_entries(report, top)):
        found += _v2_entry(report, entry, f"artifact_catalog.entries[{i}]", metadata_id, sidecar_ids)
    ids: dict[str, str] = {}
    for a in found:
        assert a.artifact_id is not None
        if a.artifact_id in ids:
            report.add(
                "invalid_identifier",
                f"{MANIFEST_FILE} artifact_catalog uses id {_show(a.artifact_id)} twice: "
                f"{ids[a.artifact_id]} and {a.path}.",
                artifact_id=a.artifact_id,
            )
        ids.setdefault(a.artifact_id, a.path)
    _check_metadata_artifact(report, metadata_id, ids)
    for artifact_id in sorted(sidecar_ids - ids.keys()):
        report.add(
            "missing_artifact",
            f"{MANIFEST_FILE} sidecars name artifact {_show(artifact_id)}, absent from artifact_catalog.",
            artifact_id=artifact_id,
        )
    _check_layers(report, found, layer_count, "artifact_catalog")
    return found


def _catalog_entries(report: _Report, top: _Reader) -> list[Any]:
    catalog = top.mapping("artifact_catalog")
    if catalog is None:
        return []
    r = _Reader(report, catalog, "artifact_catalog")
    r.reject_unknown(frozenset({"entries"}))
    entries = r.array("entries")
    if entries == []:
        r.fail("invalid_value", "entries", "is empty; a package has at least its metadata artifact")
    return entries or []


def _v2_entry(
    report: _Report, entry: Any, where: str, metadata_id: str | None, sidecars: set[str]
) -> list[Artifact]:
    body = _as_object(report, entry, where)
    if body is None:
        return []
    r = _Reader(report, body, where)
    r.reject_unknown(_ENTRY_KEYS)
    artifact_id = r.text("id")
    if artifact_id is not None and not _IDENTIFIER.fullmatch(artifact_id):
        r.fail(
            "invalid_identifier", "id", f"{_show(artifact_id)} may only use A-Z, a-z, 0-9, '.', '_' and '-'"
        )
        artifact_id = None
    path = _safe_path(r, "path")
    size = r.integer("byte_size", minimum=1)
    sha = _digest(r, "sha256", lowercase=True)
    if artifact_id is None or path is None:
        return []
    role, index, part = _v2_role(artifact_id, path, metadata_id, sidecars)
    return [Artifact(path, role, index, part, size, sha, artifact_id)]


def _v2_role(
    artifact_id: str, path: str, metadata_id: str | None, sidecars: set[str]
) -> tuple[str, int | None, int | None]:
    if artifact_id == metadata_id:
        return "metadata", None, None
    if artifact_id in sidecars:
        return "projector", None, None
    if match := LAYER_PATH.fullmatch(path):
        return "layer", int(match[1]), int(match[2]) if match[2] else None
    if path == "shared/common.gguf":
        return "common", None, None
    return "other", None, None


def _sidecar_ids(report: _Report, top: _Reader) -> set[str]:
    ids: set[str] = set()
    for i, entry in enumerate(top.array("sidecars", required=False) or []):
        body = _as_object(report, entry, f"sidecars[{i}]")
        if body is None:
            continue
        r = _Reader(report, body, f"sidecars[{i}]")
        r.reject_unknown(frozenset({"kind", "artifact_id", "name"}))
        kind, artifact_id = r.text("kind"), r.text("artifact_id")
        r.text("name", required=False)
        if kind is not None and kind != "mmproj":
            r.fail("invalid_value", "kind", f'must be "mmproj", not {_show(kind)}')
        if artifact_id is not None:
            ids.add(artifact_id)
    return ids


def _check_metadata_artifact(report: _Report, metadata_id: str | None, ids: Mapping[str, str]) -> None:
    if metadata_id is None:
        return
    path = ids.get(metadata_id)
    if path is None:
        problem = "which artifact_catalog does not list"
    elif not path.endswith(".gguf"):
        problem = f"whose file {path} is not a GGUF"
    else:
        return
    report.add(
        "invalid_metadata_artifact",
        f"{MANIFEST_FILE} source_model.metadata_artifact_id names {_show(metadata_id)}, {problem}.",
        artifact_id=metadata_id,
    )


# --- generation.speculative_decoding ----------------------------------------------------------

_SD = "generation.speculative_decoding"


@dataclass(frozen=True)
class _Gen:
    report: _Report
    layer_count: int | None
    strict: bool

    def reader(self, body: Json, where: str, allowed: frozenset[str] | None = None) -> _Reader:
        r = _Reader(self.report, body, where, _GEN)
        if self.strict and allowed is not None:
            r.reject_unknown(allowed)
        return r


def _parse_generation(
    report: _Report, raw: Json, layer_count: int | None, strict: bool
) -> tuple[Json | None, SpeculativeDecoding | None]:
    if "generation" not in raw:
        return None, None
    generation = raw["generation"]
    if not isinstance(generation, dict):
        report.add(
            "invalid_type",
            f"{MANIFEST_FILE} generation must be an object (or absent), not {_json_type(generation)}.",
            path="generation",
        )
        return None, None
    gen = _Gen(report, layer_count, strict)
    r = gen.reader(generation, "generation", frozenset({"speculative_decoding", "request_defaults"}))
    body = r.mapping("speculative_decoding", required=False)
    return generation, _parse_speculative(gen, body) if body is not None else None


def _parse_speculative(gen: _Gen, body: Json) -> SpeculativeDecoding:
    r = gen.reader(body, _SD, frozenset({"default", "proposers", "strategies"}))
    default = r.text("default")
    proposers: dict[str, Proposer] = {}
    for name, value in (r.mapping("proposers", required=False) or {}).items():
        if (p := _parse_proposer(gen, name, value)) is not None:
            proposers[name] = p
    strategies: dict[str, Strategy] = {}
    for name, value in (r.mapping("strategies", required=False) or {}).items():
        if (s := _parse_strategy(gen, name, value, proposers)) is not None:
            strategies[name] = s
    result = SpeculativeDecoding(default or "", proposers, strategies, body)
    if default is not None:
        _check_default(r, result)
    return result


def _check_default(r: _Reader, sd: SpeculativeDecoding) -> None:
    if not sd.default:
        r.fail("invalid_generation_value", "default", "is empty; it must name a strategy")
    elif sd.default == "disabled":
        r.fail(
            "invalid_generation_value",
            "default",
            'is "disabled", an operator setting, never a package strategy',
        )
    elif sd.strategy(sd.default) is None:
        declared = ", ".join(_name(n) for n in sd.strategies) or "none"
        r.fail(
            "unknown_strategy",
            "default",
            f"names {_show(sd.default)}, but the declared strategies are {declared}",
        )


def _read_type(r: _Reader, allowed: frozenset[str], noun: str) -> str:
    kind = r.text("type")
    if kind is None:
        return ""
    if kind == LEGACY_MTP_NAME:
        return NATIVE_MTP
    if kind not in allowed:
        rule = "a kebab-case type" if not _KEBAB.fullmatch(kind) else f"a known {noun} type"
        r.fail(
            "invalid_generation_value", "type", f"{_show(kind)} is not {rule} ({', '.join(sorted(allowed))})"
        )
        return ""
    return kind


def _parse_proposer(gen: _Gen, name: str, value: Any) -> Proposer | None:
    where = f"{_SD}.proposers.{_name(name)}"
    body = _as_object(gen.report, value, where, _GEN)
    if body is None:
        return None
    kind = _read_type(gen.reader(body, where), PROPOSER_TYPES, "proposer")
    if kind == NATIVE_MTP:
        r = gen.reader(body, where, frozenset({"type", "prediction_depth", "layer_indices"}))
        mtp, refusals = _read_mtp(gen, r)
        return Proposer(name, kind, native_mtp=mtp, runtime_refusals=refusals)
    if kind in NGRAM_TYPES:
        allowed = frozenset({"type", "ngram_min", "ngram_max", "max_proposal_tokens", "history_scope"})
        ngram, refusals = _read_ngram(gen, gen.reader(body, where, allowed), kind)
        return Proposer(name, kind, ngram=ngram, runtime_refusals=refusals)
    return Proposer(name, kind)


def _read_mtp(gen: _Gen, r: _Reader) -> tuple[NativeMtp | None, tuple[str, ...]]:
    depth = r.integer("prediction_depth", minimum=1)
    indices = _read_layer_indices(gen, r)
    refusals: tuple[str, ...] = ()
    if depth is not None and depth != 1:
        r.fail(
            "unsupported_generation_value",
            "prediction_depth",
            f"is {depth}, but the runtime only runs prediction_depth 1",
            value=depth,
        )
        refusals = (f"{r.path('prediction_depth')} is {depth}; the runtime only runs 1",)
    if depth is None or indices is None:
        return None, refusals
    return NativeMtp(depth, indices), refusals


def _read_layer_indices(gen: _Gen, r: _Reader) -> tuple[int, ...] | None:
    values = r.array("layer_indices")
    if values is None:
        return None
    if not values:
        r.fail("invalid_generation_value", "layer_indices", "is empty; it must name the MTP blocks")
        return None
    good = [v for v in values if _is_int(v) and v >= 0]
    if len(good) != len(values):
        r.fail("invalid_generation_value", "layer_indices", "must hold only block indices (integers >= 0)")
    if len(set(good)) != len(good):
        r.fail("invalid_generation_value", "layer_indices", "names a block twice")
    limit = gen.layer_count
    outside = [v for v in good if limit is not None and v >= limit]
    if outside:
        r.fail(
            "layer_out_of_bounds",
            "layer_indices",
            f"names {describe_layers(outside)}, but layer_count is {limit}",
            layer_indices=outside[:100],
        )
    return tuple(dict.fromkeys(good)) if good else None


def _read_ngram(gen: _Gen, r: _Reader, kind: str) -> tuple[Ngram | None, tuple[str, ...]]:
    low, high = r.integer("ngram_min", minimum=1), r.integer("ngram_max", minimum=1)
    tokens, scope = r.integer("max_proposal_tokens", minimum=1), r.text("history_scope")
    if low is not None and high is not None and low > high:
        r.fail("invalid_generation_value", "ngram_min", f"is {low}, above ngram_max {high}")
    refusals = _ngram_refusals(kind, low, high, scope)
    for key, text in refusals:
        r.fail("unsupported_generation_value", key, text)
    reasons = tuple(f"{r.path(key)} {text}" for key, text in refusals)
    if low is None or high is None or tokens is None or scope is None:
        return None, reasons
    return Ngram(low, high, tokens, scope), reasons


def _ngram_refusals(kind: str, low: int | None, high: int | None, scope: str | None) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if kind == "ngram-cache" and high is not None and high > 4:
        found.append(("ngram_max", f"is {high}, but the runtime allows at most 4 for ngram-cache"))
    if kind == "ngram-suffix" and low is not None and low < 3:
        found.append(("ngram_min", f"is {low}, but the runtime needs at least 3 for ngram-suffix"))
    if kind == "ngram-suffix" and high is not None and high > 64:
        found.append(("ngram_max", f"is {high}, but the runtime allows at most 64 for ngram-suffix"))
    if scope is not None and scope != "request":
        found.append(("history_scope", f'is {_show(scope)}, but the runtime only supports "request"'))
    return found


def _parse_strategy(gen: _Gen, name: str, value: Any, proposers: Mapping[str, Proposer]) -> Strategy | None:
    where = f"{_SD}.strategies.{_name(name)}"
    body = _as_object(gen.report, value, where, _GEN)
    if body is None:
        return None
    r = gen.reader(body, where)
    if name == "disabled":
        gen.report.add(
            "invalid_generation_value",
            f'{MANIFEST_FILE} {where} is named "disabled", an operator setting, never a package strategy.',
            path=where,
        )
    kind = _read_type(r, STRATEGY_TYPES, "strategy")
    if kind == NATIVE_MTP:
        return _native_strategy(gen, name, body, where, proposers)
    if kind in NGRAM_TYPES:
        r = gen.reader(body, where, frozenset({"type", "proposer"}))
        ref = _resolve(r, "proposer", proposers, frozenset({kind}))
        refusals = ref.runtime_refusals if ref else ()
        return Strategy(name, kind, proposer=ref.name if ref else None, runtime_refusals=refusals)
    if kind == COMPOSITE:
        return _composite_strategy(gen, name, body, where, proposers)
    return Strategy(name, kind)


def _native_strategy(
    gen: _Gen, name: str, body: Json, where: str, proposers: Mapping[str, Proposer]
) -> Strategy:
    allowed = frozenset({"type", "proposer", "prediction_depth", "layer_indices", "window_policy"})
    r = gen.reader(body, where, allowed)
    window = _read_window(gen, r)
    has_ref = "proposer" in body
    has_inline = "prediction_depth" in body or "layer_indices" in body
    if has_ref and has_inline:
        r.fail(
            "invalid_generation_value",
            "proposer",
            "is set together with inline prediction_depth/layer_indices; use one",
        )
        return Strategy(name, NATIVE_MTP, window_policy=window)
    if has_ref:
        ref = _resolve(r, "proposer", proposers, frozenset({NATIVE_MTP}))
        if ref is None:
            return Strategy(name, NATIVE_MTP, window_policy=window)
        return Strategy(
            name,
            NATIVE_MTP,
            proposer=ref.name,
            window_policy=window,
            native_mtp=ref.native_mtp,
            runtime_refusals=ref.runtime_refusals,
        )
    if has_inline:
        mtp, refusals = _read_mtp(gen, r)
        return Strategy(name, NATIVE_MTP, window_policy=window, native_mtp=mtp, runtime_refusals=refusals)
    r.fail(
        "invalid_generation_value", "proposer", "is missing, and so are prediction_depth and layer_indices"
    )
    return Strategy(name, NATIVE_MTP, window_policy=window)


def _composite_strategy(
    gen: _Gen, name: str, body: Json, where: str, proposers: Mapping[str, Proposer]
) -> Strategy:
    allowed = frozenset({"type", "primary", "extender", "extension_policy", "window_policy"})
    r = gen.reader(body, where, allowed)
    primary = _resolve(r, "primary", proposers, frozenset({NATIVE_MTP}))
    extender = _resolve(r, "extender", proposers, NGRAM_TYPES)
    extension = _read_extension(gen, r)
    window = _read_window(gen, r)
    refusals = (primary.runtime_refusals if primary else ()) + (extender.runtime_refusals if extender else ())
    mtp = primary.native_mtp if primary and primary.type == NATIVE_MTP else None
    return Strategy(
        name,
        COMPOSITE,
        primary=primary.name if primary else None,
        extender=extender.name if extender else None,
        window_policy=window,
        extension_policy=extension,
        native_mtp=mtp,
        runtime_refusals=refusals,
    )


def _resolve(
    r: _Reader, key: str, proposers: Mapping[str, Proposer], allowed: frozenset[str]
) -> Proposer | None:
    ref = r.text(key)
    if ref is None:
        return None
    found = proposers.get(ref)
    if found is None:
        r.fail("unknown_proposer", key, f"names {_show(ref)}, which {_SD}.proposers does not declare")
    elif found.type and found.type not in allowed:
        want = " or ".join(sorted(allowed))
        r.fail(
            "invalid_generation_value",
            key,
            f"names proposer {_name(ref)} of type {found.type}; it must be {want}",
        )
        return None
    return found


def _read_extension(gen: _Gen, r: _Reader) -> ExtensionPolicy | None:
    body = r.mapping("extension_policy")
    if body is None:
        return None
    allowed = frozenset({"max_tokens", "initial_tokens", "tail_backoff_proposals"})
    e = gen.reader(body, r.path("extension_policy"), allowed)
    max_tokens = e.integer("max_tokens", minimum=1)
    initial = e.integer("initial_tokens", required=False)
    backoff = e.integer("tail_backoff_proposals", required=False)
    return ExtensionPolicy(max_tokens, initial, backoff) if max_tokens is not None else None


def _read_window(gen: _Gen, r: _Reader) -> WindowPolicy | None:
    body = r.mapping("window_policy", required=False)
    if body is None:
        return None
    allowed = frozenset({"default", "initial_window", "min_window", "max_window", "pipeline_depth"})
    w = gen.reader(body, r.path("window_policy"), allowed)
    mode = w.text("default")
    if mode is not None and mode not in ("fixed", "adaptive"):
        w.fail("invalid_generation_value", "default", f'must be "fixed" or "adaptive", not {_show(mode)}')
    initial, low, high = (w.integer(k, minimum=1) for k in ("initial_window", "min_window", "max_window"))
    depth = w.integer("pipeline_depth", required=False, minimum=1)
    if initial is None or low is None or high is None or mode is None:
        return None
    if not low <= initial <= high:
        w.fail(
            "invalid_generation_value",
            "initial_window",
            f"must lie within min_window..max_window, but {low} <= {initial} <= {high} does not hold",
        )
    return WindowPolicy(mode, initial, low, high, depth)
