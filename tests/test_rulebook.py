"""Manifest validity as mesh-llm judges it: one manifest per code, built from docs/rules.md, both schemas.

v2 is mesh-llm's serde shape + validate_root (docs/rules.md sections 1-2), v1 its preflight (section 3).
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from packages_app.manifest import ManifestResult, parse_manifest
from packages_app.manifest.identity import package_id_of
from packages_app.manifest.v2schema import DecodeError

Doc = dict[str, Any]
Edit = Callable[[Doc], None]
D = "0123456789abcdef" * 4
E = "fedcba9876543210" * 4
REV = "a" * 40


def v2_base() -> Doc:
    """mesh-llm's own tests.rs::fixture(), with a real package_id (docs/rules.md section 4)."""
    doc: Doc = {
        "schema_version": 2,
        "package_id": "",
        "model_id": "fixture/model",
        "source_model": {
            "sha256": D,
            "metadata_artifact_id": "layer-0",
            "repo": "fixture/model",
            "revision": REV,
            "primary_file": "model.gguf",
            "files": [{"path": "model.gguf", "byte_size": 256, "sha256": D}],
        },
        "format": "gguf",
        "layer_count": 2,
        "artifact_catalog": {
            "entries": [
                {"id": "layer-0", "path": "layers/layer-00000.gguf", "byte_size": 256, "sha256": D},
                {"id": "layer-1", "path": "layers/layer-00001.gguf", "byte_size": 256, "sha256": E},
            ]
        },
        "native_abi_version": "0.1.53",
        "generator_version": "0.76.0-rc9",
        "created_at_unix_secs": 0,
    }
    return doc


def native(layers: list[int], depth: int = 1) -> Doc:
    return {"type": "native-mtp", "prediction_depth": depth, "layer_indices": layers}


def with_sd(doc: Doc, sd: Doc) -> None:
    doc["generation"] = {"speculative_decoding": sd}


def mtp_sd(**strategy: Any) -> Doc:
    return {"default": "mtp", "strategies": {"mtp": {**native([1]), **strategy}}}


def judge(doc: Doc, recompute_id: bool = True) -> ManifestResult:
    doc = copy.deepcopy(doc)
    if recompute_id and doc.get("schema_version") == 2:
        # A manifest that does not parse keeps its id; the parser reports why.
        with contextlib.suppress(DecodeError):
            doc["package_id"] = package_id_of(doc)
    return parse_manifest(json.dumps(doc).encode())


def errors(result: ManifestResult) -> list[str]:
    return [p.code for p in result.problems if p.severity == "error"]


def edited(base: Doc, edit: Edit, recompute_id: bool = True) -> ManifestResult:
    doc = copy.deepcopy(base)
    edit(doc)
    return judge(doc, recompute_id)


def test_the_v2_base_is_what_mesh_llm_accepts() -> None:
    result = judge(v2_base())

    assert errors(result) == [] and result.trusted


# --- v2: ValidationCodes ----------------------------------------------------------------------


def _set(path: str, value: Any) -> Edit:
    def edit(doc: Doc) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        if value is _DELETE:
            del node[last]
        else:
            node[int(last) if last.isdigit() else last] = value

    return edit


_DELETE = object()
_ENTRIES = "artifact_catalog.entries"
_M = "source_model.metadata_artifact_id"
_SD = "generation.speculative_decoding"
_S = f"{_SD}.strategies"
_P = f"{_SD}.proposers"
_REF = f"{_S}[mtp].proposer"
_RD = "generation.request_defaults"


def _add_entry(entry: Doc) -> Edit:
    return lambda doc: doc["artifact_catalog"]["entries"].append(entry)


def _sidecar(artifact_id: str, name: str | None = None) -> Edit:
    def edit(doc: Doc) -> None:
        sidecar = {"kind": "mmproj", "artifact_id": artifact_id} | (
            {"name": name} if name is not None else {}
        )
        doc.setdefault("sidecars", []).append(sidecar)

    return edit


def _both(*edits: Edit) -> Edit:
    def edit(doc: Doc) -> None:
        for e in edits:
            e(doc)

    return edit


def _publisher(**overrides: Any) -> Edit:
    entry = {
        "role": "model_config",
        "artifact_id": "layer-1",
        "source_repo": "fixture/model",
        "source_revision": REV,
        "source_path": "config.json",
    } | overrides
    return lambda doc: doc.setdefault("publisher_metadata", []).append(entry)


V2_CASES: list[tuple[str, Edit, str]] = [
    ("unsupported_schema_version", _set("schema_version", 3), "schema_version"),
    ("missing_value", _set("model_id", "  "), "model_id"),
    ("missing_value", _set("native_abi_version", ""), "native_abi_version"),
    ("missing_value", _set("layer_count", 0), "layer_count"),
    ("missing_value", _set("source_model.files", []), "source_model.files"),
    ("missing_value", _set("source_model.primary_file", _DELETE), "source_model.primary_file"),
    ("missing_value", _set("source_model.metadata_artifact_id", ""), "source_model.metadata_artifact_id"),
    ("missing_value", _sidecar("layer-1", ""), "sidecars[0].name"),
    ("invalid_digest", _set("source_model.sha256", D.upper()), "source_model.sha256"),
    ("invalid_digest", _set(f"{_ENTRIES}.1.sha256", "abc"), "artifacts[1].sha256"),
    ("invalid_identifier", _set(f"{_ENTRIES}.1.id", "layer 1"), "artifacts[1].id"),
    ("invalid_path", _set(f"{_ENTRIES}.1.path", "../layer-1.gguf"), "artifacts[1].path"),
    ("invalid_path", _set(f"{_ENTRIES}.1.path", "/abs/layer-1.gguf"), "artifacts[1].path"),
    ("invalid_path", _set(f"{_ENTRIES}.1.path", "layers//x.gguf"), "artifacts[1].path"),
    (
        "invalid_path",
        lambda d: d["source_model"]["files"].append(copy.deepcopy(d["source_model"]["files"][0])),
        "source_model.files[1].path",
    ),
    ("unknown_source_file", _set("source_model.primary_file", "other.gguf"), "source_model.primary_file"),
    ("invalid_metadata_artifact", _set(f"{_ENTRIES}.0.path", "shared/metadata.bin"), _M),
    ("invalid_metadata_artifact", _sidecar("layer-0"), "source_model.metadata_artifact_id"),
    ("source_identity_mismatch", _set("source_model.sha256", E), "source_model.sha256"),
    ("source_identity_mismatch", _publisher(source_revision="main"), "publisher_metadata[0].source_revision"),
    ("source_identity_mismatch", _publisher(source_repo="other/repo"), "publisher_metadata[0].source_repo"),
    (
        "source_identity_mismatch",
        _set(
            "publisher_defaults",
            {"compute_dtype": {"dtype": "bf16", "artifact_id": "layer-1", "json_path": "x"}},
        ),
        "publisher_defaults.compute_dtype.artifact_id",
    ),
    ("duplicate_artifact", _add_entry({"id": "layer-1", "path": "x.gguf", "byte_size": 1, "sha256": D}), ""),
    (
        "duplicate_artifact_path",
        _add_entry({"id": "layer-2", "path": "layers/layer-00001.gguf", "byte_size": 1, "sha256": D}),
        "artifacts[2].path",
    ),
    ("duplicate_sidecar", _both(_sidecar("layer-1"), _sidecar("layer-1")), "sidecars[1]"),
    ("duplicate_sidecar", _both(_publisher(), _publisher()), "publisher_metadata[1]"),
    ("unknown_artifact", _set("source_model.metadata_artifact_id", "metadata"), _M),
    ("unknown_artifact", _sidecar("mmproj"), "sidecars[0].artifact_id"),
    ("unknown_artifact", _publisher(artifact_id="config"), "publisher_metadata[0].artifact_id"),
    ("layer_out_of_bounds", lambda d: with_sd(d, mtp_sd(layer_indices=[2])), f"{_S}[mtp].layer_indices[0]"),
    (
        "layer_out_of_bounds",
        lambda d: with_sd(
            d,
            {"default": "mtp", "proposers": {"head": native([5])}, "strategies": {"mtp": _ref("head")}},
        ),
        f"{_P}[head].layer_indices[0]",
    ),
    ("unknown_strategy", lambda d: with_sd(d, {**mtp_sd(), "default": "fast"}), f"{_SD}.default"),
    ("unknown_proposer", lambda d: with_sd(d, {"default": "mtp", "strategies": {"mtp": _ref("x")}}), _REF),
    ("invalid_generation_value", lambda d: with_sd(d, {**mtp_sd(), "default": " "}), f"{_SD}.default"),
    (
        "invalid_generation_value",
        lambda d: with_sd(d, mtp_sd(prediction_depth=0)),
        f"{_S}[mtp].prediction_depth",
    ),
    ("invalid_generation_value", lambda d: with_sd(d, mtp_sd(proposer="head")), f"{_S}[mtp]"),
    (
        "invalid_generation_value",
        lambda d: with_sd(d, {"default": "mtp", "strategies": {"mtp": {"type": "native-mtp"}}}),
        f"{_S}[mtp]",
    ),
    (
        "invalid_generation_value",
        lambda d: with_sd(d, mtp_sd(window_policy=_window(initial_window=4, min_window=1, max_window=2))),
        f"{_S}[mtp].window_policy",
    ),
    (
        "invalid_generation_value",
        lambda d: with_sd(d, mtp_sd(window_policy=_window(pipeline_depth=0))),
        f"{_S}[mtp].window_policy.pipeline_depth",
    ),
    (
        "invalid_generation_value",
        lambda d: with_sd(d, mtp_sd(window_policy=_window(default=""))),
        f"{_S}[mtp].window_policy.default",
    ),
    ("invalid_generation_value", lambda d: with_sd(d, _ngram_sd(ngram_min=0)), f"{_P}[cache]"),
    (
        "invalid_generation_value",
        lambda d: with_sd(d, _ngram_sd(history_scope="")),
        f"{_P}[cache].history_scope",
    ),
    (
        "invalid_generation_value",
        lambda d: with_sd(d, _composite_sd(primary="cache")),
        f"{_S}[mtp-cache].primary",
    ),
    (
        "invalid_generation_value",
        lambda d: with_sd(d, _composite_sd(extension_policy={"max_tokens": 4, "initial_tokens": 8})),
        f"{_S}[mtp-cache].extension_policy.initial_tokens",
    ),
    (
        "invalid_generation_value",
        lambda d: d.update(generation={"request_defaults": _defaults(url="https://example.org/main/x")}),
        f"{_RD}.profiles[standard].provenance.url",
    ),
    (
        "invalid_generation_value",
        lambda d: d.update(generation={"request_defaults": _defaults(temperature=101.0)}),
        f"{_RD}.profiles[standard].temperature",
    ),
    (
        "missing_value",
        lambda d: d.update(generation={"request_defaults": {"selection": {"default": "x"}, "profiles": {}}}),
        f"{_RD}.profiles",
    ),
]


def _ref(proposer: str) -> Doc:
    return {"type": "native-mtp", "proposer": proposer}


def _window(**overrides: Any) -> Doc:
    return {"default": "fixed", "initial_window": 1, "min_window": 1, "max_window": 1} | overrides


def _ngram(kind: str = "ngram-cache", **overrides: Any) -> Doc:
    body = {
        "type": kind,
        "ngram_min": 1,
        "ngram_max": 3,
        "max_proposal_tokens": 8,
        "history_scope": "request",
    }
    return body | overrides


def _ngram_sd(**overrides: Any) -> Doc:
    return {
        "default": "ngram-cache",
        "proposers": {"cache": _ngram(**overrides)},
        "strategies": {"ngram-cache": {"type": "ngram-cache", "proposer": "cache"}},
    }


def _composite_sd(**overrides: Any) -> Doc:
    strategy = {
        "type": "composite",
        "primary": "head",
        "extender": "cache",
        "extension_policy": {"max_tokens": 4},
    }
    return {
        "default": "mtp-cache",
        "proposers": {"head": native([1]), "cache": _ngram()},
        "strategies": {"mtp-cache": strategy | overrides},
    }


def _defaults(url: str | None = None, **profile: Any) -> Doc:
    provenance = {
        "source_repo": "fixture/model",
        "revision": REV,
        "file": "generation_config.json",
        "section": "root",
        "url": url or f"https://huggingface.co/fixture/model/blob/{REV}/generation_config.json",
    }
    return {
        "selection": {"default": "standard"},
        "profiles": {"standard": {**profile, "provenance": provenance}},
    }


@pytest.mark.parametrize(
    ("code", "edit", "path"), V2_CASES, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(V2_CASES)]
)
def test_v2_reports_mesh_llms_code_at_mesh_llms_path(code: str, edit: Edit, path: str) -> None:
    result = edited(v2_base(), edit)

    assert code in errors(result)
    assert not result.trusted
    if path:
        assert path in [p.path for p in result.problems if p.code == code]


def test_an_abi_edited_without_recomputing_the_id_is_a_package_identity_mismatch() -> None:
    doc = v2_base()
    doc["package_id"] = package_id_of(doc)
    doc["native_abi_version"] = "0.1.57"

    result = judge(doc, recompute_id=False)

    assert errors(result) == ["package_identity_mismatch"]


# --- v2: what mesh-llm accepts (no invented requirements) -------------------------------------


V2_ACCEPTED: list[tuple[str, Edit]] = [
    ("generation null is absent", _set("generation", None)),
    (
        "window_policy.default is free text",
        lambda d: with_sd(d, mtp_sd(window_policy=_window(default="eager"))),
    ),
    (
        "a native-MTP prediction_depth of 2 passes the format",
        lambda d: with_sd(d, mtp_sd(prediction_depth=2)),
    ),
    ("a layer without its own artifact", _set("layer_count", 41)),
    (
        "a strategy named native-mtp-n1",
        lambda d: with_sd(d, {"default": "x", "strategies": {"x": native([1])}}),
    ),
    ("history_scope vocabulary is not checked", lambda d: with_sd(d, _ngram_sd(history_scope="session"))),
    ("ngram windows are not bounded by the format", lambda d: with_sd(d, _ngram_sd(ngram_max=40))),
    ("a valid request_defaults block", lambda d: d.update(generation={"request_defaults": _defaults()})),
    ("publisher metadata bound to the source", _publisher()),
    ("an mmproj sidecar", _sidecar("layer-1", "vision")),
    (
        "a -partMM artifact",
        _add_entry(
            {"id": "layer-1-p2", "path": "layers/layer-00001-part02.gguf", "byte_size": 9, "sha256": D}
        ),
    ),
    ("an inner '.' path segment", _set(f"{_ENTRIES}.1.path", "layers/./layer-1.gguf")),
    ("uppercase is rejected only in digests, not ids", _set(f"{_ENTRIES}.1.id", "Layer.1_A-b")),
]


@pytest.mark.parametrize(("what", "edit"), V2_ACCEPTED, ids=[w for w, _ in V2_ACCEPTED])
def test_v2_accepts_what_mesh_llm_accepts(what: str, edit: Edit) -> None:
    result = edited(v2_base(), edit)

    assert errors(result) == [], what
    assert result.trusted


def test_generation_null_gives_the_same_id_as_an_absent_block() -> None:
    doc = v2_base()
    doc["package_id"] = package_id_of(doc)
    doc["generation"] = None

    assert judge(doc, recompute_id=False).trusted


# --- v2: the parse layer (serde errors) -------------------------------------------------------

V2_PARSE_ERRORS: list[tuple[str, Edit, str]] = [
    ("an unknown root key", _set("publisher", "me"), "unknown field `publisher`"),
    ("an unknown key in an artifact", _set(f"{_ENTRIES}.0.role", "layer"), "unknown field `role`"),
    (
        "an unknown strategy type",
        lambda d: with_sd(d, mtp_sd(type="draft-token")),
        "unknown variant `draft-token`",
    ),
    ("an extra key in a strategy", lambda d: with_sd(d, mtp_sd(policy="x")), "unknown field `policy`"),
    ("a list set to null", _set("sidecars", None), "invalid type: null, expected a sequence"),
    ("a required field missing", _set("generator_version", _DELETE), "missing field `generator_version`"),
    ("a negative size", _set(f"{_ENTRIES}.0.byte_size", -1), "expected u64"),
    ("a float where an integer goes", _set("layer_count", 2.0), "expected u32"),
    ("a publisher role mesh-llm does not know", _publisher(role="readme"), "unknown variant `readme`"),
]


@pytest.mark.parametrize(("what", "edit", "message"), V2_PARSE_ERRORS, ids=[w for w, _, _ in V2_PARSE_ERRORS])
def test_v2_refuses_what_serde_refuses(what: str, edit: Edit, message: str) -> None:
    result = edited(v2_base(), edit)

    assert errors(result) == ["invalid_manifest_json"], what
    assert message in result.problems[0].message
    assert result.manifest is None


# --- v1: the preflight ------------------------------------------------------------------------


def _v1_artifact(path: str, sha: str = D) -> Doc:
    return {"path": path, "tensor_count": 1, "tensor_bytes": 10, "artifact_bytes": 100, "sha256": sha}


def v1_base() -> Doc:
    return {
        "schema_version": 1,
        "model_id": "fixture/model:Q4",
        "source_model": {"path": "/source/model.gguf", "sha256": D, "repo": "fixture/model"},
        "format": "layer-package",
        "layer_count": 2,
        "activation_width": 2048,
        "shared": {r: _v1_artifact(f"shared/{r}.gguf") for r in ("metadata", "embeddings", "output")},
        "layers": [{"layer_index": i, **_v1_artifact(f"layers/layer-00{i}.gguf")} for i in range(2)],
        "skippy_abi_version": "0.1.24",
        "created_at_unix_secs": 0,
    }


def test_the_v1_base_passes_the_preflight_and_is_only_warned_offline_only() -> None:
    result = judge(v1_base())

    assert errors(result) == [] and result.trusted
    assert [p.code for p in result.problems] == ["v1_offline_only"]


def _v1_sd(sd: Doc) -> Edit:
    return lambda d: d.update(generation={"speculative_decoding": sd})


def _v1_strategy(**strategy: Any) -> Edit:
    return _v1_sd({"default": "mtp", "strategies": {"mtp": {**native([1]), **strategy}}})


def _v1_proposers(proposers: Doc, strategies: Doc | None = None) -> Edit:
    return _v1_sd({"default": "s", "proposers": proposers, "strategies": strategies or {"s": native([1])}})


_LAYERS = "layers"
V1_CASES: list[tuple[str, Edit]] = [
    ("invalid_manifest_json", _set("shared", _DELETE)),
    ("invalid_manifest_json", _set("layers.0.layer_index", "0")),
    ("invalid_format", _set("format", "gguf")),
    ("empty_model_id", _set("model_id", " ")),
    ("missing_activation_width", _set("activation_width", _DELETE)),
    ("invalid_activation_width", _set("activation_width", 0)),
    ("empty_source_model_path", _set("source_model.path", "")),
    ("invalid_source_model_sha256", _set("source_model.sha256", "abc")),
    ("missing_skippy_abi_version", _set("skippy_abi_version", "")),
    ("empty_projector_kind", _set("projectors", [{"kind": "", **_v1_artifact("p.gguf")}])),
    ("unsupported_projector_kind", _set("projectors", [{"kind": "clip", **_v1_artifact("p.gguf")}])),
    ("empty_speculative_default", _v1_sd({"default": "", "strategies": {"mtp": native([1])}})),
    ("missing_speculative_default_strategy", _v1_sd({"default": "x", "strategies": {"mtp": native([1])}})),
    ("unsupported_speculative_proposer_type", _v1_proposers({"p": {"type": "draft-token"}})),
    ("unsupported_native_mtp_prediction_depth", _v1_strategy(prediction_depth=2)),
    ("missing_native_mtp_layers", _v1_strategy(layer_indices=[])),
    ("native_mtp_layer_out_of_range", _v1_strategy(layer_indices=[2])),
    ("invalid_ngram_proposer_window", _v1_proposers({"c": _ngram(ngram_min=3, ngram_max=2)})),
    ("invalid_ngram_proposer_max_tokens", _v1_proposers({"c": _ngram(max_proposal_tokens=0)})),
    ("unsupported_ngram_cache_max_window", _v1_proposers({"c": _ngram(ngram_max=5)})),
    ("invalid_ngram_cache_history_scope", _v1_proposers({"c": _ngram(history_scope="session")})),
    (
        "unsupported_ngram_suffix_window",
        _v1_proposers({"s": _ngram("ngram-suffix", ngram_min=2, ngram_max=8)}),
    ),
    (
        "invalid_ngram_suffix_history_scope",
        _v1_proposers({"s": _ngram("ngram-suffix", ngram_min=3, ngram_max=8, history_scope="")}),
    ),
    ("empty_speculative_strategy_type", _v1_strategy(type="")),
    ("unsupported_speculative_strategy_type", _v1_strategy(type="native-mtp-n1")),
    ("missing_speculative_proposer", _v1_proposers({}, {"s": {"type": "native-mtp", "proposer": "ghost"}})),
    (
        "native_mtp_strategy_proposer_type_mismatch",
        _v1_proposers({"c": _ngram()}, {"s": {"type": "native-mtp", "proposer": "c"}}),
    ),
    ("missing_ngram_strategy_proposer", _v1_proposers({}, {"s": {"type": "ngram-cache"}})),
    (
        "ngram_strategy_proposer_type_mismatch",
        _v1_proposers({"c": _ngram()}, {"s": {"type": "ngram-suffix", "proposer": "c"}}),
    ),
    (
        "missing_composite_extension_policy",
        _v1_proposers({}, {"s": {"type": "composite", "primary": "a", "extender": "b"}}),
    ),
    ("missing_composite_primary", _v1_proposers({}, {"s": {"type": "composite", "extender": "b"}})),
    ("missing_composite_extender", _v1_proposers({}, {"s": {"type": "composite", "primary": "a"}})),
    (
        "invalid_composite_primary_type",
        _v1_proposers({"c": _ngram()}, {"s": {"type": "composite", "primary": "c", "extender": "c"}}),
    ),
    (
        "invalid_composite_extender_type",
        _v1_proposers({"h": native([1])}, {"s": {"type": "composite", "primary": "h", "extender": "h"}}),
    ),
    ("invalid_extension_policy_tokens", _v1_strategy(extension_policy={"max_tokens": 0})),
    ("empty_window_policy_default", _v1_strategy(window_policy=_window(default=""))),
    ("invalid_window_policy_zero", _v1_strategy(window_policy=_window(initial_window=0, min_window=0))),
    (
        "invalid_window_policy_bounds",
        _v1_strategy(window_policy=_window(min_window=3, max_window=2, initial_window=2)),
    ),
    ("invalid_window_policy_initial", _v1_strategy(window_policy=_window(initial_window=4, max_window=2))),
    ("layer_index_out_of_range", _set("layers.1.layer_index", 5)),
    ("missing_layer", _set("layer_count", 3)),
    ("duplicate_layer", _set("layers.1.layer_index", 0)),
    ("unsafe_artifact_path", _set("layers.0.path", "../outside.gguf")),
    ("empty_artifact", _set("layers.0.artifact_bytes", 0)),
    ("invalid_tensor_bytes", _set("layers.0.tensor_bytes", 0)),
    ("invalid_artifact_sha256", _set("layers.0.sha256", "xyz")),
]


@pytest.mark.parametrize(("code", "edit"), V1_CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(V1_CASES)])
def test_v1_reports_the_preflights_code(code: str, edit: Edit) -> None:
    result = edited(v1_base(), edit)

    assert code in errors(result)
    assert not result.trusted


def test_v1_accepts_uppercase_digests_and_extra_keys() -> None:
    def edit(doc: Doc) -> None:
        doc["source_model"]["sha256"] = D.upper()
        doc["layers"][0]["sha256"] = D.upper()
        doc["publisher"] = "someone"

    assert errors(edited(v1_base(), edit)) == []
