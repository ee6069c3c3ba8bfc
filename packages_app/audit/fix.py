"""Pure: the suggested generation block, the patched manifest and its diff, and whether mesh-llm's package
writer would emit that block itself (docs/rules.md section 6b: only for one MTP shape); no Django, no I/O."""

from __future__ import annotations

import copy
import difflib
import json
from collections.abc import Sequence

from gguf.constants import Keys

from packages_app.audit.model import (
    Detected,
    Suggestion,
    WriterShape,
)
from packages_app.manifest import (
    MANIFEST_FILE,
    MTP_NAME,
    NATIVE_MTP,
    Json,
    Manifest,
    describe_layers,
    render_manifest,
)
from packages_app.manifest.identity import package_id_of
from packages_app.manifest.v2schema import DecodeError
from packages_app.verdicts import Verdict

_WRITER_WINDOW = {"default": "fixed", "initial_window": 1, "min_window": 1, "max_window": 1}


# --- the suggested fix ------------------------------------------------------------------------


def suggest(verdict: Verdict, manifest: Manifest | None, d: Detected) -> Suggestion | None:
    if manifest is None:
        return None
    sd = manifest.speculative_decoding
    if verdict == Verdict.UNDECLARED_MTP:
        speculative = _with_mtp_strategy(manifest, d.mtp_blocks)
    elif verdict == Verdict.DECLARATION_MISMATCH and sd is not None:
        speculative = _corrected(sd.raw, d.mtp_blocks)
    else:
        return None
    generation = copy.deepcopy(manifest.generation) if manifest.generation else {}
    generation["speculative_decoding"] = speculative
    patched = _with_package_id(_with_generation(manifest.raw, generation), manifest)
    before, after = render_manifest(manifest.raw), render_manifest(patched)
    diff = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        f"a/{MANIFEST_FILE}",
        f"b/{MANIFEST_FILE}",
    )
    writer = writer_shape(manifest, d)
    return Suggestion(generation, after, "".join(diff), _advice(manifest, writer, generation), writer)


def writer_shape(manifest: Manifest | None, d: Detected) -> WriterShape:
    """What mesh-llm's writer (PR #1937, ``infer_native_mtp_generation``) does with this source's MTP
    evidence: emits the declaration only when ``<arch>.nextn_predict_layers`` is 1 and the NextN tensors sit
    exactly at the last block (``layer_count - 1``); it bails for depth > 1, for NextN tensors with the key
    absent or 0 (the qwen4exp layout), and for NextN tensors elsewhere (DeepSeek-V4 style)."""
    key = Keys.LLM.NEXTN_PREDICT_LAYERS.format(arch=d.architecture or "<arch>")
    blocks = list(d.mtp_blocks)
    layers = d.block_count or (manifest.layer_count if manifest else None) or 0
    where = describe_layers(blocks) if blocks else ""
    if d.nextn_predict_layers is not None and d.nextn_predict_layers > 1:
        depth = d.nextn_predict_layers
        return WriterShape(
            "deep",
            f"{key} = {depth} declares {depth}-step native MTP, and the writer runs depth 1 only: it bails "
            "rather than emit a declaration",
        )
    if not d.nextn_predict_layers:
        state = "absent" if d.nextn_predict_layers is None else "0"
        return WriterShape(
            "key-absent",
            f"the NextN tensors sit at {where} but {key} is {state}, the qwen4exp layout, which the writer "
            "refuses as inconsistent evidence",
        )
    if not blocks:
        return WriterShape("no-tensors", f"{key} = 1 but no block holds NextN tensors")
    if blocks != [layers - 1]:
        return WriterShape(
            "not-last",
            f"{key} = 1 but the NextN tensors sit at {where}, not at the last block ({layers - 1}) where "
            "the writer expects them, DeepSeek-V4 style",
        )
    return WriterShape("writer")


def generation_text(generation: Json) -> str:
    """The block as one line to paste, as the advice quotes it."""
    return json.dumps(generation, separators=(",", ":"))


def _advice(manifest: Manifest, writer: WriterShape, generation: Json) -> str:
    block = f'"generation": {generation_text(generation)}'
    if manifest.schema_version == 1:
        lead = (
            "This package is schema v1, which every serving load refuses (offline-only since PR #1693): "
            "adding the block is not enough to serve it. "
        )
        if writer.emits:
            return lead + (
                "Republish it as package-v2 with `mesh-llm models package` (PR #1937): its writer emits this "
                "generation block for this source and recomputes package_id."
            )
        return lead + (
            f"Republishing it as package-v2 with `mesh-llm models package` fails for this source: its writer "
            f"(PR #1937) refuses it ({writer.reason}). Until it accepts this layout the package-v2 manifest "
            f"needs the block written by hand: {block}."
        )
    if writer.emits:
        return (
            "Or republish with `mesh-llm models package`: its writer (since PR #1937) emits this same block "
            "for this source."
        )
    return (
        f"`mesh-llm models package` refuses this source ({writer.reason}), so republishing with it does not "
        f"declare MTP. Add the block by hand, as the patched manifest does: {block}"
    )


def _with_package_id(patched: Json, manifest: Manifest) -> Json:
    """A v2 manifest's package_id binds the generation block, so the patch carries the recomputed id."""
    if manifest.schema_version != 2:
        return patched
    try:
        package_id = package_id_of(patched)
    except DecodeError:
        return patched
    return {k: (package_id if k == "package_id" else v) for k, v in patched.items()}


def writer_mtp_strategy(layer_indices: Sequence[int]) -> Json:
    """The native-MTP strategy a correct writer emits (docs/domain.md section 3)."""
    return {
        "type": NATIVE_MTP,
        "prediction_depth": 1,
        "layer_indices": list(layer_indices),
        "window_policy": dict(_WRITER_WINDOW),
    }


def _with_mtp_strategy(manifest: Manifest, blocks: Sequence[int]) -> Json:
    # Keyed mtp, as the fixed writer (PR #1937) emits it: explicit speculative.strategy = mtp selects only
    # a strategy keyed exactly mtp, so the old v1 name native-mtp-n1 would be refused.
    name = MTP_NAME
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
    if kind == NATIVE_MTP and ("prediction_depth" in body or "layer_indices" in body):
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
