"""Pure: the typed manifest (dataclasses), the vocabulary and limits both schemas share; no Django, no I/O."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

MAX_DEPTH = 64  # a real manifest nests 6 levels deep (generation...window_policy.default)
MAX_PROBLEMS = 200  # a hostile manifest must not turn into millions of stored problems
MAX_INT = 2**63 - 1

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")  # worst first
Json = dict[str, Any]

NATIVE_MTP = "native-mtp"
COMPOSITE = "composite"
NGRAM_TYPES = frozenset({"ngram-cache", "ngram-suffix"})
# Explicit speculative.strategy = mtp selects only a strategy keyed exactly "mtp" (SPEC:749-751).
# Old v1 writers named it native-mtp-n1, which explicit mtp does not select.
MTP_NAME = "mtp"
LEGACY_MTP_NAME = "native-mtp-n1"

BUILD_HOST_PATH = re.compile(r"(?:/|[A-Za-z]:[\\/]|\\\\)")


@dataclass(frozen=True)
class Problem:
    """One finding: a domain code, a severity and one plain sentence naming the file, key or layer."""

    code: str
    severity: Severity
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> str | None:
        """The manifest key the finding is about, in mesh-llm's own path notation when it has one."""
        found = self.evidence.get("path")
        return found if isinstance(found, str) else None

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "evidence": self.evidence,
        }

    @classmethod
    def from_json(cls, doc: Any) -> Problem | None:
        """A stored problem read back (a page shows what an older or capped audit holds, never fails)."""
        if not isinstance(doc, Mapping) or not isinstance(doc.get("code"), str):
            return None
        severity = doc.get("severity")
        message, evidence = doc.get("message"), doc.get("evidence")
        return cls(
            code=doc["code"],
            severity=severity if severity in SEVERITIES else "info",
            message=message if isinstance(message, str) else "",
            evidence=dict(evidence) if isinstance(evidence, Mapping) else {},
        )

    def evidence_lines(self) -> list[tuple[str, str]]:
        """(key, text) of each piece of evidence: a string as it is, anything else as compact JSON."""
        return [
            (
                str(key),
                value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str),
            )
            for key, value in self.evidence.items()
        ]


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


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
        """The strategy declared under exactly this key (mesh-llm matches names literally)."""
        return self.strategies.get(name)

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
    generator_version: str | None = None
    computed_package_id: str | None = None  # v2 only: what mesh-llm computes from the file
    request_defaults: bool = False
    publisher_metadata: bool = False

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
    raw: Json | None = None  # the top-level object, when the bytes were a JSON object (parsed or not)

    @property
    def trusted(self) -> bool:
        """Parsed, and mesh-llm's validator accepts it (meshdash's own findings are never errors)."""
        return self.manifest is not None and not any(p.severity == "error" for p in self.problems)
