"""Pure: a decoded manifest (v1 preflight struct or v2 PackageRoot) -> the typed Manifest the audit reads.

Validation is not done here (v1.py and v2rules.py do it); this only gives the values names and roles,
and records what a serving runtime refuses at load (prediction_depth other than 1, n-gram windows the
runtime bounds). No Django, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from packages_app.layout import LAYER_FILE_RE as LAYER_PATH
from packages_app.manifest.model import (
    BUILD_HOST_PATH,
    COMPOSITE,
    NATIVE_MTP,
    NGRAM_TYPES,
    Artifact,
    ExtensionPolicy,
    Json,
    Manifest,
    NativeMtp,
    Ngram,
    Proposer,
    SourceFile,
    SourceModel,
    SpeculativeDecoding,
    Strategy,
    WindowPolicy,
)

NGRAM_CACHE_MAX = 4  # skippy_runtime::NGRAM_CACHE_MAX_NGRAM (SRV:140-156)
NGRAM_SUFFIX_BOUNDS = (3, 64)


# --- schema 2 ---------------------------------------------------------------------------------


def typed_v2(root: Json, raw: Json, computed_id: str) -> Manifest:
    source = root["source_model"]
    generation = root["generation"]
    sd = generation["speculative_decoding"] if generation else None
    return Manifest(
        schema_version=root["schema_version"],
        model_id=root["model_id"],
        package_id=root["package_id"],
        format=root["format"],
        layer_count=root["layer_count"],
        activation_width=None,
        abi_version=root["native_abi_version"],
        source_model=SourceModel(
            repo=source["repo"],
            revision=source["revision"],
            primary_file=source["primary_file"],
            sha256=source["sha256"],
            canonical_ref=source["canonical_ref"],
            distribution_id=source["distribution_id"],
            metadata_artifact_id=source["metadata_artifact_id"],
            files=tuple(SourceFile(f["path"], f["byte_size"], f["sha256"]) for f in source["files"]),
        ),
        artifacts=_v2_artifacts(root),
        generation=raw.get("generation") if isinstance(raw.get("generation"), dict) else None,
        speculative_decoding=typed_speculative(sd, _raw_sd(raw)) if sd else None,
        raw=raw,
        generator_version=root["generator_version"],
        computed_package_id=computed_id,
        request_defaults=bool(generation and generation["request_defaults"]),
        publisher_metadata=bool(root["publisher_metadata"]),
    )


def _v2_artifacts(root: Json) -> tuple[Artifact, ...]:
    metadata_id = root["source_model"]["metadata_artifact_id"]
    sidecars = {s["artifact_id"] for s in root["sidecars"]}
    found: list[Artifact] = []
    for a in root["artifact_catalog"]["entries"]:
        role, index, part = _v2_role(a["id"], a["path"], metadata_id, sidecars)
        found.append(Artifact(a["path"], role, index, part, a["byte_size"], a["sha256"], a["id"]))
    return tuple(found)


def _v2_role(
    artifact_id: str, path: str, metadata_id: str, sidecars: set[str]
) -> tuple[str, int | None, int | None]:
    if artifact_id == metadata_id:
        return "metadata", None, None
    if artifact_id in sidecars:
        return "projector", None, None
    if match := LAYER_PATH.search(path):
        return "layer", int(match[1]), int(match[2]) if match[2] else None
    if path == "shared/common.gguf":
        return "common", None, None
    return "other", None, None


def _raw_sd(raw: Json) -> Json:
    generation = raw.get("generation")
    sd = generation.get("speculative_decoding") if isinstance(generation, dict) else None
    return sd if isinstance(sd, dict) else {}


# --- schema 1 ---------------------------------------------------------------------------------


def typed_v1(decoded: Json, raw: Json) -> Manifest:
    found = raw.get("source_model")
    source: Mapping[str, Any] = found if isinstance(found, dict) else {}
    generation = decoded["generation"]
    sd = generation["speculative_decoding"] if generation else None
    return Manifest(
        schema_version=decoded["schema_version"],
        model_id=decoded["model_id"],
        package_id=None,
        format=decoded["format"],
        layer_count=decoded["layer_count"],
        activation_width=decoded["activation_width"],
        abi_version=decoded["skippy_abi_version"],
        source_model=SourceModel(
            path=decoded["source_model"]["path"],
            sha256=decoded["source_model"]["sha256"],
            repo=_text(source, "repo"),
            revision=_text(source, "revision"),
            primary_file=_text(source, "primary_file"),
            canonical_ref=_text(source, "canonical_ref"),
            distribution_id=_text(source, "distribution_id"),
        ),
        artifacts=_v1_artifacts(decoded),
        generation=raw.get("generation") if isinstance(raw.get("generation"), dict) else None,
        speculative_decoding=typed_speculative(sd, _raw_sd(raw)) if sd else None,
        raw=raw,
    )


def _text(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    return value if isinstance(value, str) else None


def _v1_artifacts(decoded: Json) -> tuple[Artifact, ...]:
    found = [_v1_artifact(decoded["shared"][role], role) for role in ("metadata", "embeddings", "output")]
    found += [_v1_artifact(layer, "layer", layer["layer_index"]) for layer in decoded["layers"]]
    found += [_v1_artifact(p, "projector") for p in decoded["projectors"]]
    return tuple(found)


def _v1_artifact(body: Json, role: str, index: int | None = None) -> Artifact:
    return Artifact(
        body["path"],
        role,
        index,
        None,
        body["artifact_bytes"],
        body["sha256"].lower(),
        None,
        body["tensor_count"],
        body["tensor_bytes"],
    )


def is_build_host_path(path: str | None) -> bool:
    return path is not None and BUILD_HOST_PATH.match(path) is not None


# --- generation.speculative_decoding (both schemas, decoded) ----------------------------------


def typed_speculative(sd: Json, raw: Json) -> SpeculativeDecoding:
    proposers = {name: _proposer(name, p) for name, p in sd["proposers"].items()}
    strategies = {name: _strategy(name, s, proposers) for name, s in sd["strategies"].items()}
    return SpeculativeDecoding(sd["default"], proposers, strategies, raw)


def _proposer(name: str, p: Json) -> Proposer:
    kind = p["type"]
    if kind == NATIVE_MTP:
        mtp = _native(p.get("prediction_depth"), p.get("layer_indices") or [])
        return Proposer(name, kind, native_mtp=mtp, runtime_refusals=_depth_refusal(mtp))
    if kind in NGRAM_TYPES:
        ngram = _ngram(p)
        return Proposer(name, kind, ngram=ngram, runtime_refusals=_ngram_refusal(kind, ngram))
    return Proposer(name, kind)


def _native(depth: int | None, layers: list[int]) -> NativeMtp | None:
    return NativeMtp(depth, tuple(layers)) if depth is not None and layers else None


def _ngram(p: Json) -> Ngram | None:
    low, high, tokens, scope = (
        p.get(k) for k in ("ngram_min", "ngram_max", "max_proposal_tokens", "history_scope")
    )
    if low is None or high is None or tokens is None or scope is None:
        return None
    return Ngram(low, high, tokens, scope)


def _depth_refusal(mtp: NativeMtp | None) -> tuple[str, ...]:
    if mtp is None or mtp.prediction_depth == 1:
        return ()
    return (
        f"prediction_depth is {mtp.prediction_depth}, and the embedded runtime runs only 1 "
        '("package native MTP proposer is not valid for the embedded runtime")',
    )


def _ngram_refusal(kind: str, n: Ngram | None) -> tuple[str, ...]:
    if n is None:
        return ()
    low, high = NGRAM_SUFFIX_BOUNDS
    if kind == "ngram-cache" and n.ngram_max > NGRAM_CACHE_MAX:
        return (f"ngram-cache ngram_max is {n.ngram_max}, above the runtime's limit of {NGRAM_CACHE_MAX}",)
    if kind == "ngram-suffix" and not low <= n.ngram_min <= n.ngram_max <= high:
        return (f"ngram-suffix window {n.ngram_min}..{n.ngram_max} is outside the runtime's {low}..{high}",)
    return ()


def _strategy(name: str, s: Json, proposers: Mapping[str, Proposer]) -> Strategy:
    kind = s["type"]
    window = _window(s.get("window_policy"))
    if kind == NATIVE_MTP and s.get("proposer") is not None:
        ref = proposers.get(s["proposer"])
        mtp = ref.native_mtp if ref is not None and ref.type == NATIVE_MTP else None
        return Strategy(
            name,
            kind,
            proposer=s["proposer"],
            window_policy=window,
            native_mtp=mtp,
            runtime_refusals=ref.runtime_refusals if ref else (),
        )
    if kind == NATIVE_MTP:
        mtp = _native(s.get("prediction_depth"), s.get("layer_indices") or [])
        return Strategy(
            name, kind, window_policy=window, native_mtp=mtp, runtime_refusals=_depth_refusal(mtp)
        )
    if kind == COMPOSITE:
        return _composite(name, s, proposers, window)
    ref = proposers.get(s.get("proposer") or "")
    return Strategy(
        name,
        kind,
        proposer=s.get("proposer"),
        window_policy=window,
        runtime_refusals=ref.runtime_refusals if ref else (),
    )


def _composite(
    name: str, s: Json, proposers: Mapping[str, Proposer], window: WindowPolicy | None
) -> Strategy:
    primary, extender = proposers.get(s.get("primary") or ""), proposers.get(s.get("extender") or "")
    extension = s.get("extension_policy")
    refusals = (primary.runtime_refusals if primary else ()) + (extender.runtime_refusals if extender else ())
    return Strategy(
        name,
        COMPOSITE,
        primary=s.get("primary"),
        extender=s.get("extender"),
        window_policy=window,
        extension_policy=ExtensionPolicy(
            extension["max_tokens"], extension.get("initial_tokens"), extension.get("tail_backoff_proposals")
        )
        if extension
        else None,
        native_mtp=primary.native_mtp if primary and primary.type == NATIVE_MTP else None,
        runtime_refusals=refusals,
    )


def _window(w: Json | None) -> WindowPolicy | None:
    if w is None:
        return None
    return WindowPolicy(
        w["default"], w["initial_window"], w["min_window"], w["max_window"], w.get("pipeline_depth")
    )
