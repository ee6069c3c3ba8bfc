"""Pure: schema 1 (layer-package) manifests -> typed values + problems; no Django, no I/O."""

from __future__ import annotations

from typing import Any

from packages_app.manifest.common import (
    _check_layers,
    _layer_count,
    _parse_source,
)
from packages_app.manifest.generation import (
    _parse_generation,
)
from packages_app.manifest.model import (
    MANIFEST_FILE,
    Artifact,
    Json,
    Manifest,
)
from packages_app.manifest.reader import (
    _as_object,
    _digest,
    _Reader,
    _Report,
    _safe_path,
    _show,
)

# --- schema v1 --------------------------------------------------------------------------------


def _parse_v1(report: _Report, raw: Json) -> Manifest:
    top = _Reader(report, raw, "")
    layer_count = _layer_count(top)
    fmt = top.text("format")
    if fmt is not None and fmt != "layer-package":
        top.fail("invalid_value", "format", f'must be "layer-package" in schema 1, not {_show(fmt)}')
    artifacts = _v1_artifacts(report, top, layer_count)
    generation, speculative = _parse_generation(report, raw, layer_count, strict=False)
    top.integer("created_at_unix_secs", required=False)
    return Manifest(
        schema_version=1,
        model_id=top.text("model_id"),
        package_id=None,
        format=fmt,
        layer_count=layer_count,
        activation_width=top.integer("activation_width", minimum=1, missing_code="missing_activation_width"),
        abi_version=top.text("skippy_abi_version", missing_code="missing_skippy_abi_version"),
        source_model=_parse_source(report, top, v2=False),
        artifacts=tuple(artifacts),
        generation=generation,
        speculative_decoding=speculative,
        raw=raw,
    )


def _v1_artifacts(report: _Report, top: _Reader, layer_count: int | None) -> list[Artifact]:
    found: list[Artifact] = []
    shared = top.mapping("shared") or {}
    for role in ("metadata", "embeddings", "output") if "shared" in top.obj else ():
        if role not in shared:
            report.add(
                "missing_artifact", f"{MANIFEST_FILE} has no shared.{role} artifact.", path=f"shared.{role}"
            )
            continue
        found += _v1_artifact(report, shared[role], f"shared.{role}", role)
    for i, entry in enumerate(top.array("layers") or []):
        found += _v1_artifact(report, entry, f"layers[{i}]", "layer")
    for i, entry in enumerate(top.array("projectors", required=False) or []):
        found += _v1_artifact(report, entry, f"projectors[{i}]", "projector")
    _check_layers(report, found, layer_count, "layers[]")
    return found


def _v1_artifact(report: _Report, entry: Any, where: str, role: str) -> list[Artifact]:
    body = _as_object(report, entry, where)
    if body is None:
        return []
    r = _Reader(report, body, where)
    is_layer = role == "layer"
    index = r.integer("layer_index") if is_layer else None
    path = _safe_path(r, "path")
    size = r.integer("artifact_bytes", minimum=1)
    count = r.integer("tensor_count", required=is_layer)
    nbytes = r.integer("tensor_bytes", required=is_layer)
    if count is not None and nbytes is not None and (count == 0) != (nbytes == 0):
        r.fail(
            "invalid_value",
            "tensor_bytes",
            f"is {nbytes} with tensor_count {count}; both are 0 or neither is",
        )
    sha = _digest(r, "sha256", lowercase=False)
    if path is None or (is_layer and index is None):
        return []
    return [Artifact(path, role, index, None, size, sha, None, count, nbytes)]
