"""The rest of mesh-llm's v2 rulebook, one manifest per rule: request-default profiles value by value, the
speculative-decoding shapes test_rulebook.py does not reach, typed publisher defaults, and serde's decoding
and re-serialisation of the less common types. Each rule is shown firing with mesh-llm's code, path and
sentence, and a value just inside each bound is shown passing.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import pytest

from packages_app.manifest import parse_manifest
from packages_app.manifest.identity import package_id_of
from packages_app.manifest.reader import json_type, unsafe_path_reason
from packages_app.manifest.v2 import parse_v2
from packages_app.manifest.v2rules import path_extension
from tests.test_rulebook import (
    REV,
    Doc,
    _composite_sd,
    _defaults,
    _ngram,
    _publisher,
    edited,
    errors,
    judge,
    mtp_sd,
    native,
    v2_base,
    with_sd,
)

RD = "generation.request_defaults"
PROFILE = f"{RD}.profiles[standard]"
SD = "generation.speculative_decoding"


def profile(**values: Any) -> Callable[[Doc], None]:
    return lambda doc: doc.update(generation={"request_defaults": _defaults(**values)})


def speculative(sd: Doc) -> Callable[[Doc], None]:
    return lambda doc: with_sd(doc, sd)


def says(result: Any, code: str, path: str, message: str) -> bool:
    """An error with mesh-llm's code at mesh-llm's path whose sentence holds `message`."""
    return any(
        p.code == code and p.path == path and p.severity == "error" and message in p.message
        for p in result.problems
    )


PROFILE_CASES: list[tuple[dict[str, Any], str, str]] = [
    ({"max_tokens": 0}, "max_tokens", "max_tokens must be greater than zero"),
    ({"presence_penalty": 2.5}, "presence_penalty", "value must be within -2..=2"),
    ({"frequency_penalty": -2.5}, "frequency_penalty", "value must be within -2..=2"),
    ({"top_nsigma": -1.5}, "top_nsigma", "value must be within -1..=1.7976931348623157e308"),
    ({"dynatemp_range": -0.1}, "dynatemp_range", "value must be within 0..=1.7976931348623157e308"),
    ({"dynatemp_exponent": -1.0}, "dynatemp_exponent", "value must be within 0..=1.7976931348623157e308"),
    ({"top_p": 1.5}, "top_p", "value must be within 0..=1"),
    ({"min_p": -0.5}, "min_p", "value must be within 0..=1"),
    ({"typical_p": 2.0}, "typical_p", "value must be within 0..=1"),
    ({"temperature": -0.5}, "temperature", "temperature must be non-negative"),
    ({"repeat_penalty": 0.0}, "repeat_penalty", "repeat_penalty must be greater than zero"),
    ({"top_k": -1}, "top_k", "top_k must be greater than or equal to zero"),
    ({"repeat_last_n": -2}, "repeat_last_n", "repeat_last_n must be greater than or equal to -1"),
    ({"seed": 2**32}, "seed", "seed must fit in the native u32 field"),
    ({"logit_bias": {"15043": 100.5}}, "logit_bias[15043]", "values must be within -100..=100"),
    ({"logit_bias": {"hello": 1.0}}, "logit_bias[hello]", "keys must be signed token ids"),
    ({"logit_bias": {"4294967296": 1.0}}, "logit_bias[4294967296]", "keys must be signed token ids"),
    ({"mirostat_mode": 3}, "mirostat_mode", "mirostat_mode must be 0, 1, or 2"),
    ({"mirostat_entropy": 0.0}, "mirostat_entropy", "value must be greater than zero"),
    ({"mirostat_learning_rate": -1.0}, "mirostat_learning_rate", "value must be greater than zero"),
    ({"samplers": ["top_k", "banana"]}, "samplers[1]", "unsupported sampler name"),
    ({"sampler_sequence": "kz"}, "sampler_sequence", "sampler sequence contains an unsupported code"),
    ({"dry": {"multiplier": -0.1}}, "dry", "DRY values are outside native sampler bounds"),
    ({"dry": {"base": 0.0}}, "dry", "DRY values are outside native sampler bounds"),
    ({"dry": {"allowed_length": -1}}, "dry", "DRY values are outside native sampler bounds"),
    ({"dry": {"penalty_last_n": -2}}, "dry", "DRY values are outside native sampler bounds"),
    ({"dry": {"sequence_breakers": ["\n", ""]}}, "dry.sequence_breakers[1]", "non-empty and shorter than 16"),
    ({"dry": {"sequence_breakers": ["x" * 16]}}, "dry.sequence_breakers[0]", "non-empty and shorter than 16"),
    ({"xtc": {"probability": 1.5}}, "xtc.probability", "value must be within 0..=1"),
    ({"xtc": {"threshold": -0.1}}, "xtc.threshold", "value must be within 0..=1"),
]


@pytest.mark.parametrize(("values", "field", "message"), PROFILE_CASES, ids=[c[1] for c in PROFILE_CASES])
def test_a_request_default_outside_its_native_bound_is_refused_at_its_path(
    values: dict[str, Any], field: str, message: str
) -> None:
    result = edited(v2_base(), profile(**values))

    assert says(result, "invalid_generation_value", f"{PROFILE}.{field}", message), result.problems
    assert not result.trusted


def test_an_empty_stop_string_is_a_missing_value() -> None:
    result = edited(v2_base(), profile(stop=["</s>", ""]))

    assert says(result, "missing_value", f"{PROFILE}.stop[1]", "value must not be empty")


def test_values_on_every_native_bound_are_accepted() -> None:
    inside = {
        "max_tokens": 1,
        "stop": ["</s>"],
        "temperature": 0.0,
        "top_p": 1.0,
        "min_p": 0.0,
        "typical_p": 1.0,
        "top_nsigma": -1.0,
        "presence_penalty": -2.0,
        "frequency_penalty": 2.0,
        "repeat_penalty": 0.01,
        "top_k": 0,
        "repeat_last_n": -1,
        "seed": 2**32 - 1,
        "logit_bias": {"0": -100.0, "2147483647": 100.0},
        "mirostat_mode": 2,
        "mirostat_entropy": 5.0,
        "mirostat_learning_rate": 0.1,
        "samplers": ["top_k", "top_p"],
        "sampler_sequence": "k p",
        "dry": {"multiplier": 0.0, "base": 1.75, "allowed_length": 0, "penalty_last_n": -1},
        "xtc": {"probability": 0.0, "threshold": 1.0},
        "ignore_eos": False,
        "reasoning": {"enabled": "auto", "budget": "medium"},
    }
    result = edited(v2_base(), profile(**inside))

    assert errors(result) == [] and result.trusted


def test_a_request_default_that_is_nan_is_refused_as_not_finite() -> None:
    doc = v2_base()
    doc["generation"] = {"request_defaults": _defaults(temperature=math.nan)}  # only a Python caller can

    _, problems = parse_v2(doc)

    assert any(p.path == f"{PROFILE}.temperature" and "value must be finite" in p.message for p in problems)


@pytest.mark.parametrize(
    ("provenance", "message"),
    [
        ({"revision": "main"}, "provenance revision must be an immutable 40-character Git commit SHA"),
        ({"url": f"ftp://example.org/{REV}/x"}, "provenance URL must use http or https"),
    ],
)
def test_request_defaults_must_say_where_they_come_from_at_a_pinned_commit(
    provenance: dict[str, str], message: str
) -> None:
    def edit(doc: Doc) -> None:
        block = _defaults()
        block["profiles"]["standard"]["provenance"].update(provenance)
        doc["generation"] = {"request_defaults": block}

    field = next(iter(provenance))
    result = edited(v2_base(), edit)
    assert says(result, "invalid_generation_value", f"{PROFILE}.provenance.{field}", message)


@pytest.mark.parametrize(
    ("selection", "code", "message"),
    [
        (
            {"default": "standard", "reasoning_enabled": " "},
            "missing_value",
            "selected profile must not be empty",
        ),
        (
            {"default": "standard", "reasoning_disabled": "quiet"},
            "invalid_generation_value",
            "references undeclared generation profile 'quiet'",
        ),
    ],
)
def test_a_profile_selection_names_a_declared_profile(
    selection: dict[str, str], code: str, message: str
) -> None:
    def edit(doc: Doc) -> None:
        block = _defaults()
        block["selection"] = selection
        doc["generation"] = {"request_defaults": block}

    key = next(k for k in selection if k != "default")
    assert says(edited(v2_base(), edit), code, f"{RD}.selection.{key}", message)


def composite(**policy: Any) -> Doc:
    sd = _composite_sd()
    sd["strategies"]["mtp-cache"]["extension_policy"] = {"max_tokens": 4, **policy}
    return sd


SPECULATIVE_CASES: list[tuple[Doc, str, str]] = [
    ({**mtp_sd(), "default": " "}, f"{SD}.default", "default must not be empty"),
    (
        {"default": "mtp", "proposers": {" ": native([1])}, "strategies": mtp_sd()["strategies"]},
        f"{SD}.proposers",
        "proposer names must not be empty",
    ),
    (
        {"default": "mtp", "strategies": {" ": native([1]), "mtp": native([1])}},
        f"{SD}.strategies",
        "strategy names must not be empty",
    ),
    (
        {
            "default": "mtp",
            "proposers": {"head": native([1], depth=0)},
            "strategies": {"mtp": {"type": "native-mtp", "proposer": "head"}},
        },
        f"{SD}.proposers[head].prediction_depth",
        "prediction_depth must be greater than zero",
    ),
    (
        {
            "default": "mtp",
            "proposers": {"head": native([])},
            "strategies": {"mtp": {"type": "native-mtp", "proposer": "head"}},
        },
        f"{SD}.proposers[head].layer_indices",
        "layer_indices must not be empty",
    ),
    (
        {
            "default": "c",
            "proposers": {"cache": _ngram(max_proposal_tokens=0)},
            "strategies": {"c": {"type": "ngram-cache", "proposer": "cache"}},
        },
        f"{SD}.proposers[cache].max_proposal_tokens",
        "max_proposal_tokens must be greater than zero",
    ),
    (
        {"default": "c", "strategies": {"c": {"type": "ngram-cache", "proposer": " "}}},
        f"{SD}.strategies[c].proposer",
        "proposer reference must not be empty",
    ),
    (
        mtp_sd(prediction_depth=0),
        f"{SD}.strategies[mtp].prediction_depth",
        "prediction_depth must be greater than zero",
    ),
    (
        {
            "default": "mtp",
            "proposers": {"head": native([1])},
            "strategies": {"mtp": {**native([1]), "proposer": "head"}},
        },
        f"{SD}.strategies[mtp]",
        "not both",
    ),
    (
        {"default": "mtp", "strategies": {"mtp": {"type": "native-mtp", "prediction_depth": 1}}},
        f"{SD}.strategies[mtp].layer_indices",
        "must declare layer_indices alongside prediction_depth",
    ),
    (
        {"default": "mtp", "strategies": {"mtp": {"type": "native-mtp", "layer_indices": [1]}}},
        f"{SD}.strategies[mtp].prediction_depth",
        "must declare prediction_depth alongside layer_indices",
    ),
    (
        {"default": "mtp", "strategies": {"mtp": {"type": "native-mtp"}}},
        f"{SD}.strategies[mtp]",
        "must set either proposer or the inline prediction_depth/layer_indices form",
    ),
    (
        mtp_sd(window_policy={"default": " ", "initial_window": 1, "min_window": 1, "max_window": 1}),
        f"{SD}.strategies[mtp].window_policy.default",
        "window_policy.default must not be empty",
    ),
    (
        mtp_sd(
            window_policy={
                "default": "f",
                "initial_window": 1,
                "min_window": 1,
                "max_window": 1,
                "pipeline_depth": 0,
            }
        ),
        f"{SD}.strategies[mtp].window_policy.pipeline_depth",
        "window_policy.pipeline_depth must be greater than zero",
    ),
    (composite(max_tokens=0), f"{SD}.strategies[mtp-cache].extension_policy.max_tokens", "greater than zero"),
    (
        composite(initial_tokens=0),
        f"{SD}.strategies[mtp-cache].extension_policy.initial_tokens",
        "greater than zero",
    ),
    (
        composite(tail_backoff_proposals=0),
        f"{SD}.strategies[mtp-cache].extension_policy.tail_backoff_proposals",
        "tail_backoff_proposals must be greater than zero",
    ),
]


@pytest.mark.parametrize(("sd", "path", "message"), SPECULATIVE_CASES, ids=[c[1] for c in SPECULATIVE_CASES])
def test_a_speculative_decoding_shape_mesh_llm_refuses_is_reported_at_its_path(
    sd: Doc, path: str, message: str
) -> None:
    result = edited(v2_base(), speculative(sd))

    assert says(result, "invalid_generation_value", path, message), result.problems


def test_a_package_needs_artifacts() -> None:
    result = edited(v2_base(), lambda doc: doc["artifact_catalog"].update(entries=[]))

    assert says(result, "missing_value", "artifact_catalog.entries", "artifact catalog must not be empty")


def publisher_default(dtype_for: str, artifact_id: str = "layer-1") -> Callable[[Doc], None]:
    return lambda doc: doc.update(
        publisher_defaults={
            dtype_for: {"dtype": "bf16", "artifact_id": artifact_id, "json_path": "$.torch_dtype"}
        }
    )


def both(*edits: Callable[[Doc], None]) -> Callable[[Doc], None]:
    return lambda doc: [edit(doc) for edit in edits] and None


def test_a_typed_publisher_default_must_be_bound_to_publisher_metadata() -> None:
    unbound = edited(v2_base(), publisher_default("compute_dtype"))
    bound = edited(v2_base(), both(_publisher(), publisher_default("compute_dtype")))

    where = "publisher_defaults.compute_dtype.artifact_id"
    assert says(
        unbound,
        "source_identity_mismatch",
        where,
        "typed publisher default is not bound to publisher_metadata",
    )
    assert errors(bound) == []  # the control: bound to the model_config it reads


def test_a_typed_publisher_default_must_come_from_a_file_of_its_role() -> None:
    result = edited(v2_base(), both(_publisher(role="tokenizer_config"), publisher_default("kv_cache_dtype")))

    where = "publisher_defaults.kv_cache_dtype.artifact_id"
    assert says(
        result, "source_identity_mismatch", where, "kv_cache_dtype cannot be sourced from tokenizer_config"
    )


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        (
            "reasoning.enabled",
            1,
            "invalid type: integer `1`, expected a variant name",
        ),
        ("reasoning.budget", "lots", "unknown variant `lots`, expected one of `auto`, `low`"),
        ("reasoning.budget", -1, "invalid value: integer `-1`, expected u32"),
        ("ignore_eos", "yes", 'invalid type: string "yes", expected a boolean'),
        ("stop", ["\ud800"], "lone leading surrogate in hex escape"),
    ],
)
def test_serde_refuses_a_profile_field_of_the_wrong_type(where: str, value: Any, message: str) -> None:
    *parents, last = where.split(".")
    values: dict[str, Any] = {}
    node = values
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value

    result = edited(v2_base(), profile(**values), recompute_id=False)

    assert any(message in p.message for p in result.problems if p.code == "invalid_manifest_json"), (
        result.problems
    )


def test_a_strategy_that_is_not_an_object_is_refused_as_serde_would() -> None:
    result = edited(v2_base(), speculative({"default": "mtp", "strategies": {"mtp": "native-mtp"}}), False)

    assert any("expected internally tagged enum StrategyKind" in p.message for p in result.problems), (
        result.problems
    )


def test_the_package_id_is_computed_over_booleans_budgets_and_floats_as_serde_writes_them() -> None:
    doc = v2_base()
    doc["generation"] = {
        "request_defaults": _defaults(
            ignore_eos=True, temperature=0.7, top_nsigma=1e16, reasoning={"budget": 512}
        )
    }
    identity = package_id_of(copy.deepcopy(doc))
    flipped = copy.deepcopy(doc)
    flipped["generation"]["request_defaults"]["profiles"]["standard"]["ignore_eos"] = False

    assert package_id_of(flipped) != identity
    doc["package_id"] = identity
    assert errors(judge(doc, recompute_id=False)) == []


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("", "is empty"),
        ("/etc/passwd", "is absolute"),
        ("C:/model.gguf", "is absolute"),
        ("layers\\layer-0.gguf", "contains a backslash"),
        ("layers/\x01.gguf", "contains a control character"),
        ("layers/../../x.gguf", "climbs out of the package with '..'"),
        ("layers//x.gguf", "has an empty or '.' segment"),
        ("./x.gguf", "has an empty or '.' segment"),
        ("layers/layer-0.gguf", None),
    ],
)
def test_an_artifact_path_that_could_leave_the_package_folder_says_why(path: str, reason: str | None) -> None:
    assert unsafe_path_reason(path) == reason


@pytest.mark.parametrize(
    ("path", "extension"),
    [
        ("layers/a.gguf", "gguf"),
        ("layers/.hidden", None),
        ("layers/..", None),
        ("layers/", None),
        ("a.b/c", None),
    ],
)
def test_an_artifacts_extension_is_read_as_rusts_path_extension(path: str, extension: str | None) -> None:
    assert path_extension(path) == extension


@pytest.mark.parametrize(
    ("value", "name"),
    [(True, "a boolean"), (3, "an integer"), (1.5, "a number"), (None, "null"), (b"x", "a value")],
)
def test_a_json_value_is_named_by_its_type_in_messages(value: Any, name: str) -> None:
    assert json_type(value) == name


def test_a_manifest_that_is_a_json_array_is_invalid_naming_what_it_is() -> None:
    result = parse_manifest(b"[1, 2]")

    assert [p.message for p in result.problems] == [
        "model-package.json must hold a JSON object, not an array."
    ]
