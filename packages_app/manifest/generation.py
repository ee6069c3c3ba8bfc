"""Pure: generation.speculative_decoding (proposers, strategies, policies) -> typed values + problems."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packages_app.manifest.model import (
    _KEBAB,
    COMPOSITE,
    LEGACY_MTP_NAME,
    MANIFEST_FILE,
    NATIVE_MTP,
    NGRAM_TYPES,
    PROPOSER_TYPES,
    STRATEGY_TYPES,
    ExtensionPolicy,
    Json,
    NativeMtp,
    Ngram,
    Proposer,
    SpeculativeDecoding,
    Strategy,
    WindowPolicy,
)
from packages_app.manifest.reader import (
    _GEN,
    _as_object,
    _is_int,
    _json_type,
    _name,
    _Reader,
    _Report,
    _show,
    describe_layers,
)

# --- generation.speculative_decoding ----------------------------------------------------------

_SD = "generation.speculative_decoding"


@dataclass(frozen=True)
class _Gen:
    report: _Report
    layer_count: int | None
    strict: bool

    def reader(self, body: Json, where: str, allowed: frozenset[str] | None = None) -> _Reader:
        r = _Reader(self.report, body, where, _GEN)
        if self.strict and allowed is not None:
            r.reject_unknown(allowed)
        return r


def _parse_generation(
    report: _Report, raw: Json, layer_count: int | None, strict: bool
) -> tuple[Json | None, SpeculativeDecoding | None]:
    if "generation" not in raw:
        return None, None
    generation = raw["generation"]
    if not isinstance(generation, dict):
        report.add(
            "invalid_type",
            f"{MANIFEST_FILE} generation must be an object (or absent), not {_json_type(generation)}.",
            path="generation",
        )
        return None, None
    gen = _Gen(report, layer_count, strict)
    r = gen.reader(generation, "generation", frozenset({"speculative_decoding", "request_defaults"}))
    body = r.mapping("speculative_decoding", required=False)
    return generation, _parse_speculative(gen, body) if body is not None else None


def _parse_speculative(gen: _Gen, body: Json) -> SpeculativeDecoding:
    r = gen.reader(body, _SD, frozenset({"default", "proposers", "strategies"}))
    default = r.text("default")
    proposers: dict[str, Proposer] = {}
    for name, value in (r.mapping("proposers", required=False) or {}).items():
        if (p := _parse_proposer(gen, name, value)) is not None:
            proposers[name] = p
    strategies: dict[str, Strategy] = {}
    for name, value in (r.mapping("strategies", required=False) or {}).items():
        if (s := _parse_strategy(gen, name, value, proposers)) is not None:
            strategies[name] = s
    result = SpeculativeDecoding(default or "", proposers, strategies, body)
    if default is not None:
        _check_default(r, result)
    return result


def _check_default(r: _Reader, sd: SpeculativeDecoding) -> None:
    if not sd.default:
        r.fail("invalid_generation_value", "default", "is empty; it must name a strategy")
    elif sd.default == "disabled":
        r.fail(
            "invalid_generation_value",
            "default",
            'is "disabled", an operator setting, never a package strategy',
        )
    elif sd.strategy(sd.default) is None:
        declared = ", ".join(_name(n) for n in sd.strategies) or "none"
        r.fail(
            "unknown_strategy",
            "default",
            f"names {_show(sd.default)}, but the declared strategies are {declared}",
        )


def _read_type(r: _Reader, allowed: frozenset[str], noun: str) -> str:
    kind = r.text("type")
    if kind is None:
        return ""
    if kind == LEGACY_MTP_NAME:
        return NATIVE_MTP
    if kind not in allowed:
        rule = "a kebab-case type" if not _KEBAB.fullmatch(kind) else f"a known {noun} type"
        r.fail(
            "invalid_generation_value", "type", f"{_show(kind)} is not {rule} ({', '.join(sorted(allowed))})"
        )
        return ""
    return kind


def _parse_proposer(gen: _Gen, name: str, value: Any) -> Proposer | None:
    where = f"{_SD}.proposers.{_name(name)}"
    body = _as_object(gen.report, value, where, _GEN)
    if body is None:
        return None
    kind = _read_type(gen.reader(body, where), PROPOSER_TYPES, "proposer")
    if kind == NATIVE_MTP:
        r = gen.reader(body, where, frozenset({"type", "prediction_depth", "layer_indices"}))
        mtp, refusals = _read_mtp(gen, r)
        return Proposer(name, kind, native_mtp=mtp, runtime_refusals=refusals)
    if kind in NGRAM_TYPES:
        allowed = frozenset({"type", "ngram_min", "ngram_max", "max_proposal_tokens", "history_scope"})
        ngram, refusals = _read_ngram(gen, gen.reader(body, where, allowed), kind)
        return Proposer(name, kind, ngram=ngram, runtime_refusals=refusals)
    return Proposer(name, kind)


def _read_mtp(gen: _Gen, r: _Reader) -> tuple[NativeMtp | None, tuple[str, ...]]:
    depth = r.integer("prediction_depth", minimum=1)
    indices = _read_layer_indices(gen, r)
    refusals: tuple[str, ...] = ()
    if depth is not None and depth != 1:
        r.fail(
            "unsupported_generation_value",
            "prediction_depth",
            f"is {depth}, but the runtime only runs prediction_depth 1",
            value=depth,
        )
        refusals = (f"{r.path('prediction_depth')} is {depth}; the runtime only runs 1",)
    if depth is None or indices is None:
        return None, refusals
    return NativeMtp(depth, indices), refusals


def _read_layer_indices(gen: _Gen, r: _Reader) -> tuple[int, ...] | None:
    values = r.array("layer_indices")
    if values is None:
        return None
    if not values:
        r.fail("invalid_generation_value", "layer_indices", "is empty; it must name the MTP blocks")
        return None
    good = [v for v in values if _is_int(v) and v >= 0]
    if len(good) != len(values):
        r.fail("invalid_generation_value", "layer_indices", "must hold only block indices (integers >= 0)")
    if len(set(good)) != len(good):
        r.fail("invalid_generation_value", "layer_indices", "names a block twice")
    limit = gen.layer_count
    outside = [v for v in good if limit is not None and v >= limit]
    if outside:
        r.fail(
            "layer_out_of_bounds",
            "layer_indices",
            f"names {describe_layers(outside)}, but layer_count is {limit}",
            layer_indices=outside[:100],
        )
    return tuple(dict.fromkeys(good)) if good else None


def _read_ngram(gen: _Gen, r: _Reader, kind: str) -> tuple[Ngram | None, tuple[str, ...]]:
    low, high = r.integer("ngram_min", minimum=1), r.integer("ngram_max", minimum=1)
    tokens, scope = r.integer("max_proposal_tokens", minimum=1), r.text("history_scope")
    if low is not None and high is not None and low > high:
        r.fail("invalid_generation_value", "ngram_min", f"is {low}, above ngram_max {high}")
    refusals = _ngram_refusals(kind, low, high, scope)
    for key, text in refusals:
        r.fail("unsupported_generation_value", key, text)
    reasons = tuple(f"{r.path(key)} {text}" for key, text in refusals)
    if low is None or high is None or tokens is None or scope is None:
        return None, reasons
    return Ngram(low, high, tokens, scope), reasons


def _ngram_refusals(kind: str, low: int | None, high: int | None, scope: str | None) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if kind == "ngram-cache" and high is not None and high > 4:
        found.append(("ngram_max", f"is {high}, but the runtime allows at most 4 for ngram-cache"))
    if kind == "ngram-suffix" and low is not None and low < 3:
        found.append(("ngram_min", f"is {low}, but the runtime needs at least 3 for ngram-suffix"))
    if kind == "ngram-suffix" and high is not None and high > 64:
        found.append(("ngram_max", f"is {high}, but the runtime allows at most 64 for ngram-suffix"))
    if scope is not None and scope != "request":
        found.append(("history_scope", f'is {_show(scope)}, but the runtime only supports "request"'))
    return found


def _parse_strategy(gen: _Gen, name: str, value: Any, proposers: Mapping[str, Proposer]) -> Strategy | None:
    where = f"{_SD}.strategies.{_name(name)}"
    body = _as_object(gen.report, value, where, _GEN)
    if body is None:
        return None
    r = gen.reader(body, where)
    if name == "disabled":
        gen.report.add(
            "invalid_generation_value",
            f'{MANIFEST_FILE} {where} is named "disabled", an operator setting, never a package strategy.',
            path=where,
        )
    kind = _read_type(r, STRATEGY_TYPES, "strategy")
    if kind == NATIVE_MTP:
        return _native_strategy(gen, name, body, where, proposers)
    if kind in NGRAM_TYPES:
        r = gen.reader(body, where, frozenset({"type", "proposer"}))
        ref = _resolve(r, "proposer", proposers, frozenset({kind}))
        refusals = ref.runtime_refusals if ref else ()
        return Strategy(name, kind, proposer=ref.name if ref else None, runtime_refusals=refusals)
    if kind == COMPOSITE:
        return _composite_strategy(gen, name, body, where, proposers)
    return Strategy(name, kind)


def _native_strategy(
    gen: _Gen, name: str, body: Json, where: str, proposers: Mapping[str, Proposer]
) -> Strategy:
    allowed = frozenset({"type", "proposer", "prediction_depth", "layer_indices", "window_policy"})
    r = gen.reader(body, where, allowed)
    window = _read_window(gen, r)
    has_ref = "proposer" in body
    has_inline = "prediction_depth" in body or "layer_indices" in body
    if has_ref and has_inline:
        r.fail(
            "invalid_generation_value",
            "proposer",
            "is set together with inline prediction_depth/layer_indices; use one",
        )
        return Strategy(name, NATIVE_MTP, window_policy=window)
    if has_ref:
        ref = _resolve(r, "proposer", proposers, frozenset({NATIVE_MTP}))
        if ref is None:
            return Strategy(name, NATIVE_MTP, window_policy=window)
        return Strategy(
            name,
            NATIVE_MTP,
            proposer=ref.name,
            window_policy=window,
            native_mtp=ref.native_mtp,
            runtime_refusals=ref.runtime_refusals,
        )
    if has_inline:
        mtp, refusals = _read_mtp(gen, r)
        return Strategy(name, NATIVE_MTP, window_policy=window, native_mtp=mtp, runtime_refusals=refusals)
    r.fail(
        "invalid_generation_value", "proposer", "is missing, and so are prediction_depth and layer_indices"
    )
    return Strategy(name, NATIVE_MTP, window_policy=window)


def _composite_strategy(
    gen: _Gen, name: str, body: Json, where: str, proposers: Mapping[str, Proposer]
) -> Strategy:
    allowed = frozenset({"type", "primary", "extender", "extension_policy", "window_policy"})
    r = gen.reader(body, where, allowed)
    primary = _resolve(r, "primary", proposers, frozenset({NATIVE_MTP}))
    extender = _resolve(r, "extender", proposers, NGRAM_TYPES)
    extension = _read_extension(gen, r)
    window = _read_window(gen, r)
    refusals = (primary.runtime_refusals if primary else ()) + (extender.runtime_refusals if extender else ())
    mtp = primary.native_mtp if primary and primary.type == NATIVE_MTP else None
    return Strategy(
        name,
        COMPOSITE,
        primary=primary.name if primary else None,
        extender=extender.name if extender else None,
        window_policy=window,
        extension_policy=extension,
        native_mtp=mtp,
        runtime_refusals=refusals,
    )


def _resolve(
    r: _Reader, key: str, proposers: Mapping[str, Proposer], allowed: frozenset[str]
) -> Proposer | None:
    ref = r.text(key)
    if ref is None:
        return None
    found = proposers.get(ref)
    if found is None:
        r.fail("unknown_proposer", key, f"names {_show(ref)}, which {_SD}.proposers does not declare")
    elif found.type and found.type not in allowed:
        want = " or ".join(sorted(allowed))
        r.fail(
            "invalid_generation_value",
            key,
            f"names proposer {_name(ref)} of type {found.type}; it must be {want}",
        )
        return None
    return found


def _read_extension(gen: _Gen, r: _Reader) -> ExtensionPolicy | None:
    body = r.mapping("extension_policy")
    if body is None:
        return None
    allowed = frozenset({"max_tokens", "initial_tokens", "tail_backoff_proposals"})
    e = gen.reader(body, r.path("extension_policy"), allowed)
    max_tokens = e.integer("max_tokens", minimum=1)
    initial = e.integer("initial_tokens", required=False)
    backoff = e.integer("tail_backoff_proposals", required=False)
    return ExtensionPolicy(max_tokens, initial, backoff) if max_tokens is not None else None


def _read_window(gen: _Gen, r: _Reader) -> WindowPolicy | None:
    body = r.mapping("window_policy", required=False)
    if body is None:
        return None
    allowed = frozenset({"default", "initial_window", "min_window", "max_window", "pipeline_depth"})
    w = gen.reader(body, r.path("window_policy"), allowed)
    mode = w.text("default")
    if mode is not None and mode not in ("fixed", "adaptive"):
        w.fail("invalid_generation_value", "default", f'must be "fixed" or "adaptive", not {_show(mode)}')
    initial, low, high = (w.integer(k, minimum=1) for k in ("initial_window", "min_window", "max_window"))
    depth = w.integer("pipeline_depth", required=False, minimum=1)
    if initial is None or low is None or high is None or mode is None:
        return None
    if not low <= initial <= high:
        w.fail(
            "invalid_generation_value",
            "initial_window",
            f"must lie within min_window..max_window, but {low} <= {initial} <= {high} does not hold",
        )
    return WindowPolicy(mode, initial, low, high, depth)
