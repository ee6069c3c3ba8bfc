"""Pure: how mesh-llm resolves each operator strategy setting for a manifest; no Django, no I/O."""

from __future__ import annotations

from packages_app.audit.model import (
    Detected,
    Runtime,
)
from packages_app.manifest import (
    MANIFEST_FILE,
    MTP_NAMES,
    RUNTIME_CODES,
    Manifest,
    ManifestResult,
    SpeculativeDecoding,
    Strategy,
    describe_layers,
)

# --- how the runtime resolves strategies (domain.md section 4) --------------------------------


def _rejection(parsed: ManifestResult | None) -> str:
    """Why the runtime cannot use the manifest at all, naming the first schema error."""
    if parsed is None:
        return f"there is no {MANIFEST_FILE}"
    first = next((p for p in parsed.problems if p.severity == "error" and p.code not in RUNTIME_CODES), None)
    return f"the runtime rejects this {MANIFEST_FILE} ({first.code}: {first.message})" if first else ""


def _runtime(manifest: Manifest | None, rejection: str, d: Detected) -> Runtime:
    if manifest is None:
        why = rejection.removesuffix(".")
        return Runtime(False, f"native MTP off: {why}.", False, f"mtp is refused: {why}.")
    no_local = _no_local_signal(manifest)
    sd = manifest.speculative_decoding
    if sd is None:
        return Runtime(
            False,
            f"native MTP off: {MANIFEST_FILE} declares no generation.speculative_decoding, and {no_local}.",
            False,
            f"mtp is refused: nothing declares native MTP, and {no_local}.",
        )
    auto_on, auto_text = _auto(sd, d)
    mtp_on, mtp_text = _explicit_mtp(sd, d, no_local)
    return Runtime(auto_on, auto_text, mtp_on, mtp_text)


def _no_local_signal(manifest: Manifest) -> str:
    path = manifest.source_model.path
    if manifest.source_model.is_build_host_path:
        return f"source_model.path {path} is a build-host path, so no local GGUF proves MTP on serving nodes"
    return "a package-backed load has no local GGUF to prove MTP"


def _load_note(s: Strategy, d: Detected) -> str:
    """Why loading the declared head fails: the runtime needs NextN tensors in every named block."""
    if not d.has_mtp_weights:
        return ", but the weights hold no blk.N.nextn tensors, so the load fails"
    empty = [i for i in (s.native_mtp.layer_indices if s.native_mtp else ()) if i not in d.nextn_found]
    return f", but {describe_layers(empty)} holds no nextn tensors, so the load fails" if empty else ""


def _auto(sd: SpeculativeDecoding, d: Detected) -> tuple[bool, str]:
    s = sd.default_strategy
    if s is None:
        return False, f"native MTP off: the default strategy {sd.default or '(empty)'} is not declared."
    if s.runtime_refusals:
        return (
            False,
            f"native MTP off: the runtime refuses default strategy {s.name}: {s.runtime_refusals[0]}.",
        )
    if s.uses_native_mtp:
        return (
            True,
            f"native MTP on: default strategy {s.name} is {s.type}{_layers_text(s)}{_load_note(s, d)}.",
        )
    return False, f"native MTP off: default strategy {s.name} is {s.type or 'unknown'}, not native MTP."


def _explicit_mtp(sd: SpeculativeDecoding, d: Detected, no_local: str) -> tuple[bool, str]:
    default = sd.default_strategy
    named = [s for n, s in sd.strategies.items() if n in MTP_NAMES and s.uses_native_mtp]
    candidate = default if default is not None and default.uses_native_mtp else next(iter(named), None)
    if candidate is None:
        others = sd.native_mtp_strategies()
        if others:
            return False, (
                f"mtp is refused: strategy {others[0].name} is native MTP but neither the default nor "
                f"named mtp; select {others[0].name} by name."
            )
        return False, f"mtp is refused: no declared strategy uses native MTP, and {no_local}."
    if candidate.runtime_refusals:
        reason = candidate.runtime_refusals[0]
        return False, f"mtp is refused: strategy {candidate.name} breaks a runtime rule: {reason}."
    return True, (
        f"mtp is allowed: {MANIFEST_FILE} declares native MTP in strategy {candidate.name}"
        f"{_layers_text(candidate)}{_load_note(candidate, d)}."
    )


def _layers_text(s: Strategy) -> str:
    return f" with layer_indices {list(s.native_mtp.layer_indices)}" if s.native_mtp else ""
