"""model-package.json parsing: typed manifests from v1 and v2, every problem code, hostile input."""

from __future__ import annotations

import copy
import json
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
    mtp_name,
)

SCHEMAS = pytest.mark.parametrize("schema", [1, 2])
Edit = Callable[[dict[str, Any]], None]


def manifest_dict(schema: int, generation: dict[str, Any] | None = None) -> dict[str, Any]:
    return copy.deepcopy(build(QWEN35, schema, generation).manifest)


def parse(doc: Any) -> ManifestResult:
    return parse_manifest(json.dumps(doc).encode())


def codes(result: ManifestResult) -> list[str]:
    return [p.code for p in result.problems]


def errors(result: ManifestResult) -> list[str]:
    return [p.code for p in result.problems if p.severity == "error"]


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

    assert codes(result) == ["v1_offline_only"]
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


def test_the_old_v1_name_native_mtp_n1_is_not_selected_by_mtp() -> None:
    generation = mtp_generation(1, [40])
    strategies = generation["speculative_decoding"]["strategies"]
    strategies["native-mtp-n1"] = strategies.pop(mtp_name(1))
    generation["speculative_decoding"]["default"] = "native-mtp-n1"
    parsed = parse(manifest_dict(1, generation)).manifest
    assert parsed is not None and parsed.speculative_decoding is not None

    assert parsed.speculative_decoding.strategy("mtp") is None
    assert parsed.speculative_decoding.strategy("native-mtp-n1") is not None


def test_v1_tolerates_keys_it_does_not_know() -> None:
    assert errors(edited(1, lambda d: d.update(publisher="someone"))) == []


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
        (b"[" * 100_000, "manifest_too_large"),  # 100,000 values: past the input budget before its depth
        (b"[" * 900 + b"]" * 900, "too_deeply_nested"),
        (b'{"a":' * 70 + b"1" + b"}" * 70, "too_deeply_nested"),
        (b"[" * 65 + b"]" * 65, "too_deeply_nested"),
        (b'{"a":' * 64 + b"{}" + b"}" * 64, "too_deeply_nested"),
        (b'{"layer_count": 18446744073709551616}', "invalid_number"),
        (b'{"layer_count": ' + b"9" * 100_000 + b"}", "invalid_number"),
        (b'{"x": 1e999}', "invalid_number"),
        (b"[1, 2]", "invalid_manifest_json"),
        (b"0", "invalid_manifest_json"),
        (b'"text"', "invalid_manifest_json"),
        (b"{}", "invalid_manifest_json"),
        (b'{"schema_version": 3}', "invalid_manifest_json"),
        (b'{"schema_version": "2"}', "invalid_manifest_json"),
        (b'{"schema_version": true}', "invalid_manifest_json"),
    ],
)
def test_it_rejects_input_it_cannot_trust_at_all(data: bytes, code: str) -> None:
    result = parse_manifest(data)

    assert result.manifest is None
    assert codes(result) == [code]
    assert result.problems[0].severity == "error"
    assert result.problems[0].message.startswith("model-package.json")


def test_nesting_up_to_the_limit_is_accepted() -> None:
    assert codes(parse_manifest(b"[" * m.MAX_DEPTH + b"]" * m.MAX_DEPTH)) == ["invalid_manifest_json"]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        # Past the shared input budget's values (a value per 8 bytes): refused before json.loads runs.
        (b"[" + b"[]," * (m.MAX_MANIFEST_BYTES // 3 - 2) + b"1]", "manifest_too_large"),
        (b"[" + b"1," * (m.MAX_MANIFEST_BYTES // 2 - 2) + b"1]", "manifest_too_large"),
        (b"[" + b"1.5e100," * (m.MAX_MANIFEST_BYTES // 8 - 2) + b"1]", "manifest_too_large"),
        (b"[" + b"1.5e100, " * (m.MAX_MANIFEST_BYTES // 16) + b"1]", "invalid_manifest_json"),
    ],
    ids=["empty-arrays", "integers", "floats", "half-as-many-floats"],
)
def test_a_16_mib_body_of_tiny_values_is_refused_as_not_a_manifest(body: bytes, code: str) -> None:
    # How long it takes is measured by bench/bench_manifest.py (BENCHMARKS.md), not here.
    assert codes(parse_manifest(body)) == [code]


def test_it_refuses_to_parse_a_body_over_16_mib() -> None:
    result = parse_manifest(b"{" + b" " * m.MAX_MANIFEST_BYTES + b"}")

    assert codes(result) == ["manifest_too_large"]


@SCHEMAS
def test_it_reports_duplicate_keys(schema: int) -> None:
    text = json.dumps(manifest_dict(schema))
    result = parse_manifest(
        text.replace('"layer_count": 41', '"layer_count": 41, "layer_count": 40').encode()
    )

    assert "duplicate_key" in codes(result)
    assert not result.trusted


def test_problem_messages_stay_short_and_ascii_for_hostile_names() -> None:
    generation = mtp_generation(2, [40])
    generation["speculative_decoding"]["default"] = "\u202e<script>" + "x" * 10_000
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
