"""Pure: mesh-llm's ``validate_root`` for a decoded package-v2 root: the same ValidationCodes, paths and
order (skippy-package-format lib.rs, docs/rules.md section 2). No Django, no I/O.

The tensor-catalog checks of the full ``validate()`` need the metadata carrier's inventory and are not
made here. Input is what v2schema.decode_root returns, so every field is present and typed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from packages_app.manifest.identity import canonical_package_id
from packages_app.manifest.v2schema import Json

U32_MAX = 2**32 - 1
_HEX40 = re.compile(r"[0-9a-fA-F]{40}")
_LOWER_HEX64 = re.compile(r"[0-9a-f]{64}")
_IDENTIFIER = re.compile(r"[A-Za-z0-9._-]+")
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
_SD = "generation.speculative_decoding"


@dataclass(frozen=True)
class Issue:
    """One ValidationIssue: mesh-llm's code string, its path and its message."""

    code: str
    path: str
    message: str


class _Issues(list[Issue]):
    def push(self, code: str, path: str, message: str) -> None:
        self.append(Issue(code, path, message))

    def nonempty(self, path: str, value: str) -> None:
        if not value.strip():
            self.push("missing_value", path, "value must not be empty")

    def identifier(self, path: str, value: str) -> None:
        if not _IDENTIFIER.fullmatch(value) or not value.isascii():
            self.push("invalid_identifier", path, f"identifier {value!r} contains unsupported characters")

    def relative_path(self, path: str, value: str) -> None:
        if not is_normalized_relative_path(value):
            self.push("invalid_path", path, f"path {value!r} must be a normalized relative package path")

    def sha256(self, path: str, value: str) -> None:
        if not _LOWER_HEX64.fullmatch(value):
            self.push("invalid_digest", path, "digest must contain 64 lowercase hexadecimal characters")


def is_normalized_relative_path(value: str) -> bool:
    """Rust's Path rules on Unix: no root, no ``..``, no leading ``.``; an inner ``.`` is normalized away."""
    if not value or "\\" in value or "//" in value or value.endswith("/") or value.startswith("/"):
        return False
    segments = value.split("/")
    return segments[0] != "." and ".." not in segments


def validate_root(root: Json, computed_id: str | None = None) -> list[Issue]:
    """Every issue mesh-llm's validate_root reports, in its order (lib.rs:134-157).

    ``computed_id`` is the root's canonical package_id when the caller already has it.
    """
    issues = _Issues()
    _manifest_fields(root, computed_id or canonical_package_id(root), issues)
    artifacts = _collect_artifacts(root["artifact_catalog"]["entries"], issues)
    _metadata_binding(root, artifacts, issues)
    _sidecars(root["sidecars"], artifacts, issues)
    _publisher_metadata(root, artifacts, issues)
    _publisher_defaults(root, artifacts, issues)
    if root["generation"] is not None:
        _generation(root["generation"], root["layer_count"], issues)
    return list(issues)


# --- manifest fields, artifacts, bindings -----------------------------------------------------


def _manifest_fields(root: Json, expected: str, issues: _Issues) -> None:
    if root["schema_version"] != 2:
        issues.push(
            "unsupported_schema_version",
            "schema_version",
            f"expected schema version 2, got {root['schema_version']}",
        )
    for key in ("model_id", "format", "native_abi_version", "generator_version"):
        issues.nonempty(key, root[key])
    if root["layer_count"] == 0:
        issues.push("missing_value", "layer_count", "layer count must be greater than zero")
    _prefixed_sha256(root["package_id"], issues)
    source = root["source_model"]
    issues.sha256("source_model.sha256", source["sha256"])
    issues.nonempty("source_model.metadata_artifact_id", source["metadata_artifact_id"])
    if not source["files"]:
        issues.push("missing_value", "source_model.files", "source file inventory must not be empty")
    if not root["artifact_catalog"]["entries"]:
        issues.push("missing_value", "artifact_catalog.entries", "artifact catalog must not be empty")
    if root["package_id"] != expected:
        issues.push(
            "package_identity_mismatch",
            "package_id",
            f"package identity {root['package_id']!r} does not match canonical identity {expected!r}",
        )
    _source_files(source, issues)


def _prefixed_sha256(value: str, issues: _Issues) -> None:
    if not value.startswith("sha256:"):
        issues.push("invalid_digest", "package_id", "digest must use the sha256:<hex> form")
        return
    issues.sha256("package_id", value.removeprefix("sha256:"))


def _source_files(source: Json, issues: _Issues) -> None:
    paths: set[str] = set()
    for i, f in enumerate(source["files"]):
        issues.relative_path(f"source_model.files[{i}].path", f["path"])
        issues.sha256(f"source_model.files[{i}].sha256", f["sha256"])
        if f["path"] in paths:
            issues.push(
                "invalid_path",
                f"source_model.files[{i}].path",
                f"source file path {f['path']!r} appears more than once",
            )
        paths.add(f["path"])
    primary = source["primary_file"]
    if primary is None:
        issues.push("missing_value", "source_model.primary_file", "primary source file is required")
        return
    issues.relative_path("source_model.primary_file", primary)
    if primary not in paths:
        issues.push(
            "unknown_source_file",
            "source_model.primary_file",
            f"primary file {primary!r} is absent from source files",
        )


def _collect_artifacts(entries: list[Json], issues: _Issues) -> dict[str, Json]:
    by_id: dict[str, Json] = {}
    paths: set[str] = set()
    for i, a in enumerate(entries):
        issues.identifier(f"artifacts[{i}].id", a["id"])
        issues.relative_path(f"artifacts[{i}].path", a["path"])
        issues.sha256(f"artifacts[{i}].sha256", a["sha256"])
        if a["id"] in by_id:
            issues.push(
                "duplicate_artifact", f"artifacts[{i}].id", f"artifact id {a['id']!r} appears more than once"
            )
        by_id[a["id"]] = a
        if a["path"] in paths:
            issues.push(
                "duplicate_artifact_path",
                f"artifacts[{i}].path",
                f"artifact path {a['path']!r} appears more than once",
            )
        paths.add(a["path"])
    return by_id


def path_extension(path: str) -> str | None:
    """Rust's ``Path::extension``: after the file name's last dot, none for ``.hidden`` or ``..``."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    if name in ("", "..") or "." not in name[1:]:
        return None
    return name.rsplit(".", 1)[1]


def _metadata_binding(root: Json, artifacts: dict[str, Json], issues: _Issues) -> None:
    source = root["source_model"]
    artifact_id = source["metadata_artifact_id"]
    if not artifact_id.strip():
        return
    where = "source_model.metadata_artifact_id"
    artifact = artifacts.get(artifact_id)
    if artifact is None:
        issues.push(
            "unknown_artifact", where, f"metadata artifact {artifact_id!r} is absent from artifact catalog"
        )
        return
    if path_extension(artifact["path"]) != "gguf":
        issues.push(
            "invalid_metadata_artifact", where, f"metadata artifact {artifact['id']!r} is not a GGUF artifact"
        )
    if any(s["artifact_id"] == artifact["id"] for s in root["sidecars"]):
        issues.push(
            "invalid_metadata_artifact", where, f"metadata artifact {artifact['id']!r} has a sidecar role"
        )
    primary = next((f for f in source["files"] if f["path"] == source["primary_file"]), None)
    if primary is not None and source["sha256"] != primary["sha256"]:
        issues.push(
            "source_identity_mismatch",
            "source_model.sha256",
            "source model digest does not match the primary source file",
        )


def _sidecars(sidecars: list[Json], artifacts: dict[str, Json], issues: _Issues) -> None:
    seen: set[tuple[str, str | None]] = set()
    for i, s in enumerate(sidecars):
        key = (s["kind"], s["name"])
        if key in seen:
            issues.push(
                "duplicate_sidecar",
                f"sidecars[{i}]",
                f"sidecar semantic identity {key!r} appears more than once",
            )
        seen.add(key)
        _known_artifact(f"sidecars[{i}].artifact_id", s["artifact_id"], artifacts, issues)
        if s["name"] is not None:
            issues.nonempty(f"sidecars[{i}].name", s["name"])


def _known_artifact(path: str, artifact_id: str, artifacts: dict[str, Json], issues: _Issues) -> None:
    if artifact_id not in artifacts:
        issues.push("unknown_artifact", path, f"artifact {artifact_id!r} does not exist")


def _publisher_metadata(root: Json, artifacts: dict[str, Json], issues: _Issues) -> None:
    seen: set[tuple[str, str]] = set()
    source = root["source_model"]
    for i, m in enumerate(root["publisher_metadata"]):
        where = f"publisher_metadata[{i}]"
        if (m["role"], m["source_path"]) in seen:
            issues.push(
                "duplicate_sidecar",
                where,
                f"publisher metadata semantic identity ({m['role']!r}, {m['source_path']!r}) "
                "appears more than once",
            )
        seen.add((m["role"], m["source_path"]))
        _known_artifact(f"{where}.artifact_id", m["artifact_id"], artifacts, issues)
        issues.nonempty(f"{where}.source_repo", m["source_repo"])
        issues.nonempty(f"{where}.source_revision", m["source_revision"])
        if not _HEX40.fullmatch(m["source_revision"]):
            issues.push(
                "source_identity_mismatch",
                f"{where}.source_revision",
                "publisher metadata revision must be an immutable 40-character commit",
            )
        issues.relative_path(f"{where}.source_path", m["source_path"])
        if source["repo"] != m["source_repo"]:
            issues.push(
                "source_identity_mismatch",
                f"{where}.source_repo",
                "publisher metadata repository differs from source_model.repo",
            )
        if source["revision"] != m["source_revision"]:
            issues.push(
                "source_identity_mismatch",
                f"{where}.source_revision",
                "publisher metadata revision differs from source_model.revision",
            )


_DEFAULT_ROLES = {"compute_dtype": ("model_config",), "kv_cache_dtype": ("model_config", "hf_quant_config")}


def _publisher_defaults(root: Json, artifacts: dict[str, Json], issues: _Issues) -> None:
    defaults = root["publisher_defaults"]
    if defaults is None:
        return
    for name, roles in _DEFAULT_ROLES.items():
        declaration = defaults[name]
        if declaration is None:
            continue
        where = f"publisher_defaults.{name}"
        _known_artifact(f"{where}.artifact_id", declaration["artifact_id"], artifacts, issues)
        bound = next(
            (m for m in root["publisher_metadata"] if m["artifact_id"] == declaration["artifact_id"]), None
        )
        if bound is None:
            issues.push(
                "source_identity_mismatch",
                f"{where}.artifact_id",
                "typed publisher default is not bound to publisher_metadata",
            )
        elif bound["role"] not in roles:
            issues.push(
                "source_identity_mismatch",
                f"{where}.artifact_id",
                f"publisher default {name} cannot be sourced from {bound['role']}",
            )
        issues.nonempty(f"{where}.json_path", declaration["json_path"])


# --- generation -------------------------------------------------------------------------------


def _generation(generation: Json, layer_count: int, issues: _Issues) -> None:
    if generation["request_defaults"] is not None:
        _request_defaults(generation["request_defaults"], issues)
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


def _layer_indices(where: str, indices: list[int], layer_count: int, issues: _Issues) -> None:
    for i, index in enumerate(indices):
        if index >= layer_count:
            issues.push(
                "layer_out_of_bounds",
                f"{where}.layer_indices[{i}]",
                f"layer index {index} is out of range for layer_count {layer_count}",
            )


def _proposer(name: str, p: Json, layer_count: int, issues: _Issues) -> None:
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


def _reference(where: str, ref: str, proposers: Json, allowed: tuple[str, ...], issues: _Issues) -> None:
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


def _window(where: str, w: Json | None, issues: _Issues) -> None:
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


def _strategy(name: str, s: Json, proposers: Json, layer_count: int, issues: _Issues) -> None:
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


def _native_strategy(where: str, s: Json, proposers: Json, layer_count: int, issues: _Issues) -> None:
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


def _extension(where: str, e: Json, issues: _Issues) -> None:
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


# --- request defaults (lib.rs 1460-1790) ------------------------------------------------------

_RD = "generation.request_defaults"


def _request_defaults(rd: Json, issues: _Issues) -> None:
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


def _profile(base: str, p: Json, issues: _Issues) -> None:
    if p["max_tokens"] == 0:
        issues.push("invalid_generation_value", f"{base}.max_tokens", "max_tokens must be greater than zero")
    for i, value in enumerate(p["stop"] or ()):
        issues.nonempty(f"{base}.stop[{i}]", value)
    _profile_numbers(base, p, issues)
    _profile_samplers(base, p, issues)
    _profile_dry_xtc(base, p, issues)
    _provenance(base, p["provenance"], issues)


def _bad(issues: _Issues, path: str, message: str) -> None:
    issues.push("invalid_generation_value", path, message)


def _profile_numbers(base: str, p: Json, issues: _Issues) -> None:
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


def _profile_samplers(base: str, p: Json, issues: _Issues) -> None:
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


def _profile_dry_xtc(base: str, p: Json, issues: _Issues) -> None:
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


def _provenance(profile: str, prov: Json, issues: _Issues) -> None:
    base = f"{profile}.provenance"
    for key in ("source_repo", "revision", "file", "section", "url"):
        issues.nonempty(f"{base}.{key}", prov[key])
    revision = prov["revision"].strip()
    if not _HEX40.fullmatch(revision):
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
