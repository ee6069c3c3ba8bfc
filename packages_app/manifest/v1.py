"""Pure: schema 1 (``layer-package``) judged by mesh-llm's v1 preflight (skippy-model-package
preflight.rs, docs/rules.md section 3): its struct (extra keys ignored), its codes, its order.

Only the checks a manifest alone can answer are made here; artifact existence, size and sha256 need the
files (audit_package on a folder, or the Hub listing in the audit). No Django, no I/O.
"""

from __future__ import annotations

import re

from packages_app.layout import MANIFEST_FILE
from packages_app.manifest.model import Json, Manifest, Problem
from packages_app.manifest.reader import safe_text, unsafe_path_reason
from packages_app.manifest.typed import typed_v1
from packages_app.manifest.v2 import parse_error
from packages_app.manifest.v2schema import STR, U32T, U64T, DecodeError, Field, Map, Opt, Seq, Struct, decode

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
NGRAM_CACHE_MAX = 4


def _f(key: str, kind: object) -> Field:
    return Field(key, kind)  # type: ignore[arg-type]


def _d(key: str, kind: object) -> Field:
    return Field(key, kind, default=True)  # type: ignore[arg-type]


_ARTIFACT_FIELDS = (
    _f("path", STR),
    _f("tensor_count", U64T),
    _f("tensor_bytes", U64T),
    _f("artifact_bytes", U64T),
    _f("sha256", STR),
)
ARTIFACT = Struct("PackageArtifact", _ARTIFACT_FIELDS, deny_unknown=False)
WINDOW = Struct(
    "PackageWindowPolicy",
    (_f("default", STR), _f("initial_window", U32T), _f("min_window", U32T), _f("max_window", U32T)),
    deny_unknown=False,
)
PROPOSER = Struct(
    "PackageSpeculativeProposer",
    (
        _f("type", STR),
        _d("prediction_depth", Opt(U32T)),
        _d("layer_indices", Seq(U32T)),
        _d("ngram_min", Opt(U32T)),
        _d("ngram_max", Opt(U32T)),
        _d("max_proposal_tokens", Opt(U32T)),
        _d("history_scope", Opt(STR)),
    ),
    deny_unknown=False,
)
STRATEGY = Struct(
    "PackageSpeculativeStrategy",
    (
        _f("type", STR),
        _d("prediction_depth", Opt(U32T)),
        _d("layer_indices", Seq(U32T)),
        _d("window_policy", Opt(WINDOW)),
        _d("proposer", Opt(STR)),
        _d("primary", Opt(STR)),
        _d("extender", Opt(STR)),
        _d(
            "extension_policy",
            Opt(Struct("PackageExtensionPolicy", (_f("max_tokens", U32T),), deny_unknown=False)),
        ),
    ),
    deny_unknown=False,
)
SPECULATIVE = Struct(
    "PackageSpeculativeDecoding",
    (_f("default", STR), _d("proposers", Map(PROPOSER)), _d("strategies", Map(STRATEGY))),
    deny_unknown=False,
)
PACKAGE = Struct(
    "PackageManifest",
    (
        _f("schema_version", U32T),
        _f("model_id", STR),
        _f(
            "source_model",
            Struct("PackageSourceModel", (_f("path", STR), _f("sha256", STR)), deny_unknown=False),
        ),
        _f("format", STR),
        _f("layer_count", U32T),
        _d("activation_width", Opt(U32T)),
        _d(
            "generation",
            Opt(
                Struct(
                    "PackageGeneration", (_d("speculative_decoding", Opt(SPECULATIVE)),), deny_unknown=False
                )
            ),
        ),
        _f(
            "shared",
            Struct(
                "PackageShared",
                (_f("metadata", ARTIFACT), _f("embeddings", ARTIFACT), _f("output", ARTIFACT)),
                deny_unknown=False,
            ),
        ),
        _d(
            "projectors",
            Seq(Struct("PackageProjector", (_f("kind", STR), *_ARTIFACT_FIELDS), deny_unknown=False)),
        ),
        _f(
            "layers",
            Seq(Struct("PackageLayer", (_f("layer_index", U32T), *_ARTIFACT_FIELDS), deny_unknown=False)),
        ),
        _f("skippy_abi_version", STR),
    ),
    deny_unknown=False,
)


def parse_v1(raw: Json) -> tuple[Manifest | None, list[Problem]]:
    try:
        decoded = decode(PACKAGE, raw)
    except DecodeError as exc:
        return None, [parse_error(exc, "layer-package (schema 1)")]
    problems = [
        Problem(code, "error", safe_text(f"{MANIFEST_FILE}: {message}."), {"path": safe_text(path)})
        for code, path, message in preflight(decoded)
    ]
    return typed_v1(decoded, raw), problems


class Preflight(list[tuple[str, str, str]]):
    """(code, path, message) in the preflight's order; path is the artifact path or model-package.json."""

    def error(self, code: str, message: str, path: str = "model-package.json") -> None:
        self.append((code, path, message))


def preflight(m: Json) -> Preflight:
    """Every manifest-level issue mesh-llm's preflight reports for a decoded v1 manifest."""
    report = Preflight()
    _header(m, report)
    sd = m["generation"]["speculative_decoding"] if m["generation"] else None
    if sd is not None:
        _generation(sd, m["layer_count"], report)
    _layer_coverage(m, report)
    for role, body in _artifacts(m):
        _artifact(role, body, report)
    return report


def _header(m: Json, r: Preflight) -> None:
    if m["schema_version"] != 1:
        r.error(
            "unsupported_schema_version", f"unsupported package manifest schema_version {m['schema_version']}"
        )
    if m["format"] != "layer-package":
        r.error("invalid_format", "package manifest format must be layer-package")
    if not m["model_id"].strip():
        r.error("empty_model_id", "package manifest model_id must not be empty")
    if m["activation_width"] == 0:
        r.error("invalid_activation_width", "package manifest activation_width must be greater than zero")
    elif m["activation_width"] is None:
        r.error("missing_activation_width", "package manifest is missing activation_width")
    if not m["source_model"]["path"].strip():
        r.error("empty_source_model_path", "package manifest source_model.path must not be empty")
    if not _HEX64.fullmatch(m["source_model"]["sha256"]):
        r.error(
            "invalid_source_model_sha256",
            "package manifest source_model.sha256 must be a 64-character hex digest",
        )
    if not m["skippy_abi_version"].strip():
        r.error("missing_skippy_abi_version", "package manifest skippy_abi_version is empty")
    for p in m["projectors"]:
        if not p["kind"].strip():
            r.error("empty_projector_kind", "package projector kind must not be empty", p["path"])
        elif p["kind"] != "mmproj":
            r.error(
                "unsupported_projector_kind", f"unsupported package projector kind {p['kind']}", p["path"]
            )


def _generation(sd: Json, layer_count: int, r: Preflight) -> None:
    if not sd["default"].strip():
        r.error("empty_speculative_default", "generation.speculative_decoding.default must not be empty")
    elif sd["default"] not in sd["strategies"]:
        r.error(
            "missing_speculative_default_strategy",
            f"generation.speculative_decoding.default {sd['default']} is not present in strategies",
        )
    for name, p in sd["proposers"].items():
        _proposer(name, p, layer_count, r)
    for name, s in sd["strategies"].items():
        _strategy(name, s, sd["proposers"], layer_count, r)


def _proposer(name: str, p: Json, layer_count: int, r: Preflight) -> None:
    if not name.strip():
        r.error(
            "empty_speculative_proposer_name",
            "generation.speculative_decoding proposer names must not be empty",
        )
    if p["type"] == "native-mtp":
        _native_parts(name, p["prediction_depth"], p["layer_indices"], layer_count, r)
    elif p["type"] in ("ngram-cache", "ngram-suffix"):
        _ngram(name, p, r)
    else:
        r.error(
            "unsupported_speculative_proposer_type",
            f"speculative proposer {name} has unsupported type {p['type']}",
        )


def _native_parts(name: str, depth: int | None, layers: list[int], layer_count: int, r: Preflight) -> None:
    if depth != 1:
        r.error(
            "unsupported_native_mtp_prediction_depth",
            f"native MTP strategy {name} must use prediction_depth 1",
        )
    if not layers:
        r.error("missing_native_mtp_layers", f"native MTP strategy {name} must declare MTP layer_indices")
    for index in layers:
        if index >= layer_count:
            r.error(
                "native_mtp_layer_out_of_range",
                f"native MTP strategy {name} references layer {index}, but layer_count is {layer_count}",
            )


def _ngram(name: str, p: Json, r: Preflight) -> None:
    low, high = p["ngram_min"] or 0, p["ngram_max"] or 0
    if low == 0 or high == 0 or low > high:
        r.error(
            "invalid_ngram_proposer_window",
            f"N-gram proposer {name} must set ngram_min and ngram_max with 1 <= min <= max",
        )
    if not p["max_proposal_tokens"]:
        r.error(
            "invalid_ngram_proposer_max_tokens",
            f"N-gram proposer {name} must set max_proposal_tokens greater than zero",
        )
    cache = p["type"] == "ngram-cache"
    if cache and high > NGRAM_CACHE_MAX:
        r.error(
            "unsupported_ngram_cache_max_window",
            f"N-gram cache proposer {name} ngram_max {high} exceeds llama.cpp limit {NGRAM_CACHE_MAX}",
        )
    if cache and p["history_scope"] != "request":
        r.error(
            "invalid_ngram_cache_history_scope",
            f"N-gram cache proposer {name} must set history_scope to request",
        )
    if not cache and (low < 3 or high > 64):
        r.error(
            "unsupported_ngram_suffix_window",
            f"N-gram suffix proposer {name} must satisfy 3 <= ngram_min <= ngram_max <= 64",
        )
    if not cache and p["history_scope"] != "request":
        r.error(
            "invalid_ngram_suffix_history_scope",
            f"N-gram suffix proposer {name} must set history_scope to request",
        )


def _strategy(name: str, s: Json, proposers: Json, layer_count: int, r: Preflight) -> None:
    if not name.strip():
        r.error(
            "empty_speculative_strategy_name",
            "generation.speculative_decoding strategy names must not be empty",
        )
    if not s["type"].strip():
        r.error("empty_speculative_strategy_type", f"speculative strategy {name} type must not be empty")
    if s["proposer"] is not None:
        _reference(name, "proposer", s["proposer"], proposers, r)
    kind = s["type"]
    if kind == "native-mtp":
        _native_strategy(name, s, proposers, layer_count, r)
    elif kind in ("ngram-cache", "ngram-suffix"):
        _ngram_strategy(name, s, proposers, r)
    elif kind == "composite":
        _composite(name, s, proposers, r)
    else:
        r.error(
            "unsupported_speculative_strategy_type",
            f"speculative strategy {name} has unsupported type {kind}",
        )
    if s["extension_policy"] is not None and s["extension_policy"]["max_tokens"] == 0:
        r.error(
            "invalid_extension_policy_tokens",
            f"speculative strategy {name} extension_policy must set max_tokens > 0",
        )
    if s["window_policy"] is not None:
        _window(name, s["window_policy"], r)


def _reference(name: str, field: str, ref: str, proposers: Json, r: Preflight) -> None:
    if ref not in proposers:
        r.error(
            "missing_speculative_proposer",
            f"speculative strategy {name} references missing {field} proposer {ref}",
        )


def _native_strategy(name: str, s: Json, proposers: Json, layer_count: int, r: Preflight) -> None:
    ref = s["proposer"]
    if ref is None:
        _native_parts(name, s["prediction_depth"], s["layer_indices"], layer_count, r)
    elif ref in proposers and proposers[ref]["type"] != "native-mtp":
        r.error(
            "native_mtp_strategy_proposer_type_mismatch",
            f"native MTP speculative strategy {name} references proposer {ref} "
            f"with type {proposers[ref]['type']}",
        )


def _ngram_strategy(name: str, s: Json, proposers: Json, r: Preflight) -> None:
    ref = s["proposer"]
    if ref is None:
        r.error(
            "missing_ngram_strategy_proposer", f"N-gram speculative strategy {name} must declare a proposer"
        )
    elif ref in proposers and proposers[ref]["type"] != s["type"]:
        r.error(
            "ngram_strategy_proposer_type_mismatch",
            f"N-gram speculative strategy {name} type {s['type']} does not match proposer {ref} type "
            f"{proposers[ref]['type']}",
        )


def _composite(name: str, s: Json, proposers: Json, r: Preflight) -> None:
    if s["extension_policy"] is None:
        r.error(
            "missing_composite_extension_policy",
            f"composite speculative strategy {name} must declare extension_policy",
        )
    primary, extender = s["primary"], s["extender"]
    if primary is None:
        r.error("missing_composite_primary", f"composite speculative strategy {name} must declare primary")
        return
    if extender is None:
        r.error("missing_composite_extender", f"composite speculative strategy {name} must declare extender")
        return
    _reference(name, "primary", primary, proposers, r)
    _reference(name, "extender", extender, proposers, r)
    if primary in proposers and proposers[primary]["type"] != "native-mtp":
        r.error(
            "invalid_composite_primary_type",
            f"composite speculative strategy {name} primary {primary} must be native-mtp",
        )
    if extender in proposers and proposers[extender]["type"] not in ("ngram-cache", "ngram-suffix"):
        r.error(
            "invalid_composite_extender_type",
            f"composite speculative strategy {name} extender {extender} must be an N-gram proposer",
        )


def _window(name: str, w: Json, r: Preflight) -> None:
    if not w["default"].strip():
        r.error(
            "empty_window_policy_default",
            f"speculative strategy {name} window_policy.default must not be empty",
        )
    if 0 in (w["min_window"], w["max_window"], w["initial_window"]):
        r.error(
            "invalid_window_policy_zero",
            f"speculative strategy {name} window_policy values must be greater than zero",
        )
    if w["min_window"] > w["max_window"]:
        r.error(
            "invalid_window_policy_bounds",
            f"speculative strategy {name} window_policy min_window {w['min_window']} "
            f"exceeds max_window {w['max_window']}",
        )
    if not w["min_window"] <= w["initial_window"] <= w["max_window"]:
        r.error(
            "invalid_window_policy_initial",
            f"speculative strategy {name} window_policy initial_window {w['initial_window']} is outside "
            f"{w['min_window']}..{w['max_window']}",
        )


def _layer_coverage(m: Json, r: Preflight) -> None:
    counts: dict[int, int] = {}
    count = m["layer_count"]
    for layer in m["layers"]:
        index = layer["layer_index"]
        counts[index] = counts.get(index, 0) + 1
        if index >= count:
            r.error(
                "layer_index_out_of_range",
                f"package layer index {index} exceeds layer_count {count}",
                layer["path"],
            )
    missing = count - sum(1 for i in counts if i < count)
    if missing:  # the preflight reports each index; one issue naming them keeps a hostile count cheap
        first = [i for i in range(min(count, len(counts) + 11)) if i not in counts][:10]
        more = f" and {missing - len(first)} more" if missing > len(first) else ""
        r.error("missing_layer", f"package manifest is missing layer {', '.join(map(str, first))}{more}")
    for index, seen in sorted(counts.items()):
        if seen > 1:
            r.error("duplicate_layer", f"package manifest contains layer {index} {seen} times")


def _artifacts(m: Json) -> list[tuple[str, Json]]:
    found = [(role, m["shared"][role]) for role in ("metadata", "embeddings", "output")]
    return found + [("layer", layer) for layer in m["layers"]] + [("projector", p) for p in m["projectors"]]


def _artifact(role: str, a: Json, r: Preflight) -> None:
    reason = unsafe_path_reason(a["path"])
    if reason is not None:
        r.error("unsafe_artifact_path", f"package {role} artifact path is unsafe: it {reason}", a["path"])
        return
    if a["artifact_bytes"] == 0:
        r.error("empty_artifact", f"package {role} artifact declares zero bytes", a["path"])
    if a["tensor_count"] == 0 and a["tensor_bytes"] > 0:
        r.error(
            "invalid_tensor_bytes",
            f"package {role} artifact declares tensor_bytes without tensors",
            a["path"],
        )
    if a["tensor_count"] > 0 and a["tensor_bytes"] == 0:
        r.error(
            "invalid_tensor_bytes",
            f"package {role} artifact declares tensors but zero tensor_bytes",
            a["path"],
        )
    if not _HEX64.fullmatch(a["sha256"]):
        r.error("invalid_artifact_sha256", f"package {role} artifact sha256 is not a hex digest", a["path"])
