"""Pure: mesh-llm's validation of a package-v2 ``generation`` block: proposers, strategies, windows and
extensions (skippy-package-format lib.rs, docs/rules.md section 2); request defaults in
v2request_defaults.py. No Django, no I/O."""

from __future__ import annotations

from packages_app.manifest.v2issues import Issues
from packages_app.manifest.v2request_defaults import validate_request_defaults
from packages_app.manifest.v2schema import Json

_SD = "generation.speculative_decoding"


def validate_generation(generation: Json, layer_count: int, issues: Issues) -> None:
    if generation["request_defaults"] is not None:
        validate_request_defaults(generation["request_defaults"], issues)
    sd = generation["speculative_decoding"]
    if sd is None:
        return
    if not sd["default"].strip():
        issues.push("invalid_generation_value", f"{_SD}.default", "default must not be empty")
    for name, proposer in sd["proposers"].items():
        if not name.strip():
            issues.push("invalid_generation_value", f"{_SD}.proposers", "proposer names must not be empty")
        _proposer(name, proposer, layer_count, issues)
    for name, strategy in sd["strategies"].items():
        if not name.strip():
            issues.push("invalid_generation_value", f"{_SD}.strategies", "strategy names must not be empty")
        _strategy(name, strategy, sd["proposers"], layer_count, issues)
    if sd["default"].strip() and sd["default"] not in sd["strategies"]:
        issues.push(
            "unknown_strategy",
            f"{_SD}.default",
            f"default strategy {sd['default']!r} is not declared under strategies",
        )


def _layer_indices(where: str, indices: list[int], layer_count: int, issues: Issues) -> None:
    for i, index in enumerate(indices):
        if index >= layer_count:
            issues.push(
                "layer_out_of_bounds",
                f"{where}.layer_indices[{i}]",
                f"layer index {index} is out of range for layer_count {layer_count}",
            )


def _proposer(name: str, p: Json, layer_count: int, issues: Issues) -> None:
    where = f"{_SD}.proposers[{name}]"
    if p["type"] == "native-mtp":
        if p["prediction_depth"] == 0:
            issues.push(
                "invalid_generation_value",
                f"{where}.prediction_depth",
                "prediction_depth must be greater than zero",
            )
        if not p["layer_indices"]:
            issues.push(
                "invalid_generation_value", f"{where}.layer_indices", "layer_indices must not be empty"
            )
        _layer_indices(where, p["layer_indices"], layer_count, issues)
        return
    if p["ngram_min"] == 0 or p["ngram_max"] < p["ngram_min"]:
        issues.push(
            "invalid_generation_value",
            where,
            "ngram_min and ngram_max must satisfy 1 <= ngram_min <= ngram_max",
        )
    if p["max_proposal_tokens"] == 0:
        issues.push(
            "invalid_generation_value",
            f"{where}.max_proposal_tokens",
            "max_proposal_tokens must be greater than zero",
        )
    if not p["history_scope"].strip():
        issues.push("invalid_generation_value", f"{where}.history_scope", "history_scope must not be empty")


def _reference(where: str, ref: str, proposers: Json, allowed: tuple[str, ...], issues: Issues) -> None:
    if not ref.strip():
        issues.push("invalid_generation_value", where, "proposer reference must not be empty")
    elif ref not in proposers:
        issues.push("unknown_proposer", where, f"references undeclared proposer {ref!r}")
    elif proposers[ref]["type"] not in allowed:
        issues.push(
            "invalid_generation_value",
            where,
            f"proposer {ref!r} has kind {proposers[ref]['type']!r}, which is not compatible with this "
            f"strategy (expected one of {list(allowed)!r})",
        )


def _window(where: str, w: Json | None, issues: Issues) -> None:
    if w is None:
        return
    where = f"{where}.window_policy"
    if not w["default"].strip():
        issues.push("invalid_generation_value", f"{where}.default", "window_policy.default must not be empty")
    if 0 in (w["initial_window"], w["min_window"], w["max_window"]):
        issues.push("invalid_generation_value", where, "window_policy windows must be greater than zero")
    if w["pipeline_depth"] == 0:
        issues.push(
            "invalid_generation_value",
            f"{where}.pipeline_depth",
            "window_policy.pipeline_depth must be greater than zero",
        )
    if w["min_window"] > w["max_window"]:
        issues.push("invalid_generation_value", where, "window_policy min_window must not exceed max_window")
    if not w["min_window"] <= w["initial_window"] <= w["max_window"]:
        issues.push(
            "invalid_generation_value",
            where,
            "window_policy initial_window must lie within min_window..max_window",
        )


def _strategy(name: str, s: Json, proposers: Json, layer_count: int, issues: Issues) -> None:
    where = f"{_SD}.strategies[{name}]"
    _window(where, s["window_policy"], issues)
    kind = s["type"]
    if kind == "native-mtp":
        _native_strategy(where, s, proposers, layer_count, issues)
    elif kind == "composite":
        _extension(where, s["extension_policy"], issues)
        _reference(f"{where}.primary", s["primary"], proposers, ("native-mtp",), issues)
        _reference(f"{where}.extender", s["extender"], proposers, ("ngram-cache", "ngram-suffix"), issues)
    else:
        _reference(f"{where}.proposer", s["proposer"], proposers, (kind,), issues)


def _native_strategy(where: str, s: Json, proposers: Json, layer_count: int, issues: Issues) -> None:
    ref, has_depth, has_layers = s["proposer"], s["prediction_depth"] is not None, bool(s["layer_indices"])
    if ref is not None and not has_depth and not has_layers:
        _reference(f"{where}.proposer", ref, proposers, ("native-mtp",), issues)
    elif ref is None and has_depth and has_layers:
        if s["prediction_depth"] == 0:
            issues.push(
                "invalid_generation_value",
                f"{where}.prediction_depth",
                "prediction_depth must be greater than zero",
            )
        _layer_indices(where, s["layer_indices"], layer_count, issues)
    elif ref is not None:
        issues.push(
            "invalid_generation_value",
            where,
            "native-mtp strategy must set either proposer or the inline prediction_depth/layer_indices "
            "form, not both",
        )
    elif has_depth:
        issues.push(
            "invalid_generation_value",
            f"{where}.layer_indices",
            "inline native-mtp strategy must declare layer_indices alongside prediction_depth",
        )
    elif has_layers:
        issues.push(
            "invalid_generation_value",
            f"{where}.prediction_depth",
            "inline native-mtp strategy must declare prediction_depth alongside layer_indices",
        )
    else:
        issues.push(
            "invalid_generation_value",
            where,
            "native-mtp strategy must set either proposer or the inline prediction_depth/layer_indices form",
        )


def _extension(where: str, e: Json, issues: Issues) -> None:
    where = f"{where}.extension_policy"
    if e["max_tokens"] == 0:
        issues.push(
            "invalid_generation_value",
            f"{where}.max_tokens",
            "extension_policy.max_tokens must be greater than zero",
        )
    initial = e["initial_tokens"]
    if initial == 0:
        issues.push(
            "invalid_generation_value",
            f"{where}.initial_tokens",
            "extension_policy.initial_tokens must be greater than zero",
        )
    if initial is not None and initial > e["max_tokens"]:
        issues.push(
            "invalid_generation_value",
            f"{where}.initial_tokens",
            "extension_policy.initial_tokens must not exceed max_tokens",
        )
    if e["tail_backoff_proposals"] == 0:
        issues.push(
            "invalid_generation_value",
            f"{where}.tail_backoff_proposals",
            "extension_policy.tail_backoff_proposals must be greater than zero",
        )
