"""The MTP capability audit: verdicts, problems, runtime explanation and suggested fix, in both schemas."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packages_app import audit as auditing
from packages_app.audit import FileInfo, audit
from packages_app.manifest import parse_manifest
from packages_app.manifest.identity import package_id_of
from tests.audit_fixtures import (
    GLM47,
    LLAMA,
    NEMOTRON,
    QWEN35,
    QWEN35_NEXTN,
    Package,
    build,
    composite_generation,
    mtp_generation,
    mtp_name,
    ngram_generation,
)

SCHEMAS = pytest.mark.parametrize("schema", [1, 2])
MTP_40 = "blk.40.nextn.{eh_proj,enorm,hnorm,shared_head_norm}"


def codes(result: auditing.Audit, severity: str | None = None) -> list[str]:
    return [p.code for p in result.problems if severity is None or p.severity == severity]


def problem(result: auditing.Audit, code: str) -> auditing.Problem:
    return next(p for p in result.problems if p.code == code)


def row(result: auditing.Audit, setting: str) -> auditing.Resolution:
    found = result.runtime.row(setting)
    assert found is not None, setting
    return found


def reaudit_patched(package: Package, result: auditing.Audit) -> auditing.Audit:
    assert result.suggested_generation is not None
    patched = json.loads(result.suggested_generation.patched_manifest)
    return package.with_manifest(patched).audit()


# --- the motivating case and its fix ----------------------------------------------------------


def test_it_explains_the_motivating_qwen35_package_as_undeclared_mtp() -> None:
    result = build(QWEN35, 1).audit()

    assert result.verdict == "undeclared-mtp"
    assert problem(result, "undeclared_mtp").message == (
        f"layers/layer-040.gguf holds {MTP_40} and qwen35moe.nextn_predict_layers=1, but "
        "model-package.json declares no generation.speculative_decoding, so strategy auto resolves "
        "native MTP off and mtp is refused."
    )
    # On a release that loads it (v0.72.1 did), auto decodes without MTP and explicit mtp is refused;
    # every release since PR #1693 refuses schema v1 altogether (the assessment's outcomes).
    assert row(result, "auto").outcome == "no-mtp" and row(result, "mtp").outcome == "refused"
    assert result.assessment is not None
    newest = result.assessment.outcomes[-1]
    assert {r.outcome for r in newest.rows} == {"refused"} and "offline-only" in newest.rows[0].why
    assert problem(result, "v1_offline_only").severity == "warning"
    assert problem(result, "build_host_source_path").severity == "info"
    assert result.provenance.build_host_path is True


@SCHEMAS
def test_it_flags_an_mtp_block_without_a_declaration_in_both_schemas(schema: int) -> None:
    result = build(QWEN35, schema).audit()

    assert result.verdict == "undeclared-mtp"
    assert result.detected.mtp_blocks == (40,)
    assert result.detected.key_and_tensors_agree is True
    assert result.declared.present is False
    block = result.detected.blocks[40]
    assert (block.tensor_count, block.kinds, block.mtp) == (20, ("attention", "moe", "nextn"), True)
    assert block.file == (f"layers/layer-{40:03d}.gguf" if schema == 1 else "layers/layer-00040.gguf")
    assert MTP_40 in problem(result, "undeclared_mtp").message


@SCHEMAS
def test_it_suggests_the_generation_a_correct_writer_emits(schema: int) -> None:
    result = build(QWEN35, schema).audit()

    assert result.suggested_generation is not None
    assert result.suggested_generation.generation == mtp_generation(schema, [40])
    name = mtp_name(schema)
    assert f'+      "default": "{name}",' in result.suggested_generation.diff
    assert result.suggested_generation.diff.startswith("--- a/model-package.json\n+++ b/model-package.json\n")


@SCHEMAS
def test_the_patched_manifest_audits_as_consistent_mtp(schema: int) -> None:
    package = build(QWEN35, schema)
    patched = reaudit_patched(package, package.audit())

    assert patched.verdict == "consistent-mtp"
    assert row(patched, "auto").outcome == "native-mtp"
    assert row(patched, "mtp").outcome == "native-mtp"


@SCHEMAS
def test_the_patch_only_adds_generation_and_keeps_every_other_key(schema: int) -> None:
    package = build(QWEN35, schema)
    suggestion = package.audit().suggested_generation
    assert suggestion is not None

    patched = json.loads(suggestion.patched_manifest)
    assert {k: v for k, v in patched.items() if k not in ("generation", "package_id")} == {
        k: v for k, v in package.manifest.items() if k != "package_id"
    }
    if schema == 2:  # the id binds the generation block, so the patch carries the recomputed one
        assert patched["package_id"] == package_id_of(patched) != package.manifest["package_id"]
    removed = [
        line for line in suggestion.diff.splitlines() if line.startswith("-") and not line.startswith("---")
    ]
    assert removed == ([] if schema == 1 else [f'-  "package_id": "{package.manifest["package_id"]}",'])
    keys = list(patched)
    assert keys.index("generation") + 1 == keys.index(
        "skippy_abi_version" if schema == 1 else "native_abi_version"
    )


@SCHEMAS
def test_it_accepts_the_fixed_qwen35_revision_as_consistent_mtp(schema: int) -> None:
    result = build(QWEN35, schema, mtp_generation(schema, [40])).audit()

    assert result.verdict == "consistent-mtp"
    assert codes(result, "error") == []
    assert result.declared.uses_native_mtp is True
    assert result.declared.layer_indices == (40,)
    assert result.declared.strategies == {mtp_name(schema): "native-mtp"}
    assert result.suggested_generation is None
    assert row(result, "auto").outcome == "native-mtp"


def test_the_old_v1_strategy_name_native_mtp_n1_is_refused_by_an_explicit_mtp_setting() -> None:
    generation = mtp_generation(2, [40])
    sd = generation["speculative_decoding"]
    sd["strategies"]["native-mtp-n1"] = sd["strategies"].pop("mtp")
    sd["default"] = "native-mtp-n1"
    result = build(QWEN35, 2, generation).audit()

    assert result.verdict == "consistent-mtp"
    assert row(result, "auto").outcome == row(result, "native-mtp-n1").outcome == "native-mtp"
    assert row(result, "mtp").outcome == "refused"
    assert "not keyed mtp" in row(result, "mtp").why
    assert problem(result, "mtp_strategy_not_keyed_mtp").severity == "info"


# --- other realistic packages -----------------------------------------------------------------


@SCHEMAS
def test_a_glm_flash_package_declaring_its_block_47_is_consistent(schema: int) -> None:
    result = build(GLM47, schema, mtp_generation(schema, [47])).audit()

    assert result.verdict == "consistent-mtp"
    assert result.detected.mtp_blocks == (47,)
    # gguf.constants lists all six NextN tensors for glm4moe.
    assert result.detected.expected_nextn_tensors == (
        "eh_proj",
        "embed_tokens",
        "enorm",
        "hnorm",
        "shared_head_head",
        "shared_head_norm",
    )
    assert result.detected.missing_nextn_tensors == {}
    assert result.detected.blocks[0].kinds == ("attention", "ffn")


@SCHEMAS
def test_a_dense_llama_without_mtp_is_consistent_no_mtp(schema: int) -> None:
    result = build(LLAMA, schema).audit()

    assert result.verdict == "consistent-no-mtp"
    assert codes(result, "error") == []
    assert codes(result, "warning") == (["v1_offline_only"] if schema == 1 else [])
    assert result.detected.nextn_predict_layers is None
    assert result.detected.has_mtp_weights is False
    assert [b.kinds for b in result.detected.blocks] == [("attention", "ffn")] * 16
    assert result.suggested_generation is None


@SCHEMAS
def test_a_nemotron_composite_mtp_suffix_declaration_is_consistent(schema: int) -> None:
    result = build(NEMOTRON, schema, composite_generation([88])).audit()

    assert result.verdict == "consistent-mtp"
    assert result.detected.mtp_blocks == (88,)
    # gguf 0.19 lists no NextN tensors for nemotron_h_moe: found by the blk.N.nextn. pattern.
    assert result.detected.expected_nextn_tensors == ()
    assert result.declared.default_strategy == "mtp-suffix"
    assert result.declared.strategies["mtp-suffix"] == "composite"
    assert result.declared.layer_indices == (88,)
    assert row(result, "auto").outcome == "native-mtp"
    assert schema == 1 or "effective native-mtp+suffix" in row(result, "auto").why
    assert {"ssm", "moe", "attention"} <= {k for b in result.detected.blocks for k in b.kinds}


@SCHEMAS
def test_a_package_backed_load_without_a_build_host_path_still_explains_why_mtp_is_off(schema: int) -> None:
    package = build(QWEN35, schema)
    if schema == 1:
        package.manifest["source_model"]["path"] = QWEN35.primary_file

    result = package.audit()

    assert "no local GGUF to prove MTP" in row(result, "auto").why or schema == 1
    assert "build_host_source_path" not in codes(result)


# --- key says MTP, tensors dropped ------------------------------------------------------------


@SCHEMAS
def test_a_key_without_nextn_tensors_and_no_declaration_is_consistent_with_a_warning(schema: int) -> None:
    result = build(QWEN35, schema, nextn=()).audit()

    assert result.verdict == "consistent-no-mtp"
    assert result.detected.nextn_predict_layers == 1
    assert result.detected.key_and_tensors_agree is False
    assert result.detected.missing_nextn_tensors == {40: QWEN35_NEXTN}
    warning = problem(result, "nextn_tensors_missing")
    assert warning.severity == "warning"
    assert "qwen35moe.nextn_predict_layers=1" in warning.message
    assert "layer-" in warning.message and "blk.40.nextn" in warning.message


@SCHEMAS
def test_a_declaration_whose_nextn_tensors_were_dropped_is_declared_without_weights(schema: int) -> None:
    result = build(QWEN35, schema, mtp_generation(schema, [40]), nextn=()).audit()

    assert result.verdict == "declared-without-weights"
    message = problem(result, "declared_without_weights").message
    assert "qwen35moe.nextn_predict_layers=1 marks layer 40 as MTP" in message
    assert "loading with native MTP fails" in message
    assert row(result, "auto").outcome == "load-fails"


@SCHEMAS
def test_a_dense_model_declaring_mtp_is_declared_without_weights(schema: int) -> None:
    result = build(LLAMA, schema, mtp_generation(schema, [15])).audit()

    assert result.verdict == "declared-without-weights"
    assert "llama.nextn_predict_layers is absent" in problem(result, "declared_without_weights").message
    assert result.suggested_generation is None


@SCHEMAS
def test_an_mtp_head_missing_some_nextn_tensors_is_reported_as_incomplete(schema: int) -> None:
    result = build(QWEN35, schema, mtp_generation(schema, [40]), nextn=("eh_proj", "enorm")).audit()

    assert result.detected.missing_nextn_tensors == {40: ("hnorm", "shared_head_norm")}
    assert "blk.40.nextn.{hnorm,shared_head_norm}" in problem(result, "incomplete_mtp_head").message


@SCHEMAS
def test_nextn_tensors_without_the_key_are_flagged_because_the_loader_ignores_them(schema: int) -> None:
    package = build(QWEN35, schema, mtp_generation(schema, [40]))
    for h in package.headers.values():
        del h["kv"]["qwen35moe.nextn_predict_layers"]

    result = package.audit()

    assert result.detected.key_and_tensors_agree is False
    assert "qwen35moe.nextn_predict_layers is absent" in problem(result, "nextn_key_mismatch").message


# --- declaration mismatches -------------------------------------------------------------------


@SCHEMAS
def test_layer_indices_naming_the_wrong_block_are_a_declaration_mismatch(schema: int) -> None:
    package = build(QWEN35, schema, mtp_generation(schema, [39]))
    result = package.audit()

    assert result.verdict == "declaration-mismatch"
    message = problem(result, "mtp_layer_mismatch").message
    assert "layer_indices [39]" in message and MTP_40 in message
    assert schema == 1 or "layer 39 holds no nextn tensors, so the load fails" in row(result, "auto").why
    assert result.suggested_generation is not None
    assert result.suggested_generation.generation == mtp_generation(schema, [40])
    assert reaudit_patched(package, result).verdict == "consistent-mtp"


def test_a_prediction_depth_of_two_passes_v2_validation_but_the_load_fails() -> None:
    package = build(QWEN35, 2, mtp_generation(2, [40], depth=2))
    result = package.audit()

    assert result.verdict == "declaration-mismatch"
    assert codes(result, "error") == ["mtp_depth_mismatch"]
    assert problem(result, "strategy_fails_at_load").severity == "warning"
    assert row(result, "auto").outcome == "load-fails"
    assert row(result, "mtp").outcome == "refused"  # inline form: explicit mtp refuses it
    assert "prediction_depth is 2" in row(result, "auto").why
    assert reaudit_patched(package, result).verdict == "consistent-mtp"


def test_a_prediction_depth_of_two_fails_the_v1_preflight() -> None:
    result = build(QWEN35, 1, mtp_generation(1, [40], depth=2)).audit()

    assert result.verdict == "invalid-manifest"
    assert "unsupported_native_mtp_prediction_depth" in codes(result, "error")


@SCHEMAS
def test_an_ngram_setting_the_runtime_refuses_is_a_mismatch_in_v2_and_invalid_in_v1(schema: int) -> None:
    package = build(LLAMA, schema, ngram_generation(ngram_max=6))
    result = package.audit()

    if schema == 1:
        assert result.verdict == "invalid-manifest"
        assert "unsupported_ngram_cache_max_window" in codes(result, "error")
        return
    assert result.verdict == "declaration-mismatch"
    assert "strategy_fails_at_load" in codes(result, "warning")
    assert row(result, "auto").outcome == "load-fails"
    assert result.suggested_generation is not None
    assert (
        result.suggested_generation.generation["speculative_decoding"]["proposers"]["cache"]["ngram_max"] == 4
    )
    assert reaudit_patched(package, result).verdict == "consistent-no-mtp"


@SCHEMAS
def test_mtp_declared_beside_an_ngram_default_is_consistent_but_warned(schema: int) -> None:
    generation = ngram_generation()
    generation["speculative_decoding"]["strategies"]["mtp"] = auditing.writer_mtp_strategy([47])
    result = build(GLM47, schema, generation).audit()

    assert result.verdict == "consistent-mtp"
    assert problem(result, "mtp_not_default").severity == "warning"
    assert row(result, "auto").outcome == "no-mtp"
    assert row(result, "mtp").outcome == "native-mtp"


@SCHEMAS
def test_an_ngram_only_declaration_on_mtp_weights_is_undeclared_and_the_fix_keeps_it(schema: int) -> None:
    package = build(GLM47, schema, ngram_generation())
    result = package.audit()

    assert result.verdict == "undeclared-mtp"
    assert (
        "none native MTP, so strategy auto resolves ngram-cache" in problem(result, "undeclared_mtp").message
    )
    assert result.suggested_generation is not None
    fixed = result.suggested_generation.generation["speculative_decoding"]
    assert set(fixed["strategies"]) == {"ngram-cache", mtp_name(schema)}
    assert reaudit_patched(package, result).verdict == "consistent-mtp"


# --- invalid manifests ------------------------------------------------------------------------


@SCHEMAS
def test_an_unparseable_manifest_is_invalid_but_the_weights_are_still_described(schema: int) -> None:
    package = build(QWEN35, schema)
    result = audit(b'{"schema_version": ', package.files, package.headers)

    assert result.verdict == "invalid-manifest"
    assert codes(result, "error")[0] == "invalid_json"
    assert result.detected.mtp_blocks == (40,)
    assert result.suggested_generation is None
    assert row(result, "auto").outcome == "load-fails"
    assert "rejects" in row(result, "auto").why


@pytest.mark.parametrize(
    ("schema", "key", "code"),
    [(1, "skippy_abi_version", "invalid_manifest_json"), (2, "native_abi_version", "invalid_manifest_json")],
)
def test_a_manifest_missing_a_required_key_is_invalid(schema: int, key: str, code: str) -> None:
    package = build(QWEN35, schema, mtp_generation(schema, [40]))
    del package.manifest[key]

    result = package.audit()

    assert result.verdict == "invalid-manifest"
    assert code in codes(result, "error")
    assert "missing field `" + key in problem(result, code).message
    assert row(result, "auto").outcome == "load-fails"


def test_a_revision_without_a_manifest_is_invalid() -> None:
    package = build(QWEN35, 2)
    result = audit(None, package.files, package.headers)

    assert result.verdict == "invalid-manifest"
    assert codes(result, "error") == ["missing_manifest"]
    # With no manifest every file is unlisted, but that is one finding, not one per file.
    assert "unlisted_file" not in codes(result)
    assert {f.status for f in result.provenance.files} == {"unlisted"}
    assert result.provenance.manifest_sha256 is None
    assert "there is no model-package.json" in row(result, "mtp").why


# --- provenance -------------------------------------------------------------------------------


@SCHEMAS
def test_it_compares_every_artifact_with_the_hub_listing(schema: int) -> None:
    package = build(QWEN35, schema)
    layer = "layers/layer-040.gguf" if schema == 1 else "layers/layer-00040.gguf"
    gone = "layers/layer-001.gguf" if schema == 1 else "layers/layer-00001.gguf"
    by_path = {f.path: f for f in package.files}
    sized = next(p for p in by_path if p.startswith("shared/") and p != "shared/metadata.gguf")
    by_path[layer] = FileInfo(layer, by_path[layer].size, "0" * 64)
    by_path[sized] = FileInfo(sized, by_path[sized].size + 1, None)
    del by_path[gone]
    by_path["layers/extra.gguf"] = FileInfo("layers/extra.gguf", 10, None)
    package.files = list(by_path.values())

    result = package.audit()

    status = {f.path: f.status for f in result.provenance.files}
    assert (status[layer], status[sized], status[gone], status["layers/extra.gguf"]) == (
        "sha256_mismatch",
        "size_mismatch",
        "missing_on_hub",
        "unlisted",
    )
    assert {"artifact_sha256_mismatch", "artifact_size_mismatch", "missing_artifact", "unlisted_file"} <= set(
        codes(result)
    )
    assert problem(result, "missing_artifact").message.startswith(f"model-package.json names {gone}")
    assert "model-package.json" not in status
    assert status["shared/metadata.gguf"] == "match"
    assert result.provenance.revision == package.revision


def test_the_manifest_digest_is_the_sha256_of_the_bytes_audited() -> None:
    package = build(QWEN35, 1)
    result = package.audit()

    assert result.provenance.manifest_sha256 == hashlib.sha256(package.manifest_bytes()).hexdigest()


# --- headers --------------------------------------------------------------------------------


def test_a_v2_package_is_audited_from_its_metadata_header_alone() -> None:
    package = build(GLM47, 2, mtp_generation(2, [47]))
    assert list(package.headers) == ["shared/metadata.gguf"]

    result = package.audit()

    assert result.auditable is True
    assert result.detected.uninspected == ()
    assert result.detected.blocks[47].file == "layers/layer-00047.gguf"
    assert "shared/metadata.gguf lists blk.47.nextn" in build(GLM47, 2).audit().problems[0].message


def test_an_unreadable_mtp_layer_header_makes_the_audit_incomplete() -> None:
    package = build(QWEN35, 1)
    del package.headers["layers/layer-040.gguf"]
    package.header_errors = {"layers/layer-040.gguf": "tensor count 2^40 exceeds the limit"}

    result = package.audit()

    assert "layers/layer-040.gguf header could not be read" in problem(result, "header_unreadable").message
    gap = problem(result, "weights_not_inspected")
    assert gap.severity == "error" and "layer 40" in gap.message
    assert result.auditable is False


def test_a_missing_trunk_header_is_only_a_warning() -> None:
    package = build(QWEN35, 1)
    del package.headers["layers/layer-007.gguf"]

    result = package.audit()

    assert problem(result, "weights_not_inspected").severity == "warning"
    assert result.auditable is True
    assert result.verdict == "undeclared-mtp"


def test_without_any_header_the_audit_cannot_judge_the_weights() -> None:
    package = build(QWEN35, 2)
    result = audit(
        package.manifest_bytes(), package.files, {}, header_errors={"shared/metadata.gguf": "timeout"}
    )

    assert result.auditable is False
    assert result.detected.architecture is None
    assert problem(result, "weights_not_inspected").severity == "error"


@SCHEMAS
def test_a_layer_count_that_disagrees_with_the_block_count_is_warned(schema: int) -> None:
    package = build(QWEN35, schema)
    for h in package.headers.values():
        h["kv"]["qwen35moe.block_count"] = 42

    assert "layer_count_mismatch" in codes(package.audit(), "warning")


# --- the JSON contract ------------------------------------------------------------------------

_TOP = {
    "verdict",
    "detected",
    "declared",
    "problems",
    "provenance",
    "runtime",
    "suggested_generation",
    "compatibility",
    "request_defaults",
}
_DETECTED = {
    "architecture",
    "block_count",
    "nextn_predict_layers",
    "mtp_blocks",
    "has_mtp_weights",
    "key_and_tensors_agree",
    "expected_nextn_tensors",
    "missing_nextn_tensors",
    "mtp_sidecar",
    "blocks",
}
_DECLARED = {
    "present",
    "default_strategy",
    "uses_native_mtp",
    "layer_indices",
    "prediction_depth",
    "strategies",
}
_ADMISSION = {"release", "admitted", "why", "single_node", "split"}
_PROVENANCE = {"revision", "manifest_sha256", "source_model_path", "build_host_path", "files"}
_FILE = {"path", "role", "manifest_size", "manifest_sha256", "hub_size", "hub_sha256", "status"}


@SCHEMAS
def test_to_json_has_exactly_the_documented_shape(schema: int) -> None:
    doc = json.loads(json.dumps(build(QWEN35, schema, nextn=("eh_proj",)).audit().to_json(), allow_nan=False))

    assert set(doc) == _TOP
    assert set(doc["detected"]) == _DETECTED
    assert set(doc["detected"]["blocks"][0]) == {"index", "file", "tensor_count", "bytes", "kinds", "mtp"}
    assert set(doc["declared"]) == _DECLARED
    assert set(doc["provenance"]) == _PROVENANCE
    assert all(set(f) == _FILE for f in doc["provenance"]["files"])
    assert list(doc["runtime"])[:5] == ["auto", "mtp", "disabled", "ngram-cache", "ngram-suffix"]
    assert all(set(r) == {"outcome", "why"} for r in doc["runtime"].values())
    assert all(set(a) == _ADMISSION for a in doc["compatibility"])
    assert all(set(a["split"]) == {"admitted", "why", "gate"} for a in doc["compatibility"])
    assert all(set(a["single_node"]) == {"admitted", "why"} for a in doc["compatibility"])
    assert set(doc["suggested_generation"]) == {"generation", "patched_manifest", "diff", "advice", "writer"}
    assert all(set(p) == {"code", "severity", "message", "evidence"} for p in doc["problems"])
    assert doc["detected"]["missing_nextn_tensors"] == {"40": ["enorm", "hnorm", "shared_head_norm"]}


def test_only_the_two_consistent_verdicts_count_as_consistent() -> None:
    assert set(auditing.VERDICTS) == set(auditing.INCONSISTENT_VERDICTS) | {
        "consistent-mtp",
        "consistent-no-mtp",
    }
    assert [auditing.verdict_is_consistent(v) for v in auditing.VERDICTS] == [True, True] + [False] * 4
    assert auditing.verdict_is_consistent("something-new") is False


def test_expected_nextn_tensors_come_from_gguf_with_the_documented_qwen35_fallback() -> None:
    assert auditing.expected_nextn_tensors("glm4moe")[0] == "eh_proj"
    assert auditing.expected_nextn_tensors("qwen35moe") == QWEN35_NEXTN
    assert auditing.expected_nextn_tensors("llama") == ()
    assert auditing.expected_nextn_tensors("not-an-arch") == ()


# --- hostile input ----------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), schema=st.sampled_from([1, 2]))
def test_it_never_crashes_on_a_mangled_manifest_or_header(data: st.DataObject, schema: int) -> None:
    package = _SMALL[schema]
    manifest = copy.deepcopy(package.manifest)
    target = data.draw(st.sampled_from(sorted(manifest)))
    manifest[target] = data.draw(_json)
    headers: dict[str, Any] = copy.deepcopy(package.headers)
    path = data.draw(st.sampled_from(sorted(headers)))
    headers[path][data.draw(st.sampled_from(["kv", "tensors", "version"]))] = data.draw(_json)

    result = audit(json.dumps(manifest).encode(), package.files, headers)

    assert result.verdict in auditing.VERDICTS
    json.dumps(result.to_json(), allow_nan=False)
    assert parse_manifest(json.dumps(manifest).encode()).trusted or result.verdict == "invalid-manifest"


_SMALL = {schema: build(LLAMA, schema, mtp_generation(schema, [15])) for schema in (1, 2)}
