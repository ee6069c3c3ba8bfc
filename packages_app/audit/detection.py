"""Pure: parsed GGUF headers -> what the weights hold (blocks, NextN/MTP tensors); no Django, no I/O."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gguf.constants import MODEL_ARCH_NAMES, MODEL_TENSOR, MODEL_TENSORS, TENSOR_NAMES, Keys

from packages_app.audit.model import (
    KINDS,
    MAX_BLOCKS,
    Block,
    Detected,
    problem,
)
from packages_app.layout import LAYER_FILE_RE, METADATA_ONLY_KEY
from packages_app.manifest import (
    Manifest,
    Problem,
    describe_layers,
)

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
_ARCH_BY_NAME = {name: arch for arch, name in MODEL_ARCH_NAMES.items()}
# gguf 0.19 lists no NextN tensors for these architectures; docs/domain.md section 5 records what they hold.
_DOCUMENTED_NEXTN = {
    "qwen35": ("eh_proj", "enorm", "hnorm", "shared_head_norm"),
    "qwen35moe": ("eh_proj", "enorm", "hnorm", "shared_head_norm"),
    # DeepSeek-V4 projects with nextn.e_proj + nextn.h_proj instead of eh_proj, and its head carries its
    # own hyper-connection mixer (nextn.hc_head_*) (docs/domain.md, real catalog). Only the pair is required.
    "deepseek4": ("e_proj", "h_proj"),
    # gguf 0.19 has no cohere2moe. llama.cpp's loader (ggml-org/llama.cpp@00487aad
    # src/models/cohere2moe.cpp, load_block_mtp) creates these six for the MTP block.
    "cohere2moe": ("eh_proj", "embed_tokens", "enorm", "hnorm", "shared_head_head", "shared_head_norm"),
    # gguf 0.19 has no qwen4exp (llama.cpp PR #27742). Its loader (ggml-org/llama.cpp@001d906a
    # src/models/qwen4exp.cpp) creates enorm, hnorm, eh_proj (conversion/qwen4exp.py fuses the checkpoint's
    # fc_embedding + fc_hidden into it) and the head's own mixer hc_head_{norm,down,up}; embed_tokens and
    # shared_head_head are optional (qwen4exp reuses the trunk's), and there is no shared_head_norm.
    "qwen4exp": ("eh_proj", "enorm", "hc_head_down", "hc_head_norm", "hc_head_up", "hnorm"),
}
# What a NextN head cannot load without, where llama.cpp's loader says so (the others are created with
# TENSOR_NOT_REQUIRED); an architecture not listed here needs every expected tensor. For glm-dsa gguf 0.19's
# MODEL_TENSORS lists six NextN tensors, but the loader (ggml-org/llama.cpp@06e514f6 src/models/glm-dsa.cpp)
# marks embed_tokens, shared_head_head and shared_head_norm optional, so a head without them is complete.
# qwen4exp's hc_head_* are required only when the head is loaded, and the converter has written them in
# more than one place across PR #27742's revisions, so only the three every revision writes are required.
_REQUIRED_NEXTN = {
    "glm-dsa": ("eh_proj", "enorm", "hnorm"),
    "cohere2moe": ("eh_proj", "enorm", "hnorm"),
    "qwen4exp": ("eh_proj", "enorm", "hnorm"),
}
# Draft-MTP architectures whose loader reads <arch>.nextn_predict_layers as optional, so NextN tensors can
# come without the key (docs/rules.md section 6a: step35, cohere2moe, glm-dsa #25980, qwen4exp #28610; the
# cohere2moe, glm-dsa and qwen4exp loaders above read it with get_key(..., false)).
OPTIONAL_NEXTN_KEY = frozenset({"step35", "cohere2moe", "glm-dsa", "qwen4exp"})
NEXTN_KEY_ABSENT = "nextn_key_absent"
MTP_SIDECAR = "mtp_sidecar"
# The names mesh-llm's discover_sibling_draft_model picks as a draft beside the model (docs/rules.md 6b).
DRAFT_NAME_PARTS = ("draft", "eagle")
# The glossary entries of the problem codes this module adds (packages_app/glossary.py lists them).
GLOSSARY = {
    MTP_SIDECAR: "The package ships a GGUF named like a draft (*draft* or *eagle*) that holds NextN (MTP) "
    "tensors: mesh-llm's draft_selection_policy auto picks it as an MTP sidecar, which only an explicit "
    'speculative.strategy = "mtp" runs (auto does not), and pairing_fault warn_disable quietly turns off '
    "when the pair is incompatible. Its tensors are not the package's own blocks.",
    NEXTN_KEY_ABSENT: "The weights hold NextN (MTP) tensors and the GGUF has no nextn_predict_layers key, "
    "which llama.cpp reads as optional for this architecture (cohere2moe, glm-dsa, qwen4exp, step35): "
    "a shape the converter writes, not a key/tensor disagreement, but the header then marks no block "
    "as MTP, so only the manifest's declaration points the runtime at the head.",
}


def expected_nextn_tensors(architecture: str | None) -> tuple[str, ...]:
    """NextN tensor suffixes (e.g. "eh_proj") an architecture's MTP block holds, per gguf.constants (else
    per llama.cpp's loader, sourced in _DOCUMENTED_NEXTN)."""
    arch = _ARCH_BY_NAME.get(architecture or "")
    listed = (
        sorted(_NEXTN_SUFFIX[t] for t in MODEL_TENSORS.get(arch, ()) if t in _NEXTN_SUFFIX) if arch else []
    )
    return tuple(listed) or _DOCUMENTED_NEXTN.get(architecture or "", ())


def required_nextn_tensors(architecture: str | None) -> tuple[str, ...]:
    """The expected NextN tensors a head cannot be loaded without (an incomplete head lacks one of them)."""
    return _REQUIRED_NEXTN.get(architecture or "") or expected_nextn_tensors(architecture)


def nextn_key_is_optional(architecture: str | None) -> bool:
    return architecture in OPTIONAL_NEXTN_KEY


def key_absent_blocks(d: Detected) -> tuple[int, ...]:
    """Blocks holding NextN tensors in a GGUF without the (optional, for its architecture) nextn key."""
    if d.nextn_predict_layers is not None or not nextn_key_is_optional(d.architecture):
        return ()
    return d.mtp_blocks


def nextn_key_absent_problems(d: Detected) -> list[Problem]:
    """NextN tensors present, key absent, for an architecture that reads the key as optional: its own
    finding, not a key/tensor disagreement (judgement.py leaves these blocks out of nextn_key_mismatch)."""
    blocks = key_absent_blocks(d)
    if not blocks:
        return []
    first = blocks[0]
    source = d.evidence.get(first) or d.file(first) or f"block {first}"
    verb = "lists" if source == d.directory else "holds"
    suffixes = d.nextn_found.get(first, ())
    held = suffixes[0] if len(suffixes) == 1 else "{" + ",".join(suffixes) + "}"
    key = Keys.LLM.NEXTN_PREDICT_LAYERS.format(arch=d.architecture)
    message = (
        f"{source} {verb} blk.{first}.nextn.{held} but {key} is absent. llama.cpp reads that key as "
        f"optional for {d.architecture}, so this is a shape its converter writes, not a disagreement; "
        f"without it the header marks no block as MTP (llama.cpp counts no NextN layer), so only "
        f"generation.speculative_decoding can point the runtime at {describe_layers(list(blocks))}."
    )
    return [problem(NEXTN_KEY_ABSENT, "warning", message, blocks=list(blocks))]


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


def is_draft_name(path: str) -> bool:
    """A GGUF mesh-llm would pick as a sibling draft model: its file name holds "draft" or "eagle"."""
    name = path.rsplit("/", 1)[-1].lower()
    return name.endswith(".gguf") and any(part in name for part in DRAFT_NAME_PARTS)


def _drafts(manifest: Manifest | None, headers: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The draft-named GGUFs of the package (not its carrier, not a layer file), sorted as mesh-llm sorts
    them: separate draft models, whose tensors are not the package's blocks."""
    carrier = manifest.metadata_path if manifest else None
    return sorted(p for p in headers if is_draft_name(p) and p != carrier and not LAYER_FILE_RE.search(p))


def _shipped(manifest: Manifest | None, drafts: list[str]) -> str | None:
    """The sidecar a node has beside the model: the first draft the manifest lists (a node downloads only
    what it lists; an unlisted file gets its own finding, unlisted_file)."""
    listed = {a.path for a in manifest.artifacts} if manifest else set()
    return next((p for p in drafts if p in listed), None)


def detect(manifest: Manifest | None, headers: Mapping[str, Mapping[str, Any]]) -> Detected:
    """What the parsed headers say about blocks and NextN (MTP) tensors (an MTP draft sidecar apart)."""
    usable = {p: h for p, h in headers.items() if isinstance(h, Mapping)}
    drafts = _drafts(manifest, usable)
    sidecar = _shipped(manifest, drafts)
    sidecar_blocks = _sidecar_mtp_blocks(usable[sidecar]) if sidecar else ()
    usable = {p: h for p, h in usable.items() if p not in drafts}
    w = _read_weights(manifest, usable)
    layer_files = manifest.layer_files() if manifest else {}
    found = {i: _nextn_suffixes(names) for i, names in w.tensors.items()}
    found = {i: s for i, s in found.items() if s}
    key_blocks = _key_blocks(w.block_count, w.nextn, found)
    inspected = _inspected_blocks(w, manifest, layer_files)
    expected = expected_nextn_tensors(w.architecture)
    required = required_nextn_tensors(w.architecture)
    checked = sorted(b for b in set(key_blocks) | set(found) if b in inspected)
    missing = {b: tuple(s for s in required if s not in found.get(b, ())) for b in checked}
    # An absent key that the architecture reads as optional makes no claim to disagree with.
    optional_absent = w.nextn is None and nextn_key_is_optional(w.architecture)
    blocks = _blocks(w, layer_files, found)
    return Detected(
        architecture=w.architecture,
        block_count=w.block_count,
        nextn_predict_layers=w.nextn,
        mtp_blocks=tuple(sorted(found)),
        key_and_tensors_agree=optional_absent or {b for b in key_blocks if b in inspected} == set(found),
        expected_nextn_tensors=expected,
        missing_nextn_tensors={b: m for b, m in missing.items() if m},
        blocks=blocks,
        key_blocks=key_blocks,
        nextn_found=found,
        evidence={i: w.source[i] for i in found},
        directory=w.directory,
        uninspected=tuple(b.index for b in blocks if b.index not in inspected),
        sidecar=sidecar,
        sidecar_mtp_blocks=sidecar_blocks,
    )


def _sidecar_mtp_blocks(header: Mapping[str, Any]) -> tuple[int, ...]:
    tensors = header.get("tensors")
    names = [name for name, _ in _tensor_entries(tensors)] if isinstance(tensors, list) else []
    return tuple(sorted({int(m[1]) for n in names if (m := _NEXTN_RE.match(n))}))


def sidecar_problems(d: Detected) -> list[Problem]:
    """The MTP draft sidecar mesh-llm would pick, when it holds NextN tensors (docs/rules.md section 6b)."""
    if not d.sidecar or not d.sidecar_mtp_blocks:
        return []
    message = (
        f"{d.sidecar} holds NextN tensors ({describe_layers(list(d.sidecar_mtp_blocks))}) and is named "
        "like a draft, so mesh-llm's draft_selection_policy auto picks it as an MTP sidecar: an explicit "
        'speculative.strategy = "mtp" runs native MTP through it (auto does not), and pairing_fault '
        "warn_disable, the default, turns it off without an error when it finds the pair incompatible."
    )
    return [problem(MTP_SIDECAR, "info", message, path=d.sidecar, blocks=list(d.sidecar_mtp_blocks))]


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
    match = LAYER_FILE_RE.search(path)
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


def _key_blocks(block_count: int | None, nextn: int | None, found: Mapping[int, object]) -> tuple[int, ...]:
    """The blocks the nextn key marks as MTP: the last ``nextn`` of block_count, unless the NextN tensors
    sit past block_count and none inside it, as in GGUFs whose block_count leaves the MTP block out
    (ik_llama #2256) or MTP-only GGUFs: then the blocks that hold them."""
    if not block_count or not nextn:
        return ()
    inside = range(block_count - nextn, block_count)
    beyond = sorted(b for b in found if b >= block_count)
    if beyond and not any(b in found for b in inside):
        return tuple(beyond[:nextn])
    return tuple(inside)


def _inspected_blocks(w: _Weights, manifest: Manifest | None, layer_files: Mapping[int, str]) -> set[int]:
    indices = set(range(w.block_count or 0)) | set(w.tensors)
    if w.directory is not None:
        return indices
    guessed = {int(m[1]): p for p in w.listed if (m := LAYER_FILE_RE.search(p))}

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
