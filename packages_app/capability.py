"""Pure: manifest bytes + Hub file listing + parsed GGUF headers -> MTP capability audit; no Django/I/O."""

from __future__ import annotations

import copy
import difflib
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gguf.constants import MODEL_ARCH_NAMES, MODEL_TENSOR, MODEL_TENSORS, TENSOR_NAMES, Keys

from packages_app.manifest import (
    LEGACY_MTP_NAME,
    MANIFEST_FILE,
    MTP_NAME,
    MTP_NAMES,
    NATIVE_MTP,
    RUNTIME_CODES,
    Json,
    Manifest,
    ManifestResult,
    Problem,
    Severity,
    SpeculativeDecoding,
    Strategy,
    describe_layers,
    parse_manifest,
    render_manifest,
)

CONSISTENT_VERDICTS = ("consistent-mtp", "consistent-no-mtp")
INCONSISTENT_VERDICTS = (
    "undeclared-mtp",
    "declared-without-weights",
    "declaration-mismatch",
    "invalid-manifest",
)
VERDICTS = CONSISTENT_VERDICTS + INCONSISTENT_VERDICTS
KINDS = ("attention", "ssm", "moe", "ffn", "nextn")
METADATA_ONLY_KEY = "skippy.package.metadata_only"
MAX_BLOCKS = 4096  # far above any real model (DeepSeek-V3: 61, Qwen3-235B: 94); bounds hostile headers

# Repo housekeeping that no manifest names and nobody needs flagged.
_HOUSEKEEPING = frozenset({MANIFEST_FILE, ".gitattributes", "README.md"})
_NO_ERRORS: Mapping[str, str] = MappingProxyType({})

_NEXTN_SUFFIX = {
    t: TENSOR_NAMES[t].rsplit(".", 1)[1]
    for t in MODEL_TENSOR
    if t.name.startswith("NEXTN_") and t in TENSOR_NAMES
}
# "blk.{bid}.nextn." per gguf; the same pattern catches NextN tensors of architectures gguf does not list.
_NEXTN_PREFIX = TENSOR_NAMES[MODEL_TENSOR.NEXTN_EH_PROJ].rsplit(".", 1)[0] + "."
_NEXTN_RE = re.compile(
    re.escape(_NEXTN_PREFIX).replace(re.escape("{bid}"), r"(\d{1,6})") + r"([A-Za-z0-9_]+)"
)
_BLOCK_RE = re.compile(r"blk\.(\d{1,6})\.([A-Za-z0-9_]+)")
_MOE_RE = re.compile(r"ffn_[a-z_]+_exps")
_DENSE_FFN = frozenset({"ffn_up", "ffn_down", "ffn_gate"})
_LAYER_FILE_RE = re.compile(r"layer-(\d{1,6})(?:-part\d+)?\.gguf$")
_ARCH_BY_NAME = {name: arch for arch, name in MODEL_ARCH_NAMES.items()}
# gguf 0.19 lists no NextN tensors for these architectures; domain.md section 5 records what they hold.
_DOCUMENTED_NEXTN = {
    "qwen35": ("eh_proj", "enorm", "hnorm", "shared_head_norm"),
    "qwen35moe": ("eh_proj", "enorm", "hnorm", "shared_head_norm"),
}
_WRITER_WINDOW = {"default": "fixed", "initial_window": 1, "min_window": 1, "max_window": 1}


def verdict_is_consistent(verdict: str) -> bool:
    return verdict in CONSISTENT_VERDICTS


def expected_nextn_tensors(architecture: str | None) -> tuple[str, ...]:
    """NextN tensor suffixes (e.g. "eh_proj") an architecture's MTP block holds, per gguf.constants."""
    arch = _ARCH_BY_NAME.get(architecture or "")
    listed = (
        sorted(_NEXTN_SUFFIX[t] for t in MODEL_TENSORS.get(arch, ()) if t in _NEXTN_SUFFIX) if arch else []
    )
    return tuple(listed) or _DOCUMENTED_NEXTN.get(architecture or "", ())


def block_kind(component: str) -> str | None:
    """The kind a block tensor marks, from the name part after ``blk.N.`` (e.g. "ffn_up_exps" -> moe)."""
    if component == "nextn":
        return "nextn"
    if component.startswith("attn_q"):
        return "attention"
    if component.startswith("ssm_"):
        return "ssm"
    if _MOE_RE.fullmatch(component):
        return "moe"
    return "ffn" if component in _DENSE_FFN else None


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
        }


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


@dataclass(frozen=True)
class Runtime:
    auto_native_mtp: bool
    auto_explanation: str
    mtp_allowed: bool
    mtp_explanation: str

    def to_json(self) -> Json:
        return {
            "auto": {"native_mtp": self.auto_native_mtp, "explanation": self.auto_explanation},
            "mtp": {"allowed": self.mtp_allowed, "explanation": self.mtp_explanation},
        }


@dataclass(frozen=True)
class Suggestion:
    generation: Json
    patched_manifest: str
    diff: str

    def to_json(self) -> Json:
        return {"generation": self.generation, "patched_manifest": self.patched_manifest, "diff": self.diff}


@dataclass(frozen=True)
class Audit:
    verdict: str
    detected: Detected
    declared: Declared
    problems: list[Problem]
    provenance: Provenance
    runtime: Runtime
    suggested_generation: Suggestion | None
    # False when the headers needed to judge MTP were not read: `audit_package` exits 2 then.
    auditable: bool = True
    manifest: Manifest | None = None

    @property
    def consistent(self) -> bool:
        return verdict_is_consistent(self.verdict)

    def codes(self) -> list[str]:
        return [p.code for p in self.problems]

    def to_json(self) -> Json:
        return {
            "verdict": self.verdict,
            "detected": self.detected.to_json(),
            "declared": self.declared.to_json(),
            "problems": [p.to_json() for p in self.problems],
            "provenance": self.provenance.to_json(),
            "runtime": self.runtime.to_json(),
            "suggested_generation": self.suggested_generation.to_json()
            if self.suggested_generation
            else None,
        }


# --- the audit --------------------------------------------------------------------------------


def audit(
    manifest_bytes: bytes | None,
    files: Sequence[FileInfo],
    headers: Mapping[str, Mapping[str, Any]],
    revision: str | None = None,
    header_errors: Mapping[str, str] = _NO_ERRORS,
) -> Audit:
    """Audit one revision: what the weights hold vs what model-package.json declares."""
    parsed = parse_manifest(manifest_bytes) if manifest_bytes is not None else None
    manifest = parsed.manifest if parsed else None
    problems = list(parsed.problems) if parsed else [_missing_manifest()]
    detected = detect(manifest, headers)
    declared = declare(manifest)
    coverage = _coverage_problems(detected, header_errors)
    problems += _header_error_problems(header_errors) + coverage + _layer_count_problems(manifest, detected)
    verdict, findings = _judge(manifest, detected, declared)
    problems += findings
    checks, file_problems = _check_files(manifest, files)
    problems += file_problems + _source_path_problems(manifest)
    trusted = parsed is not None and parsed.trusted
    if not trusted:
        verdict = "invalid-manifest"
    return Audit(
        verdict=verdict,
        detected=detected,
        declared=declared,
        problems=problems,
        provenance=_provenance(manifest, manifest_bytes, revision, checks),
        runtime=_runtime(manifest if trusted else None, _rejection(parsed), detected),
        suggested_generation=_suggest(verdict, manifest, detected) if trusted else None,
        auditable=not any(p.code == "weights_not_inspected" and p.severity == "error" for p in coverage),
        manifest=manifest,
    )


def _problem(code: str, severity: Severity, message: str, **evidence: Any) -> Problem:
    return Problem(code, severity, message, evidence)


def _missing_manifest() -> Problem:
    return _problem(
        "missing_manifest",
        "error",
        f"The revision has no {MANIFEST_FILE}, so nothing declares how to serve it.",
    )


# --- what the weights hold --------------------------------------------------------------------


@dataclass
class _Weights:
    architecture: str | None = None
    block_count: int | None = None
    nextn: int | None = None
    directory: str | None = None
    tensors: dict[int, dict[str, int]] = field(default_factory=dict)  # block -> tensor name -> bytes
    source: dict[int, str] = field(default_factory=dict)  # block -> header path that listed it
    listed: set[str] = field(default_factory=set)  # headers that carried a tensor list


def detect(manifest: Manifest | None, headers: Mapping[str, Mapping[str, Any]]) -> Detected:
    """What the parsed headers say about blocks and NextN (MTP) tensors."""
    usable = {p: h for p, h in headers.items() if isinstance(h, Mapping)}
    w = _read_weights(manifest, usable)
    layer_files = manifest.layer_files() if manifest else {}
    found = {i: _nextn_suffixes(names) for i, names in w.tensors.items()}
    found = {i: s for i, s in found.items() if s}
    key_blocks = _key_blocks(w.block_count, w.nextn)
    inspected = _inspected_blocks(w, manifest, layer_files)
    expected = expected_nextn_tensors(w.architecture)
    checked = sorted(b for b in set(key_blocks) | set(found) if b in inspected)
    missing = {b: tuple(s for s in expected if s not in found.get(b, ())) for b in checked}
    blocks = _blocks(w, layer_files, found)
    return Detected(
        architecture=w.architecture,
        block_count=w.block_count,
        nextn_predict_layers=w.nextn,
        mtp_blocks=tuple(sorted(found)),
        key_and_tensors_agree={b for b in key_blocks if b in inspected} == set(found),
        expected_nextn_tensors=expected,
        missing_nextn_tensors={b: m for b, m in missing.items() if m},
        blocks=blocks,
        key_blocks=key_blocks,
        nextn_found=found,
        evidence={i: w.source[i] for i in found},
        directory=w.directory,
        uninspected=tuple(b.index for b in blocks if b.index not in inspected),
    )


def _read_weights(manifest: Manifest | None, headers: Mapping[str, Mapping[str, Any]]) -> _Weights:
    w = _Weights()
    order = sorted(headers, key=lambda p: _header_rank(manifest, p, headers[p]))
    w.directory = next((p for p in order if _is_directory(manifest, p, headers[p])), None)
    _read_kv(w, [headers[p] for p in order])
    seen: set[str] = set()
    for path in order:
        tensors = headers[path].get("tensors")
        if not isinstance(tensors, list):
            continue
        w.listed.add(path)
        for name, nbytes in _tensor_entries(tensors):
            match = _BLOCK_RE.match(name)
            if match is None or name in seen:
                continue
            seen.add(name)
            index = int(match[1])
            w.tensors.setdefault(index, {})[name] = nbytes
            w.source.setdefault(index, path)
    return w


def _header_rank(manifest: Manifest | None, path: str, header: Mapping[str, Any]) -> tuple[int, int, str]:
    if (manifest and path == manifest.metadata_path) or _kv(header).get(METADATA_ONLY_KEY) is True:
        return 0, 0, path
    match = _LAYER_FILE_RE.search(path)
    return (1, int(match[1]), path) if match else (2, 0, path)


def _is_directory(manifest: Manifest | None, path: str, header: Mapping[str, Any]) -> bool:
    """A header that lists every tensor of the package (v2 shared/metadata.gguf)."""
    if not isinstance(header.get("tensors"), list) or not header["tensors"]:
        return False
    is_v2_metadata = manifest is not None and manifest.schema_version == 2 and path == manifest.metadata_path
    return is_v2_metadata or _kv(header).get(METADATA_ONLY_KEY) is True


def _kv(header: Mapping[str, Any]) -> Mapping[str, Any]:
    kv = header.get("kv")
    return kv if isinstance(kv, Mapping) else {}


def _read_kv(w: _Weights, headers: list[Mapping[str, Any]]) -> None:
    for header in headers:
        kv = _kv(header)
        arch = kv.get(Keys.General.ARCHITECTURE)
        if isinstance(arch, str) and 0 < len(arch) <= 64:
            w.architecture = arch
            count = _int_in(kv.get(Keys.LLM.BLOCK_COUNT.format(arch=arch)), 1, MAX_BLOCKS)
            w.block_count = count
            w.nextn = _int_in(kv.get(Keys.LLM.NEXTN_PREDICT_LAYERS.format(arch=arch)), 0, count or MAX_BLOCKS)
            return


def _int_in(value: Any, low: int, high: int) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    return value if ok else None


def _tensor_entries(tensors: list[Any]) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []
    for t in tensors:
        if isinstance(t, Mapping) and isinstance(t.get("name"), str):
            nbytes = t.get("bytes")
            found.append((t["name"], nbytes if isinstance(nbytes, int) and nbytes >= 0 else 0))
    return found


def _nextn_suffixes(names: Mapping[str, int]) -> tuple[str, ...]:
    return tuple(sorted({m[2] for n in names if (m := _NEXTN_RE.match(n))}))


def _key_blocks(block_count: int | None, nextn: int | None) -> tuple[int, ...]:
    if not block_count or not nextn:
        return ()
    return tuple(range(block_count - nextn, block_count))


def _inspected_blocks(w: _Weights, manifest: Manifest | None, layer_files: Mapping[int, str]) -> set[int]:
    indices = set(range(w.block_count or 0)) | set(w.tensors)
    if w.directory is not None:
        return indices
    guessed = {int(m[1]): p for p in w.listed if (m := _LAYER_FILE_RE.search(p))}

    def seen(i: int) -> bool:
        if i in w.tensors or guessed.get(i) in w.listed or layer_files.get(i) in w.listed:
            return True
        # A block the manifest carries no file for holds nothing here (a trunk-only package).
        return manifest is not None and bool(layer_files) and i not in layer_files

    return {i for i in indices if seen(i)}


def _blocks(
    w: _Weights, layer_files: Mapping[int, str], found: Mapping[int, tuple[str, ...]]
) -> tuple[Block, ...]:
    blocks: list[Block] = []
    for index in sorted(set(range(w.block_count or 0)) | set(w.tensors)):
        names = w.tensors.get(index, {})
        source = w.source.get(index)
        kinds = {block_kind(m[2]) for n in names if (m := _BLOCK_RE.match(n))}
        blocks.append(
            Block(
                index=index,
                file=layer_files.get(index) or (source if source != w.directory else None),
                tensor_count=len(names),
                nbytes=sum(names.values()),
                kinds=tuple(k for k in KINDS if k in kinds),
                mtp=index in found,
            )
        )
    return tuple(blocks)


# --- what the manifest declares ---------------------------------------------------------------


def declare(manifest: Manifest | None) -> Declared:
    sd = manifest.speculative_decoding if manifest else None
    if sd is None:
        return Declared()
    native = sd.native_mtp_strategies()
    lead = _lead_mtp_strategy(sd)
    layers = sorted({i for s in native if s.native_mtp for i in s.native_mtp.layer_indices})
    return Declared(
        present=True,
        default_strategy=sd.default or None,
        uses_native_mtp=bool(native),
        layer_indices=tuple(layers),
        prediction_depth=lead.native_mtp.prediction_depth if lead and lead.native_mtp else None,
        strategies={name: s.type or "unknown" for name, s in sd.strategies.items()},
    )


def _lead_mtp_strategy(sd: SpeculativeDecoding) -> Strategy | None:
    """The native-MTP strategy that matters most: the default when it is one, else the first declared."""
    default = sd.default_strategy
    if default is not None and default.uses_native_mtp:
        return default
    return next(iter(sd.native_mtp_strategies()), None)


# --- the verdict ------------------------------------------------------------------------------


def _judge(manifest: Manifest | None, d: Detected, declared: Declared) -> tuple[str, list[Problem]]:
    if manifest is None:
        return "invalid-manifest", []
    problems = _head_problems(d)
    if d.has_mtp_weights and not declared.uses_native_mtp:
        return "undeclared-mtp", [_undeclared(manifest, d), *problems]
    if declared.uses_native_mtp and not d.has_mtp_weights:
        return "declared-without-weights", [_declared_without_weights(manifest, d, declared), *problems]
    problems += _missing_key_block_problems(d)
    sd = manifest.speculative_decoding
    mismatches = _declaration_mismatches(sd, d) if sd else []
    refused = any(s.runtime_refusals for s in sd.strategies.values()) if sd else False
    if mismatches or refused:
        return "declaration-mismatch", mismatches + problems
    if d.has_mtp_weights:
        assert sd is not None
        return "consistent-mtp", _not_default_problems(sd) + problems
    return "consistent-no-mtp", problems


def _tensor_list(block: int, suffixes: Sequence[str]) -> str:
    inner = suffixes[0] if len(suffixes) == 1 else "{" + ",".join(suffixes) + "}"
    return f"blk.{block}.nextn.{inner}"


def _key_text(d: Detected) -> str:
    if d.architecture is None:
        return "no header names general.architecture"
    key = Keys.LLM.NEXTN_PREDICT_LAYERS.format(arch=d.architecture)
    return f"{key}={d.nextn_predict_layers}" if d.nextn_predict_layers is not None else f"{key} is absent"


def _holds(d: Detected, block: int) -> str:
    source = d.evidence.get(block) or d.file(block) or f"block {block}"
    verb = "lists" if source == d.directory else "holds"
    return f"{source} {verb} {_tensor_list(block, d.nextn_found[block])}"


def _declaration_text(manifest: Manifest) -> tuple[str, str]:
    """How the manifest's declaration reads, and what strategy auto then resolves to."""
    sd = manifest.speculative_decoding
    if sd is None:
        return "declares no generation.speculative_decoding", "native MTP off"
    names = ", ".join(f"{n} ({s.type or 'unknown'})" for n, s in sd.strategies.items()) or "none"
    return f"declares only the strategies {names}, none native MTP", f"{sd.default or 'nothing'}"


def _undeclared(manifest: Manifest, d: Detected) -> Problem:
    weights = "; ".join(_holds(d, b) for b in d.mtp_blocks[:4])
    declared, resolved = _declaration_text(manifest)
    message = (
        f"{weights} and {_key_text(d)}, but {MANIFEST_FILE} {declared}, "
        f"so strategy auto resolves {resolved} and mtp is refused."
    )
    return _problem(
        "undeclared_mtp",
        "error",
        message,
        mtp_blocks=list(d.mtp_blocks),
        files=[d.evidence.get(b) for b in d.mtp_blocks],
        nextn_predict_layers=d.nextn_predict_layers,
    )


def _declared_without_weights(manifest: Manifest, d: Detected, declared: Declared) -> Problem:
    claim = f"{MANIFEST_FILE} declares native MTP (layer_indices {list(declared.layer_indices)})"
    if d.key_blocks:
        where = ", ".join(f"{d.file(b) or f'block {b}'}" for b in d.key_blocks[:4])
        marked = describe_layers(list(d.key_blocks))
        gap = (
            f"{claim} and {_key_text(d)} marks {marked} as MTP, but {where} holds no "
            f"blk.{d.key_blocks[0]}.nextn tensors (dropped in conversion)"
        )
    else:
        source = d.directory or "no layer header"
        gap = f"{claim}, but {source} lists no blk.N.nextn tensor and {_key_text(d)}"
    message = f"{gap}, so loading with native MTP fails."
    return _problem(
        "declared_without_weights",
        "error",
        message,
        layer_indices=list(declared.layer_indices),
        nextn_predict_layers=d.nextn_predict_layers,
    )


def _head_problems(d: Detected) -> list[Problem]:
    problems: list[Problem] = []
    for block, missing in d.missing_nextn_tensors.items():
        if block in d.nextn_found:
            message = (
                f"{_holds(d, block)} but not {_tensor_list(block, missing)}, "
                f"which a {d.architecture} NextN head holds."
            )
            problems.append(
                _problem("incomplete_mtp_head", "warning", message, block=block, missing=list(missing))
            )
    stray = [b for b in d.mtp_blocks if b not in d.key_blocks]
    if stray:
        message = (
            f"{_holds(d, stray[0])}, but {_key_text(d)}, which does not mark {describe_layers(stray)} "
            "as MTP, so the loader does not load that head."
        )
        problems.append(_problem("nextn_key_mismatch", "warning", message, blocks=stray))
    return problems


def _missing_key_block_problems(d: Detected) -> list[Problem]:
    """The key promises MTP blocks whose nextn tensors are gone (a known conversion bug)."""
    empty = [b for b in d.key_blocks if b not in d.nextn_found and b not in d.uninspected]
    if not empty:
        return []
    where = ", ".join(d.file(b) or f"block {b}" for b in empty[:4])
    message = (
        f"{_key_text(d)} marks {describe_layers(empty)} as MTP, but {where} holds no "
        f"blk.{empty[0]}.nextn tensors, so MTP cannot run from this package."
    )
    return [_problem("nextn_tensors_missing", "warning", message, blocks=empty)]


def _declaration_mismatches(sd: SpeculativeDecoding, d: Detected) -> list[Problem]:
    problems: list[Problem] = []
    heads = d.nextn_predict_layers if d.nextn_predict_layers else len(d.mtp_blocks)
    groups: dict[tuple[int, tuple[int, ...]], list[str]] = {}
    for s in sd.native_mtp_strategies():
        if s.native_mtp is not None:
            groups.setdefault((s.native_mtp.prediction_depth, s.native_mtp.layer_indices), []).append(s.name)
    for (depth, layers), names in groups.items():
        who = f"{MANIFEST_FILE} strategy {', '.join(names)}"
        if set(layers) != set(d.mtp_blocks):
            where = "; ".join(_holds(d, b) for b in d.mtp_blocks[:4])
            message = f"{who} declares layer_indices {list(layers)}, but {where}, so the runtime rejects it."
            evidence = {"strategies": names, "layer_indices": list(layers), "mtp_blocks": list(d.mtp_blocks)}
            problems.append(_problem("mtp_layer_mismatch", "error", message, **evidence))
        # The runtime runs depth 1 only, so fewer heads than blocks is fine; more is not.
        if depth > heads:
            message = (
                f"{who} declares prediction_depth {depth}, but {_key_text(d)} and the weights hold "
                f"{len(d.mtp_blocks)} MTP block(s), so there is no head for depth {depth}."
            )
            problems.append(_problem("mtp_depth_mismatch", "error", message, strategies=names, depth=depth))
    return problems


def _not_default_problems(sd: SpeculativeDecoding) -> list[Problem]:
    default = sd.default_strategy
    if default is None or default.uses_native_mtp:
        return []
    names = ", ".join(s.name for s in sd.native_mtp_strategies())
    message = (
        f"{MANIFEST_FILE} declares native MTP in strategy {names}, but the default strategy is {sd.default}, "
        "so strategy auto does not run MTP."
    )
    return [_problem("mtp_not_default", "warning", message, default=sd.default)]


# --- headers, coverage, provenance ------------------------------------------------------------


def _header_error_problems(errors: Mapping[str, str]) -> list[Problem]:
    return [
        _problem(
            "header_unreadable",
            "warning",
            f"{path} header could not be read: {str(error)[:300]}",
            path=path,
            error=str(error)[:300],
        )
        for path, error in sorted(errors.items())
    ]


def _coverage_problems(d: Detected, errors: Mapping[str, str]) -> list[Problem]:
    if d.architecture is None:
        failed = f" ({len(errors)} failed)" if errors else ""
        message = (
            f"No readable GGUF header{failed} names general.architecture, so the weights could not be "
            "checked for MTP blocks."
        )
        return [_problem("weights_not_inspected", "error", message)]
    if not d.uninspected:
        return []
    gap = [b for b in d.uninspected if b in d.key_blocks]
    files = [f for b in d.uninspected[:4] if (f := d.file(b))]
    message = (
        f"No header was read for {describe_layers(list(d.uninspected))} ({', '.join(files) or 'no file'}), "
        f"so {'the MTP block' if gap else 'those blocks'} could not be checked for nextn tensors."
    )
    return [
        _problem("weights_not_inspected", "error" if gap else "warning", message, blocks=list(d.uninspected))
    ]


def _layer_count_problems(manifest: Manifest | None, d: Detected) -> list[Problem]:
    if manifest is None or manifest.layer_count is None or d.block_count is None:
        return []
    if manifest.layer_count == d.block_count:
        return []
    key = Keys.LLM.BLOCK_COUNT.format(arch=d.architecture)
    message = (
        f"{MANIFEST_FILE} layer_count is {manifest.layer_count}, but the headers say {key}={d.block_count}."
    )
    return [_problem("layer_count_mismatch", "warning", message, layer_count=manifest.layer_count)]


def _check_files(
    manifest: Manifest | None, files: Sequence[FileInfo]
) -> tuple[list[FileCheck], list[Problem]]:
    hub = {f.path: f for f in files}
    checks: list[FileCheck] = []
    problems: list[Problem] = []
    named: set[str] = set()
    for a in manifest.artifacts if manifest else ():
        if a.path in named:
            continue
        named.add(a.path)
        f = hub.get(a.path)
        check = FileCheck(a.path, a.role, a.size, a.sha256, *_hub_facts(f), _status(a.size, a.sha256, f))
        checks.append(check)
        problems += _file_problems(check)
    for f in sorted(files, key=lambda f: f.path):
        if f.path in named or f.path in _HOUSEKEEPING:
            continue
        checks.append(FileCheck(f.path, _guess_role(f.path), None, None, *_hub_facts(f), "unlisted"))
        if manifest is not None:
            problems.append(_unlisted(f.path))
    return checks, problems


def _hub_facts(f: FileInfo | None) -> tuple[int | None, str | None]:
    if f is None:
        return None, None
    return f.size, f.lfs_sha256.lower() if f.lfs_sha256 else None


def _status(size: int | None, sha256: str | None, f: FileInfo | None) -> str:
    if f is None:
        return "missing_on_hub"
    if sha256 and f.lfs_sha256 and sha256 != f.lfs_sha256.lower():
        return "sha256_mismatch"
    if size is not None and size != f.size:
        return "size_mismatch"
    return "match"


def _file_problems(c: FileCheck) -> list[Problem]:
    if c.status == "missing_on_hub":
        message = f"{MANIFEST_FILE} names {c.path} ({c.role}), but the revision has no such file."
        return [_problem("missing_artifact", "error", message, path=c.path)]
    if c.status == "sha256_mismatch":
        message = (
            f"{c.path} on the Hub has sha256 {str(c.hub_sha256)[:12]}..., but {MANIFEST_FILE} "
            f"records {str(c.manifest_sha256)[:12]}..."
        )
        return [_problem("artifact_sha256_mismatch", "error", message, path=c.path)]
    if c.status == "size_mismatch":
        message = f"{c.path} is {c.hub_size} bytes on the Hub, but {MANIFEST_FILE} records {c.manifest_size}."
        return [_problem("artifact_size_mismatch", "error", message, path=c.path)]
    return []


def _unlisted(path: str) -> Problem:
    severity: Severity = "warning" if path.endswith(".gguf") else "info"
    message = f"{path} is in the revision, but {MANIFEST_FILE} does not name it, so no node downloads it."
    return _problem("unlisted_file", severity, message, path=path)


def _guess_role(path: str) -> str:
    if _LAYER_FILE_RE.search(path):
        return "layer"
    return "metadata" if path.endswith("metadata.gguf") else "other"


def _source_path_problems(manifest: Manifest | None) -> list[Problem]:
    if manifest is None or not manifest.source_model.is_build_host_path:
        return []
    path = manifest.source_model.path
    message = (
        f"{MANIFEST_FILE} source_model.path is {path}, a build-host path serving nodes do not have, so the "
        "runtime's local-GGUF MTP signal never fires: generation.speculative_decoding is the only channel."
    )
    return [_problem("build_host_source_path", "info", message, path=path)]


def _provenance(
    manifest: Manifest | None, data: bytes | None, revision: str | None, checks: list[FileCheck]
) -> Provenance:
    source = manifest.source_model if manifest else None
    return Provenance(
        revision=revision,
        manifest_sha256=hashlib.sha256(data).hexdigest() if data is not None else None,
        source_model_path=source.path if source else None,
        build_host_path=bool(source and source.is_build_host_path),
        files=tuple(checks),
    )


# --- how the runtime resolves strategies (domain.md section 4) --------------------------------


def _rejection(parsed: ManifestResult | None) -> str:
    """Why the runtime cannot use the manifest at all, naming the first schema error."""
    if parsed is None:
        return f"there is no {MANIFEST_FILE}"
    first = next((p for p in parsed.problems if p.severity == "error" and p.code not in RUNTIME_CODES), None)
    return f"the runtime rejects this {MANIFEST_FILE} ({first.code}: {first.message})" if first else ""


def _runtime(manifest: Manifest | None, rejection: str, d: Detected) -> Runtime:
    if manifest is None:
        why = rejection.removesuffix(".")
        return Runtime(False, f"native MTP off: {why}.", False, f"mtp is refused: {why}.")
    no_local = _no_local_signal(manifest)
    sd = manifest.speculative_decoding
    if sd is None:
        return Runtime(
            False,
            f"native MTP off: {MANIFEST_FILE} declares no generation.speculative_decoding, and {no_local}.",
            False,
            f"mtp is refused: nothing declares native MTP, and {no_local}.",
        )
    auto_on, auto_text = _auto(sd, d)
    mtp_on, mtp_text = _explicit_mtp(sd, d, no_local)
    return Runtime(auto_on, auto_text, mtp_on, mtp_text)


def _no_local_signal(manifest: Manifest) -> str:
    path = manifest.source_model.path
    if manifest.source_model.is_build_host_path:
        return f"source_model.path {path} is a build-host path, so no local GGUF proves MTP on serving nodes"
    return "a package-backed load has no local GGUF to prove MTP"


def _load_note(s: Strategy, d: Detected) -> str:
    """Why loading the declared head fails: the runtime needs NextN tensors in every named block."""
    if not d.has_mtp_weights:
        return ", but the weights hold no blk.N.nextn tensors, so the load fails"
    empty = [i for i in (s.native_mtp.layer_indices if s.native_mtp else ()) if i not in d.nextn_found]
    return f", but {describe_layers(empty)} holds no nextn tensors, so the load fails" if empty else ""


def _auto(sd: SpeculativeDecoding, d: Detected) -> tuple[bool, str]:
    s = sd.default_strategy
    if s is None:
        return False, f"native MTP off: the default strategy {sd.default or '(empty)'} is not declared."
    if s.runtime_refusals:
        return (
            False,
            f"native MTP off: the runtime refuses default strategy {s.name}: {s.runtime_refusals[0]}.",
        )
    if s.uses_native_mtp:
        return (
            True,
            f"native MTP on: default strategy {s.name} is {s.type}{_layers_text(s)}{_load_note(s, d)}.",
        )
    return False, f"native MTP off: default strategy {s.name} is {s.type or 'unknown'}, not native MTP."


def _explicit_mtp(sd: SpeculativeDecoding, d: Detected, no_local: str) -> tuple[bool, str]:
    default = sd.default_strategy
    named = [s for n, s in sd.strategies.items() if n in MTP_NAMES and s.uses_native_mtp]
    candidate = default if default is not None and default.uses_native_mtp else next(iter(named), None)
    if candidate is None:
        others = sd.native_mtp_strategies()
        if others:
            return False, (
                f"mtp is refused: strategy {others[0].name} is native MTP but neither the default nor "
                f"named mtp; select {others[0].name} by name."
            )
        return False, f"mtp is refused: no declared strategy uses native MTP, and {no_local}."
    if candidate.runtime_refusals:
        reason = candidate.runtime_refusals[0]
        return False, f"mtp is refused: strategy {candidate.name} breaks a runtime rule: {reason}."
    return True, (
        f"mtp is allowed: {MANIFEST_FILE} declares native MTP in strategy {candidate.name}"
        f"{_layers_text(candidate)}{_load_note(candidate, d)}."
    )


def _layers_text(s: Strategy) -> str:
    return f" with layer_indices {list(s.native_mtp.layer_indices)}" if s.native_mtp else ""


# --- the suggested fix ------------------------------------------------------------------------


def _suggest(verdict: str, manifest: Manifest | None, d: Detected) -> Suggestion | None:
    if manifest is None:
        return None
    sd = manifest.speculative_decoding
    if verdict == "undeclared-mtp":
        speculative = _with_mtp_strategy(manifest, d.mtp_blocks)
    elif verdict == "declaration-mismatch" and sd is not None:
        speculative = _corrected(sd.raw, d.mtp_blocks)
    else:
        return None
    generation = copy.deepcopy(manifest.generation) if manifest.generation else {}
    generation["speculative_decoding"] = speculative
    patched = _with_generation(manifest.raw, generation)
    before, after = render_manifest(manifest.raw), render_manifest(patched)
    diff = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        f"a/{MANIFEST_FILE}",
        f"b/{MANIFEST_FILE}",
    )
    return Suggestion(generation, after, "".join(diff))


def writer_mtp_strategy(layer_indices: Sequence[int]) -> Json:
    """The native-MTP strategy a correct writer emits (domain.md section 3)."""
    return {
        "type": NATIVE_MTP,
        "prediction_depth": 1,
        "layer_indices": list(layer_indices),
        "window_policy": dict(_WRITER_WINDOW),
    }


def _with_mtp_strategy(manifest: Manifest, blocks: Sequence[int]) -> Json:
    # v1 writers named it native-mtp-n1; v2 names it mtp.
    name = LEGACY_MTP_NAME if manifest.schema_version == 1 else MTP_NAME
    sd = manifest.speculative_decoding
    if sd is None:
        return {"default": name, "strategies": {name: writer_mtp_strategy(blocks)}}
    raw = copy.deepcopy(sd.raw)
    found = raw.get("strategies")
    strategies: Json = found if isinstance(found, dict) else {}
    strategies[name] = writer_mtp_strategy(blocks)
    raw["strategies"] = strategies
    raw["default"] = name  # strategy auto runs the default; MTP only helps when it is the default
    return raw


def _corrected(raw: Json, blocks: Sequence[int]) -> Json:
    fixed = copy.deepcopy(raw)
    for group in ("proposers", "strategies"):
        entries = fixed.get(group)
        for body in entries.values() if isinstance(entries, dict) else ():
            if isinstance(body, dict):
                _correct_entry(body, blocks)
    return fixed


def _correct_entry(body: Json, blocks: Sequence[int]) -> None:
    kind = body.get("type")
    if kind in (NATIVE_MTP, LEGACY_MTP_NAME) and ("prediction_depth" in body or "layer_indices" in body):
        body["prediction_depth"] = 1
        if blocks:
            body["layer_indices"] = list(blocks)
    low, high = body.get("ngram_min"), body.get("ngram_max")
    if kind in ("ngram-cache", "ngram-suffix") and isinstance(low, int) and isinstance(high, int):
        body["ngram_min"], body["ngram_max"] = _runtime_ngram_bounds(kind, low, high)
    if "history_scope" in body and body["history_scope"] != "request":
        body["history_scope"] = "request"


def _runtime_ngram_bounds(kind: str, low: int, high: int) -> tuple[int, int]:
    """The nearest values the runtime accepts: ngram-cache max <= 4, ngram-suffix 3 <= min <= max <= 64."""
    if kind == "ngram-cache":
        high = min(high, 4)
        return min(low, high), high
    low = min(max(low, 3), 64)
    return low, max(min(high, 64), low)


def _with_generation(raw: Json, generation: Json) -> Json:
    """The manifest with ``generation`` set, where a writer puts it: before the version keys."""
    if "generation" in raw:
        return {k: (generation if k == "generation" else v) for k, v in raw.items()}
    anchors = ("skippy_abi_version", "native_abi_version", "generator_version", "created_at_unix_secs")
    patched: Json = {}
    for key, value in raw.items():
        if key in anchors and "generation" not in patched:
            patched["generation"] = generation
        patched[key] = value
    patched.setdefault("generation", generation)
    return patched
