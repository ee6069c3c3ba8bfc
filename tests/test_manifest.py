"""model-package.json parsing: typed manifests from v1 and v2, every problem code, hostile input."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packages_app import manifest as m
from packages_app.manifest import ManifestResult, parse_manifest, render_manifest
from tests.audit_fixtures import (
    GLM47,
    NEMOTRON,
    QWEN35,
    build,
    composite_generation,
    mtp_generation,
    ngram_generation,
)

SCHEMAS = pytest.mark.parametrize("schema", [1, 2])
Edit = Callable[[dict[str, Any]], None]


def manifest_dict(schema: int, generation: dict[str, Any] | None = None) -> dict[str, Any]:
    return copy.deepcopy(build(QWEN35, schema, generation).manifest)


def parse(doc: Any) -> ManifestResult:
    return parse_manifest(json.dumps(doc).encode())


def codes(result: ManifestResult) -> list[str]:
    return [p.code for p in result.problems]


def edited(schema: int, edit: Edit, generation: dict[str, Any] | None = None) -> ManifestResult:
    doc = manifest_dict(schema, generation)
    edit(doc)
    return parse(doc)


def sd(doc: dict[str, Any]) -> dict[str, Any]:
    value: dict[str, Any] = doc["generation"]["speculative_decoding"]
    return value


# --- well-formed manifests --------------------------------------------------------------------


def test_it_parses_a_realistic_v1_manifest_into_typed_fields() -> None:
    result = parse(manifest_dict(1))

    assert result.problems == []
    assert result.trusted
    parsed = result.manifest
    assert parsed is not None
    assert (parsed.schema_version, parsed.format, parsed.layer_count) == (1, "layer-package", 41)
    assert parsed.model_id == "unsloth/Qwen3.5-35B-A3B-MTP-GGUF:UD-Q4_K_XL"
    assert parsed.abi_version == "0.1.24" and parsed.activation_width == 2048
    assert parsed.source_model.path == "/source/Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf"
    assert parsed.source_model.is_build_host_path
    assert parsed.layer_files()[40] == "layers/layer-040.gguf"
    assert parsed.metadata_path == "shared/metadata.gguf"
    assert {a.role for a in parsed.artifacts} == {"metadata", "embeddings", "output", "layer"}
    assert all(a.size and a.sha256 for a in parsed.artifacts)
    assert parsed.generation is None and parsed.speculative_decoding is None


def test_it_parses_a_realistic_v2_manifest_into_typed_fields() -> None:
    result = parse(manifest_dict(2, mtp_generation(2, [40])))

    assert result.problems == []
    parsed = result.manifest
    assert parsed is not None
    assert parsed.package_id is not None and parsed.package_id.startswith("sha256:")
    assert parsed.source_model.metadata_artifact_id == "metadata"
    assert not parsed.source_model.is_build_host_path
    assert parsed.layer_files()[40] == "layers/layer-00040.gguf"
    roles = {a.artifact_id: a.role for a in parsed.artifacts}
    assert (roles["metadata"], roles["common"], roles["layer-00040"]) == ("metadata", "common", "layer")
    assert parsed.speculative_decoding is not None
    strategy = parsed.speculative_decoding.default_strategy
    assert strategy is not None and strategy.uses_native_mtp
    assert strategy.native_mtp == m.NativeMtp(1, (40,))
    assert strategy.window_policy == m.WindowPolicy("fixed", 1, 1, 1)


def test_it_resolves_a_composite_strategy_through_its_proposers() -> None:
    parsed = parse(copy.deepcopy(build(NEMOTRON, 2, composite_generation([88])).manifest)).manifest
    assert parsed is not None and parsed.speculative_decoding is not None

    composite = parsed.speculative_decoding.strategies["mtp-suffix"]
    assert (composite.type, composite.primary, composite.extender) == ("composite", "mtp", "suffix")
    assert composite.native_mtp == m.NativeMtp(1, (88,))
    assert composite.extension_policy == m.ExtensionPolicy(8, 2, None)
    assert parsed.speculative_decoding.proposers["suffix"].ngram == m.Ngram(3, 8, 8, "request")


def test_the_legacy_native_mtp_n1_name_is_understood_as_mtp() -> None:
    generation = mtp_generation(1, [40])
    generation["speculative_decoding"]["strategies"]["native-mtp-n1"]["type"] = "native-mtp-n1"
    parsed = parse(manifest_dict(1, generation)).manifest
    assert parsed is not None and parsed.speculative_decoding is not None

    legacy = parsed.speculative_decoding.strategy("mtp")
    assert legacy is not None and legacy.name == "native-mtp-n1" and legacy.type == "native-mtp"


def test_v1_tolerates_keys_it_does_not_know() -> None:
    assert edited(1, lambda d: d.update(publisher="someone")).problems == []


# --- generic shape problems -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", "invalid_json"),
        (b'{"schema_version": 1,', "invalid_json"),
        (b'{"schema_version": 1, "x": NaN}', "invalid_json"),
        (b'{"schema_version": 1, "x": -Infinity}', "invalid_json"),
        (b"\xff\xfe{}", "invalid_json"),
        (b'\xef\xbb\xbf{"schema_version": 1}', "invalid_json"),
        (b"[" * 100_000, "too_deeply_nested"),
        (b'{"a":' * 70 + b"1" + b"}" * 70, "too_deeply_nested"),
        (b"[" * 65 + b"]" * 65, "too_deeply_nested"),
        (b'{"a":' * 64 + b"{}" + b"}" * 64, "too_deeply_nested"),
        (b'{"layer_count": 18446744073709551616}', "invalid_number"),
        (b'{"layer_count": ' + b"9" * 100_000 + b"}", "invalid_number"),
        (b'{"x": 1e999}', "invalid_number"),
        (b"[1, 2]", "invalid_type"),
        (b"0", "invalid_type"),
        (b'"text"', "invalid_type"),
        (b"{}", "missing_key"),
        (b'{"schema_version": 3}', "unsupported_schema_version"),
        (b'{"schema_version": "2"}', "unsupported_schema_version"),
        (b'{"schema_version": true}', "unsupported_schema_version"),
    ],
)
def test_it_rejects_input_it_cannot_trust_at_all(data: bytes, code: str) -> None:
    result = parse_manifest(data)

    assert result.manifest is None
    assert codes(result) == [code]
    assert result.problems[0].severity == "error"
    assert result.problems[0].message.startswith("model-package.json")


def test_nesting_up_to_the_limit_is_accepted() -> None:
    assert codes(parse_manifest(b"[" * m.MAX_DEPTH + b"]" * m.MAX_DEPTH)) == ["invalid_type"]


@pytest.mark.parametrize(
    "body",
    [
        b"[" + b"[]," * (m.MAX_MANIFEST_BYTES // 3 - 2) + b"1]",
        b"[" + b"1," * (m.MAX_MANIFEST_BYTES // 2 - 2) + b"1]",
        b"[" + b"1.5e100," * (m.MAX_MANIFEST_BYTES // 8 - 2) + b"1]",
    ],
    ids=["empty-arrays", "integers", "floats"],
)
def test_a_16_mib_body_of_tiny_values_is_rejected_within_seconds(body: bytes) -> None:
    started = time.monotonic()

    assert codes(parse_manifest(body)) == ["invalid_type"]
    assert time.monotonic() - started < 10


def test_it_refuses_to_parse_a_body_over_16_mib() -> None:
    started = time.monotonic()
    result = parse_manifest(b"{" + b" " * m.MAX_MANIFEST_BYTES + b"}")

    assert codes(result) == ["manifest_too_large"]
    assert time.monotonic() - started < 0.5


@SCHEMAS
def test_it_reports_duplicate_keys(schema: int) -> None:
    text = json.dumps(manifest_dict(schema))
    result = parse_manifest(
        text.replace('"layer_count": 41', '"layer_count": 41, "layer_count": 40').encode()
    )

    assert "duplicate_key" in codes(result)
    assert not result.trusted


@SCHEMAS
def test_it_reports_a_value_of_the_wrong_type_with_its_path(schema: int) -> None:
    result = edited(schema, lambda d: d.update(layer_count="41"))

    problem = next(p for p in result.problems if p.code == "invalid_type")
    assert problem.message == "model-package.json layer_count must be an integer, not a string."
    assert problem.evidence == {"path": "layer_count"}


@SCHEMAS
def test_it_reports_each_missing_required_key(schema: int) -> None:
    result = edited(schema, lambda d: d.pop("model_id"))

    assert codes(result) == ["missing_key"]
    assert "model_id" in result.problems[0].message


def test_v2_rejects_unknown_keys_at_every_level() -> None:
    def add_unknown(doc: dict[str, Any]) -> None:
        doc["extra"] = 1
        doc["artifact_catalog"]["entries"][0]["mirror"] = "x"
        sd(doc)["strategies"]["mtp"]["window_policy"]["speed"] = "fast"

    result = edited(2, add_unknown, mtp_generation(2, [40]))

    paths = [p.evidence["path"] for p in result.problems if p.code == "unknown_key"]
    assert paths == [
        "extra",
        "artifact_catalog.entries[0].mirror",
        "generation.speculative_decoding.strategies.mtp.window_policy.speed",
    ]


def test_v2_rejects_a_null_generation() -> None:
    assert codes(edited(2, lambda d: d.update(generation=None))) == ["invalid_type"]


@SCHEMAS
def test_it_rejects_impossible_values(schema: int) -> None:
    assert codes(edited(schema, lambda d: d.update(layer_count=0))) == ["invalid_value"]
    assert codes(edited(schema, lambda d: d.update(layer_count=10**9))) == ["invalid_value"]
    assert codes(edited(schema, lambda d: d.update(format="safetensors"))) == ["invalid_value"]


def test_v1_artifacts_need_bytes_and_consistent_tensor_counts() -> None:
    def zero_bytes(doc: dict[str, Any]) -> None:
        doc["layers"][3]["artifact_bytes"] = 0
        doc["layers"][4]["tensor_bytes"] = 0

    result = edited(1, zero_bytes)

    assert codes(result) == ["invalid_value", "invalid_value"]
    assert "layers[4].tensor_bytes is 0 with tensor_count 19" in result.problems[1].message


def test_a_flood_of_problems_is_capped_but_stays_untrusted() -> None:
    doc = manifest_dict(1)
    doc["layers"] = [{"layer_index": "x"}] * 20_000

    started = time.monotonic()
    result = parse(doc)

    assert len(result.problems) == m.MAX_PROBLEMS + 1
    assert result.problems[-1].code == "too_many_problems"
    assert result.problems[-1].severity == "error"
    assert not result.trusted
    assert time.monotonic() - started < 5


# --- the packaging tool's codes ---------------------------------------------------------------


def test_v1_requires_the_activation_width_and_abi_version() -> None:
    result = edited(1, lambda d: [d.pop("activation_width"), d.pop("skippy_abi_version")])

    assert codes(result) == ["missing_activation_width", "missing_skippy_abi_version"]


@pytest.mark.parametrize(
    ("schema", "edit"),
    [
        (1, lambda d: d["layers"].pop(7)),
        (2, lambda d: d["artifact_catalog"]["entries"].pop(9)),
    ],
)
def test_it_reports_a_missing_layer_by_index(schema: int, edit: Edit) -> None:
    result = edited(schema, edit)

    assert codes(result) == ["missing_layer"]
    assert "has no file for layer 7 (of 41)" in result.problems[0].message
    assert result.problems[0].evidence == {"layer_indices": [7]}


@pytest.mark.parametrize(
    ("schema", "edit"),
    [
        (1, lambda d: d["layers"].append(copy.deepcopy(d["layers"][40]))),
        (
            2,
            lambda d: d["artifact_catalog"]["entries"].append(
                {**d["artifact_catalog"]["entries"][42], "id": "again"}
            ),
        ),
    ],
)
def test_it_reports_a_layer_named_twice(schema: int, edit: Edit) -> None:
    result = edited(schema, edit)

    assert codes(result) == ["duplicate_layer"]
    assert "names layer 40 twice" in result.problems[0].message


@pytest.mark.parametrize(
    ("schema", "edit", "message"),
    [
        (1, lambda d: d["shared"].pop("output"), "model-package.json has no shared.output artifact."),
        (
            2,
            lambda d: d.update(sidecars=[{"kind": "mmproj", "artifact_id": "mmproj-f16"}]),
            'model-package.json sidecars name artifact "mmproj-f16", absent from artifact_catalog.',
        ),
    ],
)
def test_it_reports_an_artifact_the_manifest_refers_to_but_does_not_list(
    schema: int, edit: Edit, message: str
) -> None:
    result = edited(schema, edit)

    assert [(p.code, p.message) for p in result.problems] == [("missing_artifact", message)]


@pytest.mark.parametrize(
    "path",
    ["/etc/passwd", "../outside.gguf", "layers/../../x.gguf", "layers\\layer-040.gguf", "C:/x.gguf", ""],
)
@SCHEMAS
def test_it_rejects_artifact_paths_that_could_leave_the_package(schema: int, path: str) -> None:
    def set_path(doc: dict[str, Any]) -> None:
        target = doc["layers"][40] if schema == 1 else doc["artifact_catalog"]["entries"][42]
        target["path"] = path

    result = edited(schema, set_path)
    parsed = result.manifest

    assert "unsafe_artifact_path" in codes(result)
    # The unsafe file never reaches callers that might fetch or open it.
    assert parsed is not None and all(a.path != path for a in parsed.artifacts)


@pytest.mark.parametrize(
    ("schema", "edit"),
    [
        (1, lambda d: d["layers"][0].update(sha256="not-a-digest")),
        (2, lambda d: d["artifact_catalog"]["entries"][0].update(sha256="AB" * 32)),
        (2, lambda d: d.update(package_id="sha256:" + "AB" * 32)),
        (2, lambda d: d["source_model"].update(sha256="12345")),
    ],
)
def test_it_rejects_malformed_digests(schema: int, edit: Edit) -> None:
    assert codes(edited(schema, edit)) == ["invalid_digest"]


def test_v1_accepts_uppercase_digests_and_lowercases_them() -> None:
    result = edited(1, lambda d: d["layers"][0].update(sha256="AB" * 32))

    assert result.problems == []
    assert result.manifest is not None and result.manifest.artifacts[3].sha256 == "ab" * 32


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["artifact_catalog"]["entries"][0].update(id="layer 00000/x"),
        lambda d: d["artifact_catalog"]["entries"][3].update(id=d["artifact_catalog"]["entries"][2]["id"]),
    ],
)
def test_v2_rejects_bad_or_repeated_artifact_ids(edit: Edit) -> None:
    assert "invalid_identifier" in codes(edited(2, edit))


@SCHEMAS
def test_it_rejects_a_primary_file_that_is_not_a_source_file(schema: int) -> None:
    result = edited(schema, lambda d: d["source_model"].update(primary_file="other.gguf"))

    assert codes(result) == ["unknown_source_file"]


@pytest.mark.parametrize("artifact_id", ["nope", "common-readme"])
def test_v2_rejects_a_metadata_artifact_that_is_missing_or_not_gguf(artifact_id: str) -> None:
    def point_elsewhere(doc: dict[str, Any]) -> None:
        doc["source_model"]["metadata_artifact_id"] = artifact_id
        entry = {"id": "common-readme", "path": "shared/README.txt", "byte_size": 10, "sha256": "0" * 64}
        doc["artifact_catalog"]["entries"].append(entry)

    assert "invalid_metadata_artifact" in codes(edited(2, point_elsewhere))


@SCHEMAS
def test_it_rejects_an_artifact_beyond_the_layer_count(schema: int) -> None:
    result = edited(schema, lambda d: d.update(layer_count=40))

    assert codes(result) == ["layer_out_of_bounds"]
    assert "as layer 40, but layer_count is 40" in result.problems[0].message


# --- generation.speculative_decoding ----------------------------------------------------------


@SCHEMAS
def test_it_rejects_a_default_that_names_no_strategy(schema: int) -> None:
    result = edited(schema, lambda d: sd(d).update(default="turbo"), mtp_generation(schema, [40]))

    assert codes(result) == ["unknown_strategy"]
    assert '"turbo"' in result.problems[0].message


@SCHEMAS
def test_it_rejects_a_reference_to_an_undeclared_proposer(schema: int) -> None:
    generation = composite_generation([40])
    result = edited(schema, lambda d: sd(d)["strategies"]["mtp-suffix"].update(extender="cache"), generation)

    assert codes(result) == ["unknown_proposer"]


@pytest.mark.parametrize(
    "edit",
    [
        lambda g: g["proposers"]["mtp"].update(prediction_depth=0),
        lambda g: g["proposers"]["mtp"].update(layer_indices=[]),
        lambda g: g["proposers"]["mtp"].update(layer_indices=[40, 40]),
        lambda g: g["proposers"]["mtp"].update(layer_indices=["40"]),
        lambda g: g["proposers"]["suffix"].update(ngram_min=9),
        lambda g: g["proposers"]["suffix"].update(max_proposal_tokens=0),
        lambda g: g["proposers"]["suffix"].update(type="NgramSuffix"),
        lambda g: g["strategies"]["mtp"].update(layer_indices=[40]),
        lambda g: g["strategies"]["mtp"].pop("proposer"),
        lambda g: g["strategies"]["mtp"].update(proposer="suffix"),
        lambda g: g["strategies"]["mtp-suffix"].update(primary="suffix"),
        lambda g: g["strategies"]["mtp-suffix"]["window_policy"].update(min_window=3),
        lambda g: g["strategies"]["mtp-suffix"]["window_policy"].update(default="eager"),
        lambda g: g["strategies"]["mtp-suffix"]["extension_policy"].update(max_tokens=0),
        lambda g: g["strategies"].update(disabled={"type": "ngram-suffix", "proposer": "suffix"}),
        lambda g: g.update(default=""),
        lambda g: g.update(default="disabled"),
    ],
)
@SCHEMAS
def test_it_rejects_generation_values_the_schema_forbids(
    schema: int, edit: Callable[[dict[str, Any]], None]
) -> None:
    result = edited(schema, lambda d: edit(sd(d)), composite_generation([40]))

    assert "invalid_generation_value" in codes(result)
    assert not result.trusted


@pytest.mark.parametrize(
    ("generation", "edit", "reason"),
    [
        (mtp_generation(2, [40], depth=2), lambda g: None, "prediction_depth is 2"),
        (ngram_generation(ngram_max=5), lambda g: None, "at most 4 for ngram-cache"),
        (composite_generation([40]), lambda g: g["proposers"]["suffix"].update(ngram_min=2), "at least 3"),
        (composite_generation([40]), lambda g: g["proposers"]["suffix"].update(ngram_max=65), "at most 64"),
        (
            composite_generation([40]),
            lambda g: g["proposers"]["suffix"].update(history_scope="session"),
            'only supports "request"',
        ),
    ],
)
@SCHEMAS
def test_runtime_only_rules_are_reported_but_leave_the_manifest_trusted(
    schema: int, generation: dict[str, Any], edit: Callable[[dict[str, Any]], None], reason: str
) -> None:
    result = edited(schema, lambda d: edit(sd(d)), copy.deepcopy(generation))

    assert codes(result) == ["unsupported_generation_value"]
    assert reason in result.problems[0].message
    assert result.trusted
    assert result.manifest is not None and result.manifest.speculative_decoding is not None
    default = result.manifest.speculative_decoding.default_strategy
    assert default is not None and any(reason.split()[0] in r for r in default.runtime_refusals)


@SCHEMAS
def test_it_rejects_mtp_layer_indices_beyond_the_layer_count(schema: int) -> None:
    result = edited(schema, lambda d: None, mtp_generation(schema, [41]))

    assert codes(result) == ["layer_out_of_bounds"]
    assert "names layer 41, but layer_count is 41" in result.problems[0].message


def test_problem_messages_stay_short_and_ascii_for_hostile_names() -> None:
    generation = mtp_generation(2, [40])
    generation["speculative_decoding"]["default"] = "\ud800" + "x" * 10_000
    result = edited(2, lambda d: None, generation)

    assert codes(result) == ["unknown_strategy"]
    assert len(result.problems[0].message) < 300
    result.problems[0].message.encode("ascii")


# --- rendering --------------------------------------------------------------------------------


def test_render_manifest_keeps_key_order_and_two_space_indent() -> None:
    doc = {"schema_version": 2, "b": [1], "a": {"z": "é", "y": []}}

    text = render_manifest(doc)

    assert (
        text
        == '{\n  "schema_version": 2,\n  "b": [\n    1\n  ],\n  "a": {\n    "z": "é",\n    "y": []\n  }\n}\n'
    )
    assert json.loads(text) == doc
    assert render_manifest(json.loads(text)) == text


def test_render_manifest_escapes_lone_surrogates_so_the_text_is_valid_utf8() -> None:
    render_manifest({"name": "\ud800"}).encode("utf-8")


# --- never crash, never hang ------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_it_never_raises_on_arbitrary_bytes(data: bytes) -> None:
    assert isinstance(parse_manifest(data), ManifestResult)


_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
_BASE = {schema: build(GLM47, schema, composite_generation([47])).manifest for schema in (1, 2)}


@settings(max_examples=300, deadline=None)
@given(schema=st.sampled_from([1, 2]), data=st.data())
def test_it_never_raises_when_any_value_is_replaced(schema: int, data: st.DataObject) -> None:
    doc = copy.deepcopy(_BASE[schema])
    node: Any = doc
    # Walk down a random path and replace whatever is there.
    for _ in range(data.draw(st.integers(1, 6))):
        children = list(node) if isinstance(node, dict) else list(range(len(node)))
        key = data.draw(st.sampled_from(children))
        if not isinstance(node[key], dict | list) or not node[key]:
            break
        node = node[key]
    key = data.draw(st.sampled_from(list(node) if isinstance(node, dict) else list(range(len(node)))))
    node[key] = data.draw(_values)

    result = parse_manifest(json.dumps(doc).encode())

    assert result.manifest is not None or result.problems
    assert all(p.severity in ("error", "warning", "info") for p in result.problems)
