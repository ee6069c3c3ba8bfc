"""Pure: mesh-llm's validation of ``generation.request_defaults`` (lib.rs 1460-1790, docs/rules.md section 2):
the profiles' numbers, samplers, dry and xtc settings and provenance. No Django, no I/O."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from packages_app.manifest.v2issues import HEX40, U32_MAX, Issues
from packages_app.manifest.v2schema import Json

_TOKEN_ID = re.compile(r"[+-]?[0-9]+")
_SAMPLERS = frozenset(
    {
        "penalties",
        "dry",
        "top_n_sigma",
        "top_k",
        "typical_p",
        "typ_p",
        "top_p",
        "min_p",
        "xtc",
        "temperature",
        "temp",
    }
)
_SAMPLER_CODES = frozenset("edskypmxt")
_RD = "generation.request_defaults"


def validate_request_defaults(rd: Json, issues: Issues) -> None:
    if not rd["profiles"]:
        issues.push("missing_value", f"{_RD}.profiles", "at least one generation profile is required")
    for name, profile in rd["profiles"].items():
        issues.identifier(f"{_RD}.profiles[{name}]", name)
        _profile(f"{_RD}.profiles[{name}]", profile, issues)
    for key in ("default", "reasoning_enabled", "reasoning_disabled"):
        selected = rd["selection"][key]
        if selected is None:
            continue
        if not selected.strip():
            issues.push("missing_value", f"{_RD}.selection.{key}", "selected profile must not be empty")
        elif selected not in rd["profiles"]:
            issues.push(
                "invalid_generation_value",
                f"{_RD}.selection.{key}",
                f"references undeclared generation profile {selected!r}",
            )


_FINITE = (
    "temperature",
    "top_p",
    "min_p",
    "typical_p",
    "top_nsigma",
    "presence_penalty",
    "frequency_penalty",
    "repeat_penalty",
    "dynatemp_range",
    "dynatemp_exponent",
    "mirostat_entropy",
    "mirostat_learning_rate",
)
_F64_MAX = 1.7976931348623157e308
_RANGES = (
    ("temperature", 0.0, 100.0),
    ("presence_penalty", -2.0, 2.0),
    ("frequency_penalty", -2.0, 2.0),
    ("top_nsigma", -1.0, _F64_MAX),
    ("dynatemp_range", 0.0, _F64_MAX),
    ("dynatemp_exponent", 0.0, _F64_MAX),
)


def _profile(base: str, p: Json, issues: Issues) -> None:
    if p["max_tokens"] == 0:
        issues.push("invalid_generation_value", f"{base}.max_tokens", "max_tokens must be greater than zero")
    for i, value in enumerate(p["stop"] or ()):
        issues.nonempty(f"{base}.stop[{i}]", value)
    _profile_numbers(base, p, issues)
    _profile_samplers(base, p, issues)
    _profile_dry_xtc(base, p, issues)
    _provenance(base, p["provenance"], issues)


def _bad(issues: Issues, path: str, message: str) -> None:
    issues.push("invalid_generation_value", path, message)


def _profile_numbers(base: str, p: Json, issues: Issues) -> None:
    for key in _FINITE:
        value = p[key]
        if value is not None and value != value:  # NaN; the JSON loader already refuses infinities
            _bad(issues, f"{base}.{key}", "value must be finite")
    for key, low, high in _RANGES:
        if p[key] is not None and not low <= p[key] <= high:
            _bad(issues, f"{base}.{key}", f"value must be within {_rust_float(low)}..={_rust_float(high)}")
    for key in ("top_p", "min_p", "typical_p"):
        if p[key] is not None and not 0.0 <= p[key] <= 1.0:
            _bad(issues, f"{base}.{key}", "value must be within 0..=1")
    if p["temperature"] is not None and p["temperature"] < 0.0:
        _bad(issues, f"{base}.temperature", "temperature must be non-negative")
    if p["repeat_penalty"] is not None and p["repeat_penalty"] <= 0.0:
        _bad(issues, f"{base}.repeat_penalty", "repeat_penalty must be greater than zero")
    if p["top_k"] is not None and p["top_k"] < 0:
        _bad(issues, f"{base}.top_k", "top_k must be greater than or equal to zero")
    if p["repeat_last_n"] is not None and p["repeat_last_n"] < -1:
        _bad(issues, f"{base}.repeat_last_n", "repeat_last_n must be greater than or equal to -1")
    if p["seed"] is not None and p["seed"] > U32_MAX:
        _bad(issues, f"{base}.seed", "seed must fit in the native u32 field")
    for token, bias in (p["logit_bias"] or {}).items():
        valid = _TOKEN_ID.fullmatch(token) is not None and 0 <= int(token) <= 2**31 - 1
        if not valid or not -100.0 <= bias <= 100.0:
            _bad(
                issues,
                f"{base}.logit_bias[{token}]",
                "logit bias keys must be signed token ids and values must be within -100..=100",
            )
    if p["mirostat_mode"] is not None and not 0 <= p["mirostat_mode"] <= 2:
        _bad(issues, f"{base}.mirostat_mode", "mirostat_mode must be 0, 1, or 2")
    for key in ("mirostat_entropy", "mirostat_learning_rate"):
        if p[key] is not None and p[key] <= 0.0:
            _bad(issues, f"{base}.{key}", "value must be greater than zero")


def _rust_float(value: float) -> str:
    return (
        "1.7976931348623157e308"
        if value == _F64_MAX
        else str(int(value))
        if value.is_integer()
        else str(value)
    )


def _profile_samplers(base: str, p: Json, issues: Issues) -> None:
    for i, sampler in enumerate(p["samplers"] or ()):
        issues.nonempty(f"{base}.samplers[{i}]", sampler)
        if sampler not in _SAMPLERS:
            _bad(issues, f"{base}.samplers[{i}]", "unsupported sampler name")
    sequence = p["sampler_sequence"]
    if sequence is not None:
        issues.nonempty(f"{base}.sampler_sequence", sequence)
        if any(ch not in _SAMPLER_CODES for ch in sequence if not ch.isspace()):
            _bad(issues, f"{base}.sampler_sequence", "sampler sequence contains an unsupported code")


def _below(value: Any, limit: float, inclusive: bool = False) -> bool:
    return value is not None and (value <= limit if inclusive else value < limit)


def _profile_dry_xtc(base: str, p: Json, issues: Issues) -> None:
    dry = p["dry"]
    if dry is not None:
        if (
            _below(dry["multiplier"], 0.0)
            or _below(dry["base"], 0.0, inclusive=True)
            or _below(dry["allowed_length"], 0)
            or _below(dry["penalty_last_n"], -1)
        ):
            _bad(issues, f"{base}.dry", "DRY values are outside native sampler bounds")
        for i, breaker in enumerate(dry["sequence_breakers"] or ()):
            if not breaker or len(breaker.encode("utf-8")) >= 16:
                _bad(
                    issues,
                    f"{base}.dry.sequence_breakers[{i}]",
                    "DRY sequence breakers must be non-empty and shorter than 16 bytes",
                )
    xtc = p["xtc"]
    for key in ("probability", "threshold") if xtc is not None else ():
        if xtc[key] is not None and not 0.0 <= xtc[key] <= 1.0:
            _bad(issues, f"{base}.xtc.{key}", "value must be within 0..=1")


def _provenance(profile: str, prov: Json, issues: Issues) -> None:
    base = f"{profile}.provenance"
    for key in ("source_repo", "revision", "file", "section", "url"):
        issues.nonempty(f"{base}.{key}", prov[key])
    revision = prov["revision"].strip()
    if not HEX40.fullmatch(revision):
        _bad(
            issues, f"{base}.revision", "provenance revision must be an immutable 40-character Git commit SHA"
        )
    url = prov["url"]
    if not url.startswith(("https://", "http://")):
        _bad(issues, f"{base}.url", "provenance URL must use http or https")
    elif revision not in _url_segments(url):
        _bad(
            issues,
            f"{base}.url",
            "provenance URL must contain the exact revision as a distinct path or query segment",
        )


def _url_segments(url: str) -> Iterable[str]:
    return re.split(r"[/?#&=]", url)
