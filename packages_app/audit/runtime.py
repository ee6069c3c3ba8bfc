"""Pure: the resolver as a table: what mesh-llm does with each operator ``speculative.strategy`` setting
for one manifest (docs/rules.md section 5: resolver/speculative.rs, frontend/speculative.rs; section 6b: the
resolver as it is now, mesh-llm-skippy-adapter config/speculative.rs and dflash.rs). No Django, no I/O.

Each row is one of ``native-mtp``, ``no-mtp``, ``load-fails``, ``refused`` with a sentence. The table holds
under stated assumptions (``Runtime.assumptions``, a ``ResolverAssumptions``: the default operator config,
the balanced serving strategy, ``spec_default`` true, the MTP sidecar it saw or none, the break-even gate not
tripped); where mesh-llm's behaviour is not pinned down (docs/rules.md section 7) it says so in ``UNCERTAIN``.
"""

from __future__ import annotations

from packages_app.audit.model import Detected, Resolution, ResolverAssumptions, Runtime
from packages_app.manifest import (
    COMPOSITE,
    MANIFEST_FILE,
    MTP_NAME,
    NATIVE_MTP,
    Manifest,
    ManifestResult,
    Strategy,
    describe_layers,
)

OUTCOMES = ("native-mtp", "no-mtp", "load-fails", "refused")
DFLASH = "dflash"
OPERATOR_SETTINGS = ("auto", MTP_NAME, "disabled", "ngram-cache", "ngram-suffix", DFLASH)
UNDECLARED_SAMPLES = ("native-mtp-n1", "ngram")
_REFUSED_NAME = (
    "the resolver refuses it: a strategy must be auto, disabled, mtp, ngram-cache, ngram-suffix, dflash, or "
    f"a strategy declared by {MANIFEST_FILE}"
)
_DFLASH = (
    'dflash decodes with a DFlash draft model, never native MTP: it "requires a draft_model whose GGUF '
    'architecture is dflash" (none is configured by default); with one it runs effective dflash, without MTP.'
)
_PAIRING = (
    "pairing_fault warn_disable, the default, turns it off without an error when mesh-llm finds the pair "
    "incompatible"
)


def resolve(parsed: ManifestResult | None, detected: Detected | None = None) -> Runtime:
    """The resolver table for one manifest (and, when known, what its weights hold), on a release that
    admits it: whether a release does is the release matrix's answer (releases.py); the assessment
    (assessment.py) puts the two together per release."""
    manifest = parsed.manifest if parsed else None
    if manifest is None or parsed is None:
        why = f"there is no {MANIFEST_FILE}" if parsed is None else _first_error(parsed)
        return _every(_settings(None), "load-fails", f"the load fails: {why}.")
    assumptions = ResolverAssumptions(sidecar=_sidecar(detected) or "")
    if not parsed.trusted:
        return _every(_settings(manifest), "load-fails", f"the load fails: {_first_error(parsed)}.")
    rows = tuple(_resolve(manifest, s, detected) for s in _settings(manifest))
    return Runtime(rows, assumptions=assumptions)


def _sidecar(d: Detected | None) -> str | None:
    """The MTP draft sidecar mesh-llm would pick and run native MTP through: a *draft*/*eagle* GGUF of the
    package that holds NextN tensors (docs/rules.md section 6b)."""
    return d.sidecar if d is not None and d.sidecar and d.sidecar_mtp_blocks else None


def _first_error(parsed: ManifestResult) -> str:
    first = next((p for p in parsed.problems if p.severity == "error"), None)
    return f"mesh-llm rejects this {MANIFEST_FILE} ({first.code}: {first.message})" if first else "unknown"


def _settings(manifest: Manifest | None) -> list[str]:
    sd = manifest.speculative_decoding if manifest else None
    declared = [n for n in (sd.strategies if sd else {}) if n not in OPERATOR_SETTINGS]
    sample = next(n for n in UNDECLARED_SAMPLES if not sd or n not in sd.strategies)
    return [*OPERATOR_SETTINGS, *declared, sample]


def _every(settings: list[str], outcome: str, why: str) -> Runtime:
    return Runtime(tuple(Resolution(s, outcome, why) for s in settings))


def _resolve(m: Manifest, setting: str, d: Detected | None) -> Resolution:
    if setting == "auto":
        return _auto(m, d)
    if setting == MTP_NAME:
        return _mtp(m, d)
    if setting == "disabled":
        return Resolution(setting, "no-mtp", "disabled clears every speculative setting: effective disabled.")
    if setting == DFLASH:
        return Resolution(setting, "refused", _DFLASH)
    sd = m.speculative_decoding
    declared = sd.strategy(setting) if sd else None
    if declared is not None:
        return _run(setting, declared, d, f"{setting} names a declared strategy")
    if setting in ("ngram-cache", "ngram-suffix"):
        return Resolution(
            setting,
            "refused",
            f"no package strategy is named {setting}, so the operator must also set ngram_min and ngram_max "
            f'("requires both ngram_min and ngram_max"); with them it runs {setting} without MTP.',
        )
    return Resolution(setting, "refused", f"{setting} is not declared, so {_REFUSED_NAME}.")


def _auto(m: Manifest, d: Detected | None) -> Resolution:
    sd = m.speculative_decoding
    sidecar = _sidecar(d)
    if sd is None:
        unused = f" auto does not run the MTP sidecar {sidecar}; only explicit mtp does." if sidecar else ""
        return Resolution(
            "auto",
            "no-mtp",
            f"{MANIFEST_FILE} declares no generation.speculative_decoding, and a package load has no local "
            f"GGUF to prove MTP: effective disabled.{unused}",
        )
    default = sd.strategy(sd.default)
    if default is None:  # validate_root reports unknown_strategy, so a trusted manifest never gets here
        return Resolution("auto", "load-fails", f"the default strategy {sd.default} is not declared.")
    row = _run("auto", default, d, f"auto runs the default strategy {default.name}")
    if sidecar and row.outcome == "native-mtp":
        return Resolution(
            "auto", row.outcome, f"{row.why} It runs through the sidecar {sidecar}; {_PAIRING}."
        )
    return row


def _mtp(m: Manifest, d: Detected | None) -> Resolution:
    sd = m.speculative_decoding
    keyed = sd.strategy(MTP_NAME) if sd else None
    sidecar = _sidecar(d)
    if (keyed is None or not keyed.uses_native_mtp) and sidecar and d is not None:
        blocks = describe_layers(list(d.sidecar_mtp_blocks))
        return Resolution(
            MTP_NAME,
            "native-mtp",
            f"explicit mtp runs native MTP through the MTP sidecar {sidecar} (NextN tensors at {blocks}), "
            f"which draft_selection_policy auto picks beside the model; {_PAIRING}.",
        )
    if keyed is None or not keyed.uses_native_mtp:
        others = [s.name for s in sd.native_mtp_strategies()] if sd else []
        hint = f"; strategy {', '.join(others)} is native MTP but is not keyed mtp" if others else ""
        return Resolution(
            MTP_NAME,
            "refused",
            f'explicit mtp "requires proven native MTP support": no strategy is keyed exactly mtp with '
            f"native MTP{hint}, and a package load has no local GGUF to prove it.",
        )
    if keyed.runtime_refusals and keyed.proposer is None and keyed.type == NATIVE_MTP:
        return Resolution(
            MTP_NAME,
            "refused",
            f"strategy mtp is inline native MTP with {keyed.runtime_refusals[0]}, "
            "so explicit mtp is refused.",
        )
    return _run(MTP_NAME, keyed, d, "explicit mtp selects the strategy keyed mtp")


def _run(setting: str, s: Strategy, d: Detected | None, lead: str) -> Resolution:
    if s.runtime_refusals:
        return Resolution(setting, "load-fails", f"{lead}, and the load fails: {s.runtime_refusals[0]}.")
    if not s.uses_native_mtp:
        return Resolution(setting, "no-mtp", f"{lead} ({s.type}): effective {s.type}, no native MTP.")
    effective = _effective(s)
    missing = _missing_weights(s, d)
    if missing:
        return Resolution(setting, "load-fails", f"{lead} ({effective}), but {missing}, so the load fails.")
    layers = f" with layer_indices {list(s.native_mtp.layer_indices)}" if s.native_mtp else ""
    return Resolution(setting, "native-mtp", f"{lead}: effective {effective}{layers}.")


def _effective(s: Strategy) -> str:
    return NATIVE_MTP if s.type != COMPOSITE else f"{NATIVE_MTP}+{s.extender or 'ngram'}"


def _missing_weights(s: Strategy, d: Detected | None) -> str:
    """What the named blocks lack, when the weights were read; empty when they hold NextN tensors."""
    if d is None or d.architecture is None or s.native_mtp is None:
        return ""
    if not d.has_mtp_weights:
        return "the weights hold no blk.N.nextn tensors"
    empty = [i for i in s.native_mtp.layer_indices if i not in d.nextn_found and i not in d.uninspected]
    return f"{describe_layers(empty)} holds no nextn tensors" if empty else ""
