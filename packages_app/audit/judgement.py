"""Pure: declared vs detected MTP -> verdict and problems; file checks against the listing; provenance."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from gguf.constants import Keys

from packages_app.audit.detection import key_absent_blocks, nextn_key_absent_problems, sidecar_problems
from packages_app.audit.model import (
    Declared,
    Detected,
    FileCheck,
    FileInfo,
    Provenance,
    problem,
)
from packages_app.layout import HOUSEKEEPING_FILES, LAYER_FILE_RE
from packages_app.manifest import (
    MANIFEST_FILE,
    Manifest,
    Problem,
    Severity,
    SpeculativeDecoding,
    Strategy,
    describe_layers,
)
from packages_app.verdicts import Verdict

# --- what the manifest declares ---------------------------------------------------------------


def declare(manifest: Manifest | None) -> Declared:
    sd = manifest.speculative_decoding if manifest else None
    if sd is None:
        return Declared()
    native = sd.native_mtp_strategies()
    lead = _lead_mtp_strategy(sd)
    layers = sorted({i for s in native if s.native_mtp for i in s.native_mtp.layer_indices})
    return Declared(
        present=True,
        default_strategy=sd.default or None,
        uses_native_mtp=bool(native),
        layer_indices=tuple(layers),
        prediction_depth=lead.native_mtp.prediction_depth if lead and lead.native_mtp else None,
        strategies={name: s.type or "unknown" for name, s in sd.strategies.items()},
    )


def _lead_mtp_strategy(sd: SpeculativeDecoding) -> Strategy | None:
    """The native-MTP strategy that matters most: the default when it is one, else the first declared."""
    default = sd.default_strategy
    if default is not None and default.uses_native_mtp:
        return default
    return next(iter(sd.native_mtp_strategies()), None)


# --- the verdict ------------------------------------------------------------------------------


def judge(manifest: Manifest | None, d: Detected, declared: Declared) -> tuple[Verdict, list[Problem]]:
    if manifest is None:
        return Verdict.INVALID_MANIFEST, []
    problems = _head_problems(d)
    if d.has_mtp_weights and not declared.uses_native_mtp:
        return Verdict.UNDECLARED_MTP, [_undeclared(manifest, d), *problems]
    if declared.uses_native_mtp and not d.has_mtp_weights:
        return Verdict.DECLARED_WITHOUT_WEIGHTS, [_declared_without_weights(manifest, d, declared), *problems]
    problems += _missing_key_block_problems(d)
    sd = manifest.speculative_decoding
    mismatches = _declaration_mismatches(sd, d) if sd else []
    refused = any(s.runtime_refusals for s in sd.strategies.values()) if sd else False
    if mismatches or refused:
        return Verdict.DECLARATION_MISMATCH, mismatches + problems
    if d.has_mtp_weights:
        assert sd is not None
        return Verdict.CONSISTENT_MTP, _not_default_problems(sd) + problems
    return Verdict.CONSISTENT_NO_MTP, problems


def _tensor_list(block: int, suffixes: Sequence[str]) -> str:
    inner = suffixes[0] if len(suffixes) == 1 else "{" + ",".join(suffixes) + "}"
    return f"blk.{block}.nextn.{inner}"


def _key_text(d: Detected) -> str:
    if d.architecture is None:
        return "no header names general.architecture"
    key = Keys.LLM.NEXTN_PREDICT_LAYERS.format(arch=d.architecture)
    return f"{key}={d.nextn_predict_layers}" if d.nextn_predict_layers is not None else f"{key} is absent"


def _holds(d: Detected, block: int) -> str:
    source = d.evidence.get(block) or d.file(block) or f"block {block}"
    verb = "lists" if source == d.directory else "holds"
    return f"{source} {verb} {_tensor_list(block, d.nextn_found[block])}"


def _declaration_text(manifest: Manifest) -> tuple[str, str]:
    """How the manifest's declaration reads, and what strategy auto then resolves to."""
    sd = manifest.speculative_decoding
    if sd is None:
        return "declares no generation.speculative_decoding", "native MTP off"
    names = ", ".join(f"{n} ({s.type or 'unknown'})" for n, s in sd.strategies.items()) or "none"
    return f"declares only the strategies {names}, none native MTP", f"{sd.default or 'nothing'}"


def _undeclared(manifest: Manifest, d: Detected) -> Problem:
    weights = "; ".join(_holds(d, b) for b in d.mtp_blocks[:4])
    declared, resolved = _declaration_text(manifest)
    message = (
        f"{weights} and {_key_text(d)}, but {MANIFEST_FILE} {declared}, "
        f"so strategy auto resolves {resolved} and mtp is refused."
    )
    return problem(
        "undeclared_mtp",
        "error",
        message,
        mtp_blocks=list(d.mtp_blocks),
        files=[d.evidence.get(b) for b in d.mtp_blocks],
        nextn_predict_layers=d.nextn_predict_layers,
    )


def _declared_without_weights(manifest: Manifest, d: Detected, declared: Declared) -> Problem:
    claim = f"{MANIFEST_FILE} declares native MTP (layer_indices {list(declared.layer_indices)})"
    if d.key_blocks:
        where = ", ".join(f"{d.file(b) or f'block {b}'}" for b in d.key_blocks[:4])
        marked = describe_layers(list(d.key_blocks))
        gap = (
            f"{claim} and {_key_text(d)} marks {marked} as MTP, but {where} holds no "
            f"blk.{d.key_blocks[0]}.nextn tensors (dropped in conversion)"
        )
    else:
        source = d.directory or "no layer header"
        gap = f"{claim}, but {source} lists no blk.N.nextn tensor and {_key_text(d)}"
    message = f"{gap}, so loading with native MTP fails."
    return problem(
        "declared_without_weights",
        "error",
        message,
        layer_indices=list(declared.layer_indices),
        nextn_predict_layers=d.nextn_predict_layers,
    )


def _head_problems(d: Detected) -> list[Problem]:
    problems: list[Problem] = []
    for block, missing in d.missing_nextn_tensors.items():
        if block in d.nextn_found:
            message = (
                f"{_holds(d, block)} but not {_tensor_list(block, missing)}, "
                f"which a {d.architecture} NextN head holds."
            )
            problems.append(
                problem("incomplete_mtp_head", "warning", message, block=block, missing=list(missing))
            )
    absent = key_absent_blocks(d)  # the key is optional for the architecture: detection.py reports it
    problems += nextn_key_absent_problems(d) + sidecar_problems(d)
    stray = [b for b in d.mtp_blocks if b not in d.key_blocks and b not in absent]
    if stray:
        message = (
            f"{_holds(d, stray[0])}, but {_key_text(d)}, which does not mark {describe_layers(stray)} "
            "as MTP, so the loader does not load that head."
        )
        problems.append(problem("nextn_key_mismatch", "warning", message, blocks=stray))
    return problems


def _missing_key_block_problems(d: Detected) -> list[Problem]:
    """The key promises MTP blocks whose nextn tensors are gone (a known conversion bug)."""
    empty = [b for b in d.key_blocks if b not in d.nextn_found and b not in d.uninspected]
    if not empty:
        return []
    where = ", ".join(d.file(b) or f"block {b}" for b in empty[:4])
    message = (
        f"{_key_text(d)} marks {describe_layers(empty)} as MTP, but {where} holds no "
        f"blk.{empty[0]}.nextn tensors, so MTP cannot run from this package."
    )
    return [problem("nextn_tensors_missing", "warning", message, blocks=empty)]


def _declaration_mismatches(sd: SpeculativeDecoding, d: Detected) -> list[Problem]:
    problems: list[Problem] = []
    heads = d.nextn_predict_layers if d.nextn_predict_layers else len(d.mtp_blocks)
    groups: dict[tuple[int, tuple[int, ...]], list[str]] = {}
    for s in sd.native_mtp_strategies():
        if s.native_mtp is not None:
            groups.setdefault((s.native_mtp.prediction_depth, s.native_mtp.layer_indices), []).append(s.name)
    for (depth, layers), names in groups.items():
        who = f"{MANIFEST_FILE} strategy {', '.join(names)}"
        if set(layers) != set(d.mtp_blocks):
            where = "; ".join(_holds(d, b) for b in d.mtp_blocks[:4])
            message = f"{who} declares layer_indices {list(layers)}, but {where}, so the runtime rejects it."
            evidence = {"strategies": names, "layer_indices": list(layers), "mtp_blocks": list(d.mtp_blocks)}
            problems.append(problem("mtp_layer_mismatch", "error", message, **evidence))
        # The runtime runs depth 1 only, so fewer heads than blocks is fine; more is not.
        if depth > heads:
            message = (
                f"{who} declares prediction_depth {depth}, but {_key_text(d)} and the weights hold "
                f"{len(d.mtp_blocks)} MTP block(s), so there is no head for depth {depth}."
            )
            problems.append(problem("mtp_depth_mismatch", "error", message, strategies=names, depth=depth))
    return problems


def _not_default_problems(sd: SpeculativeDecoding) -> list[Problem]:
    default = sd.default_strategy
    if default is None or default.uses_native_mtp:
        return []
    names = ", ".join(s.name for s in sd.native_mtp_strategies())
    message = (
        f"{MANIFEST_FILE} declares native MTP in strategy {names}, but the default strategy is {sd.default}, "
        "so strategy auto does not run MTP."
    )
    return [problem("mtp_not_default", "warning", message, default=sd.default)]


# --- headers, coverage, provenance ------------------------------------------------------------


def header_error_problems(errors: Mapping[str, str]) -> list[Problem]:
    return [
        problem(
            "header_unreadable",
            "warning",
            f"{path} header could not be read: {str(error)[:300]}",
            path=path,
            error=str(error)[:300],
        )
        for path, error in sorted(errors.items())
    ]


def coverage_problems(d: Detected, errors: Mapping[str, str]) -> list[Problem]:
    if d.architecture is None:
        failed = f" ({len(errors)} failed)" if errors else ""
        message = (
            f"No readable GGUF header{failed} names general.architecture, so the weights could not be "
            "checked for MTP blocks."
        )
        return [problem("weights_not_inspected", "error", message)]
    if not d.uninspected:
        return []
    gap = [b for b in d.uninspected if b in d.key_blocks]
    files = [f for b in d.uninspected[:4] if (f := d.file(b))]
    message = (
        f"No header was read for {describe_layers(list(d.uninspected))} ({', '.join(files) or 'no file'}), "
        f"so {'the MTP block' if gap else 'those blocks'} could not be checked for nextn tensors."
    )
    return [
        problem("weights_not_inspected", "error" if gap else "warning", message, blocks=list(d.uninspected))
    ]


def layer_count_problems(manifest: Manifest | None, d: Detected) -> list[Problem]:
    if manifest is None or manifest.layer_count is None or d.block_count is None:
        return []
    # A block_count that leaves the MTP block out (ik_llama #2256) still describes layer_count blocks.
    beyond = [b for b in d.key_blocks if b >= d.block_count]
    if manifest.layer_count in (d.block_count, d.block_count + len(beyond)):
        return []
    key = Keys.LLM.BLOCK_COUNT.format(arch=d.architecture)
    message = (
        f"{MANIFEST_FILE} layer_count is {manifest.layer_count}, but the headers say {key}={d.block_count}."
    )
    return [problem("layer_count_mismatch", "warning", message, layer_count=manifest.layer_count)]


def check_files(
    manifest: Manifest | None, files: Sequence[FileInfo]
) -> tuple[list[FileCheck], list[Problem]]:
    hub = {f.path: f for f in files}
    checks: list[FileCheck] = []
    problems: list[Problem] = []
    named: set[str] = set()
    for a in manifest.artifacts if manifest else ():
        if a.path in named:
            continue
        named.add(a.path)
        f = hub.get(a.path)
        check = FileCheck(a.path, a.role, a.size, a.sha256, *_hub_facts(f), _status(a.size, a.sha256, f))
        checks.append(check)
        problems += _file_problems(check)
    for f in sorted(files, key=lambda f: f.path):
        if f.path in named or f.path in HOUSEKEEPING_FILES:
            continue
        checks.append(FileCheck(f.path, _guess_role(f.path), None, None, *_hub_facts(f), "unlisted"))
        if manifest is not None:
            problems.append(_unlisted(f.path))
    return checks, problems


def _hub_facts(f: FileInfo | None) -> tuple[int | None, str | None]:
    if f is None:
        return None, None
    return f.size, f.lfs_sha256.lower() if f.lfs_sha256 else None


def _status(size: int | None, sha256: str | None, f: FileInfo | None) -> str:
    if f is None:
        return "missing_on_hub"
    if sha256 and f.lfs_sha256 and sha256 != f.lfs_sha256.lower():
        return "sha256_mismatch"
    if size is not None and size != f.size:
        return "size_mismatch"
    return "match"


def _file_problems(c: FileCheck) -> list[Problem]:
    if c.status == "missing_on_hub":
        message = f"{MANIFEST_FILE} names {c.path} ({c.role}), but the revision has no such file."
        return [problem("missing_artifact", "error", message, path=c.path)]
    if c.status == "sha256_mismatch":
        message = (
            f"{c.path} on the Hub has sha256 {str(c.hub_sha256)[:12]}..., but {MANIFEST_FILE} "
            f"records {str(c.manifest_sha256)[:12]}..."
        )
        return [problem("artifact_sha256_mismatch", "error", message, path=c.path)]
    if c.status == "size_mismatch":
        message = f"{c.path} is {c.hub_size} bytes on the Hub, but {MANIFEST_FILE} records {c.manifest_size}."
        return [problem("artifact_size_mismatch", "error", message, path=c.path)]
    return []


def _unlisted(path: str) -> Problem:
    severity: Severity = "warning" if path.endswith(".gguf") else "info"
    message = f"{path} is in the revision, but {MANIFEST_FILE} does not name it, so no node downloads it."
    return problem("unlisted_file", severity, message, path=path)


def _guess_role(path: str) -> str:
    if LAYER_FILE_RE.search(path):
        return "layer"
    return "metadata" if path.endswith("metadata.gguf") else "other"


def source_path_problems(manifest: Manifest | None) -> list[Problem]:
    if manifest is None or not manifest.source_model.is_build_host_path:
        return []
    path = manifest.source_model.path
    message = (
        f"{MANIFEST_FILE} source_model.path is {path}, a build-host path serving nodes do not have, so the "
        "runtime's local-GGUF MTP signal never fires: generation.speculative_decoding is the only channel."
    )
    return [problem("build_host_source_path", "info", message, path=path)]


def provenance_of(
    manifest: Manifest | None, data: bytes | None, revision: str | None, checks: list[FileCheck]
) -> Provenance:
    source = manifest.source_model if manifest else None
    return Provenance(
        revision=revision,
        manifest_sha256=hashlib.sha256(data).hexdigest() if data is not None else None,
        source_model_path=source.path if source else None,
        build_host_path=bool(source and source.is_build_host_path),
        files=tuple(checks),
    )
