"""Pure: meshdash's own findings about a manifest mesh-llm's validator has judged: never errors, so they
never turn a manifest mesh-llm accepts into an invalid one. No Django, no I/O."""

from __future__ import annotations

from packages_app.layout import MANIFEST_FILE
from packages_app.manifest.model import MTP_NAME, Manifest, Problem


def extra_findings(manifest: Manifest) -> list[Problem]:
    found = _v1_offline_only(manifest)
    sd = manifest.speculative_decoding
    if sd is not None:
        found += _mtp_unselectable(manifest) + _load_failures(manifest)
    return found


def _v1_offline_only(m: Manifest) -> list[Problem]:
    if m.schema_version != 1:
        return []
    message = (
        f"{MANIFEST_FILE} is schema v1 (layer-package), which is offline-only: since PR #1693 every serving "
        'load refuses it ("split serving requires a package-v2 manifest"); republish it as package-v2.'
    )
    return [Problem("v1_offline_only", "warning", message, {"path": "schema_version"})]


def _mtp_unselectable(m: Manifest) -> list[Problem]:
    sd = m.speculative_decoding
    assert sd is not None
    native = [s.name for s in sd.native_mtp_strategies()]
    keyed = sd.strategy(MTP_NAME)
    if not native or (keyed is not None and keyed.uses_native_mtp):
        return []
    message = (
        f"{MANIFEST_FILE} declares native MTP in strategy {', '.join(native)}, but no strategy is keyed "
        f'exactly "mtp", so an operator\'s speculative.strategy = mtp is refused; name it to select it.'
    )
    return [
        Problem("mtp_strategy_not_keyed_mtp", "info", message, {"path": "generation.speculative_decoding"})
    ]


def _load_failures(m: Manifest) -> list[Problem]:
    sd = m.speculative_decoding
    assert sd is not None
    return [
        Problem(
            "strategy_fails_at_load",
            "warning",
            f"{MANIFEST_FILE} strategy {s.name} passes the format's checks, but loading it fails: "
            f"{s.runtime_refusals[0]}.",
            {"path": f"generation.speculative_decoding.strategies[{s.name}]"},
        )
        for s in sd.strategies.values()
        if s.runtime_refusals and m.schema_version == 2
    ]
