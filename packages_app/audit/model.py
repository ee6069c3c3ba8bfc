"""Pure: the audit's result types and verdict vocabulary; no Django, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packages_app.audit import readback as rb
from packages_app.manifest import (
    Json,
    Problem,
    Severity,
)
from packages_app.verdicts import is_consistent

KINDS = ("attention", "ssm", "moe", "ffn", "nextn")
MAX_BLOCKS = 4096  # far above any real model (DeepSeek-V3: 61, Qwen3-235B: 94); bounds hostile headers


def verdict_is_consistent(verdict: str) -> bool:
    return is_consistent(verdict)


def problem(code: str, severity: Severity, message: str, **evidence: Any) -> Problem:
    return Problem(code, severity, message, evidence)


# --- result types -----------------------------------------------------------------------------


@dataclass(frozen=True)
class FileInfo:
    """One file as the Hub lists it at the revision."""

    path: str
    size: int
    lfs_sha256: str | None = None


@dataclass(frozen=True)
class Block:
    index: int
    file: str | None
    tensor_count: int
    nbytes: int
    kinds: tuple[str, ...]
    mtp: bool

    def to_json(self) -> Json:
        return {
            "index": self.index,
            "file": self.file,
            "tensor_count": self.tensor_count,
            "bytes": self.nbytes,
            "kinds": list(self.kinds),
            "mtp": self.mtp,
        }

    @classmethod
    def from_json(cls, doc: Any) -> Block | None:
        d = rb.mapping(doc)
        index = rb.integer(d.get("index"))
        if index is None:
            return None
        return cls(
            index=index,
            file=rb.optional_text(d.get("file")),
            tensor_count=rb.integer(d.get("tensor_count")) or 0,
            nbytes=rb.integer(d.get("bytes")) or 0,
            kinds=rb.texts(d.get("kinds")),
            mtp=rb.flag(d.get("mtp")),
        )


@dataclass(frozen=True)
class Detected:
    architecture: str | None = None
    block_count: int | None = None
    nextn_predict_layers: int | None = None
    mtp_blocks: tuple[int, ...] = ()
    key_and_tensors_agree: bool = True
    expected_nextn_tensors: tuple[str, ...] = ()
    missing_nextn_tensors: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    blocks: tuple[Block, ...] = ()
    # Not in to_json: what the messages need.
    key_blocks: tuple[int, ...] = ()  # [block_count - nextn, block_count)
    nextn_found: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    evidence: Mapping[int, str] = field(default_factory=dict)  # block -> header that listed its tensors
    directory: str | None = None  # the header describing every tensor (v2 shared/metadata.gguf)
    uninspected: tuple[int, ...] = ()
    # An MTP draft sidecar: the GGUF beside the model whose name holds "draft" or "eagle", which mesh-llm's
    # draft_selection_policy auto picks (docs/rules.md section 6b); its tensors are not the package's blocks.
    sidecar: str | None = None
    sidecar_mtp_blocks: tuple[int, ...] = ()  # the blocks of the sidecar holding NextN tensors

    @property
    def has_mtp_weights(self) -> bool:
        return bool(self.mtp_blocks)

    def file(self, index: int) -> str | None:
        return next((b.file for b in self.blocks if b.index == index), None)

    def to_json(self) -> Json:
        return {
            "architecture": self.architecture,
            "block_count": self.block_count,
            "nextn_predict_layers": self.nextn_predict_layers,
            "mtp_blocks": list(self.mtp_blocks),
            "has_mtp_weights": self.has_mtp_weights,
            "key_and_tensors_agree": self.key_and_tensors_agree,
            "expected_nextn_tensors": list(self.expected_nextn_tensors),
            "missing_nextn_tensors": {str(k): list(v) for k, v in self.missing_nextn_tensors.items()},
            "blocks": [b.to_json() for b in self.blocks],
            "mtp_sidecar": {"path": self.sidecar, "mtp_blocks": list(self.sidecar_mtp_blocks)}
            if self.sidecar
            else None,
        }

    @classmethod
    def from_json(cls, doc: Any) -> Detected:
        """What to_json stored; ``has_mtp_weights`` is recomputed from the blocks it names."""
        d = rb.mapping(doc)
        missing = {
            int(key): rb.texts(names)
            for key, names in rb.mapping(d.get("missing_nextn_tensors")).items()
            if key.isdigit()
        }
        sidecar = rb.mapping(d.get("mtp_sidecar"))
        return cls(
            architecture=rb.optional_text(d.get("architecture")),
            block_count=rb.integer(d.get("block_count")),
            nextn_predict_layers=rb.integer(d.get("nextn_predict_layers")),
            mtp_blocks=rb.ints(d.get("mtp_blocks")),
            key_and_tensors_agree=rb.flag(d.get("key_and_tensors_agree"), default=True),
            expected_nextn_tensors=rb.texts(d.get("expected_nextn_tensors")),
            missing_nextn_tensors=missing,
            blocks=rb.each(d.get("blocks"), Block.from_json),
            sidecar=rb.optional_text(sidecar.get("path")),
            sidecar_mtp_blocks=rb.ints(sidecar.get("mtp_blocks")),
        )


@dataclass(frozen=True)
class Declared:
    present: bool = False
    default_strategy: str | None = None
    uses_native_mtp: bool = False
    layer_indices: tuple[int, ...] = ()
    prediction_depth: int | None = None
    strategies: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> Json:
        return {
            "present": self.present,
            "default_strategy": self.default_strategy,
            "uses_native_mtp": self.uses_native_mtp,
            "layer_indices": list(self.layer_indices),
            "prediction_depth": self.prediction_depth,
            "strategies": dict(self.strategies),
        }

    @classmethod
    def from_json(cls, doc: Any) -> Declared:
        d = rb.mapping(doc)
        return cls(
            present=rb.flag(d.get("present")),
            default_strategy=rb.optional_text(d.get("default_strategy")),
            uses_native_mtp=rb.flag(d.get("uses_native_mtp")),
            layer_indices=rb.ints(d.get("layer_indices")),
            prediction_depth=rb.integer(d.get("prediction_depth")),
            strategies={k: v for k, v in rb.mapping(d.get("strategies")).items() if isinstance(v, str)},
        )


@dataclass(frozen=True)
class FileCheck:
    path: str
    role: str
    manifest_size: int | None
    manifest_sha256: str | None
    hub_size: int | None
    hub_sha256: str | None
    status: str  # match | sha256_mismatch | size_mismatch | missing_on_hub | unlisted

    def to_json(self) -> Json:
        return {
            "path": self.path,
            "role": self.role,
            "manifest_size": self.manifest_size,
            "manifest_sha256": self.manifest_sha256,
            "hub_size": self.hub_size,
            "hub_sha256": self.hub_sha256,
            "status": self.status,
        }

    @classmethod
    def from_json(cls, doc: Any) -> FileCheck | None:
        d = rb.mapping(doc)
        path = rb.optional_text(d.get("path"))
        if path is None:
            return None
        return cls(
            path=path,
            role=rb.text(d.get("role")),
            manifest_size=rb.integer(d.get("manifest_size")),
            manifest_sha256=rb.optional_text(d.get("manifest_sha256")),
            hub_size=rb.integer(d.get("hub_size")),
            hub_sha256=rb.optional_text(d.get("hub_sha256")),
            status=rb.text(d.get("status")),
        )


@dataclass(frozen=True)
class Provenance:
    revision: str | None
    manifest_sha256: str | None
    source_model_path: str | None
    build_host_path: bool
    files: tuple[FileCheck, ...]

    def to_json(self) -> Json:
        return {
            "revision": self.revision,
            "manifest_sha256": self.manifest_sha256,
            "source_model_path": self.source_model_path,
            "build_host_path": self.build_host_path,
            "files": [f.to_json() for f in self.files],
        }

    @classmethod
    def from_json(cls, doc: Any) -> Provenance:
        d = rb.mapping(doc)
        return cls(
            revision=rb.optional_text(d.get("revision")),
            manifest_sha256=rb.optional_text(d.get("manifest_sha256")),
            source_model_path=rb.optional_text(d.get("source_model_path")),
            build_host_path=rb.flag(d.get("build_host_path")),
            files=rb.each(d.get("files"), FileCheck.from_json),
        )

    def by_path(self) -> dict[str, FileCheck]:
        return {f.path: f for f in self.files}


@dataclass(frozen=True)
class ResolverAssumptions:
    """What the resolver table assumes of the node it predicts for (docs/rules.md sections 5 and 6b), as a
    typed value: where a node reports otherwise (a serving strategy, a tripped gate), the node's answer wins
    over the table's, and advice can say which assumption did not hold.

    ``operator_config`` "default": no ``[models.*]`` or ``[defaults.speculative]`` key besides the strategy of
    the row (no ngram_min/ngram_max, no draft_model, mode auto); ``serving_strategy`` "balanced": the default
    ``--strategy`` (#2112's interactive and throughput set the strategy to ngram-suffix / disabled where the
    operator left it unset); ``spec_default`` True (false: auto never enables MTP unless a strategy is set
    explicitly); ``sidecar``: the MTP draft sidecar the table judged ("" for none), whose pairing it takes as
    compatible (``pairing_fault = warn_disable``, the default, quietly turns an incompatible one off);
    ``gate_tripped`` False: the break-even gate has not switched speculation off while running (whether it
    is on by default is not pinned down)."""

    operator_config: str = "default"
    serving_strategy: str = "balanced"
    spec_default: bool = True
    sidecar: str = ""
    gate_tripped: bool = False

    def sentences(self) -> tuple[str, ...]:
        """The assumptions as the pages and the CLI state them under the table."""
        sidecar = (
            f"the MTP draft sidecar {self.sidecar} pairs with the model (pairing_fault warn_disable, the "
            "default, quietly turns an incompatible pair off)"
            if self.sidecar
            else "no MTP draft sidecar (a *draft* or *eagle* GGUF beside the model) is picked"
        )
        return (
            "The node runs the default operator config: no [models.*] or [defaults.speculative] key but the "
            "strategy of the row (no ngram_min/ngram_max, no draft_model, mode auto).",
            f"The serving strategy is {self.serving_strategy} (--strategy interactive or throughput sets "
            'speculative.strategy to "ngram-suffix" or "disabled" where the operator left it unset, #2112).',
            "spec_default is true (false: auto never enables MTP unless a strategy is set explicitly).",
            f"{sidecar[0].upper()}{sidecar[1:]}.",
            "The break-even gate has not switched speculation off while running (SKIPPY_SPECULATION_GATE; "
            "whether it is on by default is not pinned down).",
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "operator_config": self.operator_config,
            "serving_strategy": self.serving_strategy,
            "spec_default": self.spec_default,
            "sidecar": self.sidecar,
            "gate_tripped": self.gate_tripped,
        }

    @classmethod
    def from_json(cls, doc: Any) -> ResolverAssumptions:
        doc = doc if isinstance(doc, Mapping) else {}
        text = {k: v for k, v in doc.items() if isinstance(v, str)}
        flags = {k: v for k, v in doc.items() if isinstance(v, bool)}
        return cls(
            text.get("operator_config", "default"),
            text.get("serving_strategy", "balanced"),
            flags.get("spec_default", True),
            text.get("sidecar", ""),
            flags.get("gate_tripped", False),
        )


UNCERTAIN = (
    "Whether a split package load's model path exposes a GGUF with nextn metadata is not pinned down "
    "(docs/rules.md section 7). If it does, auto and mtp turn native MTP on through the local GGUF even "
    "without a declaration; this table assumes a package load has no local GGUF signal.",
    "Whether host admission runs the full validate() or validate_root() is not confirmed; this table "
    "applies validate_root (the tensor-catalog checks need the metadata carrier).",
)


@dataclass(frozen=True)
class Resolution:
    """One row of the resolver table: an operator setting and what mesh-llm does with it."""

    setting: str
    outcome: str  # native-mtp | no-mtp | load-fails | refused
    why: str

    def to_json(self) -> dict[str, str]:
        return {"outcome": self.outcome, "why": self.why}


@dataclass(frozen=True)
class Runtime:
    rows: tuple[Resolution, ...]
    uncertain: tuple[str, ...] = UNCERTAIN
    assumptions: ResolverAssumptions = field(default_factory=ResolverAssumptions)

    def row(self, setting: str) -> Resolution | None:
        return next((r for r in self.rows if r.setting == setting), None)

    def to_json(self) -> dict[str, dict[str, str]]:
        return {r.setting: r.to_json() for r in self.rows}

    @classmethod
    def from_json(cls, doc: Any) -> Runtime:
        """The rows to_json stored (the assumptions and notes are the code's, not stored)."""
        rows = []
        for setting, row in rb.mapping(doc).items():
            values = rb.mapping(row)
            outcome, why = rb.optional_text(values.get("outcome")), rb.optional_text(values.get("why"))
            if outcome is not None and why is not None:
                rows.append(Resolution(setting, outcome, why))
        return cls(tuple(rows))


WRITER_SHAPES = ("writer", "key-absent", "deep", "not-last", "no-tensors")


@dataclass(frozen=True)
class WriterShape:
    """Whether mesh-llm's package writer (PR #1937, ``mesh-llm models package``) emits the declaration for
    this source itself (docs/rules.md section 6b): only for ``<arch>.nextn_predict_layers == 1`` with NextN
    tensors exactly at the last block; for every other MTP shape it refuses the source, and the block must
    be written by hand."""

    shape: str  # one of WRITER_SHAPES; "writer" is the one shape it emits
    reason: str = ""  # why it refuses, in a clause; "" for the writer's shape

    @property
    def emits(self) -> bool:
        return self.shape == "writer"

    def to_json(self) -> Json:
        return {"shape": self.shape, "emits": self.emits, "reason": self.reason}

    @classmethod
    def from_json(cls, doc: Any) -> WriterShape | None:
        if not isinstance(doc, Mapping) or doc.get("shape") not in WRITER_SHAPES:
            return None
        reason = doc.get("reason")
        return cls(str(doc["shape"]), reason if isinstance(reason, str) else "")


@dataclass(frozen=True)
class Suggestion:
    generation: Json
    patched_manifest: str
    diff: str
    advice: str | None = None  # what to do with the block: the writer, or by hand (and v1: republish as v2)
    writer: WriterShape | None = None  # whether mesh-llm's writer emits this block for the source

    def to_json(self) -> Json:
        return {
            "generation": self.generation,
            "patched_manifest": self.patched_manifest,
            "diff": self.diff,
            "advice": self.advice,
            "writer": self.writer.to_json() if self.writer else None,
        }

    @classmethod
    def from_json(cls, doc: Any) -> Suggestion | None:
        d = rb.mapping(doc)
        generation = d.get("generation")
        if not isinstance(generation, Mapping):
            return None
        return cls(
            generation=dict(generation),
            patched_manifest=rb.text(d.get("patched_manifest")),
            diff=rb.text(d.get("diff")),
            advice=rb.optional_text(d.get("advice")),
            writer=WriterShape.from_json(d.get("writer")),
        )
