"""Pure: the package-v2 JSON shape as mesh-llm's serde types declare it (skippy-package-format lib.rs).

One table drives both directions: decoding (unknown keys refused, required fields, integer widths,
``null`` = absent for options, a ``null`` list refused) into a canonical value, and the compact
serialization mesh-llm hashes for the package_id (declaration order, skipped empty options and lists,
floats always written with a fraction). No Django, no I/O.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

Json = dict[str, Any]

_SURROGATE = re.compile("[\ud800-\udfff]")
U32 = 2**32 - 1
U64 = 2**64 - 1
I32 = (-(2**31), 2**31 - 1)


class DecodeError(Exception):
    """The manifest does not deserialize: mesh-llm stops at the first such error (a serde error)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


@dataclass(frozen=True)
class Int:
    name: str  # u32, u64, i32
    low: int
    high: int


@dataclass(frozen=True)
class Scalar:
    name: str  # string, f64, bool


@dataclass(frozen=True)
class Enum:
    values: tuple[str, ...]


@dataclass(frozen=True)
class Seq:
    item: Type


@dataclass(frozen=True)
class Map:
    value: Type


@dataclass(frozen=True)
class Opt:
    inner: Type


@dataclass(frozen=True)
class Field:
    key: str
    type: Type
    default: bool = False  # #[serde(default)]: absent means empty list / None
    skip_empty: bool = False  # skip_serializing_if Vec::is_empty / Option::is_none / BTreeMap::is_empty


@dataclass(frozen=True)
class Struct:
    name: str
    fields: tuple[Field, ...]
    deny_unknown: bool = True  # #[serde(deny_unknown_fields)]; the v1 preflight's structs ignore extras


@dataclass(frozen=True)
class Tagged:
    """An internally tagged enum (``"type"``), each variant a struct; unknown keys refused."""

    name: str
    variants: Mapping[str, Struct]


@dataclass(frozen=True)
class ReasoningBudget:
    """GenerationReasoningBudget: untagged, a u32 token count or a level name."""


Type = Union[Int, Scalar, Enum, Seq, Map, Opt, Struct, Tagged, ReasoningBudget]  # noqa: UP007

STR = Scalar("string")
F64 = Scalar("f64")
BOOL = Scalar("bool")
U32T = Int("u32", 0, U32)
U64T = Int("u64", 0, U64)
I32T = Int("i32", *I32)


def _f(key: str, kind: Type) -> Field:
    return Field(key, kind)


def _o(key: str, kind: Type) -> Field:
    """An ``Option`` with ``default`` and ``skip_serializing_if = Option::is_none``."""
    return Field(key, Opt(kind), default=True, skip_empty=True)


def _v(key: str, kind: Type) -> Field:
    """A ``Vec`` / ``BTreeMap`` with ``default`` and ``skip_serializing_if`` empty."""
    return Field(key, kind, default=True, skip_empty=True)


WINDOW_POLICY = Struct(
    "WindowPolicy",
    (
        _f("default", STR),
        _f("initial_window", U32T),
        _f("min_window", U32T),
        _f("max_window", U32T),
        _o("pipeline_depth", U32T),
    ),
)
EXTENSION_POLICY = Struct(
    "ExtensionPolicy",
    (_f("max_tokens", U32T), _o("initial_tokens", U32T), _o("tail_backoff_proposals", U32T)),
)
_NGRAM_FIELDS = (
    _f("ngram_min", U32T),
    _f("ngram_max", U32T),
    _f("max_proposal_tokens", U32T),
    _f("history_scope", STR),
)
PROPOSER = Tagged(
    "ProposerKind",
    {
        "native-mtp": Struct("NativeMtp", (_f("prediction_depth", U32T), _f("layer_indices", Seq(U32T)))),
        "ngram-cache": Struct("NgramCache", _NGRAM_FIELDS),
        "ngram-suffix": Struct("NgramSuffix", _NGRAM_FIELDS),
    },
)
_WINDOW = _o("window_policy", WINDOW_POLICY)
STRATEGY = Tagged(
    "StrategyKind",
    {
        "native-mtp": Struct(
            "NativeMtp",
            (_o("proposer", STR), _o("prediction_depth", U32T), _v("layer_indices", Seq(U32T)), _WINDOW),
        ),
        "ngram-cache": Struct("NgramCache", (_f("proposer", STR), _WINDOW)),
        "ngram-suffix": Struct("NgramSuffix", (_f("proposer", STR), _WINDOW)),
        "composite": Struct(
            "Composite",
            (_f("primary", STR), _f("extender", STR), _f("extension_policy", EXTENSION_POLICY), _WINDOW),
        ),
    },
)
SPECULATIVE = Struct(
    "SpeculativeDecoding",
    (_f("default", STR), _v("proposers", Map(PROPOSER)), _v("strategies", Map(STRATEGY))),
)
PROVENANCE = Struct(
    "GenerationDefaultsProvenance",
    tuple(_f(k, STR) for k in ("source_repo", "revision", "file", "section", "url")),
)
DRY = Struct(
    "GenerationDryDefaults",
    (
        _o("multiplier", F64),
        _o("base", F64),
        _o("allowed_length", I32T),
        _o("penalty_last_n", I32T),
        _o("sequence_breakers", Seq(STR)),
    ),
)
XTC = Struct("GenerationXtcDefaults", (_o("probability", F64), _o("threshold", F64)))
REASONING = Struct(
    "GenerationReasoningDefaults",
    (
        _o("enabled", Enum(("auto", "off", "on"))),
        _o("format", Enum(("auto", "none", "deepseek", "deepseek-legacy", "hidden"))),
        _o("budget", ReasoningBudget()),
    ),
)
PROFILE = Struct(
    "GenerationProfile",
    (
        _o("max_tokens", U32T),
        _o("stop", Seq(STR)),
        _o("temperature", F64),
        _o("top_p", F64),
        _o("top_k", I32T),
        _o("min_p", F64),
        _o("typical_p", F64),
        _o("top_nsigma", F64),
        _o("presence_penalty", F64),
        _o("frequency_penalty", F64),
        _o("seed", U64T),
        _o("logit_bias", Map(F64)),
        _o("repeat_penalty", F64),
        _o("repeat_last_n", I32T),
        _o("dynatemp_range", F64),
        _o("dynatemp_exponent", F64),
        _o("dry", DRY),
        _o("xtc", XTC),
        _o("mirostat_mode", I32T),
        _o("mirostat_entropy", F64),
        _o("mirostat_learning_rate", F64),
        _o("samplers", Seq(STR)),
        _o("sampler_sequence", STR),
        _o("ignore_eos", BOOL),
        _o("reasoning", REASONING),
        _f("provenance", PROVENANCE),
    ),
)
SELECTION = Struct(
    "GenerationProfileSelection",
    (_f("default", STR), _o("reasoning_enabled", STR), _o("reasoning_disabled", STR)),
)
REQUEST_DEFAULTS = Struct(
    "GenerationRequestDefaults", (_f("selection", SELECTION), _f("profiles", Map(PROFILE)))
)
GENERATION = Struct(
    "Generation", (_o("request_defaults", REQUEST_DEFAULTS), _o("speculative_decoding", SPECULATIVE))
)
PUBLISHER_ROLES = (
    "model_config",
    "generation_config",
    "tokenizer_config",
    "chat_template",
    "hf_quant_config",
)
PUBLISHER_METADATA = Struct(
    "PublisherMetadata",
    (
        _f("role", Enum(PUBLISHER_ROLES)),
        _f("artifact_id", STR),
        _f("source_repo", STR),
        _f("source_revision", STR),
        _f("source_path", STR),
    ),
)
DTYPES = ("f16", "bf16", "f32", "fp8", "fp8_e4m3", "fp8_e5m2", "q8_0", "q4_0")
DTYPE_DECLARATION = Struct(
    "PublisherDtypeDeclaration", (_f("dtype", Enum(DTYPES)), _f("artifact_id", STR), _f("json_path", STR))
)
PUBLISHER_DEFAULTS = Struct(
    "PublisherModelDefaults",
    (_o("compute_dtype", DTYPE_DECLARATION), _o("kv_cache_dtype", DTYPE_DECLARATION)),
)
SIDECAR = Struct("Sidecar", (_f("kind", Enum(("mmproj",))), _f("artifact_id", STR), _o("name", STR)))
SOURCE_FILE = Struct("SourceFile", (_f("path", STR), _f("byte_size", U64T), _f("sha256", STR)))
ARTIFACT = Struct("Artifact", (_f("id", STR), _f("path", STR), _f("byte_size", U64T), _f("sha256", STR)))
SOURCE_MODEL = Struct(
    "SourceModel",
    (
        _f("sha256", STR),
        _f("metadata_artifact_id", STR),
        _o("repo", STR),
        _o("revision", STR),
        _o("primary_file", STR),
        _o("canonical_ref", STR),
        _o("distribution_id", STR),
        _v("files", Seq(SOURCE_FILE)),
    ),
)
PACKAGE_ROOT = Struct(
    "PackageRoot",
    (
        _f("schema_version", U32T),
        _f("package_id", STR),
        _f("model_id", STR),
        _f("source_model", SOURCE_MODEL),
        _f("format", STR),
        _f("layer_count", U32T),
        _f("artifact_catalog", Struct("ArtifactCatalog", (_f("entries", Seq(ARTIFACT)),))),
        _v("sidecars", Seq(SIDECAR)),
        _v("publisher_metadata", Seq(PUBLISHER_METADATA)),
        _o("publisher_defaults", PUBLISHER_DEFAULTS),
        _o("generation", GENERATION),
        _f("native_abi_version", STR),
        _f("generator_version", STR),
        _f("created_at_unix_secs", U64T),
    ),
)


# --- decoding ---------------------------------------------------------------------------------


def decode_root(raw: Any) -> Json:
    """The manifest as mesh-llm's PackageRoot holds it; raises DecodeError like serde would."""
    return decode(PACKAGE_ROOT, raw)


def decode(kind: Struct, raw: Any) -> Json:
    """``raw`` (json.loads output) as the struct ``kind`` holds it; raises DecodeError like serde would."""
    value: Json = _decode(kind, raw, "")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{str(value).lower()}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value}`"
    if isinstance(value, str):
        return f"string {json.dumps(value[:60])}"
    return "sequence" if isinstance(value, list) else "map"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _decode(kind: Type, value: Any, path: str) -> Any:
    if isinstance(kind, Opt):
        return None if value is None else _decode(kind.inner, value, path)
    if isinstance(kind, Struct):
        return _decode_struct(kind, value, path)
    if isinstance(kind, Tagged):
        return _decode_tagged(kind, value, path)
    if isinstance(kind, Seq):
        if not isinstance(value, list):
            raise DecodeError(path, f"invalid type: {_kind(value)}, expected a sequence")
        return [_decode(kind.item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(kind, Map):
        if not isinstance(value, dict):
            raise DecodeError(path, f"invalid type: {_kind(value)}, expected a map")
        return {_checked_text(k, path): _decode(kind.value, value[k], f"{path}[{k}]") for k in sorted(value)}
    return _decode_leaf(kind, value, path)


def _decode_leaf(kind: Int | Scalar | Enum | ReasoningBudget, value: Any, path: str) -> Any:
    if isinstance(kind, Int):
        return _decode_int(kind, value, path)
    if isinstance(kind, Enum):
        if not isinstance(value, str):
            raise DecodeError(path, f"invalid type: {_kind(value)}, expected a variant name")
        if value not in kind.values:
            expected = ", ".join(f"`{v}`" for v in kind.values)
            raise DecodeError(path, f"unknown variant `{value[:60]}`, expected one of {expected}")
        return value
    if isinstance(kind, ReasoningBudget):
        if isinstance(value, str):
            return _decode_leaf(Enum(("auto", "low", "medium", "high", "unrestricted")), value, path)
        return _decode_int(U32T, value, path)
    return _decode_scalar(kind, value, path)


def _decode_scalar(kind: Scalar, value: Any, path: str) -> Any:
    if kind.name == "string" and isinstance(value, str):
        return _checked_text(value, path)
    if kind.name == "bool" and isinstance(value, bool):
        return value
    if kind.name == "f64" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    expected = {"string": "a string", "bool": "a boolean", "f64": "f64"}[kind.name]
    raise DecodeError(path, f"invalid type: {_kind(value)}, expected {expected}")


def _checked_text(text: str, path: str) -> str:
    """serde_json refuses a lone surrogate escape (\\ud800) that Python's json accepts."""
    if _SURROGATE.search(text):
        raise DecodeError(path, "lone leading surrogate in hex escape")
    return text


def _decode_int(kind: Int, value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DecodeError(path, f"invalid type: {_kind(value)}, expected {kind.name}")
    if not kind.low <= value <= kind.high:
        raise DecodeError(path, f"invalid value: integer `{value}`, expected {kind.name}")
    return value


def _decode_struct(kind: Struct, value: Any, path: str) -> Json:
    if not isinstance(value, dict):
        raise DecodeError(path, f"invalid type: {_kind(value)}, expected struct {kind.name}")
    return _decode_fields(kind, value, path, frozenset())


def _decode_fields(kind: Struct, value: Json, path: str, extra: frozenset[str]) -> Json:
    known = {f.key for f in kind.fields} | extra
    for key in value if kind.deny_unknown else ():
        if key not in known:
            expected = ", ".join(f"`{f.key}`" for f in kind.fields)
            raise DecodeError(_join(path, key), f"unknown field `{key[:60]}`, expected one of {expected}")
    out: Json = {}
    for f in kind.fields:
        if f.key in value:
            out[f.key] = _decode(f.type, value[f.key], _join(path, f.key))
        elif isinstance(f.type, Opt):  # serde treats a missing Option as None even without default
            out[f.key] = None
        elif f.default:
            out[f.key] = {} if isinstance(f.type, Map) else []
        else:
            raise DecodeError(path, f"missing field `{f.key}`")
    return out


def _decode_tagged(kind: Tagged, value: Any, path: str) -> Json:
    if not isinstance(value, dict):
        raise DecodeError(path, f"invalid type: {_kind(value)}, expected internally tagged enum {kind.name}")
    if "type" not in value:
        raise DecodeError(path, "missing field `type`")
    tag = value["type"]
    variant = kind.variants.get(tag) if isinstance(tag, str) else None
    if variant is None:
        expected = ", ".join(f"`{v}`" for v in kind.variants)
        shown = tag[:60] if isinstance(tag, str) else _kind(tag)
        raise DecodeError(_join(path, "type"), f"unknown variant `{shown}`, expected one of {expected}")
    return {"type": tag, **_decode_fields(variant, value, path, frozenset({"type"}))}


# --- canonical serialization (serde_json::to_vec) ---------------------------------------------


def serialize(root: Json) -> bytes:
    """serde_json::to_vec of a decoded PackageRoot: compact, declaration order, skips applied."""
    return _write(PACKAGE_ROOT, root).encode("utf-8")


def _write(kind: Type, value: Any) -> str:
    if isinstance(kind, Opt):
        return "null" if value is None else _write(kind.inner, value)
    if isinstance(kind, Struct):
        return _write_fields(kind, value, "")
    if isinstance(kind, Tagged):
        variant = kind.variants[value["type"]]
        return _write_fields(variant, value, '"type":' + _string(value["type"]))
    if isinstance(kind, Seq):
        return "[" + ",".join(_write(kind.item, v) for v in value) + "]"
    if isinstance(kind, Map):
        return "{" + ",".join(f"{_string(k)}:{_write(kind.value, value[k])}" for k in sorted(value)) + "}"
    if isinstance(kind, Scalar) and kind.name == "f64":
        return _float(value)
    if isinstance(kind, Scalar) and kind.name == "bool":
        return "true" if value else "false"
    if isinstance(value, str):
        return _string(value)
    return str(int(value))


def _write_fields(kind: Struct, value: Json, head: str) -> str:
    parts = [head] if head else []
    for f in kind.fields:
        item = value.get(f.key)
        if f.skip_empty and (item is None or item == [] or item == {}):
            continue
        parts.append(f"{_string(f.key)}:{_write(f.type, item)}")
    return "{" + ",".join(parts) + "}"


_ENCODE_STRING = json.encoder.encode_basestring  # C-accelerated; escapes as serde_json does, UTF-8 kept


def _string(text: str) -> str:
    return _ENCODE_STRING(text)


def _float(value: float) -> str:
    """ryu's shortest form as serde_json writes it: ``1.0``, ``0.7``, ``1e16``, ``1e-7``."""
    if not math.isfinite(value):
        return "null"
    text = repr(value)
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    return f"{mantissa.removesuffix('.0')}e{int(exponent)}"
